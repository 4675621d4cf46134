"""Import-only placeholder for ``sgl_kernel``, used by agentconsole's CPU install of SGLang.

Why it exists: with ``SGLANG_USE_CPU_ENGINE=1``, sglang 0.5.23 does
``from sgl_kernel import <name>_cpu`` at module top in a few files (KV-cache copy, request-to-token
pool, speculative decoding). The only ``sgl_kernel`` on PyPI (``sglang-kernel``) is CUDA-only and
fails to load without ``libcuda.so.1``; the real CPU build exists only as source, is compiled with
``-march=native`` and targets Intel AMX. On a non-AMX CPU with ``--attention-backend
torch_native`` SGLang falls back to native torch code and never calls these functions, so the
names only have to exist for the imports to succeed.

If a function is ever called, it raises ``NotImplementedError`` naming itself. When the
environment variable ``AGENTCONSOLE_SGL_KERNEL_CALL_LOG`` names a file, the function's name is
first appended to it, so tests can assert that the file stays absent or empty. Nothing else is
recorded. ``sgl_kernel.scalar_type`` is deliberately absent: SGLang catches that ImportError.
"""

from __future__ import annotations

import os
from typing import Any, Callable, NoReturn

__all__ = [
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
]


def _placeholder(name: str) -> Callable[..., NoReturn]:
    def function(*args: Any, **kwargs: Any) -> NoReturn:
        log = os.environ.get("AGENTCONSOLE_SGL_KERNEL_CALL_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(name + "\n")
        raise NotImplementedError(
            f"sgl_kernel.{name} is an agentconsole placeholder (no CPU sgl_kernel is installed); "
            "SGLang reached a code path that needs the compiled kernel"
        )

    function.__name__ = function.__qualname__ = name
    return function


assign_draft_cache_locs_contiguous_cpu = _placeholder("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _placeholder("assign_extend_cache_locs_cpu")
assign_req_to_token_pool_cpu = _placeholder("assign_req_to_token_pool_cpu")
build_tree_kernel_efficient_cpu = _placeholder("build_tree_kernel_efficient_cpu")
copy_all_layer_kv_cache_cpu = _placeholder("copy_all_layer_kv_cache_cpu")
fill_accept_out_cache_loc_cpu = _placeholder("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _placeholder("fill_bonus_tokens_cpu")
verify_tree_greedy_cpu = _placeholder("verify_tree_greedy_cpu")

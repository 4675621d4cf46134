"""No placeholder ``sgl_kernel`` function is ever called by the CPU engine.

The placeholder package (``scripts/sglang_cpu/sgl_kernel_placeholder``) appends the name of a
called function to ``$AGENTCONSOLE_SGL_KERNEL_CALL_LOG`` before raising; the session engine's
processes inherit that variable (``conftest``). This file runs after the other engine tests
(alphabetical order), so the log covers everything they did."""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.sglang.helpers import consume, request, ticket

pytestmark = pytest.mark.sglang


def test_no_placeholder_function_was_called(
    rt: Any, run: Callable[[Awaitable[Any]], Any], sgl_kernel_log: Path
) -> None:
    out = run(consume(rt, request(ticket("kernel-check"), "one more for the log", 16)))
    assert out.result.output_tokens == 16
    calls = sgl_kernel_log.read_text() if sgl_kernel_log.exists() else ""
    assert calls == ""


def test_the_call_log_itself_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = tmp_path / "probe.log"
    monkeypatch.setenv("AGENTCONSOLE_SGL_KERNEL_CALL_LOG", str(probe))
    placeholder = importlib.import_module("sgl_kernel")
    with pytest.raises(NotImplementedError):
        placeholder.copy_all_layer_kv_cache_cpu()
    assert probe.read_text() == "copy_all_layer_kv_cache_cpu\n"
    assert os.environ["AGENTCONSOLE_SGL_KERNEL_CALL_LOG"] == str(probe)

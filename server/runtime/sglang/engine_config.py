"""How the adapter configures ``sglang.Engine``: server arguments and process environment.

:class:`EngineSettings` is what the runtime needs to know (from ``RuntimeOptions``);
:func:`engine_kwargs` turns it into ``Engine(**kwargs)`` and :func:`engine_env` into the
environment the engine's spawned processes must inherit. CPU facts (see
``/work/shared/research/sglang-0.5.23-on-cpu.md``): ``device=cpu`` with the ``torch_native``
attention backend, no CUDA graphs, no overlap scheduler, an explicit ``max_total_tokens``
(else SGLang sizes the KV pool from host RAM and takes ~30 s to allocate it), fp32 for the
tiny fp32 model (``auto`` would downcast it), and ``SGLANG_USE_CPU_ENGINE=1`` before SGLang is
imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentconsole.kvtiers.tiers import WRITE_THROUGH
from agentconsole.server.runtime.sglang import retention, symbols
from agentconsole.server.runtime.sglang.control import STATE_DIR_ENV
from agentconsole.server.runtime.sglang.processes import on_sigquit
from agentconsole.server.runtime.sglang.tiny_model import MARKER as TINY_MARKER

CPU_DEFAULT_MAX_TOTAL_TOKENS = 16384
#: SGLang's plugin whitelist value that matches no plugin (stock SGLang)
NO_PLUGINS = "none"


@dataclass(frozen=True, slots=True)
class EngineSettings:
    model_path: Path
    device: str = "cpu"  # "cpu" or "cuda"
    #: run agentconsole's plugin in the scheduler (False: stock SGLang, e.g. as a baseline)
    plugin: bool = True
    #: SGLang's own schedule policy; with the plugin it only decides what the plugin leaves
    #: to SGLang (nothing for ordering); without it, the stock baseline (fcfs, lpm, ...)
    schedule_policy: str = "fcfs"
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    tp: int = 1
    #: SGLang data-parallel ranks (``dp_size``): each a scheduler with its own KV pool
    #: (``max_total_tokens`` is per rank); the adapter routes each program to one of them
    dp: int = 1
    #: with ``dp`` > 1: pin each program to one rank (its first call by the router score,
    #: later calls on that rank, ``routed_dp_rank``); False sends calls unpinned, so SGLang's
    #: data-parallel controller places each call round robin (the baseline of
    #: ``benchmarks/bench_sglang_cpu.py --dp``)
    pin_ranks: bool = True
    enable_metrics: bool = True
    #: CPU engine: OpenMP threads of the scheduler (None: half the cores, at least 1)
    cpu_threads: int | None = None
    #: GPU only: a HiCache host-memory KV tier of this many GB per rank (None: off). With it,
    #: KV the tool-wait policy marks for offload is demoted to host memory when evicted
    #: instead of dropped. SGLang's HiCache needs CUDA (pinned host memory, sgl_kernel copies)
    hicache_size_gb: int | None = None
    #: extra ``Engine`` keyword arguments, applied last (they win)
    overrides: dict[str, Any] = field(default_factory=dict)
    #: SGLang's tool-call parser for the model's chat template (None: chosen from the
    #: template, see ``chat_template.pick_parser``)
    tool_call_parser: str | None = None
    #: where SGLang's own output goes (server-args dump, import warnings, its processes'
    #: logs); None: the server's terminal, as SGLang prints it (see ``engine_log``)
    log_file: Path | None = None

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"


def is_tiny_model(model_path: Path) -> bool:
    """True for a model made by ``tiny_model.make_tiny_model`` (it is fp32)."""
    return (model_path / TINY_MARKER).is_file()


def engine_kwargs(settings: EngineSettings) -> dict[str, Any]:
    """``Engine(**kwargs)`` for ``settings``. With ``tp > 1`` the plugin runs in every
    tensor-parallel rank and decides alike on each (``lockstep``)."""
    if settings.hicache_size_gb is not None and settings.is_cpu:
        raise ValueError(
            "HiCache needs a CUDA GPU (pinned host memory and sgl_kernel's KV copies); "
            "on the CPU engine evicted KV is recomputed"
        )
    kw: dict[str, Any] = {
        "model_path": str(settings.model_path),
        "tp_size": settings.tp,
        "enable_metrics": settings.enable_metrics,
        "log_level": "warning",
        "custom_sigquit_handler": on_sigquit,
        "schedule_policy": settings.schedule_policy,
        # SGLang's scheduler spins when idle; sleeping on its sockets frees a core on small
        # machines and adds no latency (it wakes on the next message)
        "sleep_on_idle": True,
    }
    if settings.plugin:
        kw.update(
            enable_priority_scheduling=True,
            default_priority_value=0,
            schedule_policy="fcfs",
            radix_eviction_policy=retention.STRATEGY_NAME,
        )
    if settings.max_running_requests is not None:
        kw["max_running_requests"] = settings.max_running_requests
    if settings.dp > 1:
        # every program call carries ``routed_dp_rank``; SGLang's own balancing (round robin)
        # only places the adapter's unrouted health probes
        kw["dp_size"] = settings.dp
    if settings.is_cpu:
        kw.update(
            device="cpu",
            attention_backend="torch_native",
            disable_cuda_graph=True,
            disable_overlap_schedule=True,
            max_total_tokens=settings.max_total_tokens or CPU_DEFAULT_MAX_TOTAL_TOKENS,
        )
        if is_tiny_model(settings.model_path):
            kw["dtype"] = "float32"
    elif settings.max_total_tokens is not None:
        kw["max_total_tokens"] = settings.max_total_tokens
    if settings.hicache_size_gb is not None:
        # write-through (SGLang's default, named so that bench's host tier stays the one
        # serve runs): a node is on host before it can be evicted, so evicting a marked node
        # demotes it, and no eviction stops the engine for a copy as write-back's does
        # (docs/BENCHMARKS.md 2l)
        kw.update(
            enable_hierarchical_cache=True,
            hicache_size=settings.hicache_size_gb,
            hicache_write_policy=WRITE_THROUGH,
        )
    kw.update(settings.overrides)
    return kw


def host_written_through(settings: EngineSettings) -> bool:
    """Whether the engine's host tier, if it has one, is written through (serve names SGLang's
    ``write_through`` unless ``engine_args`` chose another policy)."""
    return bool(settings.overrides.get("hicache_write_policy", WRITE_THROUGH) == WRITE_THROUGH)


def engine_env(settings: EngineSettings, state_dir: Path) -> dict[str, str | None]:
    """Environment for the engine's processes (None = unset). The adapter applies it only
    while the engine is being constructed: spawned children inherit it, the server keeps its
    own environment.

    CPU: OpenMP threads are capped (``cpu_threads``, default half the cores) unless the
    operator set ``OMP_NUM_THREADS``. Measured on 2 cores: with torch's default of one thread
    per core, any other busy process (the server itself, a load generator) leaves OpenMP's
    spinning barriers waiting for a descheduled thread and engine steps take 10-100x longer
    (a 4-program replay: 11 s instead of 1.4 s)."""
    env: dict[str, str | None]
    if not settings.plugin:
        env = {symbols.PLUGINS_ENV: NO_PLUGINS, STATE_DIR_ENV: None}
    else:
        env = {
            STATE_DIR_ENV: str(state_dir),
            symbols.TREE_CORE_ENV: "python",  # the eviction plugin needs Python tree nodes
            symbols.PLUGINS_ENV: None,
        }
    if settings.is_cpu and "OMP_NUM_THREADS" not in os.environ:
        threads = settings.cpu_threads or max(1, (os.cpu_count() or 2) // 2)
        env["OMP_NUM_THREADS"] = str(threads)
    ranks = settings.dp * settings.tp
    if settings.is_cpu and ranks > 1 and BIND_ENV not in os.environ:
        env[BIND_ENV] = cpu_bind(ranks, sorted(os.sched_getaffinity(0)))
    return env


#: SGLang's CPU core list per rank; without it SGLang refuses more ranks than NUMA nodes
#: (``utils/numa_utils.py:init_threads_binding``)
BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"


def cpu_bind(ranks: int, cpus: list[int]) -> str:
    """``SGLANG_CPU_OMP_THREADS_BIND`` for ``ranks`` scheduler ranks (data x tensor
    parallel) over ``cpus``: a
    contiguous share each, or one core each (reused round robin) when there are fewer cores
    than ranks. On a CPU without AMX SGLang only checks the list (it binds nothing), so sharing
    a core is safe; ``OMP_NUM_THREADS`` still caps each rank's threads."""
    cpus = cpus or [0]
    if len(cpus) < ranks:
        return "|".join(str(cpus[r % len(cpus)]) for r in range(ranks))
    share = len(cpus) // ranks
    groups = [cpus[r * share : (r + 1) * share] for r in range(ranks)]
    return "|".join(",".join(map(str, g)) for g in groups)


def apply_env(changes: dict[str, str | None]) -> dict[str, str | None]:
    """Apply ``changes`` to ``os.environ``; returns what to pass back to undo them."""
    previous = {k: os.environ.get(k) for k in changes}
    for key, value in changes.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    return previous

"""What the plugin reports from the scheduler process: status entries, KV use, the marker.

Helpers of ``PluginState.publish`` (``status.json``) and of the marker file the policy writes
when SGLang builds it. SGLang objects are duck-typed and read best effort: a field missing in
another build leaves its number at zero rather than stopping the scheduler.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentconsole.server.runtime.sglang import symbols, wire
from agentconsole.server.runtime.sglang.control import MARKER_PREFIX, write_json_atomic
from agentconsole.server.runtime.sglang.ranked import Ranked
from agentconsole.server.runtime.sglang.status import QueuedEntry, RunningEntry, SchedulerStatus

logger = logging.getLogger("agentconsole.sglang.plugin")


def queued_entries(ranked: list[Ranked], wall: float, waiting: list[Any]) -> list[QueuedEntry]:
    """The waiting queue in run order (``ranked`` sorted by effective key; ``waiting`` the
    requests, for their prompt sizes and the output a retracted one holds)."""
    sizes = {req.rid: (len(req.origin_input_ids), _output_tokens(req)) for req in waiting}
    out = []
    for r in ranked:
        c, key = r.candidate, r.policy_key
        shown = key if key != math.inf else 1e30  # JSON has no infinity
        out.append(
            QueuedEntry(
                c.rid,
                r.program_id,
                r.tenant,
                r.key[0],
                shown,
                wall - c.first_seen,
                *sizes.get(c.rid, (0, 0)),
            )
        )
    return out


def _output_tokens(req: Any) -> int:
    """The output tokens ``req`` holds: none before it first ran, its output so far once
    retracted (SGLang keeps it, and the request resumes from it)."""
    return len(getattr(req, "output_ids", None) or ())


def running_entries(
    running: list[Any],
    wire_of: Callable[[Any], wire.WireTicket | None],
    admitted: Mapping[str, float],
    wall: float,
) -> list[RunningEntry]:
    """The running batch: program, tenant, context and generated tokens, time running."""
    out = []
    for req in running:
        w = wire_of(req)
        t = w.ticket if w else None
        generated = len(req.output_ids)
        out.append(
            RunningEntry(
                req.rid,
                t.program_id if t else "",
                t.tenant if t else "",
                len(req.origin_input_ids) + generated,
                generated,
                wall - admitted.get(req.rid, wall),
            )
        )
    return out


def live_rids(
    scheduler: Any,
    waiting: list[Any] | None = None,
    running: list[Any] | None = None,
    plan: Any = None,
) -> set[str]:
    """Every request the scheduler holds: queued, running (both read from ``scheduler``
    when not given), in the batch just run or the one ``plan`` is about to run, or as the
    chunked prefill in progress."""
    if waiting is None:
        waiting = list(getattr(scheduler, "waiting_queue", None) or [])
    if running is None:
        running = list(getattr(getattr(scheduler, "running_batch", None), "reqs", None) or [])
    live = {r.rid for r in waiting} | {r.rid for r in running}
    for batch in (getattr(scheduler, "last_batch", None), getattr(plan, "batch_to_run", None)):
        live |= {r.rid for r in (getattr(batch, "reqs", None) or [])}
    chunked = getattr(scheduler, "chunked_req", None)
    if chunked is not None:
        live.add(chunked.rid)
    return live


def fill_kv(status: SchedulerStatus, scheduler: Any) -> None:
    """KV use of the scheduler's token pool (best effort: fields differ across builds)."""
    try:
        capacity = int(scheduler.max_total_num_tokens)
        available = int(scheduler.token_to_kv_pool_allocator.available_size())
        status.kv_capacity_tokens = capacity
        status.kv_used_tokens = max(capacity - available, 0)
        status.kv_evictable_tokens = int(scheduler.tree_cache.evictable_size())
    except (AttributeError, TypeError, ValueError):
        pass
    with contextlib.suppress(AttributeError, TypeError, ValueError):
        status.batch_slots = int(scheduler.max_running_requests)
    try:
        pool = scheduler.token_to_kv_pool_allocator.get_kvcache()
        k_bytes, v_bytes = pool.get_kv_size_bytes()
        status.kv_bytes_per_token = int((k_bytes + v_bytes) // max(int(pool.size), 1))
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        pass


def data_parallel_rank() -> int | None:
    """This scheduler process's data-parallel rank (None: SGLang runs without data
    parallelism, or has not published the process's ranks)."""
    try:
        rank = symbols.load(symbols.PARALLEL)().dp_rank
    except Exception:
        return None
    return int(rank) if rank is not None else None


def write_marker(state_dir: Path, policy: Any, dp_rank: int | None = None) -> None:
    """Write ``plugin-<pid>.json``: SGLang built our policy in this process (data-parallel
    rank ``dp_rank``), with this tree cache, tree core and eviction strategy."""
    tree = getattr(policy, "tree_cache", None)
    core = getattr(tree, "tree_core", None)
    strategy = getattr(core, "eviction_strategy", None)
    info = {
        "pid": os.getpid(),
        "dp_rank": dp_rank,
        "written_at": time.time(),
        "policy_class": type(policy).__name__,
        "tree_cache": type(tree).__name__,
        "tree_core": type(core).__name__,
        "eviction_strategy": type(strategy).__name__,
    }
    write_json_atomic(state_dir / f"{MARKER_PREFIX}{os.getpid()}.json", info)
    logger.warning("agentconsole plugin active in scheduler: %s", json.dumps(info))

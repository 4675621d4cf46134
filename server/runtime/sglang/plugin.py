"""The SGLang plugin: program-aware ordering, preemption, drain and KV retention *inside*
SGLang's scheduler process.

SGLang loads the ``sglang.srt.plugins`` entry point ``agentconsole`` (``pyproject.toml``) in
every process it starts; schedulers are spawned, so this is the only way in. :func:`register`
is inert unless ``AGENTCONSOLE_SGLANG_STATE_DIR`` names the adapter's state folder (so other
SGLang users of this environment are unaffected). When active it registers with
``HookRegistry``:

* class REPLACE of ``SchedulePolicy``: ``calc_priority`` sorts the waiting queue in place by
  the simulator's effective key (``ordering.Orderer``); the constructor writes the marker file.
* class REPLACE of ``PrefillAdder``: ``preempt_to_schedule`` lets SGLang's own priority
  preemption act on *our* decision: the plugin picks the victims with the simulator's
  ``PreemptionRule`` and sets temporary ``Req.priority`` values only for the duration of that
  call (SGLang then releases their KV and requeues them); ``add_one_req`` admits nothing while
  the operator drains.
* ``SchedulePolicy.shortest_prefill_chunk_limit`` (same class) and an AROUND hook on
  ``Scheduler._should_defer_prefill``: the pass's composition follows the rank too (an
  in-flight chunk leaves room for waiting requests that outrank it; a prefill waits a bounded
  streak of decode passes while a better-ranked request decodes; ``composition``), and
  ``PrefillAdder._select_prefill_admission`` never starts a second chunked request beside a
  chunk it capped.
* AROUND hook on ``Scheduler.get_next_batch_to_run`` (every loop pass): count the pass, poll
  ``control.json``, apply retention hints, write ``status.json``; time the scheduling
  (calibration). Under tensor parallelism every rank decides alike (``lockstep``).
* AROUND hooks on ``Scheduler.run_batch`` and ``process_batch_result``: time each step and
  credit it to the tenants of its requests (the fairness guard's share rule).
* AROUND hook on ``BasePrefixCache.update_eviction_metrics``: count the device tokens each
  eviction pass frees (telemetry: ``plugin_telemetry``).
* the ``agentconsole`` radix eviction strategy (``retention``).
* in a worker's HTTP server behind sglang-router, the ``/agentconsole/*`` routes
  (``cluster.node_api``).

Every hook body is guarded: an exception is counted, logged and reported in ``status.json``,
and SGLang's own behaviour is used for that pass, so a plugin bug never stops the scheduler.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from agentconsole.server.runtime.sglang import retention, symbols
from agentconsole.server.runtime.sglang.cluster import node_api
from agentconsole.server.runtime.sglang.composition import keeps_one_chunked
from agentconsole.server.runtime.sglang.control import STATE_DIR_ENV
from agentconsole.server.runtime.sglang.plugin_state import PluginState

logger = logging.getLogger("agentconsole.sglang.plugin")
_STATE: PluginState | None = None


def state() -> PluginState | None:
    """This process's plugin state (None when the plugin is inert)."""
    return _STATE


def register() -> None:
    """SGLang's entry point: register the hooks when the adapter configured a state folder.

    Changes SGLang's hook registry and eviction-strategy table in this process; idempotent per
    process (SGLang calls it once per process anyway).
    """
    global _STATE
    folder = os.environ.get(STATE_DIR_ENV)
    if not folder or _STATE is not None:
        return
    _STATE = PluginState(Path(folder))
    registry = symbols.load(symbols.HOOK_REGISTRY)
    hook_type = symbols.load(symbols.HOOK_TYPE)
    registry.register(
        symbols.dotted(symbols.SCHEDULE_POLICY), _policy_class(_STATE), hook_type.REPLACE
    )
    registry.register(
        symbols.dotted(symbols.PREFILL_ADDER), _adder_class(_STATE), hook_type.REPLACE
    )
    registry.register(symbols.dotted(symbols.NEXT_BATCH), _around_next_batch, hook_type.AROUND)
    registry.register(symbols.dotted(symbols.DEFER_PREFILL), _around_defer, hook_type.AROUND)
    registry.register(symbols.dotted(symbols.RUN_BATCH), _timed_forward, hook_type.AROUND)
    registry.register(symbols.dotted(symbols.PROCESS_RESULT), _timed_result, hook_type.AROUND)
    registry.register(symbols.dotted(symbols.EVICTION_METRICS), _counted_eviction, hook_type.AROUND)
    if not retention.install_strategy(_STATE.strategy_clock):
        logger.error("agentconsole: cannot install the eviction strategy on this SGLang")
    # a worker behind sglang-router: its HTTP server carries operator settings and reports
    node_api.install_if_enabled(Path(folder))


def _policy_class(st: PluginState) -> type[Any]:
    base = symbols.load(symbols.SCHEDULE_POLICY)

    class ProgramAwareSchedulePolicy(base):  # type: ignore[misc,valid-type]  # SGLang class
        """SGLang's ``SchedulePolicy`` with the waiting queue ordered by agentconsole."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            st.write_marker(self)

        def calc_priority(
            self, waiting_queue: list[Any], running_batch: Any = None, processed_tokens: int = 0
        ) -> None:
            try:
                st.sort_waiting(waiting_queue, time.time(), self.tree_cache)
            except Exception as err:
                st.record_error("calc_priority", err)
                super().calc_priority(waiting_queue, running_batch, processed_tokens)

        def shortest_prefill_chunk_limit(
            self, chunked_req: Any, waiting_queue: list[Any], budget: int, page_size: int
        ) -> int | None:
            try:
                tree = self.tree_cache
                return st.chunk_limit(chunked_req, waiting_queue, budget, page_size, tree)
            except Exception as err:
                st.record_error("shortest_prefill_chunk_limit", err)
                return None

    return ProgramAwareSchedulePolicy


def _adder_class(st: PluginState) -> type[Any]:
    base = symbols.load(symbols.PREFILL_ADDER)
    add_result = symbols.load(symbols.ADD_REQ_RESULT)

    class ProgramAwarePrefillAdder(base):  # type: ignore[misc,valid-type]  # SGLang class
        """SGLang's ``PrefillAdder`` with agentconsole's preemption rule and drain gate."""

        def add_one_req(self, req: Any, *args: Any, **kwargs: Any) -> Any:
            # a drain admits no new call; a call that already ran (SGLang retracted it under
            # memory pressure, or an operator preempt did) goes on: the drain waits for it
            if st.paused and not st.requests.ran(req.rid):
                return add_result.OTHER
            return super().add_one_req(req, *args, **kwargs)

        def _select_prefill_admission(self, req: Any, *args: Any, **kwargs: Any) -> Any:
            admission = super()._select_prefill_admission(req, *args, **kwargs)
            chunked = bool(kwargs.get("has_chunked_req"))
            if keeps_one_chunked(admission, chunked, st.chunk_capped):
                return admission
            return add_result.OTHER

        def preempt_to_schedule(self, req: Any) -> bool:
            running = list(self.running_batch.reqs)
            try:
                plan = st.plan_preemption(
                    req, running, int(self.priority_scheduling_preemption_threshold)
                )
            except Exception as err:
                st.record_error("preempt_to_schedule", err)
                return False
            if plan is None:
                return False
            mine, theirs = plan
            saved = [(r, r.priority) for r in [req, *running]]
            before = len(self.preempt_list)
            try:
                req.priority = mine
                for r in running:
                    r.priority = theirs.get(r.rid, mine)
                ok = bool(super().preempt_to_schedule(req))
            finally:
                for r, p in saved:
                    r.priority = p
            if ok:
                st.on_preempted(len(self.preempt_list) - before)
            return ok

    return ProgramAwarePrefillAdder


def _around_next_batch(original: Any, scheduler: Any, *args: Any, **kwargs: Any) -> Any:
    st = _STATE
    if st is not None:
        try:
            st.begin_pass(scheduler)
        except Exception as err:
            st.record_error("get_next_batch_to_run", err)
    start = time.perf_counter()
    plan = original(scheduler, *args, **kwargs)
    seconds = time.perf_counter() - start
    if st is not None:
        try:
            st.on_loop(scheduler, plan)
            st.on_scheduled(plan, seconds)
        except Exception as err:
            st.record_error("get_next_batch_to_run", err)
    return plan


def _around_defer(original: Any, scheduler: Any, running_batch: Any, *args: Any) -> bool:
    if original(scheduler, running_batch, *args):
        return True  # SGLang's own prefill_decode_interval
    st = _STATE
    if st is None:
        return False
    try:
        return st.defer_prefill(scheduler, running_batch)
    except Exception as err:
        st.record_error("_should_defer_prefill", err)
        return False


def _timed_forward(original: Any, scheduler: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
    return _timed(original, scheduler, batch, args, kwargs, forward=True)


def _timed_result(original: Any, scheduler: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
    return _timed(original, scheduler, batch, args, kwargs, forward=False)


def _timed(
    original: Any,
    scheduler: Any,
    batch: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    forward: bool,
) -> Any:
    wall = time.time()
    start = time.perf_counter()
    out = original(scheduler, batch, *args, **kwargs)
    st = _STATE
    if st is not None and batch is not None:
        try:
            st.on_step(batch, wall, time.perf_counter() - start, forward=forward)
        except Exception as err:
            st.record_error("step accounting", err)
    return out


def _counted_eviction(
    original: Any, cache: Any, num_evicted: Any, *args: Any, **kwargs: Any
) -> Any:
    out = original(cache, num_evicted, *args, **kwargs)
    st = _STATE
    if st is not None:
        try:
            st.telemetry.on_evicted(int(num_evicted), time.time())
        except Exception as err:
            st.record_error("eviction accounting", err)
    return out

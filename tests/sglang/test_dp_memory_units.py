"""``memory(program_id)`` of the SGLang runtime with data-parallel ranks, without an engine: a
program's memory is the rank it ran on alone (its pool, its queue, its batch), as
``bench --replicas`` shows the driver the replica a program last ran on; ``memory()`` stays
every rank's summed (the program door's view). Through ``RuntimeView`` the driver's tool-wait
decision for a program on an idle rank is the one ``bench`` makes on its idle replica, not one
priced by the busy rank's queue."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from agentconsole.kvtiers.advisor import ToolWaitAdvisor
from agentconsole.kvtiers.toolwait import get_tool_wait_policy
from agentconsole.scheduler.controller import CallUsage, ProgramController
from agentconsole.scheduler.driver import ProgramDriver
from agentconsole.scheduler.estimators import ToolLatencyEstimator
from agentconsole.scheduler.events import EventKind, EventLog, Scalar
from agentconsole.scheduler.latency import LogNormal
from agentconsole.scheduler.program import Node, NodeKind, ToolSpec
from agentconsole.scheduler.runtime import (
    CacheAction,
    GenerationRequest,
    MemoryView,
    PrefixProbe,
    ProgramContext,
)
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.live.engineview import RuntimeView
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.control import STATUS_FILE, rank_file, write_json_atomic
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.status import QueuedEntry, RunningEntry, SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream
from tests.scheduler.driver_fakes import LinearCost

CAPACITY = 20_000  # each rank's device pool
HOST = 40_000  # each rank's host tier (HiCache)
IDLE, BUSY = 0, 1


def _idle() -> SchedulerStatus:
    return SchedulerStatus(
        written_at=1.0,
        kv_capacity_tokens=CAPACITY,
        kv_used_tokens=2_000,
        batch_slots=8,
        host_capacity_tokens=HOST,
        kv_bytes_per_token=2,
    )


def _busy() -> SchedulerStatus:
    """A rank whose queue wants far more than its free pool: 12 calls of 6,000 tokens wait,
    8 run, and another program's context is kept."""
    queued = [QueuedEntry(f"q{i}/n/1", f"q{i}", "t", 2, float(i), 1.0, 6_000) for i in range(12)]
    running = [RunningEntry(f"r{i}/n/1", f"r{i}", "t", 1_500, 10, 1.0) for i in range(8)]
    return SchedulerStatus(
        written_at=1.0,
        queued=queued,
        running=running,
        kv_capacity_tokens=CAPACITY,
        kv_used_tokens=CAPACITY - 1_000,
        kv_evictable_tokens=500,
        batch_slots=8,
        retained_tokens={"kept": 400},
        host_capacity_tokens=HOST,
        kv_bytes_per_token=2,
    )


def _sglang(tmp_path: Path, dp: int = 2) -> SGLangRuntime:
    """An SGLang runtime (never started) whose ranks reported ``_idle`` and ``_busy`` (one
    rank: ``_busy``)."""
    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path, dp=dp), state_dir=tmp_path)
    if dp == 1:
        write_json_atomic(tmp_path / rank_file(STATUS_FILE, None), _busy().to_json())
    for rank, status in enumerate([_idle(), _busy()] if dp > 1 else []):
        write_json_atomic(tmp_path / rank_file(STATUS_FILE, rank), status.to_json())
    return runtime


def test_a_programs_memory_is_its_ranks_and_the_whole_runtimes_is_every_ranks(
    tmp_path: Path,
) -> None:
    runtime = _sglang(tmp_path)
    assert runtime.router is not None
    runtime.router.note("on-idle", "n0", IDLE)
    runtime.router.note("on-busy", "n0", BUSY)
    whole = runtime.memory()
    assert whole.engines == 2  # the whole view says it sums two ranks
    idle, busy = runtime.memory("on-idle"), runtime.memory("on-busy")
    assert idle.engines == busy.engines == 1
    assert idle == MemoryView(
        hbm_capacity_tokens=CAPACITY,
        free_tokens=CAPACITY - 2_000,
        batch_slots=8,
        # written through, as serve runs HiCache: the host pool's room beyond its copies
        dram_capacity_tokens=HOST - CAPACITY,
        kv_bytes_per_token=2.0,
    )
    assert (busy.queued_calls, busy.running_calls, busy.queued_tokens) == (12, 8, 72_000.0)
    assert (busy.free_tokens, busy.evictable_tokens, busy.protected_tokens) == (1_000, 500, 400)
    # the whole runtime: every rank summed (the program door sizes new programs by it)
    assert whole.hbm_capacity_tokens == 2 * CAPACITY
    assert whole.dram_capacity_tokens == 2 * (HOST - CAPACITY)
    assert whole.free_tokens == idle.free_tokens + busy.free_tokens
    assert whole.queued_calls == 12
    assert whole.running_calls == 8
    assert whole.batch_slots == 16
    # a program that ran nowhere yet: the whole runtime
    assert runtime.memory("new") == whole


def test_a_call_the_adapter_holds_counts_on_its_rank_alone(tmp_path: Path) -> None:
    """A call sent to a rank that SGLang has not registered yet queues there, not elsewhere."""
    runtime = _sglang(tmp_path)
    assert runtime.router is not None
    runtime.router.note("on-idle", "n0", IDLE)
    runtime.router.note("on-busy", "n0", BUSY)
    ticket = CallTicket("on-busy/n1/1", "on-busy", "n1", "t", time.time())
    call = SGLangStream(GenerationRequest(ticket, "ok", max_tokens=1, prompt_ids=(1, 2, 3)))
    call.rank = BUSY
    runtime._calls[call.rid] = call
    assert runtime.memory("on-busy").queued_calls == 13
    assert runtime.memory("on-busy").queued_tokens == 72_003.0
    assert runtime.memory("on-idle").queued_calls == 0
    assert runtime.memory().queued_calls == 13


def test_a_released_program_is_still_seen_on_the_rank_it_last_ran_on(tmp_path: Path) -> None:
    """A tool wait decided for recompute releases the program's place; its memory stays that
    of the rank it ran on (``bench`` looks at the replica its last call ran on)."""
    runtime = _sglang(tmp_path)
    assert runtime.router is not None
    runtime.router.note("p", "n0", IDLE)
    runtime.router.release("p")
    assert runtime.memory("p") != runtime.memory()
    assert runtime.memory("p").hbm_capacity_tokens == CAPACITY


def test_one_rank_answers_the_same_for_every_program(tmp_path: Path) -> None:
    runtime = _sglang(tmp_path, dp=1)
    assert runtime.router is None
    assert runtime.memory("p") == runtime.memory() == runtime.memory(None)
    assert runtime.memory().queued_calls == 12


def test_a_host_tier_written_back_is_all_room_of_its_own(tmp_path: Path) -> None:
    """``engine_args`` choosing SGLang's ``write_back``: the host pool holds no copies of the
    device pool, so all of it is room; written through (serve's default) it is the rest."""
    assert _sglang(tmp_path, dp=1).memory().dram_capacity_tokens == HOST - CAPACITY
    overrides = {"hicache_write_policy": "write_back"}
    settings = EngineSettings(model_path=tmp_path, overrides=overrides)
    runtime = SGLangRuntime(settings, state_dir=tmp_path)  # a new runtime clears the state
    write_json_atomic(tmp_path / rank_file(STATUS_FILE, None), _busy().to_json())
    assert runtime.memory().dram_capacity_tokens == HOST


def test_runtime_view_passes_the_program_through(tmp_path: Path) -> None:
    runtime = _sglang(tmp_path)
    assert runtime.router is not None
    runtime.router.note("on-idle", "n0", IDLE)
    view = RuntimeView(runtime)
    assert view.memory("on-idle", 0.0) == runtime.memory("on-idle")
    assert view.memory("on-idle", 0.0).hbm_capacity_tokens == CAPACITY
    assert view.memory("new", 0.0) == runtime.memory()


class _Contexts:
    """The driver's ``EngineView``: memory from ``RuntimeView`` (serve) or one fixed view (a
    replica's, as bench shows it), with a fixed context (no engine ran the call here, so the
    runtime holds none of it)."""

    def __init__(self, memory: RuntimeView | MemoryView) -> None:
        self.source = memory

    def memory(self, program_id: str, now: float) -> MemoryView:
        if isinstance(self.source, MemoryView):
            return self.source
        return self.source.memory(program_id, now)

    def context(self, program_id: str, now: float) -> ProgramContext | None:
        return ProgramContext(private_tokens=4_000)


def _tool_wait_decision(view: _Contexts) -> Mapping[str, Scalar]:
    """The ``adaptive`` policy's tool-wait decision for program ``on-idle`` whose call ended
    beside a 40 s tool, as its ``kv.decision`` event tells it (action, pressure, costs)."""
    log = EventLog()
    controller = ProgramController(log, LinearCost())
    controller.tool_latency = ToolLatencyEstimator(prior=LogNormal.from_median(40.0, 0.5))
    advisor = ToolWaitAdvisor(get_tool_wait_policy("adaptive"))
    driver = ProgramDriver(controller, advisor, LinearCost(), budget_tokens=1_000_000)
    controller.open_program("on-idle", "t", 0.0)
    assert driver.arrive("on-idle", 4_000, 0, 0.0)
    controller.add_node("on-idle", Node("n0", "on-idle", NodeKind.LLM), 0.0)
    ticket = driver.queue_call("on-idle", "n0", PrefixProbe(4_000), 0.0)
    controller.start_node("on-idle", "n0", 0.0)
    tool = Node("t0", "on-idle", NodeKind.TOOL, tool=ToolSpec("search"))
    controller.add_node("on-idle", tool, 0.0)
    driver.tool_started("on-idle", "t0", 1.0)
    driver.call_ended("on-idle", "n0", ticket.call_id, 1.0, CallUsage(4_000, 0, 50, 0.1))
    driver.settle(view, 1.0)
    decisions = [e for e in log.events if e.kind is EventKind.KV_DECISION]
    assert len(decisions) == 1
    return decisions[0].data


def test_the_tool_wait_decision_on_an_idle_rank_is_benchs(tmp_path: Path) -> None:
    """Two ranks, one idle and one swamped: the program on the idle rank is decided by its
    rank's memory, the memory ``bench --replicas`` shows the driver of an idle replica (here
    the idle rank's status as one engine's view), not by every rank's queue summed."""
    runtime = _sglang(tmp_path)
    assert runtime.router is not None
    runtime.router.note("on-idle", "n0", IDLE)
    served = _tool_wait_decision(_Contexts(RuntimeView(runtime)))
    replica = MemoryView(
        hbm_capacity_tokens=CAPACITY,
        free_tokens=CAPACITY - 2_000,
        batch_slots=8,
        dram_capacity_tokens=HOST - CAPACITY,
        kv_bytes_per_token=2.0,
    )
    bench = _tool_wait_decision(_Contexts(replica))
    assert served == bench
    assert served["pressure"] == 0.0  # an idle rank: no pressure on it
    assert served["action"] == CacheAction.KEEP
    summed = _tool_wait_decision(_Contexts(runtime.memory()))
    pressure = summed["pressure"]
    assert isinstance(pressure, float)
    assert pressure > 0.0  # what serve decided by before: both ranks summed
    assert summed["action"] != served["action"]

"""SGLang data parallelism without an engine: the rank router (``ranks``), the per-rank plugin
files and their merge (``rank_status``, ``control.rank_file``), the CPU core binding and the
per-rank telemetry."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sglang.contexts import ProgramContexts
from agentconsole.server.runtime.sglang.control import rank_file, write_json_atomic
from agentconsole.server.runtime.sglang.engine_config import (
    BIND_ENV,
    EngineSettings,
    cpu_bind,
    engine_env,
    engine_kwargs,
)
from agentconsole.server.runtime.sglang.rank_status import (
    RankFiles,
    merge_placements,
    merge_statuses,
)
from agentconsole.server.runtime.sglang.ranks import InFlight, RankRouter
from agentconsole.server.runtime.sglang.status import (
    Placement,
    QueuedEntry,
    RunningEntry,
    SchedulerStatus,
)
from agentconsole.server.runtime.sglang.telemetry import Telemetry

SALT = "t:a"
NO_PLACEMENT: list[Placement | None] = [None, None]


def test_rank_file_names() -> None:
    assert rank_file("status.json", None) == "status.json"
    assert rank_file("status.json", 1) == "status.rank1.json"
    assert rank_file("steps.jsonl", 0) == "steps.rank0.jsonl"


def test_cpu_bind_splits_cores_or_shares_them() -> None:
    assert cpu_bind(2, [0, 1]) == "0|1"
    assert cpu_bind(2, [0, 1, 2, 3, 4]) == "0,1|2,3"
    assert cpu_bind(3, [4, 5]) == "4|5|4"
    assert cpu_bind(2, []) == "0|0"


def test_engine_gets_dp_size_and_a_core_list_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BIND_ENV, raising=False)
    one = EngineSettings(model_path=Path("/m"))
    two = EngineSettings(model_path=Path("/m"), dp=2)
    assert "dp_size" not in engine_kwargs(one)
    assert BIND_ENV not in engine_env(one, Path("/s"))
    assert engine_kwargs(two)["dp_size"] == 2
    assert str(engine_env(two, Path("/s"))[BIND_ENV]).count("|") == 1
    monkeypatch.setenv(BIND_ENV, "0|0")  # the operator's wins
    assert BIND_ENV not in engine_env(two, Path("/s"))


def test_first_calls_spread_by_load_and_later_calls_stay() -> None:
    router, contexts = RankRouter(2), ProgramContexts()
    a = router.route("A", SALT, list(range(50)), 50, [], contexts, NO_PLACEMENT)
    # A's first call is still prefilling on its rank: B goes to the other one
    b = router.route("B", SALT, list(range(100, 150)), 50, [InFlight(a, 50)], contexts, [])
    assert {a, b} == {0, 1}
    # later calls stay, whatever the load
    busy = [InFlight(a, 10_000, 10_000)]
    assert router.route("A", SALT, list(range(60)), 60, busy, contexts, NO_PLACEMENT) == a
    # with nothing in flight a tie goes to the rank with fewer programs
    c = router.route("C", SALT, [7], 1, [], contexts, NO_PLACEMENT)
    d = router.route("D", SALT, [8], 1, [], contexts, NO_PLACEMENT)
    assert c != d
    assert router.programs_per_rank() == [2, 2]


def test_a_short_common_head_does_not_pile_new_programs_on_one_rank() -> None:
    """Every prompt begins with the chat template's few tokens: a rank that holds them is no
    place to prefer (SGLang's own router credits a match under 30% of the prompt nothing), so
    programs arriving one after another, each then waiting on its tools, spread by programs
    mapped instead of all following the first one's template."""
    router, contexts = RankRouter(2), ProgramContexts()
    template = list(range(1000, 1008))
    for i in range(6):
        program = f"P{i}"
        prompt = [*template, *range(i * 100, i * 100 + 92)]
        rank = router.route(program, SALT, prompt, 100, [], contexts, NO_PLACEMENT)
        router.note(program, "n1", rank)
        contexts.remember(program, SALT, prompt, [7])  # answered; now on a tool, no call
    assert router.programs_per_rank() == [3, 3]


def test_a_shared_prefix_pulls_a_new_program_to_its_rank() -> None:
    router, contexts = RankRouter(2), ProgramContexts()
    system = list(range(400))
    for program, rank in (("A", 1), ("B", 0)):
        router.route(program, SALT, [rank], 1, [], contexts, NO_PLACEMENT)
    assert router.rank_of("A") == 1 or router.rank_of("B") == 1
    on_one = "A" if router.rank_of("A") == 1 else "B"
    contexts.remember(on_one, SALT, [*system, 5], [6])
    router.note(on_one, "n1", 1)
    load = [InFlight(1, 0, 100)]  # some decode load on rank 1: the cached prefix outweighs it
    assert router.route("C", SALT, [*system, 9, 9], 402, load, contexts, NO_PLACEMENT) == 1
    # another tenant's salt shares nothing
    assert router.route("D", "t:b", [*system, 9, 9], 402, load, contexts, NO_PLACEMENT) == 0


def test_release_drain_and_lost_context_place_a_program_again() -> None:
    router, contexts = RankRouter(2), ProgramContexts()
    first = router.route("A", SALT, [1, 2, 3], 3, [], contexts, NO_PLACEMENT)
    other = 1 - first
    router.drain(first)
    assert router.route("A", SALT, [1, 2, 3], 3, [], contexts, NO_PLACEMENT) == other
    router.undrain(first)
    router.release("A")
    assert router.rank_of("A") is None
    with pytest.raises(ValueError, match="no data-parallel rank 2"):
        router.drain(2)
    # the rank's sweep (newer than A's last context) no longer finds A: placed again
    router.drain(other)
    rank = router.route("A", SALT, [1, 2, 3], 3, [], contexts, NO_PLACEMENT)
    router.undrain(other)
    contexts.remember("A", SALT, [1, 2, 3], [4])
    swept = [Placement(time.time() + 1, {}), Placement(time.time() + 1, {})]
    kept = list(swept)
    kept[rank] = Placement(time.time() + 1, {"A": (3, 3)})
    assert router.route("A", SALT, [1, 2, 3, 4], 4, [], contexts, kept) == rank
    load = [InFlight(rank, 1000)]
    assert router.route("A", SALT, [1, 2, 3, 4], 4, load, contexts, swept) == 1 - rank


def test_node_ranks_are_kept_per_program() -> None:
    router = RankRouter(2)
    router.note("A", "n1", 1)
    router.note("A", "n2", 0)
    router.note("A", "n1", 0)  # a retry ran elsewhere
    assert router.node_ranks("A") == {"n1": 0, "n2": 0}
    assert router.node_ranks("B") == {}


def test_statuses_merge_into_one_engine_view() -> None:
    r0 = SchedulerStatus(written_at=10.0, control_version=5, kv_used_tokens=100)
    r0.kv_capacity_tokens, r0.kv_bytes_per_token = 1000, 8
    r0.queued = [QueuedEntry("a/1/1", "a", "t", 2, 1.0, 0.5, 30)]
    r0.tenant_service_s = {"t": 1.0}
    r1 = SchedulerStatus(written_at=10.5, control_version=4, kv_used_tokens=50)
    r1.kv_capacity_tokens, r1.kv_bytes_per_token = 1000, 8
    r1.running = [RunningEntry("b/1/1", "b", "t", 40, 3, 0.2)]
    r1.tenant_service_s = {"t": 2.0, "u": 1.0}
    r1.late_controls = 1  # with tp > 1 per group: any group's late read shows
    merged = merge_statuses([r0, r1])
    assert merged.late_controls == 1
    assert (merged.kv_used_tokens, merged.kv_capacity_tokens) == (150, 2000)
    assert merged.control_version == 4  # in force once the slowest rank has it
    assert merged.written_at == 10.5
    assert merged.queued[0].waited_s == pytest.approx(1.0)  # aligned to the newest report
    assert [r.rid for r in merged.running] == ["b/1/1"]
    assert merged.tenant_service_s == {"t": 3.0, "u": 1.0}
    assert merge_statuses([r0]) is r0
    p0 = Placement(5.0, {"a": (10, 4), "c": (3, 3)})
    p1 = Placement(6.0, {"a": (20, 20)})
    assert merge_placements([p0, p1]) == Placement(5.0, {"a": (20, 20), "c": (3, 3)})


def test_rank_files_wait_for_every_rank(tmp_path: Path) -> None:
    files = RankFiles(tmp_path, 2)
    write_json_atomic(tmp_path / "status.rank0.json", SchedulerStatus(written_at=1.0).to_json())
    assert files.status() is None
    write_json_atomic(tmp_path / "status.rank1.json", SchedulerStatus(written_at=2.0).to_json())
    merged = files.status()
    assert merged is not None
    assert merged.written_at == 2.0
    assert files.placement() is None
    write_json_atomic(tmp_path / "placement.rank1.json", Placement(3.0, {"a": (4, 4)}).to_json())
    files = RankFiles(tmp_path, 2)  # placements are re-read at most every 0.2 s
    assert files.placements()[0] is None
    assert files.placement() == Placement(3.0, {"a": (4, 4)})
    single = RankFiles(tmp_path, 1)  # one rank: the unsuffixed names, as before
    write_json_atomic(tmp_path / "status.json", SchedulerStatus(written_at=7.0).to_json())
    status = single.status()
    assert status is not None
    assert status.written_at == 7.0


def test_a_status_is_parsed_and_merged_once_per_version_of_the_files(tmp_path: Path) -> None:
    files = RankFiles(tmp_path, 2)
    write_json_atomic(tmp_path / "status.rank0.json", SchedulerStatus(written_at=1.0).to_json())
    write_json_atomic(tmp_path / "status.rank1.json", SchedulerStatus(written_at=2.0).to_json())
    first = files.status()
    assert first is not None
    assert files.status() is first  # nothing changed: the same merge, nothing parsed again
    write_json_atomic(tmp_path / "status.rank1.json", SchedulerStatus(written_at=3.0).to_json())
    second = files.status()
    assert second is not first
    assert second is not None
    assert second.written_at == 3.0
    (tmp_path / "status.rank0.json").write_text("{not json", encoding="utf-8")
    assert files.status() is second  # a torn file: the last good one stands, as before


def test_each_rank_reports_as_an_engine_of_its_own() -> None:
    r0 = SchedulerStatus(written_at=1.0, kv_used_tokens=10, kv_bytes_per_token=2)
    r0.evictions, r0.evicted_tokens = [[1, 0.5, 30]], 30
    r1 = SchedulerStatus(written_at=1.0, kv_used_tokens=20, kv_bytes_per_token=2)
    r1.evictions, r1.evicted_tokens = [[1, 0.6, 7]], 7  # its own numbering
    log = EventLog()
    tel = Telemetry(log, lambda: None, ProgramContexts(), read_ranks=lambda: [r0, r1])
    tel.poll(100.0)
    evicted = [
        (e.data["tokens"], e.data["dp_rank"]) for e in log.events if e.kind is EventKind.KV_EVICTED
    ]
    assert evicted == [(30, 0), (7, 1)]
    stats = {
        e.data["engine"]: e.data["hbm_bytes"]
        for e in log.events
        if e.kind is EventKind.ENGINE_STATS
    }
    assert stats == {"sglang.rank0": 20, "sglang.rank1": 40}


def test_a_finished_programs_place_goes_once_its_rank_evicted_it() -> None:
    router, contexts = RankRouter(2), ProgramContexts()
    rank = router.route("A", SALT, [1, 2], 2, [], contexts, NO_PLACEMENT)
    contexts.remember("A", SALT, [1, 2], [3])
    router.route("B", SALT, [5, 6], 2, [], contexts, NO_PLACEMENT)
    assert router.rank_of("A") == rank  # no sweep since A's call: still placed
    swept: list[Placement | None] = [Placement(time.time() + 1, {}) for _ in range(2)]
    router.route("C", SALT, [7, 8], 2, [], contexts, swept)
    assert router.rank_of("A") is None


def test_unpinned_ranks_leave_every_call_to_sglangs_round_robin(tmp_path: Path) -> None:
    """``pin_ranks=False`` (the bench's round-robin arm): no rank router, so no call carries
    ``routed_dp_rank``; the engine still gets its ranks."""
    from agentconsole.server.runtime.sglang.adapter import SGLangRuntime

    pinned = SGLangRuntime(EngineSettings(model_path=tmp_path, dp=2), state_dir=tmp_path / "a")
    unpinned = SGLangRuntime(
        EngineSettings(model_path=tmp_path, dp=2, pin_ranks=False), state_dir=tmp_path / "b"
    )
    assert isinstance(pinned.router, RankRouter)
    assert unpinned.router is None
    assert engine_kwargs(unpinned.settings)["dp_size"] == 2


def test_an_ended_program_no_longer_counts_on_its_rank(tmp_path: Path) -> None:
    """``Runtime.program_ended`` (the driver's ``ProgramEnded``): the program's rank stops
    counting it at once, so a tie is no longer decided by finished programs."""
    from agentconsole.server.runtime.sglang.adapter import SGLangRuntime

    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path, dp=2), state_dir=tmp_path)
    assert runtime.router is not None
    contexts = ProgramContexts()
    a = runtime.router.route("A", SALT, [1, 2], 2, [], contexts, NO_PLACEMENT)
    runtime.router.route("B", SALT, [5, 6], 2, [], contexts, NO_PLACEMENT)
    assert runtime.router.programs_per_rank() == [1, 1]
    runtime.program_ended("A")
    assert runtime.router.rank_of("A") is None
    # the next new program goes to A's rank, now the one with fewer programs
    assert runtime.router.route("C", SALT, [7, 8], 2, [], contexts, NO_PLACEMENT) == a
    runtime.program_ended("never-routed")  # nothing to forget: no error


def test_an_ended_program_gives_up_its_kept_context(tmp_path: Path) -> None:
    """A program that ends in a tool wait with its context kept (``cache_hint(KEEP)``): the
    plugin is told to end the retention at once, not at its deadline minutes later."""
    from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
    from agentconsole.server.runtime.sglang.retention import RELEASE

    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path), state_dir=tmp_path)
    asyncio.run(runtime.cache_hint("A", CacheAction.KEEP, 600.0))
    asyncio.run(runtime.cache_hint("B", CacheAction.KEEP, 600.0))
    runtime.program_ended("A")
    retention = runtime.control.state.retention
    assert retention["A"].action == RELEASE
    assert retention["B"].action == "keep"  # the others keep theirs
    runtime.program_ended("never-kept")  # nothing to end: no hint written
    assert "never-kept" not in retention


def test_a_program_back_from_its_tool_ends_every_mark_an_ended_one_only_its_keep(
    tmp_path: Path,
) -> None:
    """Back, a program runs on its context again: an ``offload`` or ``recompute`` decision's
    evict-first mark on what survived of it would push out first the context its new call
    extends (the plugin kept it until the hint expired, a minute past its deadline). Ended, a
    drop's mark still says what should go first."""
    from agentconsole.scheduler.runtime import GenerationRequest
    from agentconsole.scheduler.ticket import CallTicket
    from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
    from agentconsole.server.runtime.sglang.retention import RELEASE

    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path), state_dir=tmp_path)
    decisions = {"A": CacheAction.RECOMPUTE, "B": CacheAction.OFFLOAD, "C": CacheAction.KEEP}
    for program, action in {**decisions, "D": CacheAction.RECOMPUTE}.items():
        asyncio.run(runtime.cache_hint(program, action, 600.0))

    async def back(program: str) -> None:
        ticket = CallTicket(f"{program}/n2/1", program, "n2", "t", 0.0)
        call = runtime._new_call(GenerationRequest(ticket, "x", max_tokens=5))
        runtime._launch(call, asyncio.sleep(0), "test")
        assert call.task is not None
        await call.task

    for program in decisions:
        asyncio.run(back(program))
    runtime.program_ended("D")
    retention = runtime.control.state.retention
    assert [retention[p].action for p in "ABCD"] == [RELEASE, RELEASE, RELEASE, "recompute"]


def test_an_ended_programs_cached_prefix_still_pulls_new_programs() -> None:
    """Forgetting an ended program's rank leaves what the rank caches of it: its context
    still tells where a shared prefix is (until the rank's sweep says it is gone)."""
    router, contexts = RankRouter(2), ProgramContexts()
    system = list(range(400))
    rank = router.route("A", SALT, [*system, 5], 401, [], contexts, NO_PLACEMENT)
    router.note("A", "n1", rank)
    contexts.remember("A", SALT, [*system, 5], [6])
    router.release("A")  # A ended (``program_ended``)
    load = [InFlight(rank, 0, 100)]  # some decode load there: the cached prefix outweighs it
    assert router.route("C", SALT, [*system, 9], 401, load, contexts, NO_PLACEMENT) == rank
    # once the rank's sweep no longer finds A, its prefix pulls nothing
    gone: list[Placement | None] = [Placement(time.time() + 1, {}) for _ in range(2)]
    assert router.route("D", SALT, [*system, 8], 401, load, contexts, gone) == 1 - rank

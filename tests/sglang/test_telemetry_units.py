"""SGLang telemetry without an engine: the adapter's context memory, the per-call events and the
status poll (``telemetry``), and the plugin's placement sweep and eviction log on a fake tree."""

from __future__ import annotations

import asyncio
import json
import time
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import plugin_telemetry, retention, wire
from agentconsole.server.runtime.sglang.contexts import ProgramContexts, common_prefix
from agentconsole.server.runtime.sglang.plugin_requests import RequestBook
from agentconsole.server.runtime.sglang.ranked import Candidate
from agentconsole.server.runtime.sglang.ranks import RankRouter
from agentconsole.server.runtime.sglang.status import Placement, SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream
from agentconsole.server.runtime.sglang.telemetry import Telemetry

ids = st.lists(st.integers(0, 3), max_size=300)


@given(ids, ids)
def test_common_prefix_is_the_naive_one(a: list[int], b: list[int]) -> None:
    naive = 0
    while naive < min(len(a), len(b)) and a[naive] == b[naive]:
        naive += 1
    assert common_prefix(array("i", a), array("i", b)) == naive


def test_contexts_reuse_recompute_namespaces_and_bounds() -> None:
    ctx = ProgramContexts(max_programs=2, max_tokens=1000)
    ctx.remember("p", "t:a", list(range(100)), [900, 901])  # 102 ids; the last has no KV
    prompt = [*range(100), 900, 901, 7, 8]
    assert ctx.reusable("p", "t:a", prompt) == 101
    assert ctx.reusable("p", "t:b", prompt) == 0  # SGLang never shares across salts
    assert ctx.reusable("q", "t:a", prompt) == 0
    assert ctx.reusable("p", "t:a", list(range(50))) == 49  # the last prompt token is prefilled
    assert ctx.recomputed("p", "t:a", prompt, cached=60) == 41
    assert ctx.recomputed("p", "t:a", prompt, cached=200) == 0  # others' prefix: no loss
    assert ctx.reuse("p", "t:a", prompt, resident=30).lost == 71
    assert ctx.reuse("p", "t:a", prompt, resident=None).lost == 0  # not reported yet
    ctx.remember("q", "t:a", [1] * 600, [])
    ctx.remember("r", "t:a", [2] * 600, [])  # over both bounds: the least recent go
    assert ctx.get("p") is None
    assert ctx.get("q") is None
    assert len(ctx) == 1


def _call(program: str, prompt: str = "hello", namespace: str = "t1") -> SGLangStream:
    t = CallTicket(f"{program}/n1/1", program, "n1", "tenant-1", arrival=0.0)
    return SGLangStream(GenerationRequest(t, prompt, max_tokens=4, cache_namespace=namespace))


def test_call_events_carry_hits_recompute_and_restore_time() -> None:
    async def scenario() -> tuple[EventLog, SGLangStream, ProgramContexts]:
        log, contexts = EventLog(), ProgramContexts()
        tel = Telemetry(log, lambda: None, contexts)
        salt = wire.cache_salt("t1", prompt_chars=5, public_prefix_chars=0)
        contexts.remember("p", salt, list(range(100)), [5, 6])
        call = _call("p")
        prompt = [*range(100), 5, 6, 9]
        meta: dict[str, Any] = {"completion_tokens": 0, "prompt_tokens": 103}
        tel.on_chunk(call, {"prompt_token_ids": prompt, "meta_info": meta})  # not prefilled
        assert not log.events
        meta = {
            "completion_tokens": 1,
            "prompt_tokens": 103,
            "cached_tokens": 41,
            "cached_tokens_details": {"device": 40, "host": 1},
            "queue_time": 0.5,
            "forward_entry_time": 10.0,
            "prefill_finished_time": 10.62,
        }
        tel.on_chunk(call, {"output_ids": [3], "meta_info": meta})
        tel.on_chunk(call, {"output_ids": [3, 4], "meta_info": meta})  # once per call
        call.meta = {"finish_reason": {"type": "length"}}
        tel.on_end(call)
        return log, call, contexts

    log, call, contexts = asyncio.run(scenario())
    kinds = [e.kind for e in log.events]
    assert kinds == [EventKind.CALL_SCHEDULED, EventKind.KV_RECOMPUTED, EventKind.KV_RELOADED]
    scheduled = log.events[0]
    assert (scheduled.program_id, scheduled.node_id, scheduled.attempt, scheduled.tenant) == (
        "p",
        "n1",
        1,
        "tenant-1",
    )
    assert scheduled.data["hit_tokens"] == 41
    assert scheduled.data["recompute_tokens"] == 101 - 41
    assert log.events[1].data["tokens"] == 60
    assert log.events[2].data["tokens"] == 1
    assert call.restore_s == pytest.approx(0.62 * 60 / (103 - 41))
    assert call.result_now().restore_s == call.restore_s
    remembered = contexts.get("p")
    assert remembered is not None
    assert list(remembered.ids) == [*range(100), 5, 6, 9, 3, 4]


def test_poll_turns_eviction_passes_and_stats_into_events() -> None:
    status = SchedulerStatus(written_at=1.0, kv_used_tokens=10, kv_bytes_per_token=4)
    status.evictions = [[1, 0.5, 30], [2, 0.7, 20]]
    status.evicted_tokens, status.busy_s = 50, 2.5
    log = EventLog()
    tel = Telemetry(log, lambda: status, ProgramContexts(), stats_s=5.0)
    tel.poll(100.0)
    tel.poll(101.0)  # the same status: nothing new
    status.written_at = 2.0
    status.evictions = [[2, 0.7, 20], [9, 1.5, 5]]  # passes 3..8 left the list unseen
    status.evicted_tokens = 50 + 70 + 5
    tel.poll(102.0)
    evicted = [(e.t, e.data["tokens"]) for e in log.events if e.kind is EventKind.KV_EVICTED]
    assert evicted == [(0.5, 30), (0.7, 20), (1.5, 5), (102.0, 70)]
    (stats,) = [e for e in log.events if e.kind is EventKind.ENGINE_STATS]
    assert (stats.data["busy_s"], stats.data["hbm_bytes"]) == (2.5, 40)


def test_poll_counts_a_restarted_process_afresh() -> None:
    """A rank whose scheduler restarted reports passes and totals from 0 again: each of its
    passes is new, and its busy seconds add to the old process's rather than go back."""
    status = SchedulerStatus(written_at=1.0, evicted_tokens=1000, busy_s=40.0)
    status.evictions = [[50, 0.5, 20]]
    log = EventLog()
    tel = Telemetry(log, lambda: status, ProgramContexts(), stats_s=0.0)
    tel.poll(100.0)
    before = len([e for e in log.events if e.kind is EventKind.KV_EVICTED])
    status = SchedulerStatus(written_at=2.0, evicted_tokens=30, busy_s=1.5)
    status.evictions = [[1, 1.5, 30]]
    tel.poll(101.0)
    evicted = [e for e in log.events if e.kind is EventKind.KV_EVICTED]
    assert [(e.t, e.data["tokens"]) for e in evicted[before:]] == [(1.5, 30)]
    status = SchedulerStatus(written_at=3.0, evicted_tokens=35, busy_s=2.0)
    status.evictions = [[1, 1.5, 30], [2, 2.5, 5]]  # the same process: only its new pass
    tel.poll(102.0)
    evicted = [e for e in log.events if e.kind is EventKind.KV_EVICTED]
    assert [(e.t, e.data["tokens"]) for e in evicted[before:]] == [(1.5, 30), (2.5, 5)]
    busy = [e.data["busy_s"] for e in log.events if e.kind is EventKind.ENGINE_STATS]
    assert busy == [40.0, 41.5, 42.0]


def test_poll_takes_another_pid_for_a_new_process() -> None:
    """A restarted process whose counters already passed the old ones is known by its pid."""
    status = SchedulerStatus(pid=10, written_at=1.0, evicted_tokens=20, busy_s=5.0)
    status.evictions = [[2, 0.5, 20]]
    log = EventLog()
    tel = Telemetry(log, lambda: status, ProgramContexts(), stats_s=0.0)
    tel.poll(100.0)
    # the new process's first pass (15 tokens) already left its list
    status = SchedulerStatus(pid=11, written_at=2.0, evicted_tokens=60, busy_s=7.0)
    status.evictions = [[3, 1.5, 45]]
    tel.poll(101.0)
    evicted = [e.data["tokens"] for e in log.events if e.kind is EventKind.KV_EVICTED]
    assert evicted == [20, 45, 15]
    busy = [e.data["busy_s"] for e in log.events if e.kind is EventKind.ENGINE_STATS]
    assert busy == [5.0, 12.0]


class _Node:
    def __init__(self, tokens: int, parent: _Node | None) -> None:
        self.key: list[int] | None = [0] * tokens
        self.parent = parent
        self.children: dict[int, _Node] = {}
        if parent is not None:
            parent.children[len(parent.children)] = self


class _Tree:
    """A radix tree of one shared prefix (300) with two branches (20 and 50 tokens)."""

    def __init__(self) -> None:
        self.root = _Node(0, None)
        self.shared = _Node(300, self.root)
        self.mine = _Node(20, self.shared)
        self.other = _Node(50, self.shared)
        self.tree_core = self
        self.matches: dict[int, tuple[int, int, int]] = {}

    def match_full_device_prefix(self, key: Any) -> tuple[int, int, int]:
        return self.matches.get(len(key), (0, 0, 0))

    def resolve_node_handle(self, handle: int) -> _Node:
        return {1: self.mine, 2: self.shared}[handle]


def test_placement_sweep_residency_slices_and_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "radix_key", lambda ctx: ctx.token_ids())
    tree = _Tree()
    tree.matches = {321: (320, 1, 320), 400: (250, 2, 300)}  # whole path / inside a node
    contexts = {
        "a": retention.Context([1] * 300, [2] * 21, None, None),
        "b": retention.Context([1] * 399, [2], None, None),
        "c": retention.Context([3] * 10, [], None, None),  # nothing of it cached
    }
    assert plugin_telemetry.context_residency(tree, contexts["a"]) == (320, 20)
    assert plugin_telemetry.context_residency(tree, contexts["b"]) == (250, 0)
    clock = iter(range(1000))
    sweep = plugin_telemetry.PlacementSweep(
        tmp_path / "placement.json", slice_s=1.5, clock=lambda: float(next(clock))
    )
    assert not sweep.step(tree, contexts, 10.0)  # the first sweep: a slice covers two programs
    assert sweep.step(tree, contexts, 10.1)
    written = Placement.from_json(json.loads((tmp_path / "placement.json").read_text()))
    # stamped as of when the sweep took its programs (10.0), not when it ended
    assert written == Placement(10.0, {"a": (320, 20), "b": (250, 0)})
    assert not sweep.step(tree, contexts, 20.0)  # the tree did not change: no sweep
    sweep.changes += 1
    assert not sweep.step(tree, contexts, 10.5)  # at most one sweep a second
    assert not sweep.step(tree, contexts, 11.2)
    assert sweep.step(tree, contexts, 11.3)


def test_a_call_that_runs_while_a_sweep_is_under_way_stays_newer_than_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep looks at the programs it took when it began; a program whose call ran on the
    rank meanwhile is not in it, so the sweep must read as older than that call (stamped at
    its end, it told the dp router the rank held nothing of the program: the mapping was
    dropped, and the next call placed again, its context recomputed)."""
    monkeypatch.setattr(retention, "radix_key", lambda ctx: ctx.token_ids())
    tree = _Tree()
    tree.matches = {321: (320, 1, 320)}
    ctx = retention.Context([1] * 300, [2] * 21, None, None)
    contexts = dict.fromkeys("abcd", ctx)  # more than one slice looks at
    clock = iter(range(1000))
    sweep = plugin_telemetry.PlacementSweep(
        tmp_path / "placement.json", slice_s=1.5, clock=lambda: float(next(clock))
    )
    sweep.changes = 1
    assert not sweep.step(tree, contexts, 100.0)  # begins: takes a to d
    adapter = ProgramContexts()
    adapter.remember("p", "t:a", [1] * 10, [2])  # p's call ran and ended meanwhile
    contexts["p"] = ctx
    assert sweep.step(tree, contexts, time.time() + 1.0)  # ends, without p
    placement = Placement.from_json(json.loads((tmp_path / "placement.json").read_text()))
    assert "p" not in placement.programs
    last = adapter.get("p")
    assert last is not None
    assert placement.written_at < last.at  # p's call is the newer news
    assert RankRouter(2)._keeps("p", 0, adapter, [placement, None])


class _Req:
    def __init__(self, rid: str, prompt: int, output: int = 0) -> None:
        self.rid, self.extra_key, self.cache_salt = rid, None, "t1"
        self.origin_input_ids, self.output_ids = [1] * prompt, [2] * output


def test_waiting_residency_is_the_live_device_match_of_the_queue_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retention, "radix_key_of", lambda ids, ctx: ids)
    tree = _Tree()
    tree.matches = {321: (320, 1, 320), 400: (250, 2, 300)}
    waiting = [_Req("a", 300, 21), _Req("b", 400), _Req("c", 10)]
    assert plugin_telemetry.waiting_residency(tree, waiting) == {"a": 320, "b": 250, "c": 0}
    many = [_Req(f"r{i}", 400) for i in range(300)]
    assert len(plugin_telemetry.waiting_residency(tree, many)) == 128  # as ``lpm`` matches
    # a token budget (the same on every tensor rank), the head always matched
    assert plugin_telemetry.waiting_residency(tree, waiting, max_tokens=725) == {"a": 320, "b": 250}
    assert plugin_telemetry.waiting_residency(tree, waiting, max_tokens=5) == {"a": 320}
    assert plugin_telemetry.waiting_residency(object(), waiting) == {}  # no read-only match


def test_eviction_log_and_plugin_fill() -> None:
    tel = plugin_telemetry.PluginTelemetry(Path("/nonexistent"))
    tel.on_evicted(0, 1.0)  # an empty pass is not one
    for i in range(70):
        tel.on_evicted(10, float(i))
    tel.on_forward(0.25)
    status = SchedulerStatus()
    tel.fill(status, object())
    assert status.evicted_tokens == 700
    assert len(status.evictions) == 64
    assert status.evictions[-1] == [70, 69.0, 10]
    assert status.busy_s == 0.25
    assert (status.host_used_tokens, status.host_capacity_tokens) == (0, 0)  # no HiCache
    assert SchedulerStatus.from_json(status.to_json()) == status


def test_a_sweep_that_keeps_failing_is_turned_off() -> None:
    tel = plugin_telemetry.PluginTelemetry(Path("/nonexistent"))
    contexts = {"a": retention.Context([1, 2], [], None, None)}
    tree = type("Tree", (), {"tree_core": None})()  # no device match: every step fails
    for _ in range(3):
        tel.on_forward(0.1)
        with pytest.raises(AttributeError):
            tel.on_loop(type("S", (), {"tree_cache": tree})(), contexts)
    assert tel.placement is None
    tel.on_loop(object(), contexts)  # off: nothing happens
    tel.on_evicted(5, 1.0)
    assert tel.evictions.total == 5


def test_the_plugins_queueing_report_reaches_the_result_where_sglangs_is_missing() -> None:
    """The plugin sets ``customized_info`` at a request's first forward; SGLang's tokenizer
    hands the accumulated values back in ``meta_info`` (None where a chunk had none)."""
    req = type("Req", (), {})()
    req.time_stats = type("Stats", (), {"queue_duration_s": 0.25})()
    req.customized_info = None
    req.output_ids = []
    plugin_telemetry.report_queue_time(req)
    assert req.customized_info == {wire.QUEUE_TIME_KEY: [0.25]}
    # retracted after 3 tokens, queued again: the sum of both spells, at the next token
    req.output_ids, req.time_stats.queue_duration_s = [7, 7, 7], 0.4
    plugin_telemetry.report_queue_time(req)
    assert req.customized_info == {wire.QUEUE_TIME_KEY: [None, None, None, 0.4]}

    def chunk(tokens: int, **meta: Any) -> dict[str, Any]:
        finish = {"type": "length"} if tokens == 2 else None
        return {
            "text": "x" * tokens,
            "meta_info": {"completion_tokens": tokens, **meta, "finish_reason": finish},
        }

    plain = _call("p-plain")  # SGLang's metrics off: only the plugin's report
    plain.feed(chunk(1, **{wire.QUEUE_TIME_KEY: [None, 0.25]}))
    plain.feed(chunk(2, **{wire.QUEUE_TIME_KEY: [None, 0.25]}))
    assert plain.plugin_queue_s == 0.25
    assert plain.result_now().queue_s == 0.25
    again = _call("p-again")  # retracted and queued again: the newest report counts
    again.feed(chunk(1, **{wire.QUEUE_TIME_KEY: [0.25]}))
    again.feed(chunk(2, **{wire.QUEUE_TIME_KEY: [0.25, None, 0.4]}))
    assert again.result_now().queue_s == 0.4
    both = _call("p-both")  # metrics on: SGLang's own figure comes first
    both.feed(chunk(2, queue_time=0.5, **{wire.QUEUE_TIME_KEY: [0.25]}))
    assert both.result_now().queue_s == 0.5
    neither = _call("p-neither")  # no plugin: no queueing known
    neither.feed(chunk(2))
    assert neither.plugin_queue_s is None
    assert neither.result_now().queue_s == 0.0


def test_a_request_back_in_the_queue_is_reported_again_at_its_next_forward() -> None:
    book = RequestBook()
    assert book.seen_running("r", 1.0)  # its first forward
    assert not book.seen_running("r", 1.1)
    book.seen_waiting(Candidate("r", None, 0.0, 0), 1.2)  # retracted: waiting again
    assert book.seen_running("r", 1.3)  # out of the queue again
    assert not book.seen_running("r", 1.4)
    assert book.admitted["r"] == 1.0  # admitted once: its residency counts from then


def test_an_abort_the_engine_made_itself_carries_its_status_and_message() -> None:
    """SGLang's own abort names its cause (``FINISH_ABORT``: 400 for a request it cannot
    serve, 503 for a retraction with nowhere to go); an abort this server asked for names
    none, whatever the engine's last chunk says."""
    refused = _call("p-refused")
    cause = {"type": "abort", "status_code": 400, "message": "lower top_k"}
    refused.feed({"text": "", "meta_info": {"finish_reason": cause, "completion_tokens": 0}})
    result = refused.result_now()
    assert (result.finish_reason, result.engine_abort_status) == ("abort", 400)
    assert result.engine_abort_message == "lower top_k"
    asked = _call("p-asked")
    asked.begin_abort()
    asked.feed({"text": "", "meta_info": {"finish_reason": cause, "completion_tokens": 0}})
    assert (asked.result_now().engine_abort_status, asked.result_now().engine_abort_message) == (
        None,
        "",
    )

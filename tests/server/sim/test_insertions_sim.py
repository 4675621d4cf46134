"""Mid-prompt insertions in the simulator: an ordinary prefix cache loses the resident suffix
after the insertion point (counted as lost reuse, not as a recompute), a relative-position
cache reuses it for a correction, and an appending program shows none of it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentconsole.kvtiers.node import Block
from agentconsole.sample_traces.format import TraceProgram
from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.kvstate import Admission, EngineKv
from agentconsole.server.runtime.sim.prefixcache import (
    DEFAULT_CORRECTION,
    ORDINARY,
    RELATIVE,
    PrefixCacheMode,
    get_prefix_cache,
)
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation
from tests.sample_traces.trace_cases import inserting_chain

COST = preset("H200-141GB", "llama-3.1-8b", 1)
SYSTEM, REPO, H1, H2 = (
    Block("sys", 1_000, True),
    Block("repo", 5_000),
    Block("h1", 3_000),
    Block("h2", 2_000),
)
INSERTED, OWN = Block("ins", 300), Block("own", 50)


def _admitted(
    mode: PrefixCacheMode, *, drop_h2: bool = False
) -> tuple[EngineKv, SimCall, Admission]:
    """The previous context ``sys, repo, h1, h2`` cached; a call that inserts 300 tokens after
    ``repo`` admitted."""
    kv = EngineKv(COST, EngineConfig(prefix_cache=mode), EventLog())
    kv.insert("t", [SYSTEM, REPO, H1, H2], "p", 0.0)
    if drop_h2:
        path = kv.index.match("t", [SYSTEM, REPO, H1, H2], 0.0).path
        kv.apply_cache_action("p", path[3:], CacheAction.RECOMPUTE, 0.0, 0.5)
    blocks = [SYSTEM, REPO, INSERTED, H1, H2, OWN]
    ticket = CallTicket("p/b/1", "p", "b", "t", 1.0, prompt_tokens=11_350)
    call = SimCall(ticket, blocks, 100, ("p", "out"), insert_at=2)
    got = kv.admit(call, 1.0, reclaim_retained=False)
    assert got is not None
    assert got.hit_tokens == 6_000  # the prefix up to the insertion point, in both modes
    return kv, call, got


def test_ordinary_prefills_the_resident_suffix_again_as_lost_reuse() -> None:
    _, call, got = _admitted(ORDINARY)
    assert (call.lost_reuse_tokens, call.suffix_reused_tokens, call.correction_tokens) == (
        5_000,
        0,
        0,
    )
    assert got.recompute_tokens == 0  # nothing was evicted: it is lost reuse, not recompute
    assert got.prefill_tokens == 300 + 5_000 + 50
    assert not call.suffix_path


def test_relative_reuses_the_suffix_for_a_correction() -> None:
    kv, call, got = _admitted(RELATIVE)
    correction = math.ceil(DEFAULT_CORRECTION * 5_000)
    assert (call.lost_reuse_tokens, call.suffix_reused_tokens, call.correction_tokens) == (
        0,
        5_000,
        correction,
    )
    assert got.prefill_tokens == 300 + 50 + correction
    assert got.recompute_tokens == 0
    # the old path is locked while the call reads it, and unlocked with the call
    old = kv.index.peek("t", [SYSTEM, REPO, H1, H2]).path
    assert [n.lock_count for n in old] == [2, 2, 1, 1]
    kv.release(call)
    assert [n.lock_count for n in old] == [0, 0, 0, 0]


@pytest.mark.parametrize(("mode", "lost", "reused"), [(ORDINARY, 3_000, 0), (RELATIVE, 0, 3_000)])
def test_an_evicted_part_of_the_suffix_is_a_recompute_in_either_mode(
    mode: PrefixCacheMode, lost: int, reused: int
) -> None:
    _, call, got = _admitted(mode, drop_h2=True)
    assert (call.lost_reuse_tokens, call.suffix_reused_tokens) == (lost, reused)
    assert got.recompute_tokens == 2_000


def test_modes_by_name_and_their_bounds() -> None:
    assert get_prefix_cache("ordinary") is ORDINARY
    assert get_prefix_cache("relative") is RELATIVE
    with pytest.raises(ValueError, match="choose from ordinary, relative"):
        get_prefix_cache("blend")
    with pytest.raises(ValueError, match="correction"):
        PrefixCacheMode("x", reuses_suffix=True, correction=1.5)
    assert ORDINARY.reuse(1_000) == (0, 0)
    assert PrefixCacheMode("free", reuses_suffix=True).reuse(1_000) == (1_000, 0)


# -- whole simulations --------------------------------------------------------------------------
def _program(*, insert: bool) -> TraceProgram:
    """a (5,000 prompt) -> read -> b (inserts 800 after the repo when ``insert``) -> read -> c."""
    return inserting_chain(after="t/repo" if insert else None, tokens=800)


def _ends(
    program: TraceProgram, mode: PrefixCacheMode
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each call's end event data by node, and the metrics report, of one program alone."""
    config = SimConfig(policy="fcfs", kv_policy="keep", engine=EngineConfig(prefix_cache=mode))
    result = Simulation([program], COST, config).run()
    ends = {
        e.node_id: dict(e.data) for e in result.events.events if e.kind is EventKind.CALL_FINISHED
    }
    return ends, MetricsAggregator().observe_all(result.events.events).report()


def test_an_appending_program_loses_no_reuse() -> None:
    ends, report = _ends(_program(insert=False), ORDINARY)
    assert (report["insertions"], report["lost_reuse_tokens"]) == (0, 0)
    assert all("lost_reuse_tokens" not in data for data in ends.values())


def test_ordinary_counts_exactly_the_computed_suffix_as_lost_reuse() -> None:
    """b's suffix after the insertion: a's prompt and output (computed for a, resident) are
    prefilled again; the tool result was never computed, so it is new input, not lost."""
    ends, report = _ends(_program(insert=True), ORDINARY)
    b = ends["b"]
    assert (b["insertion_at_tokens"], b["inserted_tokens"]) == (12_000, 800)
    assert b["lost_reuse_tokens"] == 5_200
    assert b["cached_tokens"] == 12_000
    assert b["computed_tokens"] == 800 + 5_200 + 3_000 + 20
    assert (report["insertions"], report["lost_reuse_tokens"]) == (1, 5_200)
    assert report["suffix_reused_tokens"] == report["correction_tokens"] == 0
    assert report["recompute_tokens"] == 0
    # the next call appends: it reuses the inserted context, insertion included
    assert ends["c"]["cached_tokens"] == 12_000 + 800 + 5_200 + 3_000 + 20 + 100
    assert "lost_reuse_tokens" not in ends["c"]


def test_relative_reuses_the_suffix_and_prefills_only_its_correction() -> None:
    ends, report = _ends(_program(insert=True), RELATIVE)
    correction = math.ceil(DEFAULT_CORRECTION * 5_200)
    b = ends["b"]
    assert (b["lost_reuse_tokens"], b["suffix_reused_tokens"]) == (0, 5_200)
    assert b["correction_tokens"] == correction
    assert b["computed_tokens"] == 800 + 3_000 + 20 + correction
    assert (report["lost_reuse_tokens"], report["correction_tokens"]) == (0, correction)
    assert ends["c"]["cached_tokens"] == 12_000 + 800 + 5_200 + 3_000 + 20 + 100
    ordinary_ends, ordinary = _ends(_program(insert=True), ORDINARY)
    assert report["e2e_mean_s"] < ordinary["e2e_mean_s"]
    assert b["service_s"] < ordinary_ends["b"]["service_s"]
    # c appends in either mode: it prefills only the tool result and its prompt
    assert ends["c"]["computed_tokens"] == 1_000 + 10


def test_a_call_whose_reused_suffix_does_not_fit_beside_it_goes_without_the_reuse() -> None:
    """Under ``relative`` the resident suffix is locked for its correction while the call
    reserves its misses too: where both do not fit, the call was never admitted (the run
    ended with its program unfinished, no error). It now goes without the reuse."""
    import json

    from agentconsole.sample_traces.codec import loads_trace

    program = {
        "id": "p0",
        "tenant": "t",
        "workload": "x",
        "shape": "chain",
        "arrival_s": 0.0,
        "prefix": [{"id": "platform/sys", "tokens": 1000, "public": True}],
        "nodes": [
            {"id": "a", "kind": "llm", "parents": [], "prompt_tokens": 3000, "output_tokens": 100},
            {
                "id": "b",
                "kind": "llm",
                "parents": ["a"],
                "prompt_tokens": 100,
                "output_tokens": 100,
                "insert": {"after": "platform/sys", "tokens": 500},
            },
        ],
    }
    config = EngineConfig(
        hbm_kv_tokens=6_000, host_kv_tokens=0, prefix_cache=get_prefix_cache("relative")
    )
    run = Simulation(
        loads_trace(json.dumps(program)), COST, SimConfig(policy="fcfs", engine=config)
    )
    result = run.run()
    finished = [e for e in result.events.events if e.kind is EventKind.PROGRAM_FINISHED]
    assert [e.program_id for e in finished] == ["p0"]

"""A call preempted while it decodes: its prefix hits count once, its TTFT is its first token's,
its TBT spans its whole stream (the stall included, as a client sees it), and the output KV
freed by the preemption counts as recompute."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentconsole.kvtiers.node import Block
from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind, EventLog
from agentconsole.scheduler.fairness import TIER_STARVING, TIER_UNDERSERVED
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sim.calls import EngineConfig, Phase, SimCall
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.engine import SimEngine
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

COST = preset("H200-141GB", "llama-3.1-8b", 1)
SHARED = Block("system", 1_000, public=True)


def _call(pid: str, blocks: list[Block], output: int) -> SimCall:
    ticket = CallTicket(f"{pid}/n/1", pid, "n", "t", 0.0)
    return SimCall(ticket, blocks, output, f"{pid}/n/out")


def _run_until(engine: SimEngine, now: float, done: Callable[[], bool]) -> float:
    """Run the engine's blocks from ``now`` until ``done()``; returns the time then."""
    while not done():
        wake = engine.plan(now)
        assert wake is not None, "the engine went idle first"
        now = wake
        engine.complete(now)
    return now


def _of(log: EventLog, kind: EventKind, pid: str) -> list[Event]:
    return [e for e in log.events if e.kind is kind and e.program_id == pid]


def test_a_preempted_decoding_call_counts_hits_once_and_keeps_its_first_token() -> None:
    log = EventLog()
    engine = SimEngine(COST, get_policy("fcfs"), log)
    warm = _call("warm", [SHARED], 4)  # caches the shared prefix
    engine.submit(warm, 0.0)
    now = _run_until(engine, 0.0, lambda: warm.phase is Phase.DONE)

    call = _call("p", [SHARED, Block("p/prompt", 3_000)], 400)
    engine.submit(call, now)
    submitted = now
    now = _run_until(engine, now, lambda: call.generated >= 10)
    first_token = _of(log, EventKind.CALL_FIRST_TOKEN, "p")[0].t
    generated = call.generated
    assert engine.preempt(call.call_id, now)  # its prompt goes back to the cache
    end = _run_until(engine, now, lambda: call.phase is Phase.DONE)

    scheduled = _of(log, EventKind.CALL_SCHEDULED, "p")
    assert len(scheduled) == 2  # admitted, then admitted again after the preemption
    assert [e.data["hit_tokens"] for e in scheduled] == [SHARED.tokens, 0]
    # its freed output KV is prefilled again: recompute, not a hit
    assert scheduled[1].data["recompute_tokens"] == generated
    assert len(_of(log, EventKind.CALL_FIRST_TOKEN, "p")) == 1
    (finished,) = _of(log, EventKind.CALL_FINISHED, "p")
    assert finished.data["cached_tokens"] == SHARED.tokens
    assert finished.data["ttft_s"] == pytest.approx(first_token - submitted)
    # the stream's mean gap from its first token to its last: the stall counts
    assert finished.data["tbt_s"] == pytest.approx((end - first_token) / (call.generated - 1))

    metrics = MetricsAggregator().observe_all(log.events)
    assert metrics.report()["prefix_hit_tokens"] == SHARED.tokens  # the warm-up had none
    assert max(metrics.ttft) == pytest.approx(first_token - submitted)


def test_a_preempted_call_admitted_again_keeps_one_attempt_in_a_whole_run() -> None:
    """Under a preemptive policy the simulator admits preempted calls again: each node keeps
    the attempt its call opened (its ticket and call id say attempt 1), closed when it ends,
    instead of a second attempt beside an open first one."""
    # wide-fanout's short contexts: decoding calls worth preempting (seed-mix's 80K-token ones
    # cost more to restore than their answers take; only a prefill in progress was ever cut,
    # which SGLang never does)
    programs = generate("wide-fanout", n_programs=100, rate=2.0, seed=1)
    config = SimConfig(policy="plas", program_admission=False, preemption=PreemptionRule())
    result = Simulation(programs, COST, config).run()
    preempted = [e for e in result.events.events if e.kind is EventKind.CALL_PREEMPTED]
    assert preempted, "the case preempts calls"
    for event in preempted:
        node = result.controller.programs[event.program_id].nodes[event.node_id]
        assert [a.number for a in node.attempts] == [1]
        assert node.attempts[0].finished_at is not None


def test_a_prefill_cut_short_counts_its_chunks_as_recomputed_and_its_later_hits() -> None:
    """A call preempted mid-prefill loses the chunks it ran (the simulator frees them) and
    prefills them again: recomputed tokens; re-admitted after another call cached its
    prefix, it finds that prefix: hits. Before, both went uncounted (0 and 0 here)."""
    log = EventLog()
    engine = SimEngine(
        COST,
        get_policy("fcfs"),
        log,
        config=EngineConfig(max_running_requests=1, host_kv_tokens=0),
    )
    doc = Block("doc", 20_000, public=True)
    cut = _call("cut", [doc, Block("cut/prompt", 10_000)], 4)
    other = _call("other", [doc], 4)
    engine.submit(cut, 0.0)
    now = engine.plan(0.0)
    assert now is not None
    engine.submit(other, 0.0)  # waits for the one slot
    engine.complete(now)
    ran = cut.computed_tokens
    assert cut.phase is Phase.PREFILL
    assert 0 < ran < 20_000
    assert engine.preempt(cut.call_id, now)  # mid-prefill
    _run_until(engine, now, lambda: cut.phase is Phase.DONE)
    report = MetricsAggregator().observe_all(log.events).report()
    assert (report["recompute_tokens"], report["prefix_hit_tokens"]) == (ran, 20_000)
    assert (cut.recompute_tokens, cut.hit_tokens) == (ran, 20_000)
    assert cut.computed_tokens == ran + 10_000  # the rest of its prompt, after the hit


def test_a_prefill_cut_short_keeps_the_blocks_it_finished_as_sglang_keeps_its_chunks() -> None:
    """SGLang keeps each chunk a cut-short prefill finished in its tree; the simulator freed
    them all and prefilled them again. It now keeps the whole blocks they finished: the
    re-admission finds them (its own work: no prefix hit) and prefills the rest; only the
    unfinished block's chunks are recomputed."""
    log = EventLog()
    engine = SimEngine(COST, get_policy("fcfs"), log, config=EngineConfig(max_running_requests=1))
    blocks = [Block("cut/a", 1_000), Block("cut/b", 1_000), Block("cut/c", 40_000)]
    cut = _call("cut", blocks, 4)
    engine.submit(cut, 0.0)
    now = engine.plan(0.0)
    assert now is not None
    engine.complete(now)
    ran = cut.computed_tokens
    assert cut.phase is Phase.PREFILL
    assert 2_000 < ran < 42_000  # past the two small blocks, inside the large one
    assert engine.preempt(cut.call_id, now)
    assert [n.key for n in engine.index.peek("t", blocks).path] == ["cut/a", "cut/b"]
    _run_until(engine, now, lambda: cut.phase is Phase.DONE)
    scheduled = _of(log, EventKind.CALL_SCHEDULED, "cut")
    assert [e.data["hit_tokens"] for e in scheduled] == [0, 0]
    assert scheduled[1].data["recompute_tokens"] == ran - 2_000  # the large block's chunks
    assert cut.computed_tokens == ran + (42_000 - 2_000)  # all but the kept blocks again
    (finished,) = _of(log, EventKind.CALL_FINISHED, "cut")
    assert finished.data["cached_tokens"] == 0


def test_a_calls_restore_time_is_its_re_prefills_alone() -> None:
    """Preempted twice while decoding, a call re-prefills what it had generated at each
    re-admission: its restore time is those prefills' service. Before, each re-admission
    re-added the call's whole service so far (its decode too): 6.97 s for 0.09 s of work."""
    engine = SimEngine(COST, get_policy("fcfs"), EventLog(), config=EngineConfig(host_kv_tokens=0))
    call = _call("p", [Block("p/prompt", 3_000)], 2_000)
    engine.submit(call, 0.0)
    now = _run_until(engine, 0.0, lambda: call.generated >= 1_500)
    re_prefills = 0.0

    def decoded(tokens: int) -> Callable[[], bool]:
        return lambda: call.generated >= tokens or call.phase is Phase.DONE

    for until in (1_800, 2_000):
        before = call.service_s
        assert engine.preempt(call.call_id, now)  # in decode: its prompt stays cached
        now = _run_until(engine, now, lambda: call.phase is Phase.DECODE)
        re_prefills += call.service_s - before  # the re-admission's prefill alone
        now = _run_until(engine, now, decoded(until))
    assert call.recompute_tokens > 0
    assert call.restore_s == pytest.approx(re_prefills)
    assert call.restore_s < 0.05 * call.service_s


def test_a_recompute_cut_short_before_it_ran_is_restore_time_where_it_runs() -> None:
    """Cut mid-prefill, a call is admitted again to recompute its chunks, and cut again
    before it ran any: the admission after recomputes them. Its restore time counted them
    nowhere before (0.0 s: the recompute was its second admission's, which ran nothing);
    its recomputed tokens count them once."""
    log = EventLog()
    engine = SimEngine(
        COST, get_policy("fcfs"), log, config=EngineConfig(max_running_requests=1, host_kv_tokens=0)
    )
    cut = _call("cut", [Block("cut/prompt", 30_000)], 4)
    engine.submit(cut, 0.0)
    now = engine.plan(0.0)
    assert now is not None
    engine.complete(now)
    ran = cut.computed_tokens
    assert 0 < ran < 30_000
    assert engine.preempt(cut.call_id, now)  # mid-prefill: its chunks are thrown away
    step_end = engine.plan(now)  # admitted again, its step planned, not run
    assert step_end is not None
    assert (cut.phase, cut.computed_tokens) == (Phase.PREFILL, ran)
    assert engine.preempt(cut.call_id, now)  # cut before any chunk of it ran
    engine.complete(step_end)
    assert cut.computed_tokens == ran
    _run_until(engine, step_end, lambda: cut.phase is Phase.DONE)
    assert cut.recompute_tokens == ran
    # the share of its last prefill that recomputed: ``ran`` of the 30,000 it computed then
    assert cut.restore_s > 0
    assert cut.restore_s == pytest.approx(COST.prefill_seconds(ran), rel=0.5)


def test_an_engines_hits_are_its_admitted_calls_not_every_match() -> None:
    """The prefix index counts every match, the many a queue's head makes before it fits:
    serve's simulated runtime reported those (~19x the hits on a busy engine) as its
    ``prefix_hit_tokens``. The engine counts the admitted calls' hits."""
    programs = generate("seed-mix", n_programs=40, rate=0.5, seed=0)
    config = EngineConfig(hbm_kv_tokens=200_000, host_kv_tokens=0)
    result = Simulation(programs, COST, SimConfig(policy="fcfs", engine=config)).run()
    scheduled = [e for e in result.events.events if e.kind is EventKind.CALL_SCHEDULED]
    admitted = sum(number(e.data, "hit_tokens") for e in scheduled)
    engine = result.engine
    assert engine.hit_tokens == admitted
    assert sum(engine.index.counters.hit_tokens) > 2 * admitted  # many matches per admission


def test_a_waiting_call_that_does_not_starve_displaces_the_worst_call_it_may() -> None:
    """A running starving call may be displaced only by a starving call, so the worst-ranked
    running call is not the one to ask when the waiting call does not starve: the simulator
    picks the worst of those the rule allows, as the SGLang plugin does
    (``ordering.preemption_victims``)."""
    rule = PreemptionRule(min_residency_s=0.0, cost_ratio=0.0)
    engine = SimEngine(COST, get_policy("cp-cache"), EventLog(), preemption=rule)
    starving, other = _call("a", [Block("a/p", 500)], 500), _call("b", [Block("b/p", 500)], 500)
    for call in (starving, other):
        engine.submit(call, 0.0)
    now = _run_until(engine, 0.0, lambda: starving.generated > 0 and other.generated > 0)
    starving.rank = (TIER_STARVING, 0.0, 1)  # the worst-ranked, in a starving tier
    other.rank = (TIER_UNDERSERVED, 5.0, 2)
    waiting = _call("c", [Block("c/p", 500)], 10)
    engine.submit(waiting, now)
    entry = engine.queue.entry(waiting.call_id)
    assert entry is not None
    entry.tier = TIER_UNDERSERVED
    entry.key = -1e9  # ranks (1, -1e9, seq): before ``other``, after no starving call

    assert engine._preempt_for(waiting.call_id, now)
    assert other.phase is Phase.QUEUED  # back in the queue: the one the rule allowed
    assert starving.call_id in engine.running


def test_a_call_still_prefilling_is_never_preempted_as_sglang_takes_victims_from_decoders() -> None:
    """SGLang's priority preemption takes its victims from the running batch, which a chunked
    prefill joins only after its last chunk. The simulator cut prefills in progress: on
    seed-mix at 0.5x their finished chunks were evicted before the re-admission and
    prefilled again (82K tokens recomputed where ``fcfs`` recomputed 36K)."""
    rule = PreemptionRule(min_residency_s=0.0, cost_ratio=0.0)
    engine = SimEngine(
        COST,
        get_policy("cp-cache"),
        EventLog(),
        preemption=rule,
        config=EngineConfig(max_running_requests=1),
    )
    long = _call("a", [Block("a/p", 40_000)], 500)
    engine.submit(long, 0.0)
    step_end = engine.plan(0.0)
    assert step_end is not None
    engine.complete(step_end)
    assert (long.phase, long.prompt_tokens > long.context_done) == (Phase.PREFILL, True)
    long.rank = (TIER_UNDERSERVED, 5.0, 1)
    waiting = _call("b", [Block("b/p", 500)], 10)
    engine.submit(waiting, step_end)
    entry = engine.queue.entry(waiting.call_id)
    assert entry is not None
    entry.tier, entry.key = TIER_UNDERSERVED, -1e9  # ranked well before it

    assert not engine._preempt_for(waiting.call_id, step_end)
    assert long.call_id in engine.running  # still prefilling, untouched
    now = _run_until(engine, step_end, lambda: long.phase is Phase.DECODE)
    long.rank = (TIER_UNDERSERVED, 5.0, 1)
    assert engine._preempt_for(waiting.call_id, now)  # decoding now: a victim as in SGLang
    assert (long.phase, long.call_id in engine.running) == (Phase.QUEUED, False)

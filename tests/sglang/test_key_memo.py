"""The plugin's key memo (``keymemo``): a queue ranked with it is ranked as without it, pass
after pass, while it computes again only the keys whose inputs changed or that move with
time in a way it cannot follow; and the plugin's state clears and prunes it."""

from __future__ import annotations

import random
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agentconsole.scheduler.fairness import FairnessConfig, FairnessGuard
from agentconsole.scheduler.policies.critical_path import CriticalPath
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang.control import CONTROL_FILE, ControlState, write_json_atomic
from agentconsole.server.runtime.sglang.keymemo import KeyMemo, KeyMotion
from agentconsole.server.runtime.sglang.lockstep import Layout
from agentconsole.server.runtime.sglang.ordering import Orderer
from agentconsole.server.runtime.sglang.plugin_state import PluginState
from agentconsole.server.runtime.sglang.ranked import Candidate, Ranked
from agentconsole.server.runtime.sglang.wire import WireTicket
from tests.sglang.test_lockstep_units import _req

TENANTS = ("ta", "tb", "tc")


def _ticket(n: int, now: float, rnd: random.Random) -> CallTicket:
    """A call queued at ``now``: some with a deadline or a drain that runs out while they wait
    (they enter the urgency band), some from programs with little service (they starve)."""
    return CallTicket(
        f"p{n}/n/1",
        f"p{n}",
        "n",
        rnd.choice(TENANTS),
        arrival=now,
        prompt_tokens=rnd.randint(100, 4000),
        cached_tokens=rnd.randint(0, 100),
        service_estimate_s=rnd.uniform(0.01, 2),
        restore_cost_s=rnd.uniform(0, 0.5),
        program_service_s=rnd.uniform(0, 3),
        program_wait_s=rnd.uniform(0, 2),
        remaining_cp_s=rnd.uniform(0, 20),
        unlock_value=rnd.randint(0, 2),
        deadline=now + rnd.uniform(5, 40) if rnd.random() < 0.3 else None,
        drain_s=rnd.uniform(5, 30) if rnd.random() < 0.3 else 0.0,
    )


def _orderers(policy: str) -> tuple[Orderer, Orderer]:
    config = FairnessConfig(beta=2.0, service_floor_s=3.0, half_life_s=5.0)
    return Orderer(FairnessGuard(config), policy), Orderer(FairnessGuard(config), policy)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", ["cp-cache", "critical-path", "fcfs", "plas", "progress"])
def test_a_queue_ranked_with_the_memo_is_ranked_as_without_it(seed: int, policy: str) -> None:
    """400 passes of a changing queue on a clock near today's (1.8e9 s): arrivals,
    admissions, service shifting the tenants' shares, boosts, operator overrides of a ticket,
    live cache matches at a moving prefill rate, operator preempts, reports between decisions,
    passes at the same instant, and time carrying calls into the urgency band and into
    starvation. Same order every pass; keys equal to rounding; most keys reused."""
    rnd = random.Random(seed)
    fresh, memoized = _orderers(policy)
    memo: KeyMemo[KeyMotion] = KeyMemo(horizon_s=1.0)
    waiting: dict[str, Candidate] = {}
    now, n = 1.8e9, 0
    boosts: dict[str, float] = {}
    overrides: dict[str, CallTicket] = {}
    for step in range(400):
        now += rnd.choice([0.0, 0.004, 0.02, 0.05, 0.3])
        for _ in range(rnd.choice([0, 0, 1, 3])):
            ticket = _ticket(n, now, rnd)
            waiting[ticket.call_id] = Candidate(ticket.call_id, WireTicket(ticket), now, n)
            n += 1
        if step % 7 == 0:  # service shifts the tenants' standing
            for guard in (fresh.guard, memoized.guard):
                guard.record_service(TENANTS[step % 3], 2.0, now)
        if step % 50 == 25 and waiting:  # the operator boosts a program, later lifts it
            boosts = {rnd.choice(list(waiting)).split("/")[0]: 5.0} if not boosts else {}
        if step % 11 == 0 and waiting:  # an override: a new object, changed or not
            rid = rnd.choice(list(waiting))
            base = overrides.get(rid) or _wired(waiting[rid])
            extra = rnd.choice([0.0, 0.0, -2.0, 4.0])
            overrides[rid] = base.but(remaining_cp_s=max(base.remaining_cp_s + extra, 0.0))
        if step % 8 == 0 and waiting:  # a live match of the head, or an operator preempt
            rid = rnd.choice(list(waiting))
            c = waiting[rid]
            if rnd.random() < 0.8:
                live = rnd.choice([_wired(c).cached_tokens, rnd.randint(0, 200)])
                waiting[rid] = Candidate(rid, c.wire, c.first_seen, c.seq, c.preempted_at, live)
            else:
                waiting[rid] = Candidate(rid, c.wire, c.first_seen, c.seq, now, c.resident_tokens)
        rate = 1e-3 * (1 + step % 3)
        cands = list(waiting.values())
        rnd.shuffle(cands)
        rank = partial(_rank, cands, now, boosts, overrides, rate)
        if step % 5 == 0:  # a report between decisions: read-only, the same answer
            seen = rank(memoized, remember=False, memo=memo, memo_store=False)
            assert _order(seen) == _order(rank(fresh, remember=False))
        plain, remembered = rank(fresh), rank(memoized, memo=memo)
        assert _order(remembered) == _order(plain), f"pass {step}"
        for a, b in zip(remembered, plain, strict=True):
            assert (a.key[0], a.key[2]) == (b.key[0], b.key[2])
            assert a.key[1] == pytest.approx(b.key[1], rel=1e-12, abs=1e-6)
            assert a.policy_key == pytest.approx(b.policy_key, rel=1e-12, abs=1e-6)
        for r in sorted(remembered, key=lambda r: r.key)[: rnd.choice([0, 1, 2])]:
            del waiting[r.candidate.rid]  # admitted: it leaves the queue
            overrides.pop(r.candidate.rid, None)
        memo.retain(set(waiting))
    assert memo.reused > memo.computed


def _rank(
    cands: list[Candidate],
    now: float,
    boosts: dict[str, float],
    overrides: dict[str, CallTicket],
    rate: float,
    orderer: Orderer,
    **kw: Any,
) -> list[Ranked]:
    return orderer.rank(
        cands, now, boosts=boosts, tickets=overrides, recompute_s_per_token=rate, **kw
    )


def _wired(c: Candidate) -> CallTicket:
    assert c.wire is not None
    return c.wire.ticket


def _order(ranked: list[Ranked]) -> list[str]:
    return [r.candidate.rid for r in sorted(ranked, key=lambda r: r.key)]


def _one(orderer: Orderer, memo: KeyMemo[KeyMotion], c: Candidate, now: float) -> Ranked:
    return orderer.rank([c], now, memo=memo)[0]


def _a_call(
    horizon_s: float = 1.0, **fields: float
) -> tuple[Orderer, KeyMemo[KeyMotion], Candidate]:
    """An orderer under ``cp-cache``, a memo, and one call queued at 100 s with ``fields``."""
    orderer, _ = _orderers("cp-cache")
    ticket = CallTicket("a/n/1", "a", "n", "ta", arrival=100.0, remaining_cp_s=3.0)
    ticket = ticket.but(**fields)
    return orderer, KeyMemo(horizon_s=horizon_s), Candidate("a/n/1", WireTicket(ticket), 100.0, 0)


def test_a_key_that_stands_is_computed_once_a_horizon() -> None:
    orderer, memo, c = _a_call()
    first = _one(orderer, memo, c, 100.0)
    for t in (100.2, 100.5, 101.0):
        assert _one(orderer, memo, c, t) is first
    assert (memo.computed, memo.reused) == (1, 3)
    _one(orderer, memo, c, 101.01)  # past the horizon: computed again
    assert memo.computed == 2


def test_a_key_in_the_urgency_band_drifts_with_time_without_being_computed_again() -> None:
    orderer, memo, c = _a_call(deadline=101.0)
    first = _one(orderer, memo, c, 100.0)
    later = _one(orderer, memo, c, 100.7)
    assert (memo.computed, memo.reused) == (1, 1)
    assert later.key[1] == pytest.approx(first.key[1] - 0.7)
    assert later.key == pytest.approx(_orderers("cp-cache")[0].rank([c], 100.7)[0].key)


def test_a_call_about_to_enter_the_urgency_band_is_computed_every_pass() -> None:
    """Its key changes within the horizon: kept for its own pass only, never stale."""
    slack_s = CriticalPath().urgent_slack_s
    orderer, memo, c = _a_call(deadline=103.5 + slack_s)
    fresh = _orderers("cp-cache")[0]
    for t in (100.0, 100.3, 100.6):
        assert _one(orderer, memo, c, t).key == fresh.rank([c], t)[0].key
    assert (memo.computed, memo.reused) == (3, 0)


def test_changed_inputs_or_a_clock_that_went_back_compute_again() -> None:
    orderer, memo, c = _a_call()
    base = _one(orderer, memo, c, 100.0)
    boosted = orderer.rank([c], 100.1, memo=memo, boosts={"a": 2.0})[0]
    assert boosted.policy_key == pytest.approx(base.policy_key - 2.0)
    preempted = Candidate("a/n/1", c.wire, 100.0, 0, preempted_at=100.1)
    assert _one(orderer, memo, preempted, 100.2).key[0] != base.key[0]
    _one(orderer, memo, c, 99.0)  # the clock went back
    assert (memo.computed, memo.reused) == (4, 0)


def test_a_zero_horizon_turns_the_memo_off() -> None:
    orderer, memo, c = _a_call(horizon_s=0.0)
    _one(orderer, memo, c, 100.0)
    _one(orderer, memo, c, 100.0)
    assert (len(memo), memo.reused) == (0, 0)


def test_the_plugin_reuses_keys_across_passes_and_clears_them_with_a_new_control(
    tmp_path: Path,
) -> None:
    write_json_atomic(tmp_path / CONTROL_FILE, ControlState(version=1).to_json())
    state = PluginState(tmp_path, Layout(tp_size=1, tp_rank=0))
    rnd = random.Random(3)
    waiting = [_req(i, "ta", 1_000_000.0, rnd) for i in range(20)]
    state.sort_waiting(waiting, 1_000_010.0)
    state.sort_waiting(waiting, 1_000_010.02)
    assert state.key_memo.reused >= 15  # a few tickets' deadlines pass within the horizon
    counts = (state.key_memo.reused, state.key_memo.computed, len(state.key_memo))
    state.rank(waiting, 1_000_010.03, report=True)  # a report reads, stores and counts nothing
    assert (state.key_memo.reused, state.key_memo.computed, len(state.key_memo)) == counts
    state.key_memo.retain({waiting[0].rid})
    assert len(state.key_memo) == 1
    write_json_atomic(tmp_path / CONTROL_FILE, ControlState(version=2, policy="fcfs").to_json())
    state.refresh(1_000_010.05, force=True)
    assert len(state.key_memo) == 0  # the policy changed: nothing computed under the old one stands


def test_the_pass_benchmark_runs_and_finds_the_same_order_with_and_without_the_memo() -> None:
    """``benchmarks/bench_plugin_pass.py`` at a small size: it fails if an order differs."""
    script = Path(__file__).parents[2] / "benchmarks" / "bench_plugin_pass.py"
    argv = ["--waiting", "40", "--running", "16", "--passes", "60"]
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "reused" in done.stdout

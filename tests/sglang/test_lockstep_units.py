"""Tensor-parallel ranks decide alike (``lockstep``), without SGLang: two plugin states fed the
same requests and control, but at different wall-clock times, with different measured step
times and reading ``control.json`` at different passes, take the same decisions at every pass
(queue order, preemption victims, retention clock, control version); and the pieces (decision
clock, control gate, the writer's planned pass) behave as documented."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentconsole.scheduler.policies import available, get_policy
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import retention, wire
from agentconsole.server.runtime.sglang.control import (
    BURST_S,
    CONTROL_FILE,
    STATUS_FILE,
    ControlState,
    ControlWriter,
    apply_step,
    plan_apply_steps,
    read_json,
    write_json_atomic,
)
from agentconsole.server.runtime.sglang.lockstep import ControlGate, DecisionClock, Layout
from agentconsole.server.runtime.sglang.plugin_state import PluginState

BASE = 1_000_000.0  # the sender's wall clock at the first request


def _req(n: int, tenant: str, sent: float, rnd: random.Random) -> Any:
    ticket = CallTicket(
        f"p{n}/n{n}/1",
        f"p{n}",
        f"n{n}",
        tenant,
        arrival=sent - rnd.uniform(0, 2),
        prompt_tokens=rnd.randint(10, 400),
        cached_tokens=rnd.randint(0, 10),
        expected_output_tokens=rnd.uniform(1, 300),
        service_estimate_s=rnd.uniform(0.01, 3),
        program_service_s=rnd.uniform(0, 4),
        cp_service_s=rnd.uniform(0, 4),
        remaining_cp_s=rnd.uniform(0, 20),
        unlock_value=rnd.randint(0, 3),
        deadline=sent + rnd.uniform(0.5, 8) if n % 3 == 0 else None,
    )
    params = wire.encode(ticket, clock_offset=rnd.uniform(-1, 1))
    params[wire.PARAMS_KEY]["sent"] = sent
    return SimpleNamespace(
        rid=ticket.call_id,
        sampling_params=SimpleNamespace(custom_params=params),
        origin_input_ids=list(range(ticket.prompt_tokens)),
        output_ids=[],
        extra_key=None,
        cache_salt=f"t:{tenant}",
        priority=0,
        finished=lambda: False,
    )


def _control(version: int, apply_at: int, policy: str) -> dict[str, Any]:
    state = ControlState(
        version=version,
        policy=policy,
        boosts={"p3": 50.0},
        preempted={"p5/n5/1": BASE + 1.0},
        retention={"p1": retention_hint()},
        fairness={"beta": 0.5, "service_floor_s": 0.2, "half_life_s": 1.0, "refresh_s": 0.5},
        preemption={"min_residency_s": 0.3, "cost_ratio": 0.0},
        written_at=BASE + 1.5,
        apply_at_step={STATUS_FILE: apply_at},
    )
    return state.to_json()


def retention_hint() -> Any:
    from agentconsole.server.runtime.sglang.control import RetentionHint

    return RetentionHint("keep", BASE + 2.5, 1)


class _Rank:
    """One rank's plugin state, with its own clock, step times and state folder."""

    def __init__(
        self, folder: Path, rank: int, wall0: float, tick: float, seed: int, tp: int = 2
    ) -> None:
        folder.mkdir()
        # the version written before the engine started: every rank applies it at once
        write_json_atomic(folder / CONTROL_FILE, ControlState(version=1).to_json())
        self.st = PluginState(folder, Layout(tp_size=tp, tp_rank=rank if tp > 1 else 0))
        self.folder, self.wall, self.tick = folder, wall0, tick
        self.rnd = random.Random(seed)  # measured step times: this rank's own
        self.running: list[Any] = []

    def now(self) -> float:
        self.wall += self.tick
        return self.wall


def _batch(reqs: list[Any], prefill: bool) -> Any:
    mode = SimpleNamespace(is_extend=lambda: prefill)
    lens = [len(r.origin_input_ids) for r in reqs] if prefill else None
    return SimpleNamespace(reqs=reqs, forward_mode=mode, extend_lens=lens)


def _pass(
    rk: _Rank, step: int, incoming: list[Any], waiting: list[Any], read_at: int, policy: str
) -> tuple[Any, ...]:
    """One scheduler loop pass of one rank; returns what it decided."""
    st = rk.st
    if step == read_at:  # this rank sees the new control.json now
        write_json_atomic(rk.folder / CONTROL_FILE, _control(2, 6, policy))
    scheduler = SimpleNamespace(
        tree_cache=None,
        waiting_queue=waiting,
        running_batch=SimpleNamespace(reqs=rk.running),
        last_batch=None,
        chunked_req=None,
    )
    st.begin_pass(scheduler)
    waiting.extend(incoming)
    running_batch = SimpleNamespace(reqs=rk.running)
    defer = st.defer_prefill(scheduler, running_batch) if waiting else None
    st.sort_waiting(waiting, rk.now())
    order = [r.rid for r in waiting]
    limit = st.chunk_limit(rk.running[0], waiting, 512, 16, None) if rk.running else None
    plan = st.plan_preemption(waiting[0], rk.running, 10) if waiting and rk.running else None
    admitted = waiting[:2]
    del waiting[:2]
    if admitted:
        st.on_step(_batch(admitted, True), rk.now(), rk.rnd.uniform(0.001, 0.5), forward=True)
        st.on_step(_batch(admitted, True), rk.now(), rk.rnd.uniform(0.001, 0.1), forward=False)
    if rk.running:
        st.on_step(_batch(rk.running, False), rk.now(), rk.rnd.uniform(0.001, 0.2), forward=True)
    rk.running = (rk.running + admitted)[-3:]
    st.on_loop(scheduler)
    kept = retention.node_class(BASE + 2.5, st.strategy_clock())
    underserved = st.guard.underserved({"ta", "tb"}, st.decision_time(rk.wall), remember=False)
    composition = (defer, limit)
    return order, plan, kept, st.control.version, st.orderer.policy_name, underserved, composition


def _run(tmp_path: Path, policy: str, tp: int = 2) -> tuple[list[Any], list[Any], _Rank]:
    """Eleven passes of two ranks over the same arrivals; each rank's decisions per pass."""
    rnd = random.Random(7)
    arrivals = [
        [_req(n * 3 + k, "ta" if k else "tb", BASE + n * 0.4, rnd) for k in range(3)]
        for n in range(8)
    ]
    a = _Rank(tmp_path / "r0", 0, wall0=BASE + 0.05, tick=0.003, seed=1, tp=tp)
    b = _Rank(tmp_path / "r1", 1, wall0=BASE + 900.0, tick=0.71, seed=2, tp=tp)
    waiting_a: list[Any] = []
    waiting_b: list[Any] = []
    seen_a, seen_b = [], []
    for step in range(1, 12):
        incoming = arrivals[step - 1] if step <= len(arrivals) else []
        seen_a.append(_pass(a, step, list(incoming), waiting_a, read_at=2, policy=policy))
        seen_b.append(_pass(b, step, list(incoming), waiting_b, read_at=5, policy=policy))
    return seen_a, seen_b, a


def test_without_lockstep_the_same_scenario_splits_the_ranks(tmp_path: Path) -> None:
    """The scenario has teeth: ranks deciding by their own clocks, step times and reads of
    control disagree in it."""
    seen_a, seen_b, _ = _run(tmp_path, "cp-cache", tp=1)
    assert seen_a != seen_b


@pytest.mark.parametrize("policy", available())
def test_two_ranks_decide_alike_whatever_their_clocks_and_step_times(
    tmp_path: Path, policy: str
) -> None:
    seen_a, seen_b, a = _run(tmp_path, policy)
    for step, (da, db) in enumerate(zip(seen_a, seen_b, strict=True), start=1):
        assert da == db, f"pass {step}"
    decided = seen_a
    assert decided[4][3] == 1
    assert decided[5][3] == 2
    if get_policy(policy).preemptive:  # preemption was planned on the way
        assert any(d[1] is not None for d in decided)
    # only rank 0 writes the group's files
    assert (a.folder / STATUS_FILE).exists()
    assert not (tmp_path / "r1" / STATUS_FILE).exists()
    status = read_json(a.folder / STATUS_FILE)
    assert status is not None
    assert status["step"] > 0
    assert status["late_controls"] == 0


def test_a_rank_that_reads_control_late_counts_it() -> None:
    gate, clock = ControlGate(STATUS_FILE), DecisionClock()
    gate.offer(ControlState(version=2, apply_at_step={STATUS_FILE: 5}), 3, clock)
    assert gate.due(4, clock) is None
    due = gate.due(5, clock)
    assert due is not None
    assert due.version == 2
    assert gate.late == 0
    gate.offer(ControlState(version=3, apply_at_step={STATUS_FILE: 5}), 7, clock)
    due = gate.due(7, clock)
    assert due is not None
    assert due.version == 3
    assert gate.late == 1
    # no pass planned for this group (tp=1 writers, start-up): due at once, not late
    gate.offer(ControlState(version=4), 9, clock)
    assert gate.due(9, clock) is not None
    assert gate.late == 1


def test_versions_due_at_the_same_pass_apply_only_the_newest() -> None:
    gate, clock = ControlGate("status.rank1.json"), DecisionClock()
    gate.offer(ControlState(version=2, apply_at_step={"status.rank1.json": 8}), 1, clock)
    gate.offer(ControlState(version=3, apply_at_step={"status.rank1.json": 8}), 2, clock)
    gate.offer(ControlState(version=4, apply_at_step={"status.rank1.json": 12}), 2, clock)
    due = gate.due(8, clock)
    assert due is not None
    assert due.version == 3
    assert gate.due(11, clock) is None
    due = gate.due(12, clock)
    assert due is not None
    assert due.version == 4


def test_news_after_a_write_brings_its_pass_forward_alike_on_every_rank() -> None:
    """A request sent after the write reached the clock at pass 4: the version is due at pass
    6 (not its planned 100) on a rank that read it at pass 3 and on one that read it at 5."""
    control = ControlState(version=2, written_at=9.0, apply_at_step={STATUS_FILE: 100})
    for read_at in (3, 5):
        gate, clock = ControlGate(STATUS_FILE), DecisionClock()
        clock.observe(8.0, 2)
        if read_at == 3:
            gate.offer(control, 3, clock)
        clock.observe(10.0, 4)
        if read_at == 5:
            gate.offer(control, 5, clock)
        assert gate.due(5, clock) is None
        due = gate.due(6, clock)
        assert due is not None
        assert due.version == 2
        assert gate.late == 0


def test_the_decision_clock_only_moves_forward_and_knows_when() -> None:
    clock = DecisionClock()
    for step, told in enumerate((5.0, None, 3.0, 7.5, 7.6), start=1):
        clock.observe(told, step)
    assert clock.now == 7.6
    assert clock.reached_at(4.0) == 1
    assert clock.reached_at(7.5) == 4
    assert clock.reached_at(7.55) == 5
    assert clock.reached_at(8.0) is None


def test_the_writer_plans_a_pass_ahead_of_each_group(tmp_path: Path) -> None:
    assert apply_step(100, 0.0, 5.0) == 102  # idle, or rate unknown: the minimum lead
    assert apply_step(100, 40.0, 0.05) == 100 + 12 + 2  # 0.3 s at 40 passes a second
    write_json_atomic(tmp_path / STATUS_FILE, {"step": 0})  # a tp=1 plugin reports none
    assert plan_apply_steps(tmp_path, 10.0) == {}
    status = tmp_path / "status.rank1.json"
    now = time.time()
    write_json_atomic(status, {"step": 50, "steps_per_s": 10.0, "written_at": now - 0.05})
    writer = ControlWriter(tmp_path)
    first = writer.state.apply_at_step["status.rank1.json"]
    assert first >= 50 + 3
    writer.write()  # a second write in the same burst takes the same pass
    assert writer.state.apply_at_step["status.rank1.json"] == first
    saved = json.loads((tmp_path / CONTROL_FILE).read_text())
    assert saved["apply_at_step"] == {"status.rank1.json": first}
    assert saved["written_at"] > 0
    # later, the group reports a pass further on: a later pass; never an earlier one
    time.sleep(BURST_S)
    write_json_atomic(status, {"step": 500, "steps_per_s": 10.0, "written_at": time.time()})
    writer.write()
    assert writer.state.apply_at_step["status.rank1.json"] >= 503
    write_json_atomic(status, {"step": 60, "steps_per_s": 10.0, "written_at": time.time()})
    time.sleep(BURST_S)
    before = writer.state.apply_at_step["status.rank1.json"]
    writer.write()
    assert writer.state.apply_at_step["status.rank1.json"] == before


def test_the_request_carries_its_send_time() -> None:
    ticket = CallTicket("p/n/1", "p", "n", "t", arrival=1.0)
    decoded = wire.decode(wire.encode(ticket, clock_offset=0.0))
    assert decoded is not None
    assert decoded.sent is not None
    assert decoded.sent > 1e9
    old = wire.encode(ticket, clock_offset=0.0)
    del old[wire.PARAMS_KEY]["sent"]
    legacy = wire.decode(old)
    assert legacy is not None
    assert legacy.sent is None


def test_ranks_stop_deferring_a_prefill_at_the_same_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap on what one request's prefill is deferred in all counts each deferred pass at
    its predicted length, which lockstep keeps at its configured value: two ranks whose own
    clocks run at different speeds stop deferring it at the same pass (counted on each rank's
    clock, the faster one would stop first and the batches split)."""
    import agentconsole.server.runtime.sglang.plugin_state as plugin_state

    rnd = random.Random(3)
    decoder = _req(1, "ta", BASE, rnd)
    chunked = _req(2, "tb", BASE + 0.1, rnd)
    chunked.origin_input_ids = list(range(4_000))  # many chunks: deferring it can pay
    chunked.full_untruncated_fill_ids = None
    decisions = []
    for rank, tick in ((0, 0.003), (1, 0.71)):
        clock = SimpleNamespace(t=BASE + 900.0 * rank)

        def wall(clock: Any = clock, tick: float = tick) -> float:
            clock.t += tick
            return float(clock.t)

        fake_time = SimpleNamespace(time=wall, monotonic=wall, perf_counter=time.perf_counter)
        monkeypatch.setattr(plugin_state, "time", fake_time)
        folder = tmp_path / f"r{rank}"
        folder.mkdir()
        write_json_atomic(folder / CONTROL_FILE, ControlState(version=1).to_json())
        st = PluginState(folder, Layout(tp_size=2, tp_rank=rank))
        st.rank_keys = lambda reqs: [0 if r is decoder else 1 for r in reqs]  # type: ignore
        st.meter.decode_step_s = 0.05  # configured alike on every rank: the cap binds soon
        scheduler = SimpleNamespace(
            tree_cache=None,
            waiting_queue=[],
            running_batch=SimpleNamespace(reqs=[decoder]),
            last_batch=None,
            chunked_req=chunked,
            chunked_prefill_size=64,
        )
        st.begin_pass(scheduler)
        running = SimpleNamespace(reqs=[decoder])
        decisions.append([st.defer_prefill(scheduler, running) for _ in range(60)])
    assert decisions[0] == decisions[1]
    assert decisions[0][0]  # it deferred
    assert not any(decisions[0][-10:])  # then the cap held

"""Tensor-parallel ranks apply the same control state at every pass whatever subset of the
written versions each happened to read (``ControlState.earlier``, ``ControlGate``): a rank
reads ``control.json`` once a pass, so a version replaced within a pass may reach one rank and
not another, however long it lived; every later file carries it until every rank is past its
pass, and the gate holds it from there."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang.control import (
    BURST_S,
    CONTROL_FILE,
    LEAD_S,
    MAX_EARLIER,
    STATUS_FILE,
    ControlState,
    ControlWriter,
    RetentionHint,
    earlier_versions,
    plan_apply_steps,
    read_json,
    write_json_atomic,
)
from agentconsole.server.runtime.sglang.lockstep import ControlGate, DecisionClock, Layout
from agentconsole.server.runtime.sglang.plugin_state import PluginState

BASE = 1_000_000.0


def _bare(control: ControlState | None) -> dict[str, Any] | None:
    """What a rank decides by: the state, less the file's list of earlier versions."""
    if control is None:
        return None
    data = control.to_json()
    del data["earlier"]
    return data


def _ticket(call: str, boost: float) -> dict[str, Any]:
    return CallTicket(call, "p1", "n1", "t", arrival=BASE, boost=boost).to_params()


def _report(folder: Path, step: int) -> None:
    """The group reports pass ``step`` at no measured rate: a change is planned 2 passes on."""
    write_json_atomic(folder / STATUS_FILE, {"step": step, "written_at": time.time()})


class _GateRank:
    """One rank's gate and decision clock, applying what is due as ``PluginState`` does."""

    def __init__(self) -> None:
        self.gate, self.clock = ControlGate(STATUS_FILE), DecisionClock()
        self.applied: ControlState | None = None

    def read(self, content: dict[str, Any], step: int) -> None:
        self.gate.offer(ControlState.from_json(json.loads(json.dumps(content))), step, self.clock)

    def begin(self, step: int) -> dict[str, Any] | None:
        due = self.gate.due(step, self.clock)
        if due is not None:
            self.clock.observe(due.written_at, step)
            self.applied = due
        return _bare(self.applied)


def _review_files(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """v5 planned at pass 12, then v6 written 0.1 s later planned at 14: the files as read."""
    _report(tmp_path, 10)
    initial = ControlState(
        version=4,
        paused=True,
        boosts={"p1": 2.0},
        tickets={"c1": _ticket("c1", 1.0)},
        retention={"p1": RetentionHint("keep", BASE + 5, 1), "p2": RetentionHint("offload", 0, 1)},
    )
    writer = ControlWriter(tmp_path, initial)
    v5 = read_json(tmp_path / CONTROL_FILE)
    time.sleep(0.1)
    _report(tmp_path, 12)
    writer.state.paused = False
    writer.state.boosts = {"p3": 9.0}
    writer.state.tickets["c2"] = _ticket("c2", 7.0)
    del writer.state.retention["p2"]
    writer.state.retention["p1"] = RetentionHint("offload", BASE + 9, 2)
    writer.write(ack=True)
    v6 = read_json(tmp_path / CONTROL_FILE)
    assert v5 is not None
    assert v6 is not None
    assert (v5["version"], v5["apply_at_step"]) == (5, {STATUS_FILE: 12})
    assert (v6["version"], v6["apply_at_step"]) == (6, {STATUS_FILE: 14})
    return v5, v6


def test_a_rank_that_missed_a_version_applies_it_at_its_pass_like_the_others(
    tmp_path: Path,
) -> None:
    """The review's case: rank A read v5 then v6, rank B only v6; both hold paused (v5) at
    passes 12-13 and v6 from 14, pass by pass alike."""
    v5, v6 = _review_files(tmp_path)
    a, b = _GateRank(), _GateRank()
    seen_a, seen_b = [], []
    for step in range(10, 17):
        if step == 10:
            a.read(v5, step)
        if step == 11:
            a.read(v6, step)
            b.read(v6, step)
        seen_a.append(a.begin(step))
        seen_b.append(b.begin(step))
    assert seen_a == seen_b
    assert [s["version"] if s else None for s in seen_a] == [None, None, 5, 5, 6, 6, 6]
    applied5, applied6 = seen_a[2], seen_a[4]
    assert applied5 is not None
    assert applied6 is not None
    assert applied5 == {k: v for k, v in v5.items() if k != "earlier"}
    assert applied6 == {k: v for k, v in v6.items() if k != "earlier"}
    assert a.gate.late == b.gate.late == 0
    # the case has teeth: without the earlier versions B holds nothing at passes 12-13
    bare = _GateRank()
    bare.read({**v6, "earlier": []}, 11)
    assert [bare.begin(s) for s in (12, 13)] == [None, None]


def test_plugin_states_that_read_different_versions_hold_the_same_control(
    tmp_path: Path,
) -> None:
    """The same through ``PluginState`` (file, poll, gate, apply): two tp ranks, one of which
    never sees v5 in its folder, are paused alike at every pass."""
    (tmp_path / "writer").mkdir()
    v5, v6 = _review_files(tmp_path / "writer")
    ranks = []
    for r in (0, 1):
        folder = tmp_path / f"r{r}"
        folder.mkdir()
        write_json_atomic(folder / CONTROL_FILE, ControlState(version=1).to_json())
        ranks.append(PluginState(folder, Layout(tp_size=2, tp_rank=r)))
    scheduler = SimpleNamespace(tree_cache=None)
    seen: list[list[tuple[int, bool, dict[str, float]]]] = [[], []]
    for step in range(1, 17):
        for r, state in enumerate(ranks):
            if step == 10 and r == 0:
                write_json_atomic(state.state_dir / CONTROL_FILE, v5)
            if step == 11:
                write_json_atomic(state.state_dir / CONTROL_FILE, v6)
            state.begin_pass(scheduler)
            assert state.step == step
            seen[r].append((state.control.version, state.paused, dict(state.control.boosts)))
    assert seen[0] == seen[1]
    assert [v for v, _, _ in seen[0][9:]] == [1, 1, 5, 5, 6, 6, 6]
    assert [p for _, p, _ in seen[0][9:]] == [False, False, True, True, False, False, False]


def _random_states(rnd: random.Random, count: int) -> list[ControlState]:
    """``count`` successive states, each a few random edits of the one before."""
    state = ControlState(version=1)
    out = []
    for _ in range(count):
        state = ControlState.from_json(json.loads(json.dumps(state.to_json())))
        state.version += 1
        state.ack_version = state.version if rnd.random() < 0.3 else state.ack_version
        for _ in range(rnd.randint(0, 4)):
            what = rnd.randrange(7)
            key = f"k{rnd.randrange(6)}"
            if what == 0:
                state.paused = not state.paused
            elif what == 1:
                state.policy = rnd.choice(["cp-cache", "fcfs", "srpt"])
            elif what == 2:
                state.boosts[key] = float(rnd.randrange(5))
            elif what == 3:
                state.retention[key] = RetentionHint(rnd.choice(["keep", "recompute"]), 1.5, 1)
            elif what == 4:
                state.tickets.pop(key, None) if rnd.random() < 0.5 else state.tickets.update(
                    {key: {"priority": rnd.randrange(3)}}
                )
            elif what == 5:
                state.retention.pop(key, None)
                state.preempted.pop(key, None)
            else:
                state.fairness = {"beta": rnd.random()}
        out.append(state)
    return out


def test_every_carried_version_rebuilds_exactly() -> None:
    """Each entry of every file, rebuilt against its file's newest state, is the version as
    it was written (fields, maps key by key, its own plan and time); at most MAX_EARLIER."""
    for seed in range(30):
        rnd = random.Random(seed)
        written: dict[int, dict[str, Any]] = {}
        previous: dict[str, Any] | None = None
        for n, state in enumerate(_random_states(rnd, 45)):
            state.written_at = BASE + n
            state.apply_at_step = {STATUS_FILE: 100 + n}
            data = state.to_json()
            data["earlier"] = earlier_versions(data, previous, {})
            data = json.loads(json.dumps(data))
            written[state.version] = {k: v for k, v in data.items() if k != "earlier"}
            newest = ControlState.from_json(data)
            carried = [e["version"] for e in data["earlier"]]
            assert carried == sorted(carried)
            assert len(carried) == min(n, MAX_EARLIER)
            assert carried == list(range(state.version - len(carried), state.version))
            for entry in newest.earlier:
                assert _bare(newest.earlier_state(entry)) == written[entry["version"]]
            previous = data


def test_versions_leave_the_file_once_every_group_is_past_their_pass() -> None:
    def write(version: int, plan: dict[str, int], prev: dict[str, Any] | None, seen: Any) -> Any:
        data = ControlState(version=version, apply_at_step=plan).to_json()
        data["earlier"] = earlier_versions(data, prev, seen)
        return data

    v2 = write(2, {"status.rank0.json": 20, "status.rank1.json": 30}, None, {})
    v3 = write(3, {"status.rank0.json": 25}, v2, {"status.rank0.json": 22})
    assert [e["version"] for e in v3["earlier"]] == [2]
    # group 0 is past 20 but not 25 + 3, group 1 is not 30 + 3 yet: v2 and v3 stay
    v4 = write(4, {}, v3, {"status.rank0.json": 27, "status.rank1.json": 32})
    assert [e["version"] for e in v4["earlier"]] == [2, 3]
    v5 = write(5, {}, v4, {"status.rank0.json": 28, "status.rank1.json": 33})
    assert [e["version"] for e in v5["earlier"]] == []  # and v4 was planned for no group
    # a group with no status (gone, or not reporting yet) keeps its versions
    assert [e["version"] for e in write(6, {}, v3, {})["earlier"]] == [2, 3]
    # a writer that starts its count again carries nothing of the old one's
    assert write(1, {"status.rank0.json": 50}, v3, {})["earlier"] == []
    # a file from before this field (no "earlier"): read as none
    old = ControlState(version=7).to_json()
    del old["earlier"]
    assert ControlState.from_json(old).earlier == []
    assert [
        e["version"] for e in write(8, {}, {**old, "apply_at_step": {"s": 1}}, {})["earlier"]
    ] == [7]


def test_the_writer_carries_earlier_versions_and_keeps_its_own_state_bare(
    tmp_path: Path,
) -> None:
    _report(tmp_path, 50)
    writer = ControlWriter(tmp_path)
    time.sleep(BURST_S)
    writer.state.paused = True
    writer.write()
    saved = read_json(tmp_path / CONTROL_FILE)
    assert saved is not None
    assert [e["version"] for e in saved["earlier"]] == [1]
    assert saved["earlier"][0]["paused"] is False
    assert writer.state.earlier == []
    _report(tmp_path, 60)  # the group is past v1's and v2's passes (52)
    writer.write()
    saved = read_json(tmp_path / CONTROL_FILE)
    assert saved is not None
    assert saved["earlier"] == []


def test_a_chain_of_bursts_does_not_hold_a_pass_the_group_reaches(tmp_path: Path) -> None:
    """Writes 10 ms apart for a second (each a burst with the one before) at 50 passes a
    second: the first ones share a pass, and none is planned less than half the lead ahead
    of the group's pass at its write (a pass kept for good would turn every later one late)."""
    wall0 = 1_000.0
    write_json_atomic(
        tmp_path / STATUS_FILE, {"step": 100, "steps_per_s": 50.0, "written_at": wall0}
    )
    previous: ControlState | None = None
    plans = []
    for k in range(100):
        wall = wall0 + 0.01 * k
        plan = plan_apply_steps(tmp_path, wall, previous)[STATUS_FILE]
        assert plan >= 100 + math.ceil(50.0 * (wall - wall0 + LEAD_S / 2)) + 2
        plans.append(plan)
        previous = ControlState(written_at=wall, apply_at_step={STATUS_FILE: plan})
    assert plans[0] == plans[1] == plans[5]
    assert plans == sorted(plans)
    assert plans[-1] >= 100 + 50 * 0.99


# -- many ranks, random write and read times ------------------------------------------------


@dataclass
class _World:
    """Passes (their start times), versions (write time, lead in passes), per-rank read times
    within each pass, requests (send times), and the status cadence."""

    starts: list[float]  # pass p runs from starts[p - 1] to starts[p]
    writes: list[float]
    leads: list[int]
    reads: list[list[list[float]]]  # rank -> pass -> read times (the first: begin_pass)
    sends: list[float] = field(default_factory=list)
    status_every: int = 1
    seed: int = 0


@st.composite
def _worlds(draw: st.DrawFn) -> _World:
    passes = draw(st.integers(8, 30))
    lengths = draw(st.lists(st.floats(0.002, 0.08), min_size=passes, max_size=passes))
    starts = [0.0]
    for length in lengths:
        starts.append(starts[-1] + length)
    end = starts[-6]  # written by then: in force by the last pass
    writes = sorted(draw(st.lists(st.floats(0.0, end), min_size=1, max_size=MAX_EARLIER - 2)))
    leads = draw(st.lists(st.integers(1, 4), min_size=len(writes), max_size=len(writes)))
    reads = []
    for _ in range(draw(st.integers(2, 4))):
        per_pass = []
        for p in range(passes):
            first = starts[p] + draw(st.floats(0.0, 0.999)) * (starts[p + 1] - starts[p])
            more = draw(st.lists(st.floats(0.0, 0.999), max_size=2))
            per_pass.append([first, *sorted(first + m * (starts[p + 1] - first) for m in more)])
        reads.append(per_pass)
    sends = draw(st.lists(st.floats(0.0, starts[-1]), max_size=6))
    status_every = draw(st.integers(1, 5))
    return _World(starts, writes, leads, reads, sends, status_every, draw(st.integers(0, 99)))


def _files(world: _World, *, carry: bool = True) -> list[tuple[float, dict[str, Any]]]:
    """The control files as the writer writes them: each planned ``lead`` passes after the
    pass it was written in (every rank reads it, or a newer file, at the start of the next
    pass), never before the one it replaces, a burst's writes at the same pass while that is
    still ahead; the earlier versions carried as the writer does, the group's pass as its
    last status said (``carry``: False strips them, the files before this change)."""

    def pass_at(t: float) -> int:
        return max(p for p, s in enumerate(world.starts[:-1], start=1) if s <= t)

    states = _random_states(random.Random(world.seed), len(world.writes))
    files: list[tuple[float, dict[str, Any]]] = []
    previous: dict[str, Any] | None = None
    due, last = 0, -1.0
    for state, wall, lead in zip(states, world.writes, world.leads, strict=True):
        now = pass_at(wall)
        if not (0 <= wall - last < BURST_S and due > now):
            due = max(due, now + lead)
        last = wall
        state.written_at = BASE + wall
        state.apply_at_step = {STATUS_FILE: due}
        reported = max(now - now % world.status_every, 1)
        data = state.to_json()
        data["earlier"] = earlier_versions(data, previous, {STATUS_FILE: reported})
        previous = data
        data = json.loads(json.dumps(data))
        if not carry:
            data["earlier"] = []
        files.append((wall, data))
    return files


def _run_ranks(world: _World, *, carry: bool = True) -> tuple[list[list[Any]], list[int]]:
    """Each rank's applied state at every pass, and its count of versions read late."""
    files = _files(world, carry=carry)
    initial = ControlState(version=1).to_json()

    def content_at(t: float) -> dict[str, Any]:
        found = [data for wall, data in files if wall <= t]
        return found[-1] if found else initial

    seen: list[list[Any]] = []
    late = []
    for reads in world.reads:
        rank = _GateRank()
        rank.read(initial, 0)  # written before the engine started: in force at once
        rank.begin(0)
        mine = []
        last_read = initial["version"]
        for p, times in enumerate(reads, start=1):
            for i, t in enumerate(times):
                content = content_at(t)
                if content["version"] != last_read:  # the poll parses a changed file only
                    rank.read(content, p)
                    last_read = content["version"]
                if i == 0:  # begin_pass: the pass's control, before it orders anything
                    mine.append(rank.begin(p))
                    # then the requests received at the pass's start move the clock
                    for sent in world.sends:
                        if p >= 2 and world.starts[p - 2] <= sent < world.starts[p - 1]:
                            rank.clock.observe(BASE + sent, p)
        seen.append(mine)
        late.append(rank.gate.late)
    return seen, late


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_worlds())
def test_ranks_reading_random_subsets_of_versions_apply_the_same_state(world: _World) -> None:
    seen, late = _run_ranks(world)
    for rank in seen[1:]:
        for p, (mine, first) in enumerate(zip(rank, seen[0], strict=True), start=1):
            assert mine == first, f"pass {p}"
    assert late == [0] * len(seen)
    assert seen[0][-1] is not None  # every version written is in force by the last pass
    assert seen[0][-1]["version"] == len(world.writes) + 1


def test_without_the_earlier_versions_random_reads_split_the_ranks() -> None:
    """The randomized scenario has teeth: with the files stripped of their earlier versions
    (as before this change), ranks of some worlds apply different states at some pass."""
    rnd = random.Random(3)
    split = 0
    for seed in range(100):
        starts = [0.05 * p for p in range(13)]
        writes = sorted(rnd.uniform(0, starts[-6]) for _ in range(rnd.randint(3, 10)))
        reads = [[[s + rnd.uniform(0, 0.049)] for s in starts[:-1]] for _ in range(2)]
        world = _World(starts, writes, [rnd.randint(1, 3) for _ in writes], reads, seed=seed)
        assert _run_ranks(world)[0][0] == _run_ranks(world)[0][1]
        split += _run_ranks(world, carry=False)[0][0] != _run_ranks(world, carry=False)[0][1]
    assert split > 0

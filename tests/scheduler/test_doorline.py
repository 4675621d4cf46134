"""The door's line: highest response ratio first by each kind's expected run; first come first
served before anything is learned; kept places keep their wait."""

from __future__ import annotations

from agentconsole.scheduler.door import ProgramDoor
from agentconsole.scheduler.doorline import WaitingLine
from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.growth import RunTimes


def _line(runs: dict[str, float] | None) -> WaitingLine:
    if runs is None:
        return WaitingLine(None, place_kept_s=100.0)
    known = runs
    return WaitingLine(lambda key, _running_s: known.get(key[1]), place_kept_s=100.0)


def _queue(line: WaitingLine, program_id: str, kind: str, now: float) -> None:
    entry, resumed = line.entry(program_id, 10, ("t", kind), now)
    assert not resumed
    line.add(entry)


def _waiting(runs: dict[str, float] | None, *queued: tuple[str, str, float]) -> WaitingLine:
    """A line of ``runs`` with ``queued`` (program, kind, since) in it."""
    line = _line(runs)
    for program_id, kind, now in queued:
        _queue(line, program_id, kind, now)
    return line


def _first(line: WaitingLine, now: float) -> str:
    first = line.first(now)
    assert first is not None
    return first.program_id


def test_before_anything_is_learned_the_line_is_first_come_first_served() -> None:
    nothing: list[dict[str, float] | None] = [None, {}]
    for runs in nothing:
        line = _waiting(runs, ("long", "serial", 0.0), ("short", "fanout", 1.0))
        assert _first(line, 5.0) == "long"


def test_a_short_kind_goes_ahead_until_a_long_ones_wait_outweighs_it() -> None:
    line = _waiting({"serial": 30.0, "fanout": 10.0}, ("long", "serial", 0.0))
    _queue(line, "short", "fanout", 2.0)
    # at 4 s: long (4 + 30) / 30 = 1.13, short (2 + 10) / 10 = 1.2
    assert _first(line, 4.0) == "short"
    line.take("short")  # it started
    _queue(line, "later", "fanout", 40.0)
    # at 41 s: long (41 + 30) / 30 = 2.37 beats a short one that waited 1 s (1.1)
    assert _first(line, 41.0) == "long"
    # only relative sizes matter: every run ten times longer orders the same
    scaled = _waiting(
        {"serial": 300.0, "fanout": 100.0}, ("long", "serial", 0.0), ("short", "fanout", 20.0)
    )
    assert _first(scaled, 40.0) == "short"


def test_a_head_with_nothing_learned_keeps_the_line_by_ratio_for_the_others() -> None:
    """A tenant that never finished a program of its kind (new, or its programs always fail)
    waits as a middling one; it does not turn the whole line first come first served."""
    line = _waiting(
        {"serial": 1_000.0, "fanout": 10.0},
        ("long", "serial", 0.0),
        ("newcomer", "unknown", 1.0),
        ("short", "fanout", 2.0),
    )
    assert _first(line, 5.0) == "short"  # first come first served would start "long"


def test_a_newcomer_never_goes_ahead_of_anyone_already_waiting() -> None:
    line = _waiting({"serial": 30.0, "fanout": 1.0}, ("long", "serial", 0.0))
    # it arrives with the long one: ratio 1 both
    newcomer, _ = line.entry("short", 10, ("t", "fanout"), 0.0)
    assert line.first(0.0, newcomer) is not newcomer  # ties go by place


def test_a_kept_place_resumes_its_wait() -> None:
    line = _line({"serial": 10.0})
    _queue(line, "a", "serial", 0.0)
    _queue(line, "b", "serial", 5.0)
    assert line.leave("a", 6.0)
    assert len(line) == 1
    assert (line.holds_place("a", 50.0), line.holds_place("a", 106.0)) == (True, False)
    back, resumed = line.entry("a", 10, ("t", "serial"), 20.0)
    assert (resumed, back.since) == (True, 0.0)  # it waited since 0 s, not since 20 s
    line.add(back)
    assert _first(line, 20.0) == "a"
    line.forget("b")
    assert (len(line), line.tokens) == (1, 10)


def test_the_door_starts_the_waiting_program_with_the_highest_response_ratio() -> None:
    runs = RunTimes()
    door = ProgramDoor(1_000, expected_run_s=runs.expected)
    assert door.try_start("first", 1_000, 0.0, kind=("t", "serial"))  # fills the budget
    assert not door.try_start("long", 500, 1.0, kind=("t", "serial"))
    assert not door.try_start("short", 500, 2.0, kind=("t", "fanout"))
    runs.observe(("t", "serial"), 30.0)  # learned meanwhile from other programs
    runs.observe(("t", "fanout"), 3.0)
    assert door.finish("first", 4.0) == ["short", "long"]  # both fit: short first
    assert door.started_at("short") == 4.0
    assert door.started_at("first") is None  # finished


def test_no_tenants_history_reaches_another_tenants_expected_runs() -> None:
    """Labels are the client's: another tenant's programs labelled with a tenant's kind (or
    its unlabelled fallback) teach that tenant nothing, not even before it has a history."""
    runs = RunTimes(learning_rate=1.0)
    assert runs.expected(("t", "agent")) is None  # nothing learned: first come first served
    runs.observe(("hostile", "agent"), 500.0)  # another tenant's programs of the label
    runs.observe(("hostile", "tenant:t"), 500.0)  # and of t's unlabelled programs' kind
    assert runs.expected(("t", "agent")) is None  # still nothing of t's
    assert runs.expected(("t", "tenant:t"), 4.0) is None
    runs.observe(("t", "agent"), 5.0)
    runs.observe(("hostile", "agent"), 900.0)
    assert runs.expected(("t", "agent")) == 5.0  # its own history, whatever others report
    assert runs.expected(("t", "new")) == 5.0  # an unseen kind: the mean of its own kinds
    assert runs.expected(("t", "new"), 8.0) == 8.0  # at least its longest running one's run
    restarted = RunTimes()
    restarted.adopt(runs)  # a server that has run a while starts from what it learned
    assert restarted.expected(("t", "agent")) == 5.0
    runs.observe(("t", "agent"), 7.0)
    assert restarted.expected(("t", "agent")) == 5.0  # a copy: learning apart from then on


def test_a_kind_that_has_not_finished_yet_is_no_short_one() -> None:
    """Early in a burst only the short kinds have finished: a kind none of whose programs
    finished is expected to run at least as long as its longest running one had when the
    waiting program queued (fixed then: the waiting program's ratio still grows)."""
    runs = RunTimes()
    door = ProgramDoor(1_000, expected_run_s=runs.expected)
    assert door.try_start("serial-1", 500, 0.0, kind=("t", "serial"))
    assert door.try_start("fanout-1", 500, 0.0, kind=("t", "fanout"))
    assert not door.try_start("serial-2", 500, 6.0, kind=("t", "serial"))  # serial-1 ran 6 s
    assert not door.try_start("fanout-2", 500, 6.5, kind=("t", "fanout"))
    runs.observe(("t", "fanout"), 2.0)  # fanout-1's run: the only kind learned so far
    # at 9 s: serial-2 (3 + 6) / 6 = 1.5 against fanout-2 (2.5 + 2) / 2 = 2.25 (taken for an
    # average kind, serial would be 2 s: (3 + 2) / 2 = 2.5, and go first)
    assert door.finish("fanout-1", 9.0) == ["fanout-2"]
    assert runs.expected(("t", "serial"), 6.0) == 6.0


def test_programs_that_left_from_inside_the_line_are_skipped() -> None:
    line = _waiting(None, ("a", "k", 0.0), ("b", "k", 1.0), ("c", "k", 2.0), ("d", "j", 3.0))
    assert line.leave("b", 4.0)
    line.forget("c")
    assert (_first(line, 5.0), len(line), line.tokens) == ("a", 2, 20)
    line.take("a")
    assert _first(line, 5.0) == "d"  # b and c, behind a in their kind, are gone
    back, resumed = line.entry("b", 10, ("t", "k"), 6.0)
    line.add(back)
    assert (resumed, _first(line, 6.0)) == (True, "b")  # back at its place, before d


def test_the_returning_line_keeps_an_away_programs_place_until_it_lapses() -> None:
    from agentconsole.scheduler.doorline import ReturningLine

    line = ReturningLine(place_kept_s=10.0)
    for pid in ("a", "b", "c"):
        line.park(pid)
    line.step_away("a", 1.0)  # a's caller stopped waiting: it holds no one up
    line.step_away("zz", 1.0)  # not in line: nothing
    assert (line.waiting(2.0), line.away, len(line)) == (["b", "c"], 1, 3)
    assert line.back("a", 5.0)  # its retry, within its time: at its place again
    assert line.waiting(5.0) == ["a", "b", "c"]
    assert not line.back("a", 6.0)  # it was not away any more
    line.step_away("b", 6.0)
    assert not line.back("b", 17.0)  # lapsed: out of the line
    assert "b" not in line
    line.step_away("c", 18.0)
    line.let_through_if_away("c")  # a call of it came while away: it goes on
    line.let_through_if_away("a")  # not away: stays
    assert (line.waiting(19.0), line.is_waiting("a"), line.is_waiting("c")) == (["a"], True, False)
    line.remove("a")
    line.remove("a")  # twice: nothing
    assert len(line) == 0


def test_a_kind_whose_tenant_finished_nothing_yet_is_no_short_one_either() -> None:
    """The floor holds where the tenant has nothing learned at all (its run is then taken
    for the middle of the others'): a tenant whose programs never finish (it cancels them)
    ranked as average-length, whatever its running one had run."""
    runs = RunTimes()
    runs.observe(("S", "short"), 10.0)
    door = ProgramDoor(1_000, expected_run_s=runs.expected, fairness=FairnessConfig(enabled=False))
    assert door.try_start("h-long", 1_000, 0.0, kind=("H", "agent"))  # runs 5,000 s, unfinished
    assert not door.try_start("h2", 10, 5_000.0, kind=("H", "agent"))
    assert not door.try_start("s1", 10, 5_000.0, kind=("S", "short"))
    assert door.finish("h-long", 5_010.0)[:1] == ["s1"]

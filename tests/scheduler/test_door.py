"""The program admission gate: first come, first served, within a memory budget that counts
the working set (programs whose context is kept), not every program ever started; started
programs park at their boundaries only on evidence of thrash."""

from __future__ import annotations

import pytest

from agentconsole.scheduler.door import PLACE_KEPT_S, ProgramDoor


def test_programs_start_while_their_private_context_fits_then_wait_in_order() -> None:
    gate = ProgramDoor(100)
    assert gate.try_start("a", 60, 0.0)
    assert gate.try_start("b", 40, 0.0)
    assert not gate.try_start("c", 50, 0.0)
    assert not gate.try_start("d", 10, 0.0)  # would fit, but never overtakes an earlier arrival
    assert (gate.used_tokens, gate.parked, gate.parked_tokens, gate.parked_total) == (100, 2, 60, 2)
    assert gate.finish("b", 1.0) == []  # 60 + 50 > 100: c still waits, and d behind it
    assert gate.finish("a", 2.0) == ["c", "d"]
    assert gate.used_tokens == 60
    assert gate.finish("c", 3.0) == []
    assert gate.finish("d", 3.0) == []
    assert (gate.used_tokens, gate.parked) == (0, 0)


def test_a_program_larger_than_the_budget_starts_alone() -> None:
    gate = ProgramDoor(100)
    assert gate.try_start("huge", 500, 0.0)  # nothing else counts: it could never start else
    assert not gate.try_start("small", 1, 0.0)
    assert gate.finish("huge", 1.0) == ["small"]


def test_a_program_cancelled_at_the_door_leaves_the_queue() -> None:
    gate = ProgramDoor(100)
    assert gate.try_start("a", 100, 0.0)
    assert not gate.try_start("cancelled", 50, 0.0)
    assert not gate.try_start("b", 50, 0.0)
    assert gate.finish("cancelled", 1.0) == []  # it never starts
    assert gate.finish("a", 2.0) == ["b"]
    assert gate.parked == 0


def test_a_dropped_context_leaves_the_working_set_until_its_program_returns() -> None:
    gate = ProgramDoor(100)
    assert gate.try_start("tester", 80, 0.0)
    assert not gate.try_start("new", 50, 0.0)
    # a minutes-long test run: the tool-wait decision dropped the context, the door opens
    assert gate.step_out("tester", until=1.0, now=1.0) == ["new"]
    assert gate.used_tokens == 50
    gate.rejoin("tester")  # back with a call: counted again at once, even over the budget
    assert gate.used_tokens == 130
    assert not gate.try_start("later", 1, 2.0)


def test_a_kept_context_counts_until_its_retention_lapses() -> None:
    gate = ProgramDoor(100)
    assert gate.try_start("a", 80, 0.0)
    assert not gate.try_start("b", 50, 0.0)
    assert gate.step_out("a", until=10.0, now=1.0) == []  # kept for 9 s: still counted
    assert gate.next_expiry() == 10.0
    assert gate.wake(5.0) == []
    assert gate.wake(10.0) == ["b"]  # the retention lapsed while the tool still ran
    assert gate.next_expiry() is None  # nobody waits: no wake-up needed


def test_a_rejoin_cancels_the_pending_lapse() -> None:
    gate = ProgramDoor(100)
    assert gate.try_start("a", 80, 0.0)
    assert gate.step_out("a", until=10.0, now=1.0) == []
    gate.rejoin("a")  # its tool returned early: the stale lapse must not uncount it
    assert not gate.try_start("b", 50, 2.0)
    assert gate.wake(10.0) == []
    assert gate.used_tokens == 80


def test_a_disabled_gate_admits_everything_and_counts_nothing() -> None:
    gate = ProgramDoor(0, enabled=False)
    assert all(gate.try_start(str(i), 10**9, 0.0) for i in range(5))
    assert gate.step_out("0", until=5.0, now=1.0) == []
    assert (gate.used_tokens, gate.parked_total, gate.finish("0", 2.0)) == (0, 0, [])
    with pytest.raises(ValueError, match="budget_tokens"):
        ProgramDoor(-1)


def test_a_started_program_that_grows_is_resized_and_parked_at_its_boundary() -> None:
    door = ProgramDoor(1_000)
    assert door.try_start("a", 300, 0.0)
    assert door.try_start("b", 300, 0.0)
    door.resize("a", 2_000, 300)  # its kind is known to reach 2,000: admission counts that
    assert (door.used_tokens, door.outgrown(0.0)) == (2_300, False)  # what it holds still fits
    assert not door.try_start("c", 10, 0.0)  # no newcomer while the predictions do not fit
    door.resize("a", 2_000, 800)  # it grew: 1,100 held
    assert (door.held_tokens, door.outgrown(0.0)) == (1_100, False)  # counted, not yet thrash
    door.note_lost("b", 200, 3.0)  # b's next call found 200 of its 300 tokens evicted: thrash
    assert door.outgrown(3.0)
    door.park_started("a", 0.0)  # at its next call boundary
    assert door.is_returning("a")
    assert (door.held_tokens, door.outgrown(3.0)) == (300, False)
    assert not door.try_start("d", 10, 0.0)  # a newcomer waits behind the returning one
    # room frees up: the parked started program goes on first, then the newcomers that fit
    assert door.finish("b", 1.0) == ["a"]
    assert door.finish("a", 2.0) == ["c", "d"]
    assert door.boundary_parks == 1


def test_a_work_conserving_door_starts_the_next_program_rather_than_idle_a_slot() -> None:
    """With the engine's batch known, predictions do not keep a slot idle: while fewer started
    programs than ``batch_slots`` have calls in the engine, the next one starts when what is
    held now leaves room for its prediction."""
    door = ProgramDoor(1_000, batch_slots=2)
    assert door.try_start("a", 600, 0.0)
    door.resize("a", 600, 200)  # predicted to reach 600, holds 200
    assert door.try_start("b", 300, 0.0)  # fits the predictions: 900
    door.resize("b", 300, 100)
    # both slots busy: predictions decide (900 + 300 > 1,000), whatever is held
    assert not door.try_start("c", 300, 0.0)
    # a waits on a tool, its context kept: a slot would idle, and 300 held + 300 fits
    assert door.step_out("a", until=60.0, now=1.0) == ["c"]
    assert door.used_tokens == 1_200  # over the predictions: thrash, if it comes, parks
    # b waits too: but 300 + 300 held + d's 500 does not fit what is held
    assert not door.try_start("d", 500, 1.0)
    assert door.step_out("b", until=60.0, now=2.0) == []
    door.resize("c", 300, 300)
    door.resize("a", 600, 600)  # a grew while out: the started programs hold 1,000
    assert (door.held_tokens, door.outgrown(2.0)) == (1_000, False)
    door.rejoin("a")
    door.resize("b", 300, 150)
    door.note_lost("c", 300, 3.0)  # the engine dropped c's whole context: thrash
    # a started program parks at its boundary
    assert (door.held_tokens, door.outgrown(3.0)) == (1_050, True)
    door.park_started("b", 2.5)
    assert door.finish("c", 3.0) == ["b"]  # the returning program first, then d waits
    assert door.parked == 1


def test_after_a_boundary_park_the_door_fills_no_slot_for_its_cooldown() -> None:
    door = ProgramDoor(1_000, batch_slots=4, fill_cooldown_s=100.0)
    assert door.try_start("a", 600, 0.0)
    door.resize("a", 600, 100)
    assert door.try_start("b", 400, 0.0)
    door.resize("b", 400, 100)
    assert door.try_start("c", 300, 0.0)  # over the predictions: a slot was free
    door.park_started("c", 5.0)  # contexts outgrew memory: evidence of thrash
    assert door.finish("c", 6.0) == []
    assert not door.try_start("d", 300, 7.0)  # a slot is free, but predictions decide now
    assert door.wake(104.0) == []
    assert door.wake(105.0) == ["d"]  # the cooldown is over: the free slot is filled


def test_without_the_batch_the_door_admits_by_predictions_alone() -> None:
    door = ProgramDoor(1_000)  # batch_slots 0: the engine's batch unknown
    assert door.try_start("a", 900, 0.0)
    door.resize("a", 900, 100)
    assert not door.try_start("b", 300, 0.0)
    assert door.step_out("a", until=60.0, now=1.0) == []  # kept: it still counts


def test_a_program_that_stopped_waiting_keeps_its_place_for_its_retry() -> None:
    door = ProgramDoor(100, place_kept_s=60.0)
    assert door.try_start("a", 100, 0.0)
    assert not door.try_start("early", 50, 1.0)
    assert not door.try_start("late", 50, 2.0)
    assert door.leave("early", 3.0) == []  # its caller got 503 and will retry
    assert (door.parked, door.is_parked("early")) == (1, False)
    assert not door.try_start("early", 50, 10.0)  # the retry queues where it was
    assert door.parked_total == 2  # one program waiting twice is one program that waited
    assert door.finish("a", 11.0) == ["early", "late"]


def test_a_retry_that_fits_starts_ahead_of_later_arrivals_and_a_lapsed_place_is_lost() -> None:
    door = ProgramDoor(100, place_kept_s=60.0)
    assert door.try_start("a", 60, 0.0)
    assert door.try_start("small", 30, 0.0)
    assert not door.try_start("b", 40, 1.0)
    assert door.leave("b", 2.0) == []
    assert not door.try_start("big", 80, 3.0)  # arrived after b first did
    assert door.finish("small", 4.0) == []  # 60 + 80 > 100: big still waits
    # b's place is ahead of big's and it fits: it starts at once (behind big it would wait)
    assert door.try_start("b", 40, 5.0)
    assert door.finish("a", 6.0) == []
    assert door.finish("b", 6.0) == ["big"]
    assert door.try_start("small", 10, 7.0)
    assert not door.try_start("c", 100, 6.0)
    door.leave("c", 7.0)
    assert not door.try_start("d", 100, 8.0)
    assert not door.try_start("c", 100, 100.0)  # its place lapsed: it queues behind d
    assert door.finish("big", 101.0) == []
    assert door.finish("small", 102.0) == ["d"]
    assert door.finish("d", 103.0) == ["c"]


def test_a_started_program_that_stopped_waiting_at_its_boundary_stays_started() -> None:
    door = ProgramDoor(1_000)
    assert door.try_start("a", 300, 0.0)
    assert door.try_start("b", 300, 0.0)
    door.resize("a", 300, 900)
    door.park_started("a", 0.0)
    assert not door.try_start("c", 10, 0.0)
    assert door.leave("a", 1.0) == ["c"]  # its caller gave up waiting: newcomers may go on
    assert (door.is_started("a"), door.is_returning("a"), door.held_tokens) == (True, False, 310)
    door.rejoin("a")  # its retried call runs: it counts again
    assert door.held_tokens == 300 + 900 + 10


def test_a_returning_programs_retry_comes_back_to_its_place_in_line() -> None:
    door = ProgramDoor(1_000)
    assert door.try_start("a", 600, 0.0)
    assert door.try_start("b", 400, 0.0)
    door.resize("a", 600, 700)  # 1,100 held: over the budget
    door.park_started("a", 0.0)
    assert not door.try_start("c", 100, 0.5)  # behind the returning program
    assert door.leave("a", 1.0) == ["c"]  # a's caller gave up: it holds no one up meanwhile
    assert (door.parked, door.holds_place("a", 1.0), door.is_returning("a")) == (0, True, False)
    assert door.come_back("a", 2.0) is False  # its retry: back at its place, not at the end
    assert not door.try_start("d", 50, 2.5)  # a newcomer waits behind it again
    assert door.finish("c", 3.0) == ["a"]
    assert (door.boundary_parks, door.parked) == (1, 1)  # parked once, however often it left
    assert door.come_back("b", 3.0) is None  # it never left: the boundary rule applies
    door.park_started("b", 4.0)
    door.leave("b", 5.0)
    assert door.come_back("b", 5.0 + PLACE_KEPT_S) is None  # its place lapsed


def test_only_a_real_loss_of_a_counted_context_is_evidence_of_thrash() -> None:
    """Outgrowing the budget parks nobody until the engine loses a counted context; a few
    tokens missing (a late placement report, a page) or an uncounted context lost (its
    retention lapsed, or the door parked it) is no evidence; each over-commitment needs its
    own."""
    door = ProgramDoor(1_000)
    assert door.try_start("a", 600, 0.0)
    assert door.try_start("b", 400, 0.0)
    door.resize("a", 600, 700)  # 1,100 held: over the budget by 100
    door.note_lost("a", 10, 0.5)  # a sliver of a's 700 tokens: no evidence
    assert (door.held_tokens, door.outgrown(0.5)) == (1_100, False)
    assert door.step_out("b", until=1.0, now=1.0) == []  # its context dropped for a tool wait
    door.note_lost("b", 400, 1.5)  # uncounted: losing it was the plan, not thrash
    door.rejoin("b")
    assert (door.held_tokens, door.outgrown(1.5)) == (1_100, False)
    door.note_lost("a", 175, 2.0)  # a quarter of a's context: the engine is evicting what counts
    assert (door.held_tokens, door.outgrown(2.0)) == (1_100, True)
    door.resize("a", 600, 500)  # what is held fits again (900): the episode is over
    door.resize("a", 600, 700)  # over again: no evidence yet for this one
    assert (door.held_tokens, door.outgrown(2.0)) == (1_100, False)


def test_a_lapsed_retention_or_a_planned_park_is_no_evidence_of_thrash() -> None:
    """A context kept through a tool wait counts only until its retention lapses, even when
    nothing woke the door since; a program the door parked comes back without its context,
    by plan."""
    door = ProgramDoor(1_000)
    for pid in ("a", "b", "c"):
        assert door.try_start(pid, 300, 0.0)
        door.resize(pid, 300, 400)  # each grew to 400: 1,200 held
    assert door.step_out("b", until=5.0, now=1.0) == []  # kept for its tool wait until 5 s
    door.note_lost("b", 400, 6.0)  # its next call at 6 s: the retention had lapsed
    door.rejoin("b")
    assert (door.held_tokens, door.outgrown(6.0)) == (1_200, False)
    door.note_lost("c", 400, 6.0)  # c's context evicted while counted: thrash
    assert door.outgrown(6.0)
    door.park_started("a", 6.5)  # its context dropped at its boundary
    assert door.finish("c", 7.0) == ["a"]  # room: a goes on, counted again
    door.resize("b", 300, 700)  # 1,100 held: over, no evidence yet
    door.note_lost("a", 400, 7.5)  # its next call finds the context the door dropped
    assert (door.held_tokens, door.outgrown(7.5)) == (1_100, False)


def test_a_sibling_queued_while_its_program_is_parked_does_not_use_up_the_planned_drop() -> None:
    """A fan-out's sibling call queued while its program waits to go on finds the dropped
    context too; the parked call's own return afterwards is still no evidence of thrash."""
    door = ProgramDoor(1_000)
    for pid in ("a", "b", "c"):
        assert door.try_start(pid, 300, 0.0)
        door.resize(pid, 300, 400)
    door.note_lost("c", 400, 1.0)  # thrash: over budget with evidence
    door.park_started("a", 1.5)  # a's context dropped at its boundary
    door.note_lost("a", 400, 2.0)  # a sibling of a's is queued meanwhile: by plan
    door.rejoin("a")
    assert door.finish("c", 3.0) == ["a"]  # room: a's parked call goes on
    door.resize("b", 300, 700)  # over again (1,100 held): no evidence yet
    door.note_lost("a", 400, 3.5)  # the parked call itself finds its context gone: by plan
    assert (door.held_tokens, door.outgrown(3.5)) == (1_100, False)
    door.note_lost("a", 400, 4.0)  # later losses of a's context are evidence again
    assert door.outgrown(4.0)


def test_a_parked_program_whose_sibling_counts_again_goes_on_without_more_room() -> None:
    """A fan-out sibling's call counts the program again while its parked call waits: that
    call takes no more room than is counted already, so it goes on at once (before, it
    waited for room for its share a second time, and held up every returning program)."""
    door = _three_outgrown_with_a_parked()
    door.rejoin("a")  # its sibling's call is queued: a counts again
    assert door.used_tokens == 900
    assert door.wake(2.0) == ["a"]
    assert (door.used_tokens, door.parked) == (900, 0)


def test_an_unfinished_kinds_floor_follows_its_longest_running_program() -> None:
    """The floor of a kind none of whose programs finished is how long its tenant's longest
    running program of it has run; when that one ends, the next longest's (and nothing once
    none runs). Another tenant's programs with the same label are not its tenant's kind."""
    door = ProgramDoor(10_000, expected_run_s=lambda kind, floor: max(floor, 1.0))
    assert door.try_start("l0", 100, 0.0, kind=("u", "long"))  # another tenant, same label
    assert door.try_start("l1", 100, 1.0, kind=("t", "long"))
    assert door.try_start("l2", 100, 5.0, kind=("t", "long"))
    assert door.try_start("s1", 100, 6.0, kind=("t", "short"))
    assert door._running_s(("t", "long"), 10.0) == 9.0  # not u's, running since 0
    assert door._running_s(("v", "long"), 10.0) == 0.0  # nothing of v's runs
    door.finish("l1", 11.0)
    assert door._running_s(("t", "long"), 12.0) == 7.0
    door.finish("l2", 13.0)
    assert door._running_s(("t", "long"), 14.0) == 0.0
    assert door._running_s(("u", "long"), 14.0) == 14.0
    door.finish("l0", 15.0)
    assert set(door._started_by_kind) == {("t", "short")}  # an ended kind leaves nothing


def test_one_program_alone_never_outgrows_memory() -> None:
    door = ProgramDoor(100)
    assert door.try_start("huge", 5_000, 0.0)  # it could never start otherwise
    assert not door.outgrown(0.0)


def test_the_peak_estimator_learns_per_kind_and_follows_growth() -> None:
    from agentconsole.scheduler.growth import PeakEstimator, kind_key

    peaks = PeakEstimator(learning_rate=0.5)
    coding = ("t", "coding")
    assert peaks.predict(coding, 20_000) == 20_000  # nothing learned yet
    peaks.observe(coding, 200_000)
    assert peaks.predict(coding, 20_000) == 200_000  # sized by its kind's peak
    assert peaks.predict(coding, 250_000) == 250_000  # corrected as it outgrows it
    peaks.observe(coding, 100_000)
    assert peaks.known(coding) == 150_000
    # a kind the tenant never finished: its largest kind's (a fresh label sized by its first
    # prompt let every program through)
    assert peaks.predict(("t", "search"), 5_000) == 150_000
    assert peaks.predict(("u", "coding"), 5_000) == 5_000  # another tenant's kind of that name
    assert kind_key({"workload": "repair"}, "t") == ("t", "repair")
    assert kind_key({}, "t") == ("t", "tenant:t")


def test_a_lapse_found_by_a_newcomers_check_is_a_wake_due() -> None:
    """A counts through a tool wait until t=10 and B waits behind it. C arrives at t=11: its
    check uncounts A's lapsed retention, but B is first in line, so C queues and nobody
    starts, and no lapse is left for :meth:`next_expiry` to announce: the door says a wake is
    due, and the wake starts B and C."""
    door = ProgramDoor(100)
    assert door.try_start("A", 80, 0.0)
    assert door.step_out("A", until=10.0, now=0.0) == []
    assert not door.try_start("B", 50, 1.0)
    assert (door.wake_due, door.next_expiry()) == (False, 10.0)
    assert not door.try_start("C", 10, 11.0)
    assert (door.used_tokens, door.next_expiry(), door.wake_due) == (0, None, True)
    assert door.wake(11.0) == ["B", "C"]
    assert (door.wake_due, door.parked) == (False, 0)


def test_a_counted_returning_program_goes_on_behind_one_that_does_not_fit() -> None:
    """The returning line keeps its order among programs that need room, but one counted
    again by a sibling's call needs none: it goes on though the first in line does not fit
    (before, the first's lack of room held it, its call queued, behind it)."""
    door = _three_outgrown_with_a_parked()
    door.park_started("b", 1.6)
    door.resize("c", 900, 900)  # c grew: a's 300 no longer fits beside it
    assert not door.try_start("new", 10, 1.7)
    door.rejoin("b")  # b's sibling call is queued: b counts again
    assert door.wake(2.0) == ["b"]  # a still waits at the head; the newcomer behind it
    assert (door.is_returning("a"), door.is_parked("new")) == (True, True)
    assert door.finish("c", 3.0) == ["a", "new"]


def _three_outgrown_with_a_parked() -> ProgramDoor:
    """Three started programs that outgrew a 1,000-token budget (400 held each, the loss of
    c's context seen at 1.0), the first parked at its call boundary at 1.5."""
    door = ProgramDoor(1_000)
    for pid in ("a", "b", "c"):
        assert door.try_start(pid, 300, 0.0)
        door.resize(pid, 300, 400)
    door.note_lost("c", 400, 1.0)
    door.park_started("a", 1.5)
    return door


def test_a_newcomer_that_moves_the_shares_makes_a_wake_due() -> None:
    """c1's arrival (too big) takes tenant X out of "below its share", so y1, which fits,
    may now go ahead of X's x2: the door says a wake is due (before, y1 waited for the door's
    next event though it could start)."""
    door = ProgramDoor(160)
    assert door.try_start("a1", 100, 0.0, kind=("A", "k"))
    assert door.try_start("x1", 25, 0.0, kind=("X", "k"))
    assert not door.try_start("x2", 50, 1.0, kind=("X", "k"))
    assert not door.try_start("y1", 30, 2.0, kind=("Y", "k"))
    assert not door.try_start("c1", 100, 3.0, kind=("C", "k"))
    assert door.wake_due
    assert door.wake(3.0) == ["y1"]


def test_a_prediction_that_shrinks_or_a_budget_that_grows_makes_a_wake_due() -> None:
    door = ProgramDoor(1_000)
    assert door.try_start("a", 600, 0.0)
    assert not door.try_start("b", 500, 1.0)
    assert not _wake_due(door)
    door.resize("a", 400, 400)  # a's prediction fell (its shared prefix learned): b fits
    assert _wake_due(door)
    assert door.wake(2.0) == ["b"]
    assert not door.try_start("c", 500, 3.0)
    door.size_to(1_500, 0)  # the engines' memory grew
    assert door.wake_due
    assert door.wake(4.0) == ["c"]


def _wake_due(door: ProgramDoor) -> bool:
    """``door.wake_due`` read afresh (a property the checker would take as unchanged)."""
    return door.wake_due

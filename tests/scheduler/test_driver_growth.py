"""The program driver sizes programs by their predicted peak and parks a started program at
its call boundary once the started ones outgrow memory (issue 12's growth-aware door)."""

from __future__ import annotations

import pytest

from agentconsole.scheduler.actions import (
    CacheHint,
    ProgramEnded,
    StartPrograms,
)
from agentconsole.scheduler.controller import CallUsage, ProgramController
from agentconsole.scheduler.doorroom import door_size
from agentconsole.scheduler.driver import ProgramDriver
from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.program import Node, NodeKind, ToolKind, ToolSpec
from agentconsole.scheduler.runtime import CacheAction, MemoryView, PrefixProbe, ProgramContext
from tests.scheduler.driver_fakes import KeepAdvisor, LinearCost


class _View:
    def memory(self, program_id: str, now: float) -> MemoryView:
        return MemoryView(hbm_capacity_tokens=600, free_tokens=0, dram_capacity_tokens=4_000)

    def context(self, program_id: str, now: float) -> ProgramContext | None:
        return None


def _driver() -> ProgramDriver:
    controller = ProgramController(EventLog(), LinearCost())
    return ProgramDriver(controller, KeepAdvisor(), LinearCost(), budget_tokens=1_000)


def _call(
    driver: ProgramDriver, pid: str, nid: str, tokens: int, now: float, *, lost: int = 0
) -> None:
    driver.controller.add_node(pid, Node(nid, pid, NodeKind.LLM), now)
    probe = PrefixProbe(tokens, lost_tokens=lost)
    ticket = driver.queue_call(pid, nid, probe, now, private_tokens=tokens)
    driver.controller.start_node(pid, nid, now)
    usage = CallUsage(tokens, 0, 50, 0.1)
    driver.call_ended(pid, nid, ticket.call_id, now + 1, usage)


def test_a_kind_known_to_grow_is_admitted_by_its_peak() -> None:
    driver = _driver()
    for pid in ("done", "next", "third"):
        driver.controller.open_program(pid, "t", 0.0, labels={"workload": "coding"})
    assert driver.arrive("done", 100, 0, 0.0)
    for step in range(5):  # it grows to ~900 tokens, then finishes
        _call(driver, "done", f"n{step}", 100 + 150 * step, float(step))
    driver.finish("done", 10.0)
    assert driver.growth.known(("t", "coding")) is not None
    assert driver.arrive("next", 100, 0, 11.0)  # sized at ~750: alone, it starts
    assert not driver.arrive("third", 100, 0, 11.0)  # two ~750-token peaks do not fit 1,000


def _grow_past_the_budget(driver: ProgramDriver) -> None:
    """Programs a and b start small, then together hold 1,050 tokens of the 1,000."""
    view = _View()
    for pid in ("a", "b"):
        driver.controller.open_program(pid, "t", 0.0, labels={"workload": "new"})
        assert driver.arrive(pid, 100, 0, 0.0)
        _call(driver, pid, "n0", 100, 0.0)
    assert driver.at_boundary("a", view, 2.0) is None  # 300 held of 1,000: go on
    _call(driver, "a", "n1", 500, 2.0)
    _call(driver, "b", "n1", 450, 2.0)


def test_started_programs_that_outgrow_memory_park_at_a_call_boundary() -> None:
    driver, view = _driver(), _View()
    _grow_past_the_budget(driver)
    assert driver.at_boundary("a", view, 3.0) is None  # counted over, but nothing lost yet
    _call(driver, "b", "n2", 500, 3.0, lost=400)  # the engine evicted most of b's context
    parked = driver.at_boundary("a", view, 4.0)
    assert parked == [CacheHint("a", CacheAction.OFFLOAD, 0.0)]  # host memory can take it
    assert driver.at_boundary("b", view, 4.0) is None  # a alone no longer counts
    # a's caller gave up waiting (serve's 503); its retry waits at its place again, and its
    # context is not offloaded a second time
    assert driver.leave_door("a", 4.5) == []
    assert driver.at_boundary("a", view, 4.8) == []
    assert driver.door.boundary_parks == 1
    # its placement is dropped, and with the room it leaves a goes on first
    assert driver.finish("b", 5.0) == [ProgramEnded("b"), StartPrograms(("a",))]


def test_counts_that_lapsed_since_the_door_last_woke_park_nobody() -> None:
    """The started programs outgrew memory with evidence, then stopped counting (the idle
    grace of a program with no call lapsed, 5 s) while no event woke the door (nobody waited,
    so no wake was due): a boundary a minute later is judged on what counts then, and the
    program goes on: no context moved, no cooldown on filling slots."""
    driver, view = _driver(), _View()
    _grow_past_the_budget(driver)
    _call(driver, "b", "n2", 500, 3.0, lost=400)  # evidence: the engine lost b's context
    driver.settle(view, 4.0)  # neither has a call now: each counts for the idle grace only
    assert driver.door.outgrown(4.0)
    assert driver.at_boundary("a", view, 60.0) is None
    assert driver.door.boundary_parks == 0


def test_a_prefix_other_programs_computed_is_not_counted_as_the_programs_own() -> None:
    """A platform or tenant prefix the engine held when the program's first call came (every
    hit then is another program's KV) is stored once for all: the door counts the rest."""
    driver = _driver()
    driver.controller.open_program("p", "t", 0.0)
    assert driver.arrive("p", 200, 0, 0.0)
    driver.controller.add_node("p", Node("n0", "p", NodeKind.LLM), 0.0)
    first = PrefixProbe(1_000, cached_tokens=700, slow_tokens=100)  # a shared prefix of 800
    driver.queue_call("p", "n0", first, 0.0)  # serve: the whole prompt is "private"
    assert driver.door.held_tokens == 200
    driver.controller.add_node("p", Node("n1", "p", NodeKind.LLM), 1.0)
    # later calls hit its own context too: only the first call's hits are another's
    driver.queue_call("p", "n1", PrefixProbe(1_300, cached_tokens=1_250), 1.0)
    assert driver.door.held_tokens == 500
    driver.controller.add_node("p", Node("n2", "p", NodeKind.LLM), 2.0)
    # a runtime that knows public blocks says so (the simulator): the smaller counts
    driver.queue_call("p", "n2", PrefixProbe(1_400, cached_tokens=1_300), 2.0, private_tokens=450)
    assert driver.door.held_tokens == 450


def test_bench_and_serve_size_a_new_program_at_the_door_by_one_rule() -> None:
    """The door sizes a new program by what of its first prompt it does not share: serve
    marks nothing public, so the prefix its engine holds is another program's; the
    simulator's traces mark the platform prefix public and a tenant's prefix counts."""
    held = PrefixProbe(1_000, cached_tokens=700, slow_tokens=100)
    assert door_size(1_000, held) == 200  # serve: the whole prompt is "private"
    assert door_size(700, held) == 700  # bench: 300 public, the rest its own
    assert door_size(1_000, None) == 1_000  # nothing known: all of it counts
    driver = _driver()
    driver.controller.open_program("p", "t", 0.0)
    assert driver.arrive("p", 1_000, 0, 0.0, held=held)
    assert driver.door.held_tokens == 200


def test_a_shared_prefix_the_probe_did_not_see_is_learned_when_the_first_call_ends() -> None:
    """SGLang's probe sees only the program's own last context: a new program's shared prefix
    shows first as the cached tokens the engine reports for its first call."""
    driver = _driver()
    driver.controller.open_program("p", "t", 0.0, labels={"workload": "w"})
    assert driver.arrive("p", 1_000, 0, 0.0)
    driver.controller.add_node("p", Node("n0", "p", NodeKind.LLM), 0.0)
    ticket = driver.queue_call("p", "n0", PrefixProbe(1_000), 0.0)
    assert driver.door.held_tokens == 1_000  # nothing known yet: all of it counts
    driver.controller.start_node("p", "n0", 0.0)
    driver.call_ended("p", "n0", ticket.call_id, 1.0, CallUsage(1_000, 800, 50, 0.1))
    assert driver.door.held_tokens == 250  # its own 200 and its answer
    driver.controller.add_node("p", Node("n1", "p", NodeKind.LLM), 1.0)
    ticket = driver.queue_call("p", "n1", PrefixProbe(1_100, cached_tokens=1_049), 1.0)
    driver.controller.start_node("p", "n1", 1.0)
    assert driver.door.held_tokens == 300
    driver.call_ended("p", "n1", ticket.call_id, 2.0, CallUsage(1_100, 1_049, 50, 0.1))
    assert driver.door.held_tokens == 350  # later cached tokens are its own context
    driver.finish("p", 3.0)
    assert driver.growth.known(("t", "w")) == 350  # its peak, less what was never its own


def test_a_carrier_that_marks_public_prefixes_has_said_what_is_shared() -> None:
    """The simulator's traces mark the platform prefix public: the rest counts as the
    program's own, a tenant-wide prefix too (conservatively), whatever the engine held."""
    driver = _driver()
    driver.controller.open_program("q", "t", 0.0)
    assert driver.arrive("q", 700, 0, 0.0)
    driver.controller.add_node("q", Node("n0", "q", NodeKind.LLM), 0.0)
    probe = PrefixProbe(1_000, cached_tokens=800)  # 300 public, 500 of its tenant's prefix
    ticket = driver.queue_call("q", "n0", probe, 0.0, private_tokens=700)
    assert driver.door.held_tokens == 700
    driver.controller.start_node("q", "n0", 0.0)
    driver.call_ended("q", "n0", ticket.call_id, 1.0, CallUsage(1_000, 800, 50, 0.1))
    assert driver.door.held_tokens == 750


@pytest.mark.parametrize(("outcome", "cached", "parks"), [("ok", 100, True), ("aborted", 0, False)])
def test_a_context_evicted_while_its_call_waited_is_evidence_of_thrash(
    outcome: str, cached: int, parks: bool
) -> None:
    """An engine that protects the contexts kept through tool waits shows thrash as calls that
    find their context gone only after queueing: the engine serves fewer tokens from cache than
    it held when the call was queued. A call aborted in the queue reports nothing cached:
    that says nothing of memory."""
    driver, view = _driver(), _View()
    _grow_past_the_budget(driver)
    driver.controller.add_node("b", Node("n2", "b", NodeKind.LLM), 3.0)
    ticket = driver.queue_call("b", "n2", PrefixProbe(600, cached_tokens=500), 3.0)
    driver.controller.start_node("b", "n2", 3.0)
    assert driver.at_boundary("a", view, 3.5) is None
    # b's call ran with 100 of its 500 queued-as-cached tokens: 400 were evicted meanwhile
    usage = CallUsage(600, cached, 50, 0.1)
    driver.call_ended("b", "n2", ticket.call_id, 4.0, usage, outcome=outcome)
    parked = driver.at_boundary("a", view, 4.5)
    assert parked == ([CacheHint("a", CacheAction.OFFLOAD, 0.0)] if parks else None)


def test_a_finished_programs_run_from_the_door_teaches_its_kinds_expected_run() -> None:
    driver = _driver()
    driver.controller.open_program("p", "t", 0.0, labels={"workload": "fanout"})
    driver.controller.open_program("q", "t", 0.0, labels={"workload": "serial"})
    driver.controller.open_program("empty", "t", 0.0, labels={"workload": "fanout"})
    assert driver.arrive("p", 100, 0, 2.0)
    assert driver.arrive("q", 100, 0, 2.0)
    assert driver.arrive("empty", 100, 0, 2.0)
    _call(driver, "p", "n0", 100, 2.0)
    driver.finish("p", 305.0, last_active=5.0)  # idle since 5 s: 3 s from the door to its end
    driver.cancel("q", 309.0)  # a cancelled program teaches nothing
    driver.finish("empty", 2.5)  # nor one that ran no call (it would train the kind short)
    learned = (driver.run_times.expected(("t", "fanout")), driver.run_times.expected(("t", "x")))
    assert learned == (3.0, 3.0)  # a kind never seen is taken for an average one of its own
    assert driver.run_times.expected(("other", "fanout")) is None  # never another tenant's


def test_an_idle_finish_ends_the_programs_e2e_at_its_last_work() -> None:
    """``serve`` ends a program nobody finished once it stood idle ``program_idle_s`` (300 s):
    every inferred program and every plain OpenAI client's ends so. Its E2E, finish time and
    deadline are its last work's, not the sweep's (they read 300 s too long)."""
    driver = _driver()
    events = driver.controller.sink
    assert isinstance(events, EventLog)
    driver.controller.open_program("p", "t", 0.0, deadline=10.0)
    assert driver.arrive("p", 100, 0, 0.0)
    _call(driver, "p", "n0", 100, 1.0)
    driver.finish("p", 305.0, last_active=5.0)
    finished = [e for e in events.events if e.kind is EventKind.PROGRAM_FINISHED]
    assert [(e.t, e.data["e2e_s"], e.data["deadline_met"]) for e in finished] == [
        (305.0, 5.0, True)
    ]
    assert driver.controller.get("p").finished_at == 5.0
    report = MetricsAggregator().observe_all(events.events).report()
    assert report["e2e_p50_s"] == 5.0


def test_a_new_driver_relearns_what_the_finish_events_recorded() -> None:
    """A restarted server replays the stored finishes: each kind's peak and run, each label's
    calls and each tool's latencies come back as they were learned (a failed program teaches
    its label's calls, as it does live, and nothing else; a program that ended at the door
    teaches no peak)."""
    first = _driver()
    for pid, tenant, kind in (("a", "t", "coding"), ("b", "u", "coding"), ("c", "t", "chat")):
        first.controller.open_program(pid, tenant, 0.0, labels={"workload": kind})
        assert first.arrive(pid, 100, 0, 1.0)
    for step in range(3):
        _call(first, "a", f"n{step}", 100 + 200 * step, 2.0 + step)
    _call(first, "b", "n0", 300, 2.0)
    _call(first, "c", "n0", 50, 2.0)
    first.finish("a", 9.0)
    first.finish("b", 20.0, last_active=4.0)
    for k in range(6):  # a tool's latencies: enough for its own fit
        node = Node(f"t{k}", "c", NodeKind.TOOL, tool=ToolSpec("pytest", ToolKind.TEST_RUN))
        first.controller.add_node("c", node, 3.0)
        first.controller.start_node("c", f"t{k}", 3.0)
        first.controller.finish_tool("c", f"t{k}", 4.0, outcome="ok", latency_s=1.0 + k)
    first.finish("c", 30.0, success=False)
    for k in range(5):  # failed chats: enough for the label's calls to count
        first.controller.open_program(f"f{k}", "t", 0.0, labels={"workload": "chat"})
        assert first.arrive(f"f{k}", 100, 0, 30.0)
        _call(first, f"f{k}", "n0", 50, 30.0)
        first.finish(f"f{k}", 31.0, success=False)
    first.controller.open_program("door", "t", 0.0, labels={"workload": "idle"})
    assert first.arrive("door", 5_000, 0, 31.0)  # sized by its first prompt, then no call
    first.finish("door", 31.5)
    assert first.growth.known(("t", "idle")) is None
    for k in range(5):  # enough finishes of the label for its calls to count
        first.controller.open_program(f"d{k}", "t", 0.0, labels={"workload": "coding"})
        assert first.arrive(f"d{k}", 100, 0, 31.0)
        for step in range(k + 1):
            _call(first, f"d{k}", f"n{step}", 100, 32.0 + step)
        first.finish(f"d{k}", 40.0)
    log = first.controller.sink
    assert isinstance(log, EventLog)

    second = _driver()
    assert second.relearn(log.events) == 20  # 8 finishes, 6 failures, 6 tools' ends
    for key in (("t", "coding"), ("u", "coding"), ("t", "chat")):
        assert second.growth.known(key) == first.growth.known(key)
    for key in (("t", "coding"), ("u", "coding"), ("t", "chat"), ("v", "coding")):
        assert second.run_times.expected(key) == first.run_times.expected(key)
    learned, relearned = first.controller.remaining_work, second.controller.remaining_work
    for label in ("coding", "chat", "idle"):
        remaining = [learned.remaining_calls("t", label, done) for done in range(4)]
        assert [relearned.remaining_calls("t", label, done) for done in range(4)] == remaining
    assert learned.remaining_calls("t", "coding", 0) != 8.0  # learned, not the prior
    assert learned.remaining_calls("t", "chat", 0) != 8.0
    assert second.growth.known(("t", "chat")) is None
    assert second.growth.known(("t", "idle")) is None
    tools, retools = first.controller.tool_latency, second.controller.tool_latency
    pytest_latency = tools.distribution("t", "pytest", "test_run")
    assert retools.distribution("t", "pytest", "test_run") == pytest_latency
    assert retools.distribution("t", "pytest") != retools.distribution("t", "never-seen")
    assert "tool_latency_s" not in second.controller.prediction_log.summary()  # nothing logged
    # the mean tool time in every remaining path, as learned live
    assert second.controller._mean_tool_s == pytest.approx(first.controller._mean_tool_s)


def test_a_program_whose_first_call_failed_counts_at_the_door_only_for_the_idle_grace() -> None:
    """A first call aborted or failed (its client left, the runtime refused it) leaves the
    program counted only for the idle grace, as one done with its work so far; before, it
    counted until the program was idle-finished, keeping newcomers out for minutes."""
    driver = _driver()
    for pid in ("a", "b"):
        driver.controller.open_program(pid, "t", 0.0)
    assert driver.arrive("a", 900, 0, 0.0)
    assert not driver.arrive("b", 900, 0, 0.0)  # a's 900 of 1,000 leave no room
    driver.controller.add_node("a", Node("n0", "a", NodeKind.LLM), 0.0)
    ticket = driver.queue_call("a", "n0", PrefixProbe(900), 0.0, private_tokens=900)
    driver.controller.start_node("a", "n0", 0.0)
    driver.call_ended("a", "n0", ticket.call_id, 1.0, None, outcome="aborted")
    assert driver.settle(_View(), 1.0) == []  # a still counts, for the idle grace
    assert driver.tick(1.0 + driver.idle_grace_s + 0.1) == [StartPrograms(("b",))]


# -- tenants' kinds apart ------------------------------------------------------------------------
#: labels another tenant may give its programs to aim at tenant alpha's predictions: alpha's
#: unlabelled programs' kind (by workload and by agent label), the kind alpha labels its
#: programs with, and bravo's own unlabelled kind
_AIMED_AT_ALPHA: tuple[dict[str, str], ...] = (
    {"workload": "tenant:alpha"},
    {"agent": "tenant:alpha"},
    {"workload": "coding"},
    {},
)


def _big_driver() -> ProgramDriver:
    controller = ProgramController(EventLog(), LinearCost())
    return ProgramDriver(controller, KeepAdvisor(), LinearCost(), budget_tokens=10_000_000)


def _run_program(
    driver: ProgramDriver,
    pid: str,
    tenant: str,
    labels: dict[str, str],
    tokens: int,
    now: float,
    *,
    run_s: float,
) -> None:
    """One program of ``tenant`` with ``labels``: one call of ``tokens`` tokens, finished
    ``run_s`` after its start."""
    driver.controller.open_program(pid, tenant, now, labels=labels)
    assert driver.arrive(pid, tokens, 0, now)
    _call(driver, pid, "n0", tokens, now)
    driver.finish(pid, now + run_s)


def _alphas_history(driver: ProgramDriver) -> None:
    """Alpha's own programs: unlabelled ones of 100 tokens (peak 150 with the answer), coding
    ones of 300 (peak 350)."""
    for k in range(3):
        _run_program(driver, f"alpha-{k}", "alpha", {}, 100, float(k), run_s=2.0)
        _run_program(driver, f"alpha-c{k}", "alpha", {"workload": "coding"}, 300, k, run_s=9)


def _alphas_next(driver: ProgramDriver, now: float) -> tuple[int, int]:
    """What the door counts for alpha's next unlabelled and next coding program, each of 20
    tokens so far (each alone at the door)."""
    counted = []
    for pid, labels in ((f"alpha-next-{now}", {}), (f"alpha-code-{now}", {"workload": "coding"})):
        driver.controller.open_program(pid, "alpha", now, labels=labels)
        assert driver.arrive(pid, 20, 0, now)
        counted.append(driver.door.used_tokens)
        driver.cancel(pid, now)  # teaches nothing
    return counted[0], counted[1]


def _alphas_runs(driver: ProgramDriver) -> tuple[float | None, float | None]:
    runs = driver.run_times
    return runs.expected(("alpha", "tenant:alpha")), runs.expected(("alpha", "coding"))


@pytest.mark.parametrize("labels", _AIMED_AT_ALPHA)
def test_another_tenants_programs_never_change_a_tenants_predicted_peak_or_run(
    labels: dict[str, str],
) -> None:
    """The security review's case: tenant bravo labels programs with alpha's kinds (alpha's
    unlabelled fallback ``tenant:alpha`` too) and fills them with 400,000-token prompts that
    run long. Alpha's next programs are sized at the door, and ordered in its line, by
    alpha's own history as before (they were counted at 400,050 tokens)."""
    driver = _big_driver()
    _alphas_history(driver)
    before, runs_before = _alphas_next(driver, 20.0), _alphas_runs(driver)
    assert before == (150, 350)
    for k in range(3):
        _run_program(driver, f"bravo-poison-{k}", "bravo", labels, 400_000, 30.0, run_s=900.0)
    assert _alphas_next(driver, 2_000.0) == before
    assert _alphas_runs(driver) == runs_before
    bravo_kind = labels.get("workload") or labels.get("agent") or "tenant:bravo"
    assert driver.growth.known(("bravo", bravo_kind)) == 400_050  # bravo's own, apart


def test_a_tenants_first_program_of_a_kind_is_sized_by_what_it_holds_not_by_others() -> None:
    """Before anything of a tenant's kind is learned its program counts what it holds now
    (the prior), never another tenant's peak of the kind, and its run is unknown."""
    driver = _big_driver()
    for k in range(3):
        _run_program(driver, f"bravo-{k}", "bravo", {"workload": "coding"}, 400_000, k, run_s=9)
    assert _alphas_next(driver, 20.0) == (20, 20)
    assert _alphas_runs(driver) == (None, None)


def test_a_restart_relearns_each_tenants_kinds_apart() -> None:
    """A restarted server replays the stored finishes under each event's tenant: bravo's
    programs labelled with alpha's kinds still leave alpha's predictions alone."""
    first = _big_driver()
    _alphas_history(first)
    for k, labels in enumerate(_AIMED_AT_ALPHA):
        _run_program(first, f"bravo-{k}", "bravo", labels, 400_000, 30.0, run_s=900.0)
    log = first.controller.sink
    assert isinstance(log, EventLog)
    second = _big_driver()
    assert second.relearn(log.events) == 10  # alpha's 6 finishes, bravo's 4
    assert _alphas_next(second, 2_000.0) == (150, 350)
    assert _alphas_runs(second) == _alphas_runs(first) == (2.0, 9.0)
    for key, peak in first.growth.items():
        assert second.growth.known(key) == peak


def test_the_next_settle_starts_who_a_lapse_found_at_the_door_made_room_for() -> None:
    """The driver's side of :meth:`ProgramDoor.wake_due`: a settle (after any event, in
    bench and serve alike) starts the programs a lapse found by a newcomer's check made room
    for, though no program's events came in."""

    class Holding(_View):
        def context(self, program_id: str, now: float) -> ProgramContext | None:
            return ProgramContext(800, 0)  # a's context is cached: the advisor keeps it

    driver, view = _driver(), Holding()
    for pid in "abc":
        driver.controller.open_program(pid, "t", 0.0)
    assert driver.arrive("a", 800, 0, 0.0)
    _call(driver, "a", "n1", 800, 0.0)
    tool = ToolSpec("run_tests", ToolKind.TEST_RUN)
    driver.controller.add_node("a", Node("t1", "a", NodeKind.TOOL, parents=("n1",), tool=tool), 1.0)
    driver.tool_started("a", "t1", 1.0)
    assert driver.settle(view, 1.0) == [CacheHint("a", CacheAction.KEEP, 1.0)]  # to t=2
    assert not driver.arrive("b", 500, 0, 1.5)  # behind a's kept context
    assert not driver.arrive("c", 100, 0, 30.0)  # its check uncounts a; b is first in line
    assert driver.settle(view, 30.0) == [StartPrograms(("b", "c"))]


def test_a_door_switched_back_on_knows_what_ran_while_it_was_off() -> None:
    """An operator's switch to a request-level policy turns the door off, and back: the
    programs that started meanwhile count (a newcomer passed beside them into a full engine),
    and one that went to its tools meanwhile counts only for the idle grace (it counted as
    running through its whole tool wait)."""
    driver = _driver()  # a 1,000-token door
    driver.program_aware = False
    driver.controller.open_program("a", "t", 0.0)
    assert driver.arrive("a", 900, 0, 0.0)
    _call(driver, "a", "n0", 900, 0.0)  # a's call ran; a is in flight no more
    driver.program_aware = True
    driver.controller.open_program("b", "t", 1.5)
    assert not driver.arrive("b", 900, 0, 1.5)  # a's 900 count: b waits
    driver.program_aware = False
    driver.controller.add_node("a", Node("t0", "a", NodeKind.TOOL, tool=ToolSpec("s")), 2.0)
    driver.tool_started("a", "t0", 2.0)
    driver.settle(_View(), 2.0)  # a waits on a tool: nothing decided under this policy
    driver.program_aware = True
    later = 2.0 + driver.idle_grace_s + 1.0
    driver.settle(_View(), later)
    driver.tick(later)
    assert driver.door.started_at("b") is not None


def test_the_door_keeps_room_for_each_tenants_shared_prefix() -> None:
    """Where the carrier marks nothing public (serve), a program is sized without the prefix
    the engine held of its first prompt, so nobody's size counts that prefix: the budget keeps
    room for it, once per tenant (a tenant's programs share one; SGLang shares nothing across
    tenants). Left out, coding-agent's 75K-token prefixes took a third of what the door thought
    free and it thrashed at 3x."""
    controller = ProgramController(EventLog(), LinearCost())
    driver = ProgramDriver(controller, KeepAdvisor(), LinearCost(), memory_share=0.5)

    def start(pid: str, tenant: str, shared: int, now: float) -> None:
        controller.open_program(pid, tenant, now, labels={"workload": "w"})
        held = PrefixProbe(3_000, cached_tokens=shared)
        assert driver.arrive(pid, 3_000, 100_000, now, held=held)
        controller.add_node(pid, Node("n0", pid, NodeKind.LLM), now)
        driver.queue_call(pid, "n0", held, now, private_tokens=3_000)

    start("a1", "ta", 2_000, 0.0)  # its prefix counts for ta from now on
    start("a2", "ta", 1_500, 1.0)  # a shorter prefix of the same tenant adds nothing
    start("b1", "tb", 2_500, 2.0)
    controller.open_program("c1", "tc", 3.0, labels={"workload": "w"})
    driver.arrive("c1", 1_000, 100_000, 3.0)
    assert driver.door.budget_tokens == 50_000 - 2_000 - 2_500
    driver.finish("b1", 4.0)  # an ended program's prefix no longer holds room
    controller.open_program("c2", "tc", 5.0, labels={"workload": "w"})
    driver.arrive("c2", 1_000, 100_000, 5.0)
    assert driver.door.budget_tokens == 50_000 - 2_000

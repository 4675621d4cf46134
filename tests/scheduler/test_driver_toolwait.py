"""A tool-wait decision taken after the tool started prices what is left of its wait: the
retention runs to when the tool is due back, not a whole latency past the decision."""

from __future__ import annotations

import pytest

from agentconsole.kvtiers.advisor import ToolWaitAdvisor
from agentconsole.kvtiers.toolwait import get_tool_wait_policy
from agentconsole.scheduler.actions import CacheHint
from agentconsole.scheduler.controller import CallUsage, ProgramController
from agentconsole.scheduler.driver import ProgramDriver, SettleFailed
from agentconsole.scheduler.estimators import ToolLatencyEstimator
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.latency import LogNormal
from agentconsole.scheduler.program import Node, NodeKind, ToolSpec
from agentconsole.scheduler.runtime import CacheAction, MemoryView, PrefixProbe, ProgramContext
from agentconsole.scheduler.ticket import CallTicket
from tests.scheduler.driver_fakes import LinearCost


class _View:
    def memory(self, program_id: str, now: float) -> MemoryView:
        return MemoryView(hbm_capacity_tokens=100_000, free_tokens=50_000)

    def context(self, program_id: str, now: float) -> ProgramContext | None:
        return ProgramContext(private_tokens=2_000)


#: a tool that takes 40 s, give or take 5% (what the driver learned of it)
LATENCY = LogNormal.from_median(40.0, 0.05)


def _calling() -> tuple[ProgramController, ProgramDriver, CallTicket]:
    """Program ``p`` under the keep policy, its call ``n0`` running since 0 s (its ticket)."""
    controller = ProgramController(EventLog(), LinearCost())
    # an estimator that knows the tool already (set, not patched: the class may be compiled)
    controller.tool_latency = ToolLatencyEstimator(prior=LATENCY)
    advisor = ToolWaitAdvisor(get_tool_wait_policy("keep"))
    driver = ProgramDriver(controller, advisor, LinearCost(), budget_tokens=1_000_000)
    controller.open_program("p", "t", 0.0)
    assert driver.arrive("p", 2_000, 0, 0.0)
    controller.add_node("p", Node("n0", "p", NodeKind.LLM), 0.0)
    ticket = driver.queue_call("p", "n0", PrefixProbe(2_000), 0.0)
    controller.start_node("p", "n0", 0.0)
    return controller, driver, ticket


def _decide(tool_started_at: float, now: float) -> CacheHint:
    """The keep policy's hint for a tool of :data:`LATENCY` started at ``tool_started_at``
    beside a call that ends at ``now``."""
    controller, driver, ticket = _calling()
    # a tool on a parallel branch starts while the call runs
    controller.add_node("p", Node("t0", "p", NodeKind.TOOL, tool=ToolSpec("search")), 0.0)
    driver.tool_started("p", "t0", tool_started_at)
    assert driver.settle(_View(), tool_started_at) == []  # a call is in flight: no decision
    driver.call_ended("p", "n0", ticket.call_id, now, CallUsage(2_000, 0, 50, 0.1))
    hints = [a for a in driver.settle(_View(), now) if isinstance(a, CacheHint)]
    assert len(hints) == 1
    assert hints[0].action is CacheAction.KEEP
    return hints[0]


def test_a_tool_that_has_run_30_of_its_40_s_is_waited_for_what_is_left() -> None:
    hint = _decide(tool_started_at=0.0, now=30.0)
    # the keep policy's 90th percentile of the rest: about 12.6 s, not 42.6 s from now
    assert hint.retain_s == pytest.approx(LATENCY.quantile(0.9) - 30.0, rel=1e-6)
    assert hint.retain_s <= 13.0


def test_a_tool_that_just_started_is_waited_for_its_whole_latency() -> None:
    assert _decide(tool_started_at=5.0, now=5.0).retain_s == pytest.approx(LATENCY.quantile(0.9))


def _waiting_on_two_tools() -> tuple[ProgramDriver, CacheHint, CacheHint]:
    """A program whose call ended at 1 s waits on tool ``a`` (started then) and on ``b``,
    started at 10 s: the driver's hints for each (``b`` is due back last, so its wait is
    decided again)."""
    controller, driver, ticket = _calling()
    driver.call_ended("p", "n0", ticket.call_id, 1.0, CallUsage(2_000, 0, 50, 0.1))
    hints = []
    for node_id, started in (("a", 1.0), ("b", 10.0)):
        controller.add_node("p", Node(node_id, "p", NodeKind.TOOL, tool=ToolSpec("search")), 1.0)
        driver.tool_started("p", node_id, started)
        (hint,) = [a for a in driver.settle(_View(), started) if isinstance(a, CacheHint)]
        hints.append(hint)
    return driver, hints[0], hints[1]


def test_a_tool_whose_start_failed_leaves_the_wait_to_be_decided_again() -> None:
    """``b``'s start failed (nothing of it runs): the program waits on ``a`` alone, and its
    wait, decided for ``b`` (due back last), is decided again for what is left of ``a``'s."""
    driver, _, for_b = _waiting_on_two_tools()
    assert for_b.retain_s == pytest.approx(LATENCY.quantile(0.9))
    driver.no_longer_waits_on("p", "b")
    (hint,) = [a for a in driver.settle(_View(), 10.0) if isinstance(a, CacheHint)]
    assert hint.action is CacheAction.KEEP
    # ``a`` has run 9 of its 40 s: held until it is due back, not until ``b`` would have been
    assert hint.retain_s == pytest.approx(LATENCY.quantile(0.9) - 9.0, rel=1e-3)
    assert driver.retained["p"].until == pytest.approx(10.0 + hint.retain_s)


def test_a_cancelled_tool_leaves_the_wait_to_be_decided_again() -> None:
    """``b`` is cancelled (a node cancel): as with a failed start, the wait decided for it is
    decided again for what is left of ``a``'s."""
    driver, _, for_b = _waiting_on_two_tools()
    driver.nodes_cancelled("p", ["b"])
    (hint,) = [a for a in driver.settle(_View(), 10.0) if isinstance(a, CacheHint)]
    assert hint.retain_s == pytest.approx(LATENCY.quantile(0.9) - 9.0, rel=1e-3)
    assert hint.retain_s < for_b.retain_s


def test_the_last_tool_whose_start_failed_ends_the_programs_kv_hold() -> None:
    driver, _, _ = _waiting_on_two_tools()
    driver.no_longer_waits_on("p", "b")
    driver.no_longer_waits_on("p", "a")
    assert "p" not in driver.retained
    assert not [a for a in driver.settle(_View(), 10.0) if isinstance(a, CacheHint)]


class _FailingView(_View):
    """A runtime view whose context of program ``broken`` cannot be read."""

    def context(self, program_id: str, now: float) -> ProgramContext | None:
        if program_id == "broken":
            raise OSError("placement unreadable")
        return super().context(program_id, now)


def _waiting_on_a_tool(driver: ProgramDriver, controller: ProgramController, pid: str) -> None:
    """Program ``pid``'s call ran and ended at 1 s beside a started tool: it waits on tools."""
    controller.open_program(pid, "t", 0.0)
    assert driver.arrive(pid, 2_000, 0, 0.0)
    controller.add_node(pid, Node("n0", pid, NodeKind.LLM), 0.0)
    ticket = driver.queue_call(pid, "n0", PrefixProbe(2_000), 0.0)
    controller.start_node(pid, "n0", 0.0)
    controller.add_node(pid, Node("t0", pid, NodeKind.TOOL, tool=ToolSpec("search")), 0.0)
    driver.tool_started(pid, "t0", 0.5)
    driver.call_ended(pid, "n0", ticket.call_id, 1.0, CallUsage(2_000, 0, 50, 0.1))


def test_a_decision_that_fails_keeps_what_was_decided_and_the_rest_for_next_time() -> None:
    controller, driver, _ = _calling()  # program p, its call still running
    for pid in ("a", "broken", "c"):
        _waiting_on_a_tool(driver, controller, pid)
    with pytest.raises(SettleFailed) as failed:
        driver.settle(_FailingView(), 1.0)
    assert failed.value.program_id == "broken"
    assert isinstance(failed.value.__cause__, OSError)
    # a's hint was decided before the failure: it is handed over, not lost
    assert [a.program_id for a in failed.value.actions if isinstance(a, CacheHint)] == ["a"]
    # c was not reached: the next settle decides it; the failed one is not retried
    hints = [a for a in driver.settle(_FailingView(), 1.0) if isinstance(a, CacheHint)]
    assert [h.program_id for h in hints] == ["c"]
    assert driver.settle(_FailingView(), 1.0) == []


def _keep() -> ToolWaitAdvisor:
    return ToolWaitAdvisor(get_tool_wait_policy("keep"))


def test_a_program_whose_decision_failed_leaves_the_door_after_the_idle_grace() -> None:
    """Its wait was never decided, so nothing would end its share at the door: it stayed
    counted for its whole tool wait (hours) while newcomers waited; it now holds its share
    for the idle grace, as a program with nothing decided."""
    controller = ProgramController(EventLog(), LinearCost())
    driver = ProgramDriver(controller, _keep(), LinearCost(), budget_tokens=3_000)
    _waiting_on_a_tool(driver, controller, "broken")
    controller.open_program("next", "t", 1.0)
    assert not driver.arrive("next", 2_000, 0, 1.0)  # 4,000 of 3,000: it waits
    with pytest.raises(SettleFailed):
        driver.settle(_FailingView(), 1.0)
    later = 1.0 + driver.idle_grace_s + 1.0
    driver.settle(_View(), later)
    driver.tick(later)
    assert driver.door.started_at("next") is not None


def test_a_call_the_runtime_refused_leaves_the_door_after_the_idle_grace() -> None:
    """``withdraw`` (the runtime refused the call at submit): the program has nothing in
    flight, so it holds its share only for the idle grace (it held it until it idled out)."""
    controller = ProgramController(EventLog(), LinearCost())
    driver = ProgramDriver(controller, _keep(), LinearCost(), budget_tokens=3_000)
    controller.open_program("a", "t", 0.0)
    assert driver.arrive("a", 2_000, 0, 0.0)
    controller.add_node("a", Node("n0", "a", NodeKind.LLM), 0.0)
    ticket = driver.queue_call("a", "n0", PrefixProbe(2_000), 0.0, private_tokens=2_000)
    driver.withdraw("a", ticket.call_id)
    controller.open_program("b", "t", 0.1)
    assert not driver.arrive("b", 2_000, 0, 0.1)
    later = 0.1 + driver.idle_grace_s + 1.0
    driver.settle(_View(), 0.2)
    driver.settle(_View(), later)
    driver.tick(later)
    assert driver.door.started_at("b") is not None

"""A tool that ends after its node was cancelled (its program's cancel, its own node cancel, or
the agent's finish of its program) is recorded on its node, and a restart's replay of the
event log keeps that end: the cancel's ``node.cancelled`` closes the attempt in the replay,
and the late ``tool.finished`` must still give it the tool's outcome (``outcome_after_cancel``
read null after a crash within a second of a cancel and a late end, though ``tool_s`` and
``finished_at`` were right)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentconsole.scheduler.controller import (
    ABANDONED,
    AFTER_CANCEL,
    AFTER_FINISH,
    ProgramController,
)
from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.program import Node, NodeKind, ToolKind, ToolSpec
from agentconsole.server.live.eventtail import TailReplay, created_program
from agentconsole.server.live.servicemodel import OnlineServiceModel
from agentconsole.server.live.views import node_json, outcome_after_cancel

WRITE = ToolSpec("write", ToolKind.HTTP, side_effect=True, idempotent=False, timeout_s=9.0)


def _program_cancel(c: ProgramController) -> str:
    c.cancel_program("p", 3.0)
    return AFTER_CANCEL


def _node_cancel(c: ProgramController) -> str:
    c.cancel_node("p", "t1", 3.0, by="user")
    return AFTER_CANCEL


def _finish(c: ProgramController) -> str:
    c.close_node("p", "t1", 3.0, ABANDONED)  # as ProgramService.finish_program closes it
    c.finish_program("p", 3.0, success=True)
    return AFTER_FINISH


@pytest.mark.parametrize("end", [_program_cancel, _node_cancel, _finish])
def test_a_late_end_is_on_its_node_and_the_replay_keeps_its_outcome(
    end: Callable[[ProgramController], str],
) -> None:
    log = EventLog()
    controller = ProgramController(log, OnlineServiceModel())
    controller.open_program("p", "t", 1.0)
    controller.add_node("p", Node("t1", "p", NodeKind.TOOL, tool=WRITE), 1.5)
    controller.start_node("p", "t1", 2.0)
    marker = end(controller)
    assert controller.finish_tool_after_cancel("p", "t1", 5.0, outcome="ok", latency_s=3.0)
    # a second report of the same end is no second end
    assert not controller.finish_tool_after_cancel("p", "t1", 6.0, outcome="fail", latency_s=4.0)
    live = controller.programs["p"].nodes["t1"]
    late = log.events[-1]
    assert late.kind is EventKind.TOOL_FINISHED
    assert late.data[marker] is True
    assert outcome_after_cancel(live) == "ok"
    created, *rest = log.events
    tail = TailReplay(created_program(created), {}, 0)
    for seq, event in enumerate(rest, start=2):
        tail.apply(seq, event)
    replayed = tail.program.nodes["t1"]
    assert outcome_after_cancel(replayed) == "ok"
    assert node_json(replayed) == node_json(live)


def test_a_node_cancel_is_replayed_as_withdrawn() -> None:
    log = EventLog()
    controller = ProgramController(log, OnlineServiceModel())
    controller.open_program("p", "t", 1.0)
    controller.add_node("p", Node("a", "p", NodeKind.LLM), 1.0)
    controller.add_node("p", Node("b", "p", NodeKind.LLM, parents=("a",)), 1.0)
    controller.add_node("p", Node("other", "p", NodeKind.LLM), 1.0)
    controller.start_node("p", "a", 2.0)
    changed = controller.cancel_node("p", "a", 3.0, by="operator")
    assert [n.node_id for n in changed] == ["a", "b"]
    assert controller.cancel_node("p", "a", 4.0, by="operator") == []  # once
    created, *rest = log.events
    tail = TailReplay(created_program(created), {}, 0)
    for seq, event in enumerate(rest, start=2):
        tail.apply(seq, event)
    nodes = tail.program.nodes
    assert [nodes[n].withdrawn for n in ("a", "b", "other")] == [True, True, False]
    assert controller.programs["p"].nodes["a"].attempts[-1].outcome == "cancelled"
    assert tail.program.state.value == "running"

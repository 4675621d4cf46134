"""The observed critical path passes by a branch cancelled on request (``Node.withdrawn``):
its cancel, or a side effect's end after it, is often the last ``finished_at`` of the
program, yet the dropped branch ended nothing the program waited for."""

from __future__ import annotations

from agentconsole.scheduler import dag
from agentconsole.scheduler.program import Node, NodeKind, NodeState, Program


def _program(edges: dict[str, tuple[str, ...]], finished: dict[str, float]) -> Program:
    program = Program("p", "t", 0.0)
    for nid, parents in edges.items():
        node = Node(nid, "p", NodeKind.LLM, parents=parents)
        dag.add_node(program, node)
        node.finished_at = finished.get(nid)
        node.state = NodeState.DONE if nid in finished else NodeState.PENDING
    return program


def _withdraw(program: Program, nid: str, finished_at: float) -> None:
    node = program.nodes[nid]
    node.state, node.withdrawn, node.finished_at = NodeState.CANCELLED, True, finished_at


def test_a_withdrawn_branch_that_ended_last_is_not_the_critical_path() -> None:
    # root, then the main branch (done at 5) and a speculative one cancelled at 4 whose
    # side effect ended late, at 7
    program = _program({"root": (), "main": ("root",), "spec": ("root",)}, {"root": 1, "main": 5})
    _withdraw(program, "spec", 7.0)
    assert dag.observed_critical_path(program) == ("root", "main")


def test_a_withdrawn_parent_is_passed_by_on_the_way_back() -> None:
    # ``join`` ended before ``spec`` was cancelled (at 9): the path runs through ``main``
    edges = {"root": (), "main": ("root",), "spec": ("root",), "join": ("main", "spec")}
    program = _program(edges, {"root": 1, "main": 3, "join": 6})
    _withdraw(program, "spec", 9.0)
    assert dag.observed_critical_path(program) == ("root", "main", "join")


def test_a_running_node_stays_the_sink_past_a_withdrawn_one() -> None:
    program = _program({"root": (), "main": ("root",), "spec": ("root",)}, {"root": 1})
    _withdraw(program, "spec", 4.0)
    main = program.nodes["main"]
    main.state, main.started_at = NodeState.RUNNING, 2.0
    assert dag.observed_critical_path(program) == ("root", "main")


def test_a_program_of_withdrawn_nodes_only_has_no_critical_path() -> None:
    program = _program({"only": ()}, {})
    _withdraw(program, "only", 2.0)
    assert dag.observed_critical_path(program) == ()

"""DAG invariants and the critical path against brute force on random DAGs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentconsole.scheduler import dag
from agentconsole.scheduler.program import Branch, Node, NodeKind, NodeState, Program


def _program(edges: list[list[int]], weights: list[float]) -> Program:
    program = Program("p", "t", 0.0)
    for i, parents in enumerate(edges):
        node = Node(f"n{i}", "p", NodeKind.LLM, parents=tuple(f"n{p}" for p in parents))
        node.service_s = weights[i]
        dag.add_node(program, node)
    return program


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[list[list[int]], list[float]]:
    n = draw(st.integers(1, 9))
    edges = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)
    ]
    weights = draw(st.lists(st.floats(0, 10), min_size=n, max_size=n))
    return edges, weights


def _all_paths(program: Program) -> list[list[str]]:
    sinks = [nid for nid, kids in program.children.items() if not kids]
    paths: list[list[str]] = []

    def walk(nid: str, suffix: list[str]) -> None:
        node = program.nodes[nid]
        if not node.parents:
            paths.append([nid, *suffix])
        for p in node.parents:
            walk(p, [nid, *suffix])

    for s in sinks:
        walk(s, [])
    return paths


@given(random_dags())
@settings(max_examples=200, deadline=None)
def test_critical_path_equals_brute_force(case: tuple[list[list[int]], list[float]]) -> None:
    program = _program(*case)
    best = max(sum(program.nodes[n].service_s for n in path) for path in _all_paths(program))
    cp = dag.critical_path(program, lambda n: n.service_s)
    assert cp.length == pytest.approx(best)
    # the returned path is a real chain whose weight is the length
    assert sum(program.nodes[n].service_s for n in cp.nodes) == pytest.approx(cp.length)
    for parent, child in zip(cp.nodes, cp.nodes[1:], strict=False):
        assert parent in program.nodes[child].parents


@given(random_dags())
@settings(max_examples=100, deadline=None)
def test_insertion_order_is_topological(case: tuple[list[list[int]], list[float]]) -> None:
    program = _program(*case)
    seen: set[str] = set()
    for nid, node in program.nodes.items():
        assert set(node.parents) <= seen
        seen.add(nid)


def test_unknown_parent_and_duplicate_rejected() -> None:
    program = _program([[]], [1.0])
    with pytest.raises(dag.DagError, match="unknown parent"):
        dag.add_node(program, Node("x", "p", NodeKind.LLM, parents=("nope",)))
    with pytest.raises(dag.DagError, match="already exists"):
        dag.add_node(program, Node("n0", "p", NodeKind.LLM))
    assert list(program.nodes) == ["n0"]


def test_branches_counted_on_fanout_and_repair() -> None:
    program = _program([[], [0], [0], [0]], [1, 1, 1, 1])
    assert program.branches == 3  # n2 and n3 open branches beside n1
    dag.add_node(program, Node("r", "p", NodeKind.LLM, parents=("n1",), branch=Branch.REPAIR))
    assert program.branches == 4


def test_unlock_value_and_unlocked_by() -> None:
    program = _program([[], [], [0, 1], [0]], [1, 1, 1, 1])
    assert dag.unlock_value(program, "n0") == 1  # n3 only: n2 also waits on n1
    program.nodes["n1"].state = NodeState.DONE
    assert dag.unlock_value(program, "n0") == 2
    program.nodes["n0"].state = NodeState.DONE
    assert {n.node_id for n in dag.unlocked_by(program, "n0")} == {"n2", "n3"}


def test_cancel_subtree_only_touches_descendants() -> None:
    program = _program([[], [0], [1], [0], []], [1] * 5)
    program.nodes["n0"].state = NodeState.DONE
    program.nodes["n1"].state = NodeState.RUNNING
    changed = dag.cancel_subtree(program, "n1", now=5.0)
    assert {n.node_id for n in changed} == {"n1", "n2"}
    assert program.nodes["n3"].state is NodeState.PENDING
    assert program.nodes["n4"].state is NodeState.PENDING
    assert program.nodes["n0"].state is NodeState.DONE
    assert dag.cancel_subtree(program, "n1", now=6.0) == []


def test_observed_critical_path_follows_last_finisher() -> None:
    program = _program([[], [0], [0], [1, 2]], [1] * 4)
    for nid, t in {"n0": 1.0, "n1": 5.0, "n2": 3.0, "n3": 6.0}.items():
        program.nodes[nid].finished_at = t
    assert dag.observed_critical_path(program) == ("n0", "n1", "n3")


def test_observed_critical_path_ends_at_the_running_node() -> None:
    program = _program([[], [0], [0], [1, 2]], [1] * 4)
    for nid, t in {"n0": 1.0, "n1": 5.0, "n2": 3.0}.items():
        program.nodes[nid].finished_at = t
    program.nodes["n3"].state = NodeState.RUNNING
    program.nodes["n3"].started_at = 5.0
    assert dag.observed_critical_path(program) == ("n0", "n1", "n3")

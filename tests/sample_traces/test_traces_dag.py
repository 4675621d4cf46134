"""DAG helpers: parent resolution errors, cycle finding and ancestors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.sample_traces import TraceError
from agentconsole.sample_traces.dag import ancestors, find_cycle, resolve_parents


def test_resolves_a_diamond() -> None:
    ids = ["a", "b", "c", "d"]
    parents = [[], ["a"], ["a"], ["c", "b"]]
    resolved = resolve_parents(ids, parents)
    assert resolved == ((), (0,), (0,), (2, 1))
    assert ancestors(resolved, 3) == [0, 1, 2]
    assert ancestors(resolved, 0) == []


def test_cycle_is_spelled_out() -> None:
    with pytest.raises(TraceError, match=r"cycle 'a' -> 'c' -> 'b' -> 'a'") as info:
        resolve_parents(["a", "b", "c"], [["c"], ["a"], ["b"]])
    assert info.value.field == "nodes[0].parents"


def test_forward_reference_without_cycle() -> None:
    with pytest.raises(TraceError, match="parent 'b' is listed after node 'a'"):
        resolve_parents(["a", "b"], [["b"], []])


def test_find_cycle_none_on_dag() -> None:
    assert find_cycle([(), (0,), (0, 1)]) is None
    assert find_cycle([(1,), (0,)]) == [0, 1, 0]


@st.composite
def dags(draw: st.DrawFn) -> list[list[int]]:
    n = draw(st.integers(1, 30))
    return [
        draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        for i in range(n)
    ]


@given(dags())
def test_ancestors_are_closed_and_sorted(parents: list[list[int]]) -> None:
    ids = [f"n{i}" for i in range(len(parents))]
    resolved = resolve_parents(ids, [[ids[j] for j in row] for row in parents])
    assert find_cycle(resolved) is None
    for i in range(len(parents)):
        anc = ancestors(resolved, i)
        assert anc == sorted(set(anc))
        assert all(j < i for j in anc)
        for j in anc:
            assert set(ancestors(resolved, j)) <= set(anc)
        assert set(parents[i]) <= set(anc)

"""Tool-wait marks on a path two programs share (``retention.RetentionBook`` on a stand-in
radix tree): one program's drop or release never undoes another's keep."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentconsole.server.runtime.sglang.control import RetentionHint
from agentconsole.server.runtime.sglang.retention import (
    DROPPED,
    UNTIL_ATTR,
    Context,
    RetentionBook,
)

pytestmark = pytest.mark.sglang


class _Node:
    def __init__(self, parent: _Node | None, key: list[int]) -> None:
        self.parent, self.key = parent, key
        self.children: dict[int, _Node] = {}
        if parent is not None:
            parent.children[len(parent.children)] = self


class _Tree:
    """root -> n1 -> n2 -> n3: program B's context ends at n2, program A's at n3 (a forked
    sub-agent's context is a prefix of its parent's)."""

    def __init__(self) -> None:
        self.root = _Node(None, [])
        self.n1 = _Node(self.root, [1, 2])
        self.n2 = _Node(self.n1, [3, 4])
        self.n3 = _Node(self.n2, [5, 6])

    def match_prefix(self, params: Any) -> Any:
        length = len(params.key.token_ids)
        node = {2: self.n1, 4: self.n2, 6: self.n3}[length]
        return SimpleNamespace(device_prefix_len=length, last_device_node=node)

    def resolve_node_handle(self, node: Any) -> Any:
        return node


def _ctx(tokens: list[int]) -> Context:
    return Context(tokens, [], None, "salt")


def test_a_drop_and_a_release_keep_another_program_s_keep() -> None:
    tree, book = _Tree(), RetentionBook()
    book.note("B", _ctx([1, 2, 3, 4]))
    book.note("A", _ctx([1, 2, 3, 4, 5, 6]))
    book.apply(tree, {"B": RetentionHint("keep", 1000.0, seq=1)})
    book.apply(
        tree,
        {"B": RetentionHint("keep", 1000.0, seq=1), "A": RetentionHint("drop", 0.0, seq=1)},
    )
    assert getattr(tree.n3, UNTIL_ATTR) == DROPPED  # A's own suffix
    assert getattr(tree.n2, UNTIL_ATTR) == 1000.0  # B's context: B keeps it
    assert getattr(tree.n1, UNTIL_ATTR) == 1000.0
    book.apply(
        tree,
        {"B": RetentionHint("keep", 1000.0, seq=1), "A": RetentionHint("release", 0.0, seq=2)},
    )
    assert getattr(tree.n2, UNTIL_ATTR) == 1000.0  # A's release is A's alone
    assert getattr(tree.n3, UNTIL_ATTR) is None
    book.apply(tree, {"B": RetentionHint("release", 0.0, seq=2)})
    assert getattr(tree.n2, UNTIL_ATTR) is None

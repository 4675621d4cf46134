"""Tool-wait marks on a path two programs share (``retention.RetentionBook`` on a stand-in
radix tree): one program's recompute or release never undoes another's keep. Each
``CacheAction`` (and the release) maps to its mark, an unknown action is refused, and the
adapter's hints read back from ``control.json`` are all known to the plugin."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sglang.control import (
    CONTROL_FILE,
    ControlState,
    RetentionHint,
    read_json,
)
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.retention import (
    DROPPED,
    RELEASE,
    UNTIL_ATTR,
    Context,
    RetentionBook,
    mark_for,
    marks_whole_path,
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


def test_a_recompute_and_a_release_keep_another_program_s_keep() -> None:
    tree, book = _Tree(), RetentionBook()
    book.note("B", _ctx([1, 2, 3, 4]))
    book.note("A", _ctx([1, 2, 3, 4, 5, 6]))
    book.apply(tree, {"B": RetentionHint(CacheAction.KEEP, 1000.0, seq=1)})
    book.apply(
        tree,
        {
            "B": RetentionHint(CacheAction.KEEP, 1000.0, seq=1),
            "A": RetentionHint(CacheAction.RECOMPUTE, 0.0, seq=1),
        },
    )
    assert getattr(tree.n3, UNTIL_ATTR) == DROPPED  # A's own suffix
    assert getattr(tree.n2, UNTIL_ATTR) == 1000.0  # B's context: B keeps it
    assert getattr(tree.n1, UNTIL_ATTR) == 1000.0
    book.apply(
        tree,
        {
            "B": RetentionHint(CacheAction.KEEP, 1000.0, seq=1),
            "A": RetentionHint(RELEASE, 0.0, seq=2),
        },
    )
    assert getattr(tree.n2, UNTIL_ATTR) == 1000.0  # A's release is A's alone
    assert getattr(tree.n3, UNTIL_ATTR) is None
    book.apply(tree, {"B": RetentionHint(RELEASE, 0.0, seq=2)})
    assert getattr(tree.n2, UNTIL_ATTR) is None


class _ForkTree:
    """root -> shared -> {a, b}: two programs behind one system prompt, each with its own
    turns."""

    def __init__(self) -> None:
        root = _Node(None, [])
        self.shared = _Node(root, [1, 2, 3, 4])
        self.a = _Node(self.shared, [5, 6])
        self.b = _Node(self.shared, [7, 8, 9])

    def match_prefix(self, params: Any) -> Any:
        last = list(params.key.token_ids)[-1]
        node = self.a if last == 6 else self.b
        return SimpleNamespace(device_prefix_len=len(params.key.token_ids), last_device_node=node)

    def resolve_node_handle(self, node: Any) -> Any:
        return node


def test_a_keep_counts_only_the_tokens_its_program_holds_alone() -> None:
    """Two programs keeping their contexts behind one shared prompt hold the prompt once:
    each is counted its own turns (as the simulator counts a keep: its private blocks), not
    the whole path, which counted the shared prompt once per program."""
    tree, book = _ForkTree(), RetentionBook()
    book.note("A", _ctx([1, 2, 3, 4, 5, 6]))
    book.note("B", _ctx([1, 2, 3, 4, 7, 8, 9]))
    keep = RetentionHint(CacheAction.KEEP, 1000.0, seq=1)
    book.apply(tree, {"A": keep, "B": keep})
    assert book.kept_tokens(0.0) == {"A": 2, "B": 3}
    # a keep still marks the whole path: the shared prompt is kept while either waits
    assert getattr(tree.shared, UNTIL_ATTR) == 1000.0

    # A decided again: its context dropped; B's keep of the shared prompt still holds it
    book.apply(tree, {"A": RetentionHint(CacheAction.RECOMPUTE, 0.0, seq=2), "B": keep})
    assert getattr(tree.a, UNTIL_ATTR) == DROPPED
    assert getattr(tree.shared, UNTIL_ATTR) == 1000.0
    assert book.kept_tokens(0.0) == {"B": 3}


def test_a_keep_decided_again_as_a_drop_leaves_no_keep_on_the_shared_prompt() -> None:
    """A keep marks its whole path, the shared prompt too; a drop marks its own turns only:
    the keep's mark on the prompt must go with it (before, the prompt stayed kept,
    reported as nothing kept, until the keep's deadline)."""
    tree, book = _ForkTree(), RetentionBook()
    book.note("A", _ctx([1, 2, 3, 4, 5, 6]))
    book.apply(tree, {"A": RetentionHint(CacheAction.KEEP, 1000.0, seq=1)})
    assert getattr(tree.shared, UNTIL_ATTR) == 1000.0
    book.apply(tree, {"A": RetentionHint(CacheAction.OFFLOAD, 0.0, seq=2)})
    assert getattr(tree.a, UNTIL_ATTR) == DROPPED
    assert getattr(tree.shared, UNTIL_ATTR) is None
    assert book.kept_tokens(0.0) == {}


#: every hint action -> (its node mark for a deadline of 1000.0, whether it marks the whole path)
_EXPECTED_MARKS: dict[str, tuple[float | None, bool]] = {
    CacheAction.KEEP: (1000.0, True),
    CacheAction.OFFLOAD: (DROPPED, False),
    CacheAction.RECOMPUTE: (DROPPED, False),
    RELEASE: (None, True),
}


def test_every_cache_action_maps_to_its_mark() -> None:
    assert set(CacheAction) <= set(_EXPECTED_MARKS)  # a new member needs its mark decided
    for action, (mark, whole) in _EXPECTED_MARKS.items():
        assert (mark_for(action, 1000.0), marks_whole_path(action)) == (mark, whole), action


@pytest.mark.parametrize("action", ["drop", "Keep", "evict", ""])
def test_an_unknown_action_is_refused_not_taken_for_an_eviction(action: str) -> None:
    with pytest.raises(ValueError, match="unknown retention action"):
        mark_for(action, 1000.0)
    with pytest.raises(ValueError, match="unknown retention action"):
        marks_whole_path(action)


def test_a_book_marks_nothing_for_an_unknown_action_and_applies_the_others() -> None:
    tree, book = _Tree(), RetentionBook()
    book.note("B", _ctx([1, 2, 3, 4]))
    book.note("A", _ctx([1, 2, 3, 4, 5, 6]))
    hints = {"A": RetentionHint("drop", 0.0, seq=1), "B": RetentionHint("keep", 1000.0, seq=1)}
    with pytest.raises(ValueError, match="A: unknown retention action 'drop'"):
        book.apply(tree, hints)
    assert getattr(tree.n3, UNTIL_ATTR, None) is None  # A's context is not evicted first
    assert getattr(tree.n2, UNTIL_ATTR) == 1000.0  # B's hint, after A's, still applied
    book.apply(tree, hints)  # reported once: the same hint again is not applied again


def test_the_plugin_knows_every_hint_the_adapter_writes(tmp_path: Path) -> None:
    """Both ends of ``control.json``: each decision ``cache_hint`` sends, and the release a
    program's end sends, read back as the plugin reads them, mark the tree without error."""
    from agentconsole.server.runtime.sglang.adapter import SGLangRuntime

    runtime = SGLangRuntime(EngineSettings(model_path=tmp_path), state_dir=tmp_path)
    for action in CacheAction:
        asyncio.run(runtime.cache_hint(action.value, action, 60.0))
    runtime.program_ended(CacheAction.KEEP.value)  # a kept context is released
    data = read_json(tmp_path / CONTROL_FILE)
    assert data is not None
    hints = ControlState.from_json(data).retention
    assert {h.action for h in hints.values()} == {*CacheAction, RELEASE} - {CacheAction.KEEP}
    tree, book = _Tree(), RetentionBook()
    for program in hints:
        book.note(program, _ctx([1, 2, 3, 4, 5, 6]))
    book.apply(tree, hints)
    assert getattr(tree.n3, UNTIL_ATTR) == DROPPED  # offload and recompute: evicted first


def test_the_plugin_counts_a_bad_hint_and_its_pass_goes_on(tmp_path: Path) -> None:
    """A hint with an unknown action is one counted error of the plugin's retention step,
    not an exception that would skip the pass's status and telemetry after it."""
    from agentconsole.server.runtime.sglang.plugin_state import PluginState

    state = PluginState(tmp_path)
    state.retention.note("A", _ctx([1, 2, 3, 4, 5, 6]))
    state.control = ControlState(retention={"A": RetentionHint("drop", 0.0, seq=1)})
    state.apply_retention(_Tree(), 0.0)  # no exception
    assert state.errors == 1
    assert "retention" in (state.last_error or "")

"""Tokens a call streamed before a crash are charged at the restart: the projector's rows of a
streaming call's node carry what it had streamed (``projector.py``), and the rebuild charges
the attempt the crash cut that much, once (``reopen.py``, ``eventtail.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import Event, EventKind, EventLog
from agentconsole.scheduler.program import Node, NodeKind, NodeState
from agentconsole.server.live.eventtail import INTERRUPTED, STREAMED_ATTEMPT, STREAMED_TOKENS
from agentconsole.server.live.projector import StoreProjector, Streamed
from agentconsole.server.live.reopen import rebuild
from agentconsole.server.live.servicemodel import OnlineServiceModel
from agentconsole.server.live.views import stored_program
from agentconsole.server.store import Store, StoreConfig
from agentconsole.server.store.jsonutil import JSONValue
from agentconsole.server.store.records import AttemptRecord, NodeRecord, ProgramRecord
from agentconsole.server.store.repository import ProgramView, StoredEvent


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "streamed.duckdb", StoreConfig())
    try:
        yield opened
    finally:
        opened.close()


class _Streams:
    """The calls in flight as the projector sees them, set by the test."""

    def __init__(self) -> None:
        self.now: list[Streamed] = []

    def __call__(self) -> list[Streamed]:
        return self.now


def _streaming_program(store: Store) -> tuple[ProgramController, StoreProjector, _Streams]:
    """Program ``p`` (40 tokens used by an earlier call) whose node ``n``'s first call is in
    flight; its rows committed once, before it streamed anything."""
    log = EventLog()
    controller = ProgramController(log, OnlineServiceModel())
    projector = StoreProjector(controller, store.writer)
    streams = _Streams()
    projector.follow_streams(streams)
    log.subscribe(projector.observe)
    program = controller.open_program("p", "t", 1.0)
    program.tokens_used = 40
    controller.add_node("p", Node("n", "p", NodeKind.LLM), 1.0)
    controller.ticket("p", "n", 2.0, prompt_tokens=10)
    controller.start_node("p", "n", 2.0)
    asyncio.run(projector.sync())
    return controller, projector, streams


def _stored(store: Store) -> ProgramView:
    return store.repo.get_programs(["p"])["p"]


def test_a_streaming_calls_node_row_carries_what_it_streamed(store: Store) -> None:
    _, projector, streams = _streaming_program(store)
    streams.now = [Streamed("p", "n", 1, 120)]
    asyncio.run(projector.sync())
    (row,) = _stored(store).nodes
    assert (row.data[STREAMED_ATTEMPT], row.data[STREAMED_TOKENS]) == (1, 120)
    # a write with nothing new streamed writes no row: the rate is one per call per interval
    assert projector.write() == 0
    streams.now = [Streamed("p", "n", 1, 300)]
    assert projector.write() == 1


def test_a_restart_charges_the_tokens_the_last_sync_recorded(store: Store) -> None:
    """The crash comes after the sync that recorded 120 tokens (more were delivered since:
    the charge lags by at most one interval's worth)."""
    _, projector, streams = _streaming_program(store)
    streams.now = [Streamed("p", "n", 1, 120)]
    asyncio.run(projector.sync())
    program = rebuild(_stored(store), now=50.0)
    node = program.nodes["n"]
    assert node.state is NodeState.FAILED
    assert [(a.number, a.outcome) for a in node.attempts] == [(1, INTERRUPTED)]
    assert node.output_tokens == 120
    assert program.tokens_used == 40 + 120


def test_a_call_that_ended_after_the_rows_is_charged_once_by_its_end() -> None:
    """The rows say the call had streamed 120 tokens; the tail past them has its abort,
    which charged 150 (the replay leaves its attempt open: the restart closes it). The charge
    is the end's, not the end's plus the row's."""
    view = _row_streamed(attempt=1, tokens=120)
    aborted = Event(
        6.0,
        EventKind.CALL_ABORTED,
        "p",
        "n",
        1,
        "t",
        {"outcome": "aborted", "charged_output_tokens": 150, "prompt_tokens": 0},
    )
    program = rebuild(view, now=50.0, tail=[StoredEvent(11, aborted)])
    assert program.nodes["n"].output_tokens == 150
    assert program.tokens_used == 40 + 150


def test_a_row_of_an_earlier_attempts_stream_charges_nothing() -> None:
    program = rebuild(_row_streamed(attempt=1, tokens=120, open_attempt=2), now=50.0)
    assert program.nodes["n"].attempts[-1].outcome == INTERRUPTED
    assert program.tokens_used == 40


def _row_streamed(attempt: int, tokens: int, open_attempt: int = 1) -> ProgramView:
    """Program ``p`` (40 tokens used, rows synced at seq 10), node ``n`` running its
    ``open_attempt``, its row saying attempt ``attempt`` had streamed ``tokens``."""
    data: dict[str, JSONValue] = {
        "branch": "main",
        "synced_seq": 10,
        STREAMED_ATTEMPT: attempt,
        STREAMED_TOKENS: tokens,
    }
    earlier = tuple(
        AttemptRecord("p", "n", number, "aborted", 2.0, finished_at=3.0)
        for number in range(1, open_attempt)
    )
    attempts = (*earlier, AttemptRecord("p", "n", open_attempt, "running", 4.0))
    return ProgramView(
        ProgramRecord("p", "t", "running", 1.0, 2.0, data={"tokens_used": 40, "synced_seq": 10}),
        (NodeRecord("p", "n", "llm", "running", 1.0, 2.0, (), open_attempt, data),),
        attempts,
    )


def test_a_program_known_only_to_the_store_shows_no_stream_bookkeeping(store: Store) -> None:
    """The row's streamed count is the projector's bookkeeping, as its sync mark: a node read
    from the store alone (the program left memory) shows neither."""
    _, projector, streams = _streaming_program(store)
    streams.now = [Streamed("p", "n", 1, 120)]
    asyncio.run(projector.sync())
    (node,) = stored_program(_stored(store))["nodes"]
    assert STREAMED_ATTEMPT not in node
    assert STREAMED_TOKENS not in node

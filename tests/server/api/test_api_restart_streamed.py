"""A crash mid-stream gives no tokens away: what a call had streamed when the projector last
wrote its rows is charged to its program after the restart (its node and ``tokens_used``),
not refunded with the call's interrupted attempt."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentconsole.scheduler.program import NodeState
from agentconsole.server.live.eventtail import INTERRUPTED, STREAMED_TOKENS
from agentconsole.server.live.reopen import programs_to_restore
from agentconsole.server.store.repository import ProgramView, StoredEvent
from tests.server.api.harness import LiveServer, make_config

Restorable = list[tuple[ProgramView | None, list[StoredEvent]]]
STREAMED_BEFORE_THE_SYNC = 20


def _crash_mid_stream(server: LiveServer) -> tuple[Restorable, int]:
    """Program ``p``'s call on node ``long`` streams; once it has delivered some tokens the
    projector writes (as its periodic write would) and the store commits. Returns what a
    start-up would restore had the process died right then, and ``p``'s ``tokens_used``
    (which counts a call at its end: none yet)."""
    live = server.live
    with server.client() as c:
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201

    async def stream_then_die() -> tuple[Restorable, int]:
        from agentconsole.server.live.intake import ChatCall

        messages = [{"role": "user", "content": "x"}]
        chat = ChatCall(messages, 4000, program_id="p", node_id="long", ignore_eos=True)
        call = await live.service.start_call("tenant-a", chat)
        while call.received < STREAMED_BEFORE_THE_SYNC:
            await asyncio.sleep(0.005)
        await live.queries.projector.sync()
        await asyncio.wrap_future(live.store.writer.flush())
        restorable = await asyncio.to_thread(programs_to_restore, live.store.repo)
        assert not call.finished  # still streaming: only a crash would end it now
        return restorable, live.service.controller.programs["p"].tokens_used

    return server.run(stream_then_die())


def test_tokens_streamed_before_a_crash_are_charged_after_the_restart(tmp_path: Path) -> None:
    with LiveServer(make_config(tmp_path / "before.duckdb")) as first:
        first.wait_ready()
        restorable, used_before = _crash_mid_stream(first)
    ((view, tail),) = restorable
    assert view is not None
    (row,) = view.nodes
    recorded = row.data[STREAMED_TOKENS]
    assert isinstance(recorded, int)
    assert recorded >= STREAMED_BEFORE_THE_SYNC
    with LiveServer(make_config(tmp_path / "after.duckdb")) as second:
        second.wait_ready()

        async def reopen() -> None:
            assert second.live.service.reopen(view, tail) is not None

        second.run(reopen())
        program = second.live.service.controller.programs["p"]
        cut = program.nodes["long"]
        assert cut.state is NodeState.FAILED
        assert [a.outcome for a in cut.attempts] == [INTERRUPTED]
        assert cut.output_tokens == recorded
        assert program.tokens_used == used_before + recorded
        with second.client() as c:
            shown = c.get("/v1/programs/p").json()
        assert shown["tokens_used"] >= recorded
        assert shown["nodes"][0]["output_tokens"] == recorded

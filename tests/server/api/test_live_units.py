"""Units of the live service: the hub, prompts and tool-call parsing, prefix chains, and a
call's abort and ghost-token accounting against a runtime that ignores aborts for a while."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.runtime import GenerationRequest, GenerationResult, TokenDelta
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.scheduler.tokenstream import TokenStream
from agentconsole.server.live.calls import LiveCall
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.identity import PrefixChains, chain_hashes
from agentconsole.server.live.prompt import ToolCall, ToolCallFilter, parse_tool_calls, render_chat
from agentconsole.server.runtime.sim.live_text import tool_call_text


def _event(tenant: str = "t") -> Event:
    return Event(time.time(), EventKind.ENGINE_STATS, tenant=tenant)


def test_hub_numbers_fans_out_and_filters() -> None:
    hub = EventHub(first_seq=10, ring_size=8)
    seen: list[Event] = []
    hub.subscribe(seen.append)
    hub.resolve_tenants(lambda pid: "owner" if pid == "p" else None)
    for i in range(12):
        hub.emit(_event("a" if i % 2 else "b"))
    hub.emit(Event(time.time(), EventKind.KV_DROPPED, "p"))
    assert len(seen) == 13
    assert hub.last_seq == 22
    assert seen[-1].tenant == "owner"  # resolved from the program
    items, cursor = hub.since(hub.last_seq - 6, tenant="a")
    assert cursor == hub.last_seq
    assert all(e.tenant == "a" for _, e in items)
    assert len(items) == 3
    with pytest.raises(LookupError):
        hub.since(10)  # fell out of the 8-event ring


def test_a_cursor_before_this_life_s_first_seq_is_the_store_s() -> None:
    """A restarted hub numbers from the store's last commit: a cursor before that is served
    from the store (``LookupError``), not walked through empty ring slots and lost."""
    hub = EventHub(first_seq=100, ring_size=8)
    for _ in range(3):
        hub.emit(_event())
    assert hub.oldest_seq() == 100
    with pytest.raises(LookupError):
        hub.since(50)
    items, _ = hub.since(99)
    assert [seq for seq, _ in items] == [100, 101, 102]


@given(st.text(max_size=80), st.lists(st.integers(1, 7), max_size=30))
def test_filter_passes_plain_text_through_unchanged(text: str, cuts: list[int]) -> None:
    pieces, rest = [], text
    for n in cuts:
        pieces.append(rest[:n])
        rest = rest[n:]
    pieces.append(rest)
    held = ToolCallFilter(enabled=True)
    out = "".join(held.feed(p) for p in pieces)
    tail, calls = held.finish()
    if calls is None:
        assert out + tail == text
    else:
        assert "<tool_call>" in text
        assert "<tool_call>" not in out


CALL = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'


def _streamed(text: str, cuts: list[int]) -> tuple[str, str, list[ToolCall] | None]:
    """``text`` fed to a filter in pieces of ``cuts`` (then the rest): (what it sent, what
    its finish sent, the calls)."""
    held, out, at = ToolCallFilter(enabled=True), "", 0
    for n in cuts:
        out += held.feed(text[at : at + n])
        at += n
    out += held.feed(text[at:])
    tail, calls = held.finish()
    return out, tail, calls


@given(
    st.sampled_from(["", "  \n", "Sure, let me look. ", "ok\n"]),
    st.sampled_from(["", "\n", " done", "\n<tool_call>{}</tool_call>"]),
    st.lists(st.integers(1, 9), max_size=40),
)
def test_a_streamed_answer_is_a_call_exactly_when_the_whole_answer_is(
    before: str, after: str, cuts: list[int]
) -> None:
    """The stream and the answer not streamed (and the DAG, which parses the whole text)
    agree: text before or after the block makes the answer text (before, text streamed ahead
    of a call's block was sent, then the block still became a call)."""
    text = before + CALL + after
    out, tail, calls = _streamed(text, cuts)
    assert (calls is None) == (parse_tool_calls(text) is None)
    if calls is None:
        assert out + tail == text


@given(st.lists(st.integers(1, 9), min_size=1, max_size=40))
def test_filter_turns_a_streamed_tool_call_into_calls(cuts: list[int]) -> None:
    text = CALL
    out, tail, calls = _streamed(text, cuts)
    assert out == ""
    assert tail == ""
    assert calls is not None
    assert calls[0].name == "f"
    assert json.loads(calls[0].arguments) == {"x": 1}


@given(st.lists(st.integers(1, 9), max_size=40))
def test_a_call_whose_argument_holds_the_closing_tag_is_one_call(cuts: list[int]) -> None:
    """A block is read as JSON, not up to the first ``</tool_call>``: an editing tool's
    argument may hold that text (the answer was plain text, the block left as content)."""
    args = {"path": "chatml.py", "new": 'CLOSE = "</tool_call>" <tool_call>'}
    text = "<tool_call>\n" + json.dumps({"name": "edit", "arguments": args}) + "\n</tool_call>"
    expected = [ToolCall("edit", json.dumps(args))]
    assert parse_tool_calls(text) == expected
    out, tail, calls = _streamed(text, cuts)
    assert (out, tail, calls) == ("", "", expected)
    assert parse_tool_calls(text + " and text") is None  # text after a block: plain text
    assert parse_tool_calls(text.replace("\n</tool_call>", "")) is None  # unclosed


def test_render_and_the_sim_tool_convention_agree() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get",
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": "string"}},
                    "required": ["q"],
                },
            },
        }
    ]
    user = [{"role": "user", "content": "hi"}]
    prompt = render_chat(user, tools, "auto")
    call = tool_call_text(prompt)
    assert call is not None
    parsed = parse_tool_calls(call)
    assert parsed is not None
    assert parsed[0].name == "get"
    assert json.loads(parsed[0].arguments) == {"q": "sim"}
    assert tool_call_text(render_chat(user, tools, "none")) is None
    answered: list[dict[str, Any]] = [
        *user,
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "get", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "42"},
    ]
    assert tool_call_text(render_chat(answered, tools, "auto")) is None
    assert tool_call_text(render_chat(answered, tools, "required")) is not None
    assert parse_tool_calls("text <tool_call>{}</tool_call>") is None


def test_prefix_chains_find_the_longest_recorded_prefix() -> None:
    chains = PrefixChains(per_tenant=3)
    msgs = [{"role": "user", "content": str(i)} for i in range(5)]
    chains.record("t", chain_hashes(msgs[:2]), "p1", "n1")
    chains.record("t", chain_hashes(msgs[:4]), "p1", "n2")
    assert chains.find("t", chain_hashes(msgs)) == ("p1", "n2")
    assert chains.find("t", chain_hashes(msgs[:3])) == ("p1", "n1")
    assert chains.find("other", chain_hashes(msgs)) is None
    for i in range(3):
        chains.record("t", chain_hashes([{"role": "user", "content": f"x{i}"}]), "q", "n")
    assert len(chains) == 3  # bounded


def _one_call(text: str) -> list[bytes]:
    return chain_hashes([{"role": "user", "content": text}])


def test_a_tenant_flooding_inferred_calls_evicts_only_its_own_links() -> None:
    """Each tenant has its own bound: a flood of distinct calls of one tenant drops its own
    oldest links, and another tenant's agents still find their programs."""
    chains = PrefixChains(per_tenant=4, total=100)
    victim = [_one_call(f"victim {i}") for i in range(4)]
    for i, hashes in enumerate(victim):
        chains.record("victim", hashes, f"p{i}", "n")
    for i in range(1_000):
        chains.record("flooder", _one_call(f"flood {i}"), "f", f"n{i}")
    assert [chains.find("victim", h) for h in victim] == [(f"p{i}", "n") for i in range(4)]
    assert (chains.held("victim"), chains.held("flooder"), len(chains)) == (4, 4, 8)
    assert chains.find("flooder", _one_call("flood 995")) is None  # its own oldest went
    assert chains.find("flooder", _one_call("flood 999")) == ("f", "n999")


def test_past_the_total_bound_the_largest_book_gives_way() -> None:
    """All books together stay within ``total``; past it the tenant holding the most loses
    its oldest link (its own when it records), so no tenant shrinks a smaller one."""
    chains = PrefixChains(per_tenant=10, total=12)
    for i in range(3):
        chains.record("small", _one_call(f"small {i}"), "s", f"n{i}")
    for i in range(50):
        chains.record("big", _one_call(f"big {i}"), "b", f"n{i}")
    assert (chains.held("small"), chains.held("big"), len(chains)) == (3, 9, 12)
    for i in range(3, 6):  # the small tenant grows to the big one's size: the big one gives way
        chains.record("small", _one_call(f"small {i}"), "s", f"n{i}")
    assert (chains.held("small"), chains.held("big"), len(chains)) == (6, 6, 12)
    for i in range(6, 10):  # now as large as the other: it drops its own oldest
        chains.record("small", _one_call(f"small {i}"), "s", f"n{i}")
    assert (chains.held("small"), chains.held("big")) == (6, 6)
    assert chains.find("small", _one_call("small 9")) == ("s", "n9")
    assert chains.find("small", _one_call("small 3")) is None
    for i in range(12):  # many tenants of one link each: bounded in all, the books too
        chains.record(f"t{i}", _one_call("hi"), "p", "n")
    assert len(chains) == 12


class _StubbornRuntime:
    """Streams ``total`` tokens; keeps producing ``late`` more after an abort."""

    name = "stub"

    def __init__(self, total: int, late: int, unseen: int = 0) -> None:
        # late: tokens streamed after the abort; unseen: tokens generated after it that are
        # only in the final accounting (SGLang's, which stops streaming at the abort)
        self.total, self.late, self.unseen = total, late, unseen
        self.aborted = asyncio.Event()
        self.abort_calls = 0
        self.produced = 0
        self._tasks: list[asyncio.Task[None]] = []

    def submit(self, request: GenerationRequest) -> TokenStream:
        stream = TokenStream()
        self._tasks.append(asyncio.create_task(self._feed(stream)))
        return stream

    async def _feed(self, stream: TokenStream) -> None:
        while self.produced < self.total:
            if self.aborted.is_set():
                for _ in range(self.late):
                    self.produced += 1
                    stream.push(TokenDelta(" late", 1))
                break
            self.produced += 1
            stream.push(TokenDelta(" tok", 1))
            await asyncio.sleep(0.001)
        produced = self.produced + self.unseen
        stream.end(GenerationResult("abort", "", 5, 0, self.produced, produced_tokens=produced))

    async def abort(self, call_id: str) -> bool:
        self.abort_calls += 1
        self.aborted.set()
        return True


class _Hooks:
    def first_token(self, call: LiveCall) -> None: ...

    def progress(self, call: LiveCall) -> None: ...

    def ended(self, call: LiveCall, result: GenerationResult | None) -> None: ...


@pytest.mark.parametrize(("late", "unseen"), [(7, 0), (0, 7), (3, 4)])
def test_abort_stops_forwarding_and_counts_ghost_tokens(late: int, unseen: int) -> None:
    async def scenario() -> tuple[int, int, int, int, int]:
        runtime = _StubbornRuntime(total=10_000, late=late, unseen=unseen)
        ticket = CallTicket("p/n/1", "p", "n", "t", time.time())
        call = LiveCall(GenerationRequest(ticket, "x", 10_000), runtime, _Hooks())  # type: ignore[arg-type]
        got = 0
        async for _ in call.deltas():
            got += 1
            if got == 20:
                await asyncio.gather(call.abort("cancel"), call.abort("cancel"))
        outcome = await call.outcome()
        assert outcome.finish_reason == "abort"
        return got, call.received, call.ghost, runtime.produced, runtime.abort_calls

    got, received, ghost, produced, aborts = asyncio.run(scenario())
    assert got == 20  # nothing reached the client after the abort was asked for
    assert received >= 20
    # every token produced after the abort was asked is a ghost: the 7 the runtime makes once
    # it has the abort (streamed or only counted in its result), and any it made between the
    # ask and the runtime's seeing it
    assert ghost == produced + unseen - received
    assert ghost >= 7
    assert aborts == 1  # exactly one abort per call, however many callers

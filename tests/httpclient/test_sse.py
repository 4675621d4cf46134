"""The SSE parser: framing rules, and chunking never changes the result."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentconsole.httpclient.sse import SSEMessage, SSEParser

STREAM = (
    ": keep-alive\n"
    'event: batch\ndata: {"seq": 3}\nid: 3\n\n'
    "data: a\r\ndata: b\r\n\r\n"
    "event: overview\rdata:no-space\r\r"
    "event: lonely\n\n"
)
EXPECTED = [
    SSEMessage("batch", '{"seq": 3}', "3"),
    SSEMessage("message", "a\nb", "3"),
    SSEMessage("overview", "no-space", "3"),
]


def test_parses_events_comments_ids_and_line_endings() -> None:
    assert SSEParser().feed(STREAM) == EXPECTED


def test_incomplete_event_waits_for_blank_line() -> None:
    parser = SSEParser()
    assert parser.feed("event: batch\ndata: x\n") == []
    assert parser.feed("\n") == [SSEMessage("batch", "x")]


def test_trailing_carriage_return_is_not_a_line_end_yet() -> None:
    parser = SSEParser()
    assert parser.feed("data: x\r") == []
    # "\r\n" split across chunks is one line end, not two (which would dispatch early)
    assert parser.feed("\ndata: y\n\n") == [SSEMessage("message", "x\ny")]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_chunking_gives_the_same_messages(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    parser = SSEParser()
    out: list[SSEMessage] = []
    start = 0
    for point in [*points, len(STREAM)]:
        out.extend(parser.feed(STREAM[start:point]))
        start = point
    assert out == EXPECTED

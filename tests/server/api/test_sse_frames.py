"""Every SSE frame the API sends stays one line for every line splitter: generated text may
hold U+0085, U+2028 or U+2029, which JSON leaves raw but ``str.splitlines`` (httpx's
``iter_lines``, many SSE clients) ends a line at."""

from __future__ import annotations

import json

import httpx

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.api import observe
from agentconsole.server.api.openai_format import Completion, TextCompletion, sse_data
from agentconsole.server.live.errors import ServiceError

LINE_ENDS_IN_TEXT = "one\u2028two\u2029three\x85four é 中 \U0001f600"


def _frames(payload: bytes) -> list[dict[str, object]]:
    """The JSON of each ``data:`` line, as httpx's line splitter reads ``payload``."""
    lines = httpx.Response(200, content=payload).iter_lines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ")]


def test_generated_text_with_unicode_line_ends_arrives_whole() -> None:
    chat = Completion("r1", "m", {})
    text = TextCompletion("r2", "m", {})
    payload = chat.chunk({"content": LINE_ENDS_IN_TEXT}) + text.chunk(LINE_ENDS_IN_TEXT)
    frames = _frames(payload)
    assert frames[0]["choices"][0]["delta"]["content"] == LINE_ENDS_IN_TEXT  # type: ignore[index]
    assert frames[1]["choices"][0]["text"] == LINE_ENDS_IN_TEXT  # type: ignore[index]


def test_errors_and_events_with_unicode_line_ends_arrive_whole() -> None:
    error = Completion.error(ServiceError(LINE_ENDS_IN_TEXT, field="f"))
    event = Event(1.0, EventKind.OPERATOR_ACTION, "p", data={"reason": LINE_ENDS_IN_TEXT})
    frames = _frames(error + observe._frame("event", {"seq": 1, **event.to_json()}, seq=1))
    assert frames[0] == {  # a chat stream's error frame: OpenAI's shape (errors.as_openai)
        "error": {
            "type": "invalid_request_error",
            "message": LINE_ENDS_IN_TEXT,
            "field": "f",
            "param": "f",
            "code": "invalid_request",
        }
    }
    assert frames[1]["data"] == {"reason": LINE_ENDS_IN_TEXT}


def test_plain_frames_are_unchanged() -> None:
    assert sse_data({"a": "b é"}) == 'data: {"a":"b é"}\n\n'.encode()

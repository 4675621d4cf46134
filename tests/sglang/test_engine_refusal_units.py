"""A request SGLang finds malformed before it queues it: its tokenizer manager raises
``ValueError`` from ``generate_request`` (``SamplingParams.verify``, its field checks). The
adapter ends the call as SGLang's own 400 abort of it, with SGLang's message (the client's
400, not a 503 to retry), not as a failure. A fake engine here; the real one in
``test_sglang_refusal``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentconsole.scheduler.runtime import CONTEXT_LENGTH_EXCEEDED, GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.api.callflow import engine_ended
from agentconsole.server.api.errors import openai_refusal_body
from agentconsole.server.live.calls import CallOutcome
from agentconsole.server.live.errors import ContextTooLong, Unavailable
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.engine_config import EngineSettings

#: the fake engine's context (its tokenizer manager's ``context_len``, as SGLang's)
CONTEXT = 2048


class _Manager:
    """A tokenizer manager whose ``generate_request`` raises ``error`` (after ``chunks``)."""

    def __init__(self, error: Exception, chunks: int = 0) -> None:
        self.error, self.chunks = error, chunks
        self.rid_to_state: dict[str, Any] = {}
        self.context_len = CONTEXT

    async def generate_request(self, obj: Any, request: Any) -> AsyncIterator[dict[str, Any]]:
        for i in range(self.chunks):
            yield {"text": "x" * (i + 1), "meta_info": {"completion_tokens": i + 1}}
        raise self.error


class _Engine:
    def __init__(self, manager: _Manager) -> None:
        self.tokenizer_manager = manager


def _runtime(tmp_path: Path, manager: _Manager) -> SGLangRuntime:
    rt = SGLangRuntime(EngineSettings(model_path=tmp_path, plugin=False), state_dir=tmp_path)
    rt.engine = _Engine(manager)
    return rt


def _request(call_id: str = "p1/n1/0001") -> GenerationRequest:
    ticket = CallTicket(call_id, "p1", "n1", "t1", arrival=0.0)
    return GenerationRequest(ticket, "hello", max_tokens=8, cache_namespace="t1", prompt_ids=(1, 2))


def test_a_value_error_before_any_chunk_ends_the_call_refused_with_sglangs_message(
    tmp_path: Path,
) -> None:
    said = "min_p must be in [0, 1], got 1.5."
    rt = _runtime(tmp_path, _Manager(ValueError(said)))

    async def go() -> Any:
        return await rt.submit(_request()).result()

    result = asyncio.run(go())
    assert result.finish_reason == "abort"
    assert result.engine_abort_status == 400
    assert result.engine_abort_message == said
    assert (result.output_tokens, result.prefilled_tokens) == (0, 0)  # nothing ran
    assert rt._calls == {}  # out of the books
    refused = engine_ended(CallOutcome("abort", "", result), rt.max_context_tokens, "messages")
    assert not isinstance(refused, Unavailable)
    assert (refused.status, refused.type, refused.retryable) == (400, "invalid_request", None)
    assert said in str(refused)
    assert result.engine_abort_code is None  # a bad parameter: no narrower code


#: SGLang 0.5.23's words for a prompt its context cannot hold (``test_e2e_sglang_refusal``
#: meets them from the real engine)
CONTEXT_REFUSALS = [
    "The input (2100 tokens) is longer than the model's context length (2048 tokens).",
    "Requested token count exceeds the model's maximum context length of 2048 tokens. You"
    " requested a total of 2100 tokens: 2000 tokens from the input messages and 100 tokens for"
    " the completion. Please reduce the number of tokens in the input messages or the"
    " completion to fit within the limit.",
    "Input length (2045 tokens) exceeds the maximum allowed length (2042 tokens). Use a shorter"
    " input or enable --allow-auto-truncate.",
]


@pytest.mark.parametrize("said", CONTEXT_REFUSALS, ids=["input", "input+output", "scheduler"])
@pytest.mark.parametrize("prompt_field", ["messages", "prompt"])
def test_sglangs_refusal_of_a_prompt_too_long_is_context_length_exceeded(
    tmp_path: Path, said: str, prompt_field: str
) -> None:
    """What agents trim their history on: the client's 400 with ``code``
    ``context_length_exceeded`` naming the prompt's field (chat's ``messages``, a
    completion's ``prompt``), its message opened as the intake's own refusal (OpenAI's words,
    with the engine's context: what LiteLLM matches) and then SGLang's (both lengths),
    answered or streamed."""
    rt = _runtime(tmp_path, _Manager(ValueError(said)))

    async def go() -> Any:
        return await rt.submit(_request()).result()

    result = asyncio.run(go())
    assert (result.engine_abort_status, result.engine_abort_code) == (400, CONTEXT_LENGTH_EXCEEDED)
    assert rt.max_context_tokens == CONTEXT
    refused = engine_ended(CallOutcome("abort", "", result), rt.max_context_tokens, prompt_field)
    assert isinstance(refused, ContextTooLong)
    assert (refused.status, refused.type) == (400, "context_length_exceeded")
    assert str(refused) == (
        f"This model's maximum context length is {CONTEXT} tokens; the engine refused the"
        f" call: {said}"
    )
    frame = openai_refusal_body(refused)["error"]  # a stream's error frame
    assert (frame["type"], frame["code"]) == ("invalid_request_error", "context_length_exceeded")
    assert frame["param"] == prompt_field
    assert frame["message"] == str(refused)


def test_an_engine_context_refusal_of_a_model_whose_context_is_unknown_is_sglangs_words(
    tmp_path: Path,
) -> None:
    """No context length known (None): no length is made up; SGLang's own message, still
    ``context_length_exceeded`` naming the prompt's field."""
    rt = _runtime(tmp_path, _Manager(ValueError(CONTEXT_REFUSALS[0])))

    async def go() -> Any:
        return await rt.submit(_request()).result()

    refused = engine_ended(CallOutcome("abort", "", asyncio.run(go())), None, "messages")
    assert isinstance(refused, ContextTooLong)
    assert str(refused) == f"the engine refused the call: {CONTEXT_REFUSALS[0]}"
    assert refused.field == "messages"


@pytest.mark.parametrize(
    ("error", "chunks"),
    [(RuntimeError("the scheduler died"), 0), (ValueError("mid-stream"), 2)],
)
def test_other_failures_still_fail_the_call(tmp_path: Path, error: Exception, chunks: int) -> None:
    """Anything but SGLang's up-front refusal stays a failure (a 503 to retry)."""
    rt = _runtime(tmp_path, _Manager(error, chunks))

    async def go() -> None:
        await rt.submit(_request()).result()

    with pytest.raises(type(error)):
        asyncio.run(go())

"""A call the real SGLang engine (CPU, in process) refuses as malformed before queueing it
(its ``SamplingParams.verify`` raises ``ValueError`` from ``generate_request``), over real
HTTP with the official client: 400 ``invalid_request`` carrying SGLang's message, raised as
``BadRequestError`` and never retried; the program goes on (its next call answers), the
refused call's node does not complete and is not left running, streamed or not.

What reaches SGLang is the API's validated request; the refusal is provoked by adding a
sampling entry SGLang's ``verify`` refuses (``min_p`` over 1) to the calls of the nodes named
``malformed`` on their way into the real tokenizer manager, and ``max_new_tokens`` past the
context to those of the nodes named ``overlong``.

A prompt over the context is 400 ``context_length_exceeded`` (the client's ``BadRequestError``
that agent frameworks trim their history on), whether the intake finds it (the engine's
``context_len``) or SGLang does: its tokenizer manager's check, and its scheduler's, which
takes a few tokens less than the context (a prompt the intake lets through)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.server.api.harness import LiveServer, make_config

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Served:
    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.sent = 0  # requests that reached SGLang
        self.http = httpx.Client()
        self.client = openai.OpenAI(
            base_url=server.url + "/v1", api_key="sk-a", max_retries=3, http_client=self.http
        )

    async def break_refused_programs(self) -> None:
        tm = self.server.live.service.runtime.engine.tokenizer_manager  # type: ignore[attr-defined]
        original = tm.generate_request

        def malformed(obj: Any, request: Any = None) -> Any:
            self.sent += 1
            if "/malformed/" in str(obj.rid):  # rid: program/node/attempt
                obj.sampling_params = {**obj.sampling_params, "min_p": 1.5}
            if "/overlong/" in str(obj.rid):
                obj.sampling_params = {**obj.sampling_params, "max_new_tokens": tm.context_len}
            return original(obj, request)

        tm.generate_request = malformed


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("sglang-refusal")
    model = make_tiny_model(root / "tiny")
    config = make_config(
        root / "api.duckdb",
        runtime="sglang",
        model=str(model),
        runtime_extra={"enable_metrics": False},  # SGLang's metrics register once a process
    )
    with LiveServer(config) as server:
        server.wait_ready(timeout=300)
        served = Served(server)
        server.run(served.break_refused_programs())
        yield served
        served.http.close()


def _program(served: Served, pid: str) -> dict[str, Any]:
    with served.server.client() as client:
        found: dict[str, Any] = client.get(f"/v1/programs/{pid}").json()
    return found


def _ask(served: Served, messages: Any, stream: bool, headers: dict[str, str]) -> None:
    """A chat call of at most 4 tokens, read to its end when streamed (where a refusal
    arrives as the error frame the client raises)."""
    answer = served.client.chat.completions.create(
        model="m", messages=messages, max_tokens=4, stream=stream, extra_headers=headers
    )
    for _ in answer if stream else ():
        pass


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_request_sglang_refuses_is_a_400_with_its_message_and_the_program_goes_on(
    served: Served, stream: bool
) -> None:
    pid = f"refused-{'s' if stream else 'p'}"
    before = served.sent
    ask: list[Any] = [{"role": "user", "content": "hello"}]
    # a stream's error frame is the client's ``APIError``; a plain answer's 400 its
    # ``BadRequestError``
    headers = {"X-Program-Id": pid, "X-Node-Id": "malformed"}

    with pytest.raises(openai.APIError) as refused:
        _ask(served, ask, stream, headers)
    error = refused.value
    assert "min_p must be in [0, 1]" in error.message
    if not stream:
        assert isinstance(error, openai.BadRequestError)
        assert error.status_code == 400
        assert error.code == "invalid_request"
        assert error.response.headers.get("x-should-retry") != "true"
    assert served.sent == before + 1  # the client did not retry it (max_retries=3)
    program = _program(served, pid)
    assert program["state"] == "running"
    (node,) = program["nodes"]
    assert node["node_id"] == "malformed"
    assert node["state"] not in ("done", "running")  # refused: not completed, not left running
    # the program goes on: its next call (another node, sent to SGLang unbroken) answers
    after = served.client.chat.completions.create(
        model="m", messages=ask, max_tokens=4, extra_headers={"X-Program-Id": pid}
    )
    assert after.choices[0].finish_reason in ("stop", "length")
    program = _program(served, pid)
    assert program["state"] == "running"
    assert program["nodes_done"] == 1


def _context_refusal(error: openai.APIError, param: str) -> str:
    """The message of ``error``, a ``context_length_exceeded`` refusal as OpenAI shapes it,
    naming ``param``."""
    assert (error.code, error.type) == ("context_length_exceeded", "invalid_request_error")
    assert error.param == param
    assert isinstance(error.body, dict)
    return str(error.body["message"])


def _engine_context_refusal(served: Served, error: openai.APIError, param: str) -> str:
    """SGLang's words in ``error``, its refusal of a prompt over its context: opened as the
    intake's own refusal is (OpenAI's words, with the engine's context: LiteLLM matches
    them)."""
    context = served.server.live.service.runtime.max_context_tokens
    opening = (
        f"This model's maximum context length is {context} tokens; the engine refused the call: "
    )
    message = _context_refusal(error, param)
    assert message.startswith(opening), message
    return message.removeprefix(opening)


def test_a_prompt_over_the_context_is_refused_before_sglang_sees_it(served: Served) -> None:
    runtime = served.server.live.service.runtime
    context = runtime.max_context_tokens
    assert context is not None
    before = served.sent
    long: Any = [{"role": "user", "content": "hello " * context}]
    with pytest.raises(openai.BadRequestError) as refused:
        served.client.chat.completions.create(model="m", messages=long, max_tokens=4)
    message = _context_refusal(refused.value, "messages")
    assert message.startswith(f"This model's maximum context length is {context} tokens")
    assert served.sent == before  # the intake refused it: not sent, so not retried


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_sglangs_own_context_refusal_is_context_length_exceeded(
    served: Served, stream: bool
) -> None:
    """SGLang's tokenizer manager refuses prompt + ``max_new_tokens`` over its context (the
    hook raises ``max_new_tokens``): 400 ``context_length_exceeded`` naming ``messages``,
    OpenAI's opening then SGLang's message, never retried; streamed, the error frame carries
    the same."""
    before = served.sent
    headers = {"X-Program-Id": f"overlong-{stream}", "X-Node-Id": "overlong"}
    ask: Any = [{"role": "user", "content": "hello"}]

    with pytest.raises(openai.APIError) as refused:
        _ask(served, ask, stream, headers)
    said = _engine_context_refusal(served, refused.value, "messages")
    assert isinstance(refused.value, openai.BadRequestError) != stream
    assert "exceeds the model's maximum context length" in said  # SGLang's own words
    assert served.sent == before + 1


def test_a_prompt_sglangs_scheduler_cannot_take_is_context_length_exceeded(
    served: Served,
) -> None:
    """A prompt a few tokens short of the context, with no ``max_tokens``: the intake lets it
    through with the room left as the answer's budget, and SGLang's scheduler, whose longest
    input is a few tokens less than its context, refuses it. That is a prompt too long too."""
    runtime = served.server.live.service.runtime
    context = runtime.max_context_tokens
    assert context is not None

    def tokens(words: int) -> int:
        return runtime.chat_format.encode("hello " * words).tokens

    low, high = 1, context  # the fewest words whose prompt reaches ``context - 3`` tokens
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if tokens(middle) < context - 3 else (low, middle)
    assert context - 6 <= tokens(low) < context  # past the scheduler's, within the intake's
    before = served.sent
    with pytest.raises(openai.BadRequestError) as refused:
        served.client.completions.create(
            model="m", prompt="hello " * low, extra_headers={"X-Program-Id": "near-full"}
        )
    said = _engine_context_refusal(served, refused.value, "prompt")
    assert "exceeds the maximum allowed length" in said
    assert served.sent == before + 1

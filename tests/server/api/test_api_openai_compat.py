"""OpenAI compatibility through the official ``openai`` client: what the server cannot honour
(``response_format`` other than text, ``logprobs``, non-text content parts) is refused naming
it, never ignored; errors carry OpenAI's ``param`` and ``code``; a refusal that can never pass
says ``x-should-retry: false`` so the client does not send it again; and the default
``max_tokens`` shrinks to the room a long prompt leaves in the context."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel

from agentconsole.server.live.chatml import message_text, render_chat
from agentconsole.server.live.errors import ContextTooLong, InvalidRequest
from agentconsole.server.live.intake import ChatCall, fit_context
from agentconsole.server.live.tenants import CallHold, TenantLimits
from tests.server.api.harness import LiveServer, chat_body, make_config

CHAT = "/v1/chat/completions"
#: the simulated llama-3.1-8b's context; the sim counts 4 characters a token
CONTEXT = 131_072


class Answer(BaseModel):
    city: str


class _Counted:
    """An ``openai`` client with its default retries (2) and a count of the requests sent."""

    def __init__(self, server: LiveServer, key: str = "sk-a") -> None:
        self.requests = 0
        http = httpx.Client(event_hooks={"request": [self._count]}, timeout=60)
        self.client = openai.OpenAI(base_url=server.url + "/v1", api_key=key, http_client=http)

    def _count(self, request: httpx.Request) -> None:
        self.requests += 1

    def chat(self, program_id: str, **extra: Any) -> Any:
        """One chat call of ``program_id``; the count restarts with it."""
        self.requests = 0
        return self.client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hello"}],
            extra_body={"agentconsole": {"program_id": program_id}, **extra.pop("body", {})},
            **extra,
        )


def _client(server: LiveServer, key: str = "sk-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def _user(content: Any) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": content}]


def _opened(server: LiveServer, program_id: str) -> bool:
    with server.client() as c:
        return c.get(f"/v1/programs/{program_id}").status_code == 200


# -- 1. response_format ---------------------------------------------------------------------------
def test_parse_with_a_schema_is_refused_naming_response_format(server: LiveServer) -> None:
    client = _client(server)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.parse(
            model="m",
            messages=_user("Where?"),
            response_format=Answer,
            extra_headers={"X-Program-Id": "rf-parse"},
        )
    assert refused.value.status_code == 400
    assert refused.value.param == "response_format"
    assert "json_schema" in refused.value.message
    assert not _opened(server, "rf-parse")  # refused before anything ran


def test_json_object_is_refused_and_text_is_accepted(server: LiveServer) -> None:
    client = _client(server)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="m", messages=_user("hi"), response_format={"type": "json_object"}
        )
    assert refused.value.param == "response_format"
    assert "json_object" in refused.value.message
    done = client.chat.completions.create(
        model="m", messages=_user("hi"), response_format={"type": "text"}, max_tokens=4
    )
    assert done.choices[0].message.content


# -- 2. logprobs ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "param"),
    [({"logprobs": True}, "logprobs"), ({"logprobs": True, "top_logprobs": 3}, "logprobs")],
)
def test_chat_logprobs_are_refused(server: LiveServer, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        _client(server).chat.completions.create(model="m", messages=_user("hi"), **extra)
    assert refused.value.param == param
    assert "log probabilities" in refused.value.message


def test_top_logprobs_alone_is_refused_and_false_logprobs_accepted(server: LiveServer) -> None:
    with server.client() as c:
        refused = c.post(CHAT, json=chat_body(top_logprobs=2))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "top_logprobs"
        for accepted in ({"logprobs": False}, {"logprobs": None, "top_logprobs": None}):
            answered = c.post(CHAT, json=chat_body(max_tokens=4, **accepted))
            assert answered.status_code == 200, answered.text
            assert answered.json()["choices"][0]["logprobs"] is None


# -- 3. content parts -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1"}},
    ],
)
def test_non_text_content_parts_are_refused_naming_their_type(
    server: LiveServer, part: dict[str, Any]
) -> None:
    program_id = f"parts-{part['type']}"
    for content in ([part], [{"type": "text", "text": "What is this?"}, part]):
        with pytest.raises(openai.BadRequestError) as refused:
            _client(server).chat.completions.create(
                model="m", messages=_user(content), extra_headers={"X-Program-Id": program_id}
            )
        assert refused.value.param == "messages.0.content"
        assert repr(part["type"]) in refused.value.message
    assert not _opened(server, program_id)


def test_text_parts_are_still_read(server: LiveServer) -> None:
    parts = [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]
    done = _client(server).chat.completions.create(model="m", messages=_user(parts), max_tokens=4)
    assert done.usage is not None
    plain = _client(server).chat.completions.create(
        model="m", messages=_user("one two"), max_tokens=4
    )
    assert plain.usage is not None
    assert done.usage.prompt_tokens == plain.usage.prompt_tokens


def test_the_prompt_formats_refuse_non_text_parts_too() -> None:
    assert message_text([{"type": "text", "text": "a"}, {"text": "b"}]) == "ab"
    image = [{"type": "image_url", "image_url": {"url": "x"}}]
    with pytest.raises(InvalidRequest, match="'image_url'"):
        message_text(image)
    with pytest.raises(InvalidRequest):
        render_chat([{"role": "user", "content": image}])


# -- 4. param and code ----------------------------------------------------------------------------
def test_errors_carry_openai_param_and_code(server: LiveServer) -> None:
    """On OpenAI's routes an invalid request is OpenAI's 400 (``BadRequestError``), its
    ``type`` OpenAI's and ours in ``code``; ``field`` stays beside ``param``."""
    client = _client(server)
    with pytest.raises(openai.BadRequestError) as invalid:
        client.chat.completions.create(model="m", messages=_user("hi"), n=2)
    assert (invalid.value.param, invalid.value.code, invalid.value.type) == (
        "n",
        "invalid_request",
        "invalid_request_error",
    )
    body = invalid.value.body
    assert isinstance(body, dict)
    assert body["field"] == "n"  # the keys the consoles read stay
    # OpenAI's status: an agent's ``except openai.BadRequestError`` trims its history
    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(model="m", messages=_user("abcd" * 131_100), max_tokens=9)
    assert too_long.value.code == "context_length_exceeded"
    assert too_long.value.param == "messages"
    with pytest.raises(openai.AuthenticationError) as unauthorized:
        _client(server, key="sk-nobody").models.list()
    assert unauthorized.value.code == "unauthorized"
    assert unauthorized.value.param is None
    with server.client() as c:
        error = c.post(CHAT, content=b"{not json").json()["error"]
        native = c.post("/v1/programs", content=b"{not json").json()["error"]
    assert error == {
        "type": "invalid_request_error",
        "message": error["message"],
        "param": None,
        "code": "invalid_json",
    }
    assert (native["type"], native["code"]) == ("invalid_json", "invalid_json")


@pytest.mark.parametrize("path", [CHAT, "/v1/completions"])
def test_an_invalid_field_is_a_bad_request_naming_it(server: LiveServer, path: str) -> None:
    """Both generation routes, through the official client: 400 ``BadRequestError`` with
    ``param`` the field as sent, whether the body model (``temperature`` out of range), the
    route (``max_tokens`` over the server's limit) or the service (a parent the program does
    not have) refuses it."""
    client = _client(server)
    program_id = "bad-field" + path.replace("/", "-")
    with server.client() as c:
        assert c.post("/v1/programs", json={"program_id": program_id}).status_code == 201
    create: Any = client.chat.completions.create if path == CHAT else client.completions.create
    given: dict[str, Any] = {"messages": _user("hi")} if path == CHAT else {"prompt": "hi"}
    unknown_parent = {"program_id": program_id, "parent_ids": ["nowhere"]}
    for extra, param in (
        ({"temperature": 3}, "temperature"),
        ({"max_tokens": 10**6}, "max_tokens"),
        ({"extra_body": {"agentconsole": unknown_parent}}, "agentconsole.parent_ids"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            create(model="m", **given, **extra)
        error = refused.value
        assert (error.status_code, error.param, error.type, error.code) == (
            400,
            param,
            "invalid_request_error",
            "invalid_request",
        ), error.body


def test_agentconsoles_own_routes_keep_422(server: LiveServer) -> None:
    """A refused body on an agentconsole route is still 422 with our ``type``."""
    with server.client() as c:
        refused = c.post("/v1/programs", json={"program_id": "bad id!"})
        nodes = c.post("/v1/programs", json={"quotas": {"tokens": -1}})
    assert refused.status_code == nodes.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request",
        "invalid_request",
        "program_id",
    )
    assert nodes.json()["error"]["param"] == "quotas.tokens"


# -- 5. retries -----------------------------------------------------------------------------------
def test_an_exhausted_quota_is_not_retried(server: LiveServer) -> None:
    with server.client() as c:
        made = c.post("/v1/programs", json={"program_id": "rt-quota", "quotas": {"tokens": 30}})
        assert made.status_code == 201, made.text
    counted = _Counted(server)
    try:  # stopped when it crosses 30 tokens, or it ends first
        counted.chat("rt-quota", max_tokens=40, body={"ignore_eos": True})
    except openai.RateLimitError:
        assert counted.requests == 1
    with pytest.raises(openai.RateLimitError) as refused:
        counted.chat("rt-quota", max_tokens=4)
    assert refused.value.code == "quota_exceeded"
    assert counted.requests == 1
    assert refused.value.response.headers["x-should-retry"] == "false"


def test_a_call_of_an_ended_program_is_not_retried(server: LiveServer) -> None:
    with server.client() as c:
        assert c.post("/v1/programs", json={"program_id": "rt-ended"}).status_code == 201
        assert c.post("/v1/programs/rt-ended/finish", json={}).status_code == 200
    counted = _Counted(server)
    with pytest.raises(openai.ConflictError) as refused:
        counted.chat("rt-ended", max_tokens=4)
    assert counted.requests == 1
    assert refused.value.response.headers["x-should-retry"] == "false"
    # the tool gateway's type for a call on an ended program: one type on every route
    assert refused.value.code == "program_not_running"


def test_a_call_aborted_by_a_cancel_is_not_retried(server: LiveServer) -> None:
    counted = _Counted(server)
    raised: list[BaseException] = []

    def call() -> None:
        try:  # tens of seconds at the harness's speed, unless cancelled
            counted.chat("rt-cancel", max_tokens=30_000, body={"ignore_eos": True})
        except openai.APIError as error:
            raised.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        with server.client() as c:
            deadline = time.monotonic() + 20
            while not c.get("/v1/programs/rt-cancel").json().get("tokens_used"):
                assert time.monotonic() < deadline, "the call never started"
                time.sleep(0.05)
            assert c.post("/v1/programs/rt-cancel/cancel").status_code == 200
    finally:
        caller.join(30)
    (error,) = raised
    assert isinstance(error, openai.ConflictError)
    assert counted.requests == 1
    assert error.response.headers["x-should-retry"] == "false"


@pytest.fixture
def limited(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """A server whose tenant-a has the limits the test is parametrized with."""
    limits = TenantLimits(**request.param)
    config = make_config(tmp_path / "limits.duckdb", tenant_overrides={"tenant-a": limits})
    with LiveServer(config) as live:
        live.wait_ready()
        yield live


@pytest.mark.parametrize("limited", [{"stored_bytes": 1}], indirect=True)
def test_a_full_tenant_store_is_not_retried(limited: LiveServer) -> None:
    counted = _Counted(limited)
    with pytest.raises(openai.RateLimitError) as refused:  # the program's opening fills it
        counted.chat("rt-stored", max_tokens=4)
    assert refused.value.param == "limits.stored_bytes"
    assert counted.requests == 1
    assert refused.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("limited", [{"tokens_per_minute": 200}], indirect=True)
def test_a_spent_minute_says_retry(limited: LiveServer) -> None:
    with limited.client() as c:
        assert c.post(CHAT, json=chat_body("x" * 400, max_tokens=16)).status_code == 200
        refused = c.post(CHAT, json=chat_body("y" * 400, max_tokens=16))
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["param"] == "limits.tokens_per_minute"
    assert refused.headers["x-should-retry"] == "true"
    assert int(refused.headers["Retry-After"]) >= 1


# -- 6. the default max_tokens --------------------------------------------------------------------
def _long_prompt(tokens: int) -> str:
    """A user message of about ``tokens`` tokens no other prompt starts with."""
    return uuid.uuid4().hex * (tokens * 4 // 32)


def test_the_default_max_tokens_shrinks_to_the_room_left(server: LiveServer) -> None:
    """Within 1024 tokens of the context and no ``max_tokens``: answered, with what the
    context leaves, and the tenant's reservation holds that, not the default."""
    tenants = server.live.service.tenants
    reserved: list[int] = []
    reserve = tenants.reserve

    def recording(tenant: str, tokens: int) -> CallHold:
        reserved.append(tokens)
        return reserve(tenant, tokens)

    tenants.reserve = recording  # type: ignore[method-assign]
    try:
        done = _client(server).chat.completions.create(
            model="m", messages=_user(_long_prompt(CONTEXT - 300)), extra_body={"ignore_eos": True}
        )
    finally:
        del tenants.reserve
    assert done.usage is not None
    assert CONTEXT - 1024 < done.usage.prompt_tokens < CONTEXT
    assert done.usage.prompt_tokens + done.usage.completion_tokens == CONTEXT
    assert done.choices[0].finish_reason == "length"
    (held,) = reserved
    assert CONTEXT - 1024 < held <= CONTEXT  # uncached prompt + the shrunk max_tokens


def test_a_prompt_that_fills_the_context_is_refused_naming_the_prompt(
    server: LiveServer,
) -> None:
    client = _client(server)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="m", messages=_user(_long_prompt(CONTEXT)))
    assert refused.value.code == "context_length_exceeded"
    assert refused.value.param == "messages"
    assert "max_tokens" not in refused.value.message
    # a max_tokens the client did send is still its own to answer for
    with pytest.raises(openai.BadRequestError) as asked:
        client.chat.completions.create(
            model="m", messages=_user(_long_prompt(CONTEXT - 300)), max_tokens=1024
        )
    assert asked.value.param == "max_tokens"


#: the served model's context in ``test_fit_context`` (a small one: the numbers stay readable)
SMALL_CONTEXT = 100


@pytest.mark.parametrize(
    ("prompt_tokens", "max_tokens", "given", "fitted"),
    [
        (10, 50, True, 50),
        (10, 50, False, 50),
        (80, 50, False, 20),  # the default shrinks to the room
        (99, 50, False, 1),
        (80, 50, True, "max_tokens"),  # the client's own value overflows
        (100, 50, False, "messages"),  # no room for one token: the prompt is at fault
        (100, 50, True, "messages"),
    ],
)
def test_fit_context(prompt_tokens: int, max_tokens: int, given: bool, fitted: int | str) -> None:
    chat = ChatCall([{"role": "user", "content": "x"}], max_tokens, max_tokens_given=given)
    if isinstance(fitted, int):
        assert fit_context(SMALL_CONTEXT, prompt_tokens, chat) == fitted
        return
    with pytest.raises(ContextTooLong) as refused:
        fit_context(SMALL_CONTEXT, prompt_tokens, chat)
    assert refused.value.field == fitted
    text = ChatCall(chat.messages, max_tokens, max_tokens_given=given, prompt_text="x")
    with pytest.raises(ContextTooLong) as refused:
        fit_context(SMALL_CONTEXT, prompt_tokens, text)
    assert refused.value.field == ("prompt" if fitted == "messages" else fitted)


def test_the_contract_publishes_400_not_422_on_openais_routes(server: LiveServer) -> None:
    with server.client(None) as c:
        paths = c.get("/schema/openapi.json").json()["paths"]
    for path in ("/v1/chat/completions", "/v1/completions"):
        responses = paths[path]["post"]["responses"]
        assert "422" not in responses, path
        assert "invalid_request_error" in responses["400"]["description"], path
        assert "context_length_exceeded" in responses["400"]["description"], path
    programs = paths["/v1/programs"]["post"]["responses"]
    assert "422" in programs
    assert "invalid_request_error" not in programs["400"]["description"]

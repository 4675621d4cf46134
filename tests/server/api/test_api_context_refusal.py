"""A call refused for its own prompt (over the model's context: 400) opens no program: the
request named a new program, or none (an inferred one), and nothing ran, so neither the
controller nor the store keeps an empty program, and the id stays free."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from tests.server.api.harness import LiveServer, chat_body

CHAT = "/v1/chat/completions"
#: the simulated llama-3.1-8b serves 131,072 tokens; the sim counts 4 characters a token
TOO_LONG = "abcd" * 131_000


def _refused(response: httpx.Response) -> dict[str, Any]:
    """The error of an OpenAI 400 ``context_length_exceeded`` (its ``type`` OpenAI's)."""
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "context_length_exceeded")
    return error


def _inferred_total(client: httpx.Client) -> int:
    listed = client.get("/v1/programs", params={"label": "inferred:true"})
    total: int = listed.json()["total"]
    return total


def _held_in_memory(server: LiveServer, program_id: str) -> bool:
    async def held() -> bool:
        return program_id in server.app.state.live.service.controller.programs

    return server.run(held())


def test_a_refused_call_naming_a_new_program_leaves_no_program(server: LiveServer) -> None:
    body = chat_body(TOO_LONG, max_tokens=200, agentconsole={"program_id": "ctx-new"})
    with server.client() as client:
        _refused(client.post(CHAT, json=body))
        assert client.get("/v1/programs/ctx-new").status_code == 404
        listed = client.get("/v1/programs", params={"limit": 1000}).json()["programs"]
        assert "ctx-new" not in {p["program_id"] for p in listed}
    assert not _held_in_memory(server, "ctx-new")


def test_the_id_of_a_refused_call_stays_free_for_its_tenant(server: LiveServer) -> None:
    headers = {"X-Program-Id": "ctx-free"}
    with server.client() as client:
        _refused(client.post(CHAT, json=chat_body(TOO_LONG, max_tokens=200), headers=headers))
        fits = client.post(CHAT, json=chat_body("short", max_tokens=4), headers=headers)
        assert fits.status_code == 200, fits.text
        program = client.get("/v1/programs/ctx-free").json()
    assert [n["node_id"] for n in program["nodes"]] == ["llm-1"]


def test_a_refused_call_without_identity_opens_no_inferred_program(server: LiveServer) -> None:
    with server.client() as client:
        before = _inferred_total(client)
        _refused(client.post(CHAT, json=chat_body(TOO_LONG, max_tokens=200)))
        completion = {"model": "m", "prompt": TOO_LONG * 2}
        assert _refused(client.post("/v1/completions", json=completion))["field"] == "prompt"
        assert _inferred_total(client) == before


def test_a_refused_call_of_a_running_program_changes_nothing(server: LiveServer) -> None:
    identity = {"agentconsole": {"program_id": "ctx-running"}}
    with server.client() as client:
        first = client.post(CHAT, json=chat_body("hello", max_tokens=4, **identity))
        assert first.status_code == 200, first.text
        before = client.get("/v1/programs/ctx-running").json()
        _refused(client.post(CHAT, json=chat_body(TOO_LONG, max_tokens=200, **identity)))
        after = client.get("/v1/programs/ctx-running").json()
    assert after["state"] == "running"
    assert [n["node_id"] for n in after["nodes"]] == [n["node_id"] for n in before["nodes"]]
    assert after["tokens_used"] == before["tokens_used"]


def test_a_refusal_names_max_completion_tokens_when_the_client_sent_that(
    server: LiveServer,
) -> None:
    """OpenAI's newer name for the answer's budget is what the client wrote: the refusal
    names it, over the server's limit and over the model's context alike."""
    with server.client() as c:
        over_limit = chat_body("hi", max_completion_tokens=40_000)
        error = c.post(CHAT, json=over_limit).json()["error"]
        assert error["field"] == "max_completion_tokens"
        assert "max_completion_tokens must be at most" in error["message"]
        old_name = c.post(CHAT, json=chat_body("hi", max_tokens=40_000)).json()["error"]
        assert old_name["field"] == "max_tokens"
        long_prompt = chat_body("abcd" * 120_000, max_completion_tokens=30_000)
        overflow = _refused(c.post(CHAT, json=long_prompt))
        assert overflow["field"] == "max_completion_tokens"


def test_a_large_prompt_is_read_off_the_event_loop(server: LiveServer) -> None:
    """Rendering and tokenizing a prompt of megabytes takes seconds with a real tokenizer:
    on the event loop every tenant's requests and streams stood still meanwhile (another
    tenant's ``/v1/whoami`` waited 3.3 s in the review's run). A large request is read on a
    worker thread; a small one inline (a thread hop would cost every call)."""
    from agentconsole.server.live.intake import INLINE_PROMPT_CHARS

    runtime: Any = server.live.service.models.runtime_of(None)  # its format swapped
    chat_format = runtime.chat_format
    threads: list[int] = []

    class Recording:  # the sim's format, noting the thread each render runs on
        name = chat_format.name

        def __getattr__(self, attribute: str) -> Any:
            return getattr(chat_format, attribute)

        def render(self, *args: Any, **kwargs: Any) -> Any:
            threads.append(threading.get_ident())
            return chat_format.render(*args, **kwargs)

    runtime.chat_format = Recording()
    loop_thread = server.run(_thread_of_the_loop())
    try:
        with server.client() as client:
            assert client.post(CHAT, json=chat_body("hi", max_tokens=5)).status_code == 200
            large = "abcd" * (INLINE_PROMPT_CHARS // 4 + 1)
            assert client.post(CHAT, json=chat_body(large, max_tokens=5)).status_code == 200
            # the tool schemas are rendered into the prompt too (4,096 characters each at most)
            described = "abcd" * 1000
            tools = [
                {"type": "function", "function": {"name": f"f{k}", "description": described}}
                for k in range(INLINE_PROMPT_CHARS // len(described) + 1)
            ]
            body = chat_body("hi", max_tokens=5, tools=tools)
            assert client.post(CHAT, json=body).status_code == 200
    finally:
        runtime.chat_format = chat_format
    assert threads[0] == loop_thread
    assert threads[1] != loop_thread
    assert threads[2] != loop_thread


async def _thread_of_the_loop() -> int:
    return threading.get_ident()

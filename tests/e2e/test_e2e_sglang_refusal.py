"""A call the real SGLang engine (CPU, in process) refuses as malformed before queueing it
(its ``SamplingParams.verify`` raises ``ValueError`` from ``generate_request``), over real
HTTP with the official client: 400 ``invalid_request`` carrying SGLang's message, raised as
``BadRequestError`` and never retried; the program goes on (its next call answers), the
refused call's node does not complete and is not left running, streamed or not.

What reaches SGLang is the API's validated request; the refusal is provoked by adding a
sampling entry SGLang's ``verify`` refuses (``min_p`` over 1) to the calls of the nodes named
``malformed`` on their way into the real tokenizer manager."""

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

    def ask_it() -> None:
        answer = served.client.chat.completions.create(
            model="m", messages=ask, max_tokens=4, stream=stream, extra_headers=headers
        )
        for _ in answer if stream else ():
            pass

    with pytest.raises(openai.APIError) as refused:
        ask_it()
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

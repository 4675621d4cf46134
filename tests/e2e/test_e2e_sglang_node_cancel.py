"""A node cancel on ``agentconsole serve --runtime sglang`` (the real engine on CPU, the e2e
package's shared ``sglang_serve``): the branch's streaming call is aborted in the engine (the
program cancel's path: SGLang's abort of the request), not only cut off at the HTTP side, so
it stops long before its ``max_tokens`` and leaves the engine's running set when the cancel
answers; the program runs on, its next call served, a call under the cancelled node 409."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
TENANT = {"Authorization": "Bearer sk-dev"}
PID = "node-cancel-1"


def _body(node: str, parents: list[str], max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": f"count slowly, {node}"}],
        "max_tokens": max_tokens,
        "agentconsole": {"program_id": PID, "node_id": node, "parent_ids": parents},
        **extra,
    }


class _Stream:
    """The branch's streamed call, read in a thread: ``started`` once a token came."""

    def __init__(self, url: str) -> None:
        self.started = threading.Event()
        self.done = threading.Event()
        self.tokens = 0
        self.finish: str | None = None
        self.error: str | None = None
        body = _body("spec", ["root"], 1400, stream=True, ignore_eos=True)
        threading.Thread(target=self._run, args=(url, body), daemon=True).start()

    def _run(self, url: str, body: dict[str, Any]) -> None:
        try:
            with (
                httpx.Client(base_url=url, timeout=120, headers=TENANT) as client,
                client.stream("POST", "/v1/chat/completions", json=body) as r,
            ):
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    frame = json.loads(line[6:])
                    if "error" in frame:
                        self.error = str(frame["error"].get("message"))
                        continue
                    choice = frame["choices"][0]
                    self.tokens += bool(choice["delta"].get("content"))
                    self.finish = choice.get("finish_reason") or self.finish
                    if self.tokens:
                        self.started.set()
        finally:
            self.started.set()
            self.done.set()


def test_a_node_cancel_aborts_the_branch_in_the_engine(sglang_serve: ServeProcess) -> None:
    with httpx.Client(base_url=sglang_serve.url, timeout=120, headers=TENANT) as http:
        assert http.post("/v1/programs", json={"program_id": PID}).status_code == 201
        http.post("/v1/chat/completions", json=_body("root", [], 8)).raise_for_status()
        branch = _Stream(sglang_serve.url)
        assert branch.started.wait(60)
        started = time.monotonic()
        ack = http.post(f"/v1/programs/{PID}/nodes/spec/cancel")
        running = http.get("/v1/runtime").json()["running"]
        assert branch.done.wait(10)
        stopped_in = time.monotonic() - started
        under = http.post("/v1/chat/completions", json=_body("under", ["spec"], 8))
        goes_on = http.post("/v1/chat/completions", json=_body("next", ["root"], 8))
        program = http.get(f"/v1/programs/{PID}").json()
    assert ack.status_code == 200, ack.text
    assert ack.json()["aborted_calls"] == [f"{PID}/spec/0001"]
    assert not [c for c in running if c["program_id"] == PID]  # out of the engine at the ack
    assert stopped_in < 10
    assert branch.finish != "length"  # stopped long before its 1,400 tokens
    assert branch.error is not None
    assert under.status_code == 409, under.text
    assert goes_on.status_code == 200, goes_on.text
    assert program["state"] == "running"
    states = {n["node_id"]: n["state"] for n in program["nodes"]}
    assert states == {"root": "done", "spec": "cancelled", "next": "done"}

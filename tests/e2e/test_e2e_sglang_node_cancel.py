"""A node cancel on ``agentconsole serve --runtime sglang`` (the real engine on CPU, the e2e
package's shared ``sglang_serve``): the branch's streaming call is aborted in the engine (the
program cancel's path: SGLang's abort of the request), not only cut off at the HTTP side, so
it stops long before its ``max_tokens`` and leaves the engine's running set when the cancel
answers; the program runs on, its next call served, a call under the cancelled node 409."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServeProcess
from tests.e2e.streams import StreamedChat

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


def test_a_node_cancel_aborts_the_branch_in_the_engine(sglang_serve: ServeProcess) -> None:
    with httpx.Client(base_url=sglang_serve.url, timeout=120, headers=TENANT) as http:
        assert http.post("/v1/programs", json={"program_id": PID}).status_code == 201
        http.post("/v1/chat/completions", json=_body("root", [], 8)).raise_for_status()
        spec = _body("spec", ["root"], 1400, stream=True, ignore_eos=True)
        branch = StreamedChat(sglang_serve.url, spec, TENANT)
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
    assert branch.error is not None  # the server's error frame
    assert branch.failure is None
    assert under.status_code == 409, under.text
    assert goes_on.status_code == 200, goes_on.text
    assert program["state"] == "running"
    states = {n["node_id"]: n["state"] for n in program["nodes"]}
    assert states == {"root": "done", "spec": "cancelled", "next": "done"}

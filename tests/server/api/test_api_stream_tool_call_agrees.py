"""An answer with text before its ``<tool_call>`` block is text, streamed or not (over real
HTTP, the simulated runtime's ChatML answers; SGLang without a chat template answers alike):
before, the stream sent the text, then the block as ``tool_calls``, while the answer not
streamed and the program's DAG (which parses the whole text) took it for plain text, so the
streamed call's id matched no tool node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentconsole.server.runtime.sim import live as simlive
from tests.server.api.harness import LiveServer, make_config

ANSWER = 'Sure, let me look. <tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def _pieces(prompt: object, tokens: int, *, allow_tool_call: bool = True) -> list[str]:
    return [ANSWER[i : i + 4] for i in range(0, len(ANSWER), 4)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simlive, "output_pieces", _pieces)
        db = Path(tmp_path_factory.mktemp("stream-tool-call")) / "store.duckdb"
        with LiveServer(make_config(db)) as live:
            live.wait_ready()
            yield live


def _body(program_id: str, stream: bool) -> dict[str, Any]:
    return {
        "model": "sim",
        "stream": stream,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "find it"}],
        "agentconsole": {"program_id": program_id, "node_id": "n1"},
    }


def test_text_before_a_call_block_is_text_streamed_or_not(server: LiveServer) -> None:
    with server.client() as client:
        plain = client.post("/v1/chat/completions", json=_body("tc-plain", False)).json()
        with client.stream("POST", "/v1/chat/completions", json=_body("tc-stream", True)) as r:
            frames = [json.loads(line[6:]) for line in r.iter_lines() if line[:7] == "data: {"]
    choices = [f["choices"][0] for f in frames if f.get("choices")]
    streamed = "".join(c["delta"].get("content") or "" for c in choices)
    assert plain["choices"][0]["finish_reason"] == "stop"
    assert plain["choices"][0]["message"]["content"] == ANSWER
    assert [c["finish_reason"] for c in choices if c["finish_reason"]] == ["stop"]
    assert not [c for c in choices if c["delta"].get("tool_calls")]
    assert streamed == ANSWER

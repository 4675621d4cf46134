"""A multi-step agent over the HTTP API, and the ledger of what the server acknowledged to it.

One program: ``steps`` times a chat call (its own LLM node) then a tool call through the
gateway (its own tool node), then ``/finish``. A call that fails ends the program's run (the
server may have died: the crash loop kills it on purpose).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

#: An idle connection is dropped before the server's ``timeout_keep_alive`` (5 s) can close
#: it: with httpx's default (also 5 s) a request sent on a connection the server is closing
#: at that moment gets no answer (``ReadError``), the classic keep-alive race.
KEEPALIVE_EXPIRY_S = 2.0


def client_limits(connections: int) -> httpx.Limits:
    """The agents' connection pool: ``connections`` at most, idle ones dropped early."""
    return httpx.Limits(max_connections=connections, keepalive_expiry=KEEPALIVE_EXPIRY_S)


@dataclass(frozen=True, slots=True)
class ToolAck:
    """A committed tool call: what was sent and the result the server answered."""

    tool: str
    body: dict[str, Any]
    result: Any


@dataclass(slots=True)
class Ledger:
    """What the server answered to the agents."""

    #: program -> nodes whose call was answered 200 (LLM) or committed (tool)
    nodes: dict[str, set[str]] = field(default_factory=dict)
    tools: dict[str, ToolAck] = field(default_factory=dict)
    chat_latencies: list[float] = field(default_factory=list)
    tool_latencies: list[float] = field(default_factory=list)
    output_tokens: int = 0
    programs_started: int = 0
    programs_finished: int = 0
    #: refusals by status, and requests with no answer at all by error
    errors: Counter[str] = field(default_factory=Counter)

    def acknowledge(self, program_id: str, node_id: str) -> None:
        self.nodes.setdefault(program_id, set()).add(node_id)

    def snapshot(self) -> dict[str, set[str]]:
        return {pid: set(nodes) for pid, nodes in self.nodes.items()}


def _messages(program_id: str, step: int) -> list[dict[str, str]]:
    # the same growing conversation every step: the program's prefix is reused
    history = [{"role": "system", "content": "You are a careful agent. " * 8}]
    history.append({"role": "user", "content": f"Task of {program_id}: make the tests pass."})
    for done in range(step):
        history.append({"role": "assistant", "content": f"step {done}: ran the tool"})
        history.append({"role": "user", "content": f"tool output {done}: ok " * 6})
    return history


async def _post(
    client: httpx.AsyncClient, ledger: Ledger, path: str, body: dict[str, Any]
) -> tuple[dict[str, Any] | None, float]:
    """The JSON answer of a 200/201 (None otherwise, counted in ``ledger.errors``) and the
    latency."""
    since = time.perf_counter()
    try:
        response = await client.post(path, json=body)
    except httpx.HTTPError as error:  # no answer: the server died, or dropped the connection
        ledger.errors[f"lost ({type(error).__name__})"] += 1
        return None, time.perf_counter() - since
    latency = time.perf_counter() - since
    if response.status_code not in (200, 201):
        ledger.errors[str(response.status_code)] += 1
        return None, latency
    answer: dict[str, Any] = response.json()
    return answer, latency


async def run_program(
    client: httpx.AsyncClient,
    ledger: Ledger,
    program_id: str,
    steps: int,
    *,
    node_prefix: str = "",
    tool_seconds: float = 0.0,
    finish: bool = True,
) -> bool:
    """Run one program; True if every call was answered (and the finish, when asked)."""
    ledger.programs_started += 1
    for step in range(steps):
        llm, tool = f"{node_prefix}llm-{step}", f"{node_prefix}tool-{step}"
        chat = {
            "model": "sim",
            "messages": _messages(program_id, step),
            "max_tokens": 32,
            "agentconsole": {"program_id": program_id, "node_id": llm},
        }
        answer, latency = await _post(client, ledger, "/v1/chat/completions", chat)
        if answer is None:
            return False
        ledger.chat_latencies.append(latency)
        ledger.output_tokens += int(answer["usage"]["completion_tokens"])
        ledger.acknowledge(program_id, llm)
        name = "sleep" if tool_seconds > 0 else "echo"
        arguments = {"seconds": tool_seconds} if tool_seconds > 0 else {"text": f"{step}"}
        call = {"program_id": program_id, "node_id": tool, "arguments": arguments}
        answer, latency = await _post(client, ledger, f"/v1/tools/{name}/call", call)
        if answer is None:
            return False
        ledger.tool_latencies.append(latency)
        ledger.tools[str(answer["tool_call_id"])] = ToolAck(name, call, answer["result"])
        ledger.acknowledge(program_id, tool)
    if finish:
        done, _ = await _post(client, ledger, f"/v1/programs/{program_id}/finish", {})
        if done is None:
            return False
        ledger.programs_finished += 1
    return True

"""An unmodified agent framework gets whole programs: the OpenAI Agents SDK with one function
tool, pointed at ``/v1`` with nothing but an ``X-Program-Id`` header, runs its tool loop; the
server infers the tool node from the conversation (started when the answer asked for it,
finished when its result came back), learns the tool's latency and ends the program once it
is idle."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from tests.server.api.harness import LiveServer, make_config, wait_until

pytestmark = pytest.mark.e2e
TOOL_SECONDS = 0.3


@function_tool
async def look_up_order(order_id: str) -> str:
    """Find an order's status."""
    await asyncio.sleep(TOOL_SECONDS)  # the tool's own work, invisible to the server
    return f"order {order_id} shipped"


async def _run_agent(url: str, program_id: str) -> str:
    set_tracing_disabled(True)
    client = AsyncOpenAI(
        base_url=url + "/v1",
        api_key="sk-a",
        default_headers={"X-Program-Id": program_id},
        max_retries=0,
    )
    agent = Agent(
        name="support",
        instructions="Answer questions about orders; use the tool.",
        tools=[look_up_order],
        model=OpenAIChatCompletionsModel(model="sim", openai_client=client),
    )
    result = await Runner.run(agent, "Where is order 42?", max_turns=4)
    await client.close()
    return str(result.final_output)


def test_an_agents_sdk_agent_yields_a_whole_program_that_ends_by_itself(tmp_path: Path) -> None:
    config = make_config(tmp_path / "agents.duckdb", program_idle_s=1.0)
    with LiveServer(config) as server:
        server.wait_ready()
        answer = asyncio.run(_run_agent(server.url, "sdk-agent"))
        assert answer  # the model's final text, after the tool's result
        with server.client() as c:
            program = c.get("/v1/programs/sdk-agent").json()
        nodes: list[dict[str, Any]] = program["nodes"]
        kinds = [n["kind"] for n in nodes]
        assert kinds == ["llm", "tool", "llm"], nodes
        llm, tool, last = nodes
        assert tool["tool"] == "look_up_order"
        assert tool["state"] == "done"
        assert tool["parents"] == [llm["node_id"]]
        assert last["parents"] == [tool["node_id"]]
        assert tool["tool_s"] >= TOOL_SECONDS  # from the answer's end to the result's arrival
        # the latency estimator learned the tool
        errors = server.live.service.controller.prediction_log.summary()
        assert errors["tool_latency_s"]["count"] >= 1
        # nobody says the program is done: it ends after program_idle_s
        started = time.monotonic()
        wait_until(lambda: _state(server, "sdk-agent") == "finished", timeout=10)
        assert time.monotonic() - started < 8


def _state(server: LiveServer, program_id: str) -> str:
    with server.client() as c:
        state: str = c.get(f"/v1/programs/{program_id}").json()["state"]
        return state

"""What the crash loop keeps across rounds, and its check of a restarted server: every node
the client saw acknowledged and synced is there (LLM ones ``done``), every committed tool call
replays its result."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx

from .agent import ToolAck
from .serve import TENANT


@dataclass(slots=True)
class Loop:
    """What the rounds found."""

    durable: dict[str, set[str]] = field(default_factory=dict)
    tools: dict[str, ToolAck] = field(default_factory=dict)
    ready_s: list[float] = field(default_factory=list)
    fresh_ready_s: float = float("nan")  # the first start, on a new file
    starts: int = 0
    reopen_failures: list[str] = field(default_factory=list)
    killed_at_random: int = 0
    points_reached: list[str] = field(default_factory=list)
    points_missed: int = 0
    checked_nodes: int = 0
    lost_nodes: list[str] = field(default_factory=list)
    undone_nodes: list[str] = field(default_factory=list)
    checked_tools: int = 0
    lost_tools: list[str] = field(default_factory=list)
    #: nodes answered 200 with no barrier after them (not promised durable): checked, lost
    unsynced: list[int] = field(default_factory=lambda: [0, 0])


async def verify(
    url: str,
    loop: Loop,
    nodes: dict[str, set[str]],
    tools: dict[str, ToolAck],
    unsynced: dict[str, set[str]] | None = None,
) -> None:
    """Check ``nodes`` and ``tools`` (acknowledged before the last crash) on the restarted
    server; count how many of the ``unsynced`` nodes it kept."""
    unsynced = unsynced or {}
    gate = asyncio.Semaphore(16)
    async with httpx.AsyncClient(base_url=url, headers=TENANT, timeout=30) as client:

        async def program(pid: str, acked: set[str]) -> None:
            async with gate:
                response = await client.get(f"/v1/programs/{pid}")
            loop.checked_nodes += len(acked)
            kept = {n["node_id"] for n in response.json().get("nodes", [])}
            loop.unsynced[0] += len(unsynced.get(pid, set()))
            loop.unsynced[1] += len(unsynced.get(pid, set()) - kept)
            if response.status_code != 200:
                loop.lost_nodes += [f"{pid}/{n} ({response.status_code})" for n in acked]
                return
            states = {n["node_id"]: n["state"] for n in response.json()["nodes"]}
            loop.lost_nodes += [f"{pid}/{n}" for n in acked if n not in states]
            llm = [n for n in acked if "llm-" in n and n in states]
            loop.undone_nodes += [f"{pid}/{n}={states[n]}" for n in llm if states[n] != "done"]

        async def replay(tool_call_id: str, ack: ToolAck) -> None:
            async with gate:
                response = await client.post(f"/v1/tools/{ack.tool}/call", json=ack.body)
            loop.checked_tools += 1
            answer: dict[str, Any] = response.json() if response.status_code == 200 else {}
            if answer.get("status") != "replayed" or answer.get("result") != ack.result:
                loop.lost_tools.append(f"{tool_call_id} ({response.status_code})")

        # the programs first: a replayed tool call adds its node again if the store lost it
        programs = set(nodes) | set(unsynced)
        await asyncio.gather(*(program(pid, nodes.get(pid, set())) for pid in programs))
        await asyncio.gather(*(replay(key, ack) for key, ack in tools.items()))

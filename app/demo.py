"""Built-in demo agents for ``serve --demo``: replay ``seed-mix.small.jsonl`` over the HTTP API.

A minimal stand-in until the replay package provides ``agentconsole.replay.demo:run_demo``.
Each trace program runs as a real agent would: it opens a program, runs every node once its
parents are done (LLM nodes as chat calls whose prompt is the node's context, scaled down by
``token_scale``; tool nodes by reporting start and finish around their recorded latency),
then finishes the program. Trace tenants are spread over the demo tenant keys. The trace is
replayed in rounds until the server stops. Errors of single calls are logged and skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path

import httpx

from agentconsole.sample_traces.codec import load_trace
from agentconsole.sample_traces.format import LLMNode, ToolNode, TraceProgram, context_segments

log = logging.getLogger(__name__)


def _trace_path() -> Path:
    import agentconsole.sample_traces as traces

    return Path(traces.__file__).resolve().parent / "seed-mix.small.jsonl"


def segment_text(key: str, tokens: int, token_scale: float) -> str:
    """Deterministic filler standing for a context segment (same key, same text)."""
    chars = max(int(tokens * token_scale) * 4, 8)
    seed = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    return (seed * (chars // len(seed) + 1))[:chars]


async def _node(
    client: httpx.AsyncClient,
    key: str,
    program: TraceProgram,
    pid: str,
    index: int,
    token_scale: float,
) -> None:
    node = program.nodes[index]
    auth = {"Authorization": f"Bearer {key}"}
    if isinstance(node, LLMNode):
        segments = context_segments(program, node.id)
        text = "".join(segment_text(s.key, s.tokens, token_scale) for s in segments)
        body = {
            "model": "auto",  # several models served: the selector's choice
            "messages": [{"role": "user", "content": text}],
            "max_tokens": max(min(node.output_tokens, 256), 1),
            "ignore_eos": True,
            "agentconsole": {"program_id": pid, "node_id": node.id, "parent_ids": node.parents},
        }
        response = await client.post("/v1/chat/completions", json=body, headers=auth)
        response.raise_for_status()
        return
    assert isinstance(node, ToolNode)
    spec = {"node_id": node.id, "kind": "tool", "parents": list(node.parents), "tool": node.tool}
    await client.post(f"/v1/programs/{pid}/nodes", json=spec, headers=auth)
    start = {"node_id": node.id, "tool": node.tool}
    await client.post(f"/v1/programs/{pid}/tool-calls/start", json=start, headers=auth)
    await asyncio.sleep(node.duration_s)
    finish = {"node_id": node.id, "outcome": node.outcome.value, "latency_s": node.duration_s}
    await client.post(f"/v1/programs/{pid}/tool-calls/finish", json=finish, headers=auth)


async def run_program(
    client: httpx.AsyncClient, key: str, program: TraceProgram, pid: str, token_scale: float
) -> None:
    """Play one trace program as an agent over HTTP (see the module docstring)."""
    auth = {"Authorization": f"Bearer {key}"}
    create: dict[str, object] = {
        "program_id": pid,
        "labels": {"workload": program.shape, "demo": "true"},
    }
    if program.deadline_s is not None:
        create["deadline_s"] = program.deadline_s
    (await client.post("/v1/programs", json=create, headers=auth)).raise_for_status()
    index = {n.id: i for i, n in enumerate(program.nodes)}
    done: dict[int, asyncio.Task[None]] = {}
    for i, node in enumerate(program.nodes):  # listing order is topological

        async def run(i: int = i, parents: tuple[str, ...] = node.parents) -> None:
            await asyncio.gather(*(done[index[p]] for p in parents))
            await _node(client, key, program, pid, i, token_scale)

        done[i] = asyncio.create_task(run())
    results = await asyncio.gather(*done.values(), return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        log.info("demo program %s: %d node(s) failed: %r", pid, len(failed), failed[0])
    await client.post(f"/v1/programs/{pid}/finish", json={"success": not failed}, headers=auth)


async def run_demo(
    url: str, keys: Mapping[str, str], *, rounds: int | None = None, token_scale: float = 0.02
) -> None:
    """Replay the demo trace against ``url`` with the demo tenant keys, ``rounds`` times
    (forever when None)."""
    programs = load_trace(_trace_path())
    demo_keys = sorted(k for k, t in keys.items() if t.startswith("tenant-")) or sorted(keys)
    tenants = sorted({p.tenant for p in programs})
    key_of = {t: demo_keys[i % len(demo_keys)] for i, t in enumerate(tenants)}
    round_no = 0
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        while rounds is None or round_no < rounds:
            jobs = []
            for program in programs:
                pid = f"demo-{round_no}-{program.id}"

                async def play(p: TraceProgram = program, pid: str = pid) -> None:
                    await asyncio.sleep(p.arrival_s)
                    await run_program(client, key_of[p.tenant], p, pid, token_scale)

                jobs.append(play())
            results = await asyncio.gather(*jobs, return_exceptions=True)
            for error in (r for r in results if isinstance(r, BaseException)):
                log.info("demo program failed: %r", error)
            round_no += 1

"""quota-bypass: the token-quota bypass of issue 16 must stay closed (T7 of the test plan).

The attack: a program with a token quota of 300 opens six streams of ``max_tokens`` 250
(``ignore_eos``) at once and hangs up each after ~200 tokens. Charged one call at a time, at
its end, it got ~1,200 tokens. Now the tokens all of a program's streams received count
together, so together they stop at the quota (each stream may overshoot by the one token in
flight), the next call answers 429, and the program is charged at least what it was sent.

The second half: a program cancelled mid-stream is charged exactly what it caused: the
tokens delivered before the cancel plus its ghost tokens (made after the abort was asked,
never sent; counted in ``/metrics``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agentconsole.server.runtime.sim.live_text import count_tokens

from .report import Report
from .serve import TENANT, metric_values, start_serve


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=5, help="attacks (and cancels)")
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=250)
    parser.add_argument("--cut-after", type=int, default=200, help="tokens before hanging up")
    parser.add_argument("--quota", type=int, default=300, help="the program's token quota")


def _chat(program_id: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "agentconsole": {"program_id": program_id},
    }


async def _stream(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    cut_after: int,
    on_token: asyncio.Event | None = None,
) -> int:
    """Tokens received before hanging up after ``cut_after`` or the end; ``on_token`` is set
    at the first. A chunk may carry several tokens; the simulated model's tokens are its
    tokenizer's (:func:`count_tokens`: 4 characters each), so the text received counts them."""
    text = ""
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            text += choices[0].get("delta", {}).get("content") or ""
            if text and on_token is not None:
                on_token.set()
            if count_tokens(text) >= cut_after:
                break
    return count_tokens(text)


@dataclass(frozen=True, slots=True)
class Attack:
    """One attack: tokens the streams got, the next call's status, the program's charge."""

    delivered: int
    next_status: int
    tokens_used: int


@dataclass(frozen=True, slots=True)
class Cancel:
    """One cancel mid-stream: its status, tokens delivered, charged and ghost."""

    status: int
    delivered: int
    charged: int
    ghost: int


async def _attack(client: httpx.AsyncClient, pid: str, args: argparse.Namespace) -> Attack:
    created = await client.post(
        "/v1/programs", json={"program_id": pid, "quotas": {"tokens": args.quota}}
    )
    if created.status_code != 201:
        raise RuntimeError(f"program not created: {created.text}")
    body = _chat(pid, args.max_tokens)
    got = await asyncio.gather(
        *(_stream(client, body, args.cut_after) for _ in range(args.streams))
    )
    after = await client.post("/v1/chat/completions", json={**_chat(pid, 8), "stream": False})
    program = (await client.get(f"/v1/programs/{pid}")).json()
    return Attack(sum(got), after.status_code, int(program["tokens_used"]))


async def _cancel(client: httpx.AsyncClient, url: str, pid: str) -> Cancel:
    ghosts_before = metric_values(url).get("agentconsole_ghost_tokens_total", 0.0)
    first = asyncio.Event()
    streaming = asyncio.ensure_future(_stream(client, _chat(pid, 2000), 10**6, first))
    await asyncio.wait_for(first.wait(), 30)
    await asyncio.sleep(0.3)  # let it stream a while
    cancelled = await client.post(f"/v1/programs/{pid}/cancel", json={})
    delivered = await asyncio.wait_for(streaming, 30)
    await asyncio.sleep(0.2)  # the call's end is accounted just after its stream closed
    program = (await client.get(f"/v1/programs/{pid}")).json()
    ghosts = metric_values(url).get("agentconsole_ghost_tokens_total", 0.0) - ghosts_before
    (node,) = program["nodes"]
    return Cancel(cancelled.status_code, delivered, int(node["output_tokens"]), int(ghosts))


async def _trials(url: str, args: argparse.Namespace) -> tuple[list[Attack], list[Cancel]]:
    attacks: list[Attack] = []
    cancels: list[Cancel] = []
    async with httpx.AsyncClient(base_url=url, headers=TENANT, timeout=60) as client:
        for t in range(args.trials):
            attacks.append(await _attack(client, f"bypass-{t}", args))
            cancels.append(await _cancel(client, url, f"cancel-{t}"))
    return attacks, cancels


def run(args: argparse.Namespace, command: str) -> Report:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="reliability-quota-"))
    server = start_serve(workdir / "quota.duckdb")
    try:
        attacks, cancels = asyncio.run(_trials(server.url, args))
    finally:
        server.stop()
    report = Report("quota-bypass", command)
    f = report.figures
    f["attack"] = (
        f"{args.streams} streams x max_tokens {args.max_tokens}, cut after "
        f"{args.cut_after}, quota {args.quota}; {args.trials} trials"
    )
    delivered = [a.delivered for a in attacks]
    f["tokens delivered per trial (max)"] = f"{delivered} ({max(delivered)})"
    f["without the fix (streams x cut)"] = args.streams * args.cut_after
    f["next call's status"] = str(sorted({a.next_status for a in attacks}))
    f["program tokens_used (prompt + output)"] = str([a.tokens_used for a in attacks])
    f["cancel: delivered / charged / ghost"] = str(
        [f"{c.delivered}/{c.charged}/{c.ghost}" for c in cancels]
    )
    bound = args.quota + args.streams
    over = [n for n in delivered if n > bound]
    report.check(
        f"delivered <= quota + one token per stream ({bound})", not over, over or "none over"
    )
    refused = [a.next_status for a in attacks if a.next_status != 429]
    report.check("the next call answers 429", not refused, refused or "429 every time")
    under = [a for a in attacks if a.tokens_used < a.delivered]
    report.check("program charged at least what it was sent", not under, under or "yes")
    wrong = [c for c in cancels if c.charged != c.delivered + c.ghost]
    report.check("cancelled call charged = delivered + ghost tokens", not wrong, wrong or "equal")
    failed = [c.status for c in cancels if c.status != 200]
    report.check("cancel answers 200", not failed, failed or "200 every time")
    return report

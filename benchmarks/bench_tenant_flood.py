"""A light tenant beside a hostile flood, on ``serve`` (seed section 13: one tenant's load must
not starve another's).

Each arm starts its own ``agentconsole serve --runtime sim`` (the simulated H200 in real time,
the admission door on, the product's defaults) on a fresh DuckDB file and drives it over
loopback HTTP for ``--seconds``:

* ``alone``: tenant ``light`` runs ``--light-agents`` agents, each a loop of programs of four
  calls (a 2,000-token prompt, 100 output tokens, a 0.5 s tool between calls);
* ``flooded``: the same, beside tenant ``flood`` running ``--flood-agents`` agents that each
  open program after program of one long call (20,000-token prompt, 2,000 output tokens) as
  fast as they are answered, several times what the engine serves.

It prints the light tenant's call latency and program time in both arms and their ratio
(flooded over alone): the fairness guard's promise is that the ratio stays small however hard
the flood pushes. A refused call (429/503) is retried after its ``retry-after`` and counts in
its latency; so is one whose kept-alive connection the server closed as it was reused. The
times are of the calls and programs answered: a program still unanswered when the run ends
(``--seconds`` after the last start) is counted apart (``unfinished``). ``--fairness
KEY=VALUE`` sets the engine guard's fields (e.g. ``beta=1000`` turns the aging bound off) for
both arms.

    .venv/bin/python benchmarks/bench_tenant_flood.py [--seconds 150] [--flood-agents 200]
        [--light-agents 4] [--fairness beta=1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from bench_api import start_server

from agentconsole.scheduler.metrics import percentile

KEYS = {"flood": "sk-flood", "light": "sk-light"}


@dataclass
class Shape:
    """One agent's programs: ``calls`` calls of ``prompt_tokens`` then ``output_tokens``."""

    prompt_tokens: int
    output_tokens: int
    calls: int
    tool_s: float


LIGHT = Shape(prompt_tokens=2_000, output_tokens=100, calls=4, tool_s=0.5)
FLOOD = Shape(prompt_tokens=20_000, output_tokens=2_000, calls=1, tool_s=0.0)


@dataclass
class Seen:
    """What one tenant's agents measured."""

    call_s: list[float] = field(default_factory=list)
    program_s: list[float] = field(default_factory=list)
    refused: int = 0
    dropped: int = 0
    #: programs (each with its call) still unanswered at the end, left out of the times above
    unfinished: int = 0


def config_file(folder: Path, fairness: dict[str, float]) -> Path:
    lines = ["[auth]", 'operator_keys = ["sk-op"]', "[auth.tenant_keys]"]
    lines += [f'"{key}" = "{tenant}"' for tenant, key in KEYS.items()]
    if fairness:
        lines.append("[runtime.extra.fairness]")
        lines += [f"{name} = {value}" for name, value in fairness.items()]
    path = folder / "serve.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def filler(tokens: int, seed: str) -> str:
    """Text the sim's tokenizer counts as about ``tokens`` tokens (four characters each),
    unique per program so that no two programs share a prefix by accident."""
    return random.Random(seed).randbytes(tokens * 2).hex()


async def chat(
    client: httpx.AsyncClient,
    url: str,
    key: str,
    program: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    seen: Seen,
    stop_at: float,
) -> str | None:
    """One call, retried while refused (429/503) until ``stop_at``; None if it never ran."""
    start = time.monotonic()
    body = {"model": "sim", "messages": messages, "max_tokens": max_tokens, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {key}", "X-Program-Id": program}
    while time.monotonic() < stop_at:
        try:
            reply = await client.post(
                f"{url}/v1/chat/completions",
                json=body,
                headers=headers,
                timeout=max(stop_at - time.monotonic(), 1.0),
            )
        except httpx.TimeoutException:
            return None
        except httpx.TransportError:  # a kept-alive connection the server closed as it was reused
            seen.dropped += 1
            await asyncio.sleep(0.5)
            continue
        if reply.status_code == 200:
            seen.call_s.append(time.monotonic() - start)
            content: str = reply.json()["choices"][0]["message"]["content"] or ""
            return content
        if reply.status_code not in (429, 503):
            raise RuntimeError(f"{reply.status_code}: {reply.text[:300]}")
        seen.refused += 1
        await asyncio.sleep(min(float(reply.headers.get("retry-after", "1")), 5.0))
    return None


async def agent(
    client: httpx.AsyncClient,
    url: str,
    tenant: str,
    shape: Shape,
    seen: Seen,
    measure_until: float,
    stop_at: float,
) -> None:
    """Programs of ``shape`` one after another; a program counts if it started in time."""
    key = KEYS[tenant]
    while time.monotonic() < measure_until:
        program = f"{tenant}-{uuid.uuid4().hex[:12]}"
        start = time.monotonic()
        messages = [
            {"role": "system", "content": filler(shape.prompt_tokens, program)},
            {"role": "user", "content": f"task {program}"},
        ]
        for step in range(shape.calls):
            answer = await chat(
                client, url, key, program, messages, shape.output_tokens, seen, stop_at
            )
            if answer is None:  # still unanswered at the end: counted apart, not in the times
                seen.unfinished += 1
                return
            messages.append({"role": "assistant", "content": answer})
            if step < shape.calls - 1:
                await asyncio.sleep(shape.tool_s)
                messages.append({"role": "user", "content": f"tool result {step}"})
        with contextlib.suppress(httpx.TransportError):  # the program ends idle otherwise
            await client.post(
                f"{url}/v1/programs/{program}/finish", headers={"Authorization": f"Bearer {key}"}
            )
        seen.program_s.append(time.monotonic() - start)


async def drive(url: str, seconds: float, flood_agents: int, light_agents: int) -> dict[str, Seen]:
    """Run both tenants' agents for ``seconds``; the programs started by then run to their end
    for at most ``seconds`` more: one still unanswered then counts as ``unfinished``, its time
    in no percentile."""
    seen = {"flood": Seen(), "light": Seen()}
    measure_until = time.monotonic() + seconds
    stop_at = measure_until + seconds
    limits = httpx.Limits(max_connections=flood_agents + light_agents + 8)
    async with httpx.AsyncClient(limits=limits) as client:
        runs = [
            agent(client, url, "flood", FLOOD, seen["flood"], measure_until, stop_at)
            for _ in range(flood_agents)
        ]
        runs += [
            agent(client, url, "light", LIGHT, seen["light"], measure_until, stop_at)
            for _ in range(light_agents)
        ]
        await asyncio.gather(*runs)
    return seen


def arm(
    seconds: float, flood_agents: int, light_agents: int, fairness: dict[str, float]
) -> dict[str, Seen]:
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp:
        folder = Path(tmp)
        config = config_file(folder, fairness)
        proc, host, port = start_server(
            folder / "flood.duckdb", serve_args=("--config", str(config))
        )
        url = f"http://{host}:{port}"
        try:
            return asyncio.run(drive(url, seconds, flood_agents, light_agents))
        finally:
            proc.terminate()
            proc.wait(60)


def summary(seen: Seen) -> dict[str, float]:
    out: dict[str, float] = {"calls": len(seen.call_s), "programs": len(seen.program_s)}
    for name, values in (("call", seen.call_s), ("program", seen.program_s)):
        for q in (50, 95):
            out[f"{name}_p{q}_s"] = percentile(values, q) if values else float("nan")
    out["refused"], out["dropped"], out["unfinished"] = seen.refused, seen.dropped, seen.unfinished
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--flood-agents", type=int, default=200)
    parser.add_argument("--light-agents", type=int, default=4)
    parser.add_argument("--fairness", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    fairness = {k: float(v) for k, v in (item.split("=", 1) for item in args.fairness)}
    alone = summary(arm(args.seconds, 0, args.light_agents, fairness)["light"])
    flooded_runs = arm(args.seconds, args.flood_agents, args.light_agents, fairness)
    flooded, flood = summary(flooded_runs["light"]), summary(flooded_runs["flood"])
    title = f"light tenant ({args.light_agents} agents) alone and beside {args.flood_agents} "
    title += f"flooding agents, {args.seconds:g} s each"
    print(title + (f", fairness {fairness}" if fairness else ""))
    print(f"{'light tenant':<22}{'alone':>10}{'flooded':>10}{'ratio':>8}")
    for name in ("call_p50_s", "call_p95_s", "program_p50_s", "program_p95_s"):
        ratio = flooded[name] / alone[name] if alone[name] > 0 else float("nan")
        print(f"{name:<22}{alone[name]:>10.2f}{flooded[name]:>10.2f}{ratio:>7.2f}x")
    for name in ("calls", "programs", "unfinished", "refused", "dropped"):
        print(f"{name:<22}{alone[name]:>10.0f}{flooded[name]:>10.0f}")
    print(
        f"flood tenant: {flood['calls']:.0f} calls answered, call P50 {flood['call_p50_s']:.1f} s,"
        f" P95 {flood['call_p95_s']:.1f} s (of those answered; {flood['unfinished']:.0f}"
        f" unanswered at the end), {flood['refused']:.0f} refusals"
    )
    if args.json:
        report = {"alone": alone, "flooded": flooded, "flood": flood, "fairness": fairness}
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""``agentconsole replay``: drive a live server with a trace, with a progress bar."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentconsole.replay.demo import demo_trace
from agentconsole.replay.engine import run_replay
from agentconsole.replay.results import ProgramOutcome, ReplayOptions, ReplaySummary, ToolMode
from agentconsole.sample_traces import TraceError, load_trace


def parse_keys(pairs: Sequence[str], default_key: str | None) -> dict[str, str]:
    """``tenant=key`` pairs; ``default_key`` plays every tenant not named."""
    keys: dict[str, str] = {}
    for pair in pairs:
        tenant, sep, key = pair.partition("=")
        if not sep or not tenant or not key:
            raise click.BadParameter(f"expected TENANT=KEY, got {pair!r}", param_hint="--key")
        keys[tenant] = key
    if default_key:
        keys.setdefault("*", default_key)
    if not keys:
        raise click.BadParameter("give --api-key or at least one --key TENANT=KEY")
    return keys


def run_replay_command(
    url: str,
    trace: Path | None,
    keys: dict[str, str],
    *,
    speed: float,
    tools: ToolMode,
    token_scale: float,
    max_output_tokens: int | None,
    limit: int | None,
    model: str,
    id_prefix: str = "",
) -> ReplaySummary:
    """Load the trace, replay it with a rich progress bar, print the summary; then fail
    (exit 1) when any program failed, so a script sees that the replay did not go through."""
    try:
        programs = load_trace(trace or demo_trace())
    except (OSError, TraceError) as error:
        raise click.ClickException(str(error)) from error
    if limit is not None:
        programs = programs[:limit]
    options = ReplayOptions(
        tools=tools,
        token_scale=token_scale,
        max_output_tokens=max_output_tokens,
        model=model,
        id_prefix=id_prefix,
    )
    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]replay"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[states]}"),
    )  # fmt: skip
    counts = {"finished": 0, "cancelled": 0, "failed": 0, "skipped": 0}

    async def main() -> ReplaySummary:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        with Progress(*columns, console=console) as bar:
            task = bar.add_task("replay", total=len(programs), states="")

            def advance(outcome: ProgramOutcome) -> None:
                counts[outcome.state] += 1
                states = "  ".join(f"{k} {v}" for k, v in counts.items() if v)
                bar.update(task, advance=1, states=states)

            return await run_replay(url, keys, programs, speed, stop, options=options,
                                    progress=advance)  # fmt: skip

    try:
        summary = asyncio.run(main())
    except Exception as error:  # the server refused to set up (e.g. tools): say why
        raise click.ClickException(f"replay failed: {error}") from error
    click.echo(summary.render())
    failed = summary.count("failed")
    if failed:
        raise click.ClickException(f"{failed} of {len(summary.outcomes)} programs failed")
    return summary

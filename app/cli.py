"""The ``agentconsole`` command line.

Each subcommand imports its implementation only when it runs, so ``agentconsole --help`` and
``agentconsole dashboard`` never import torch or SGLang (the vLLM CLI pattern).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from agentconsole import __version__
from agentconsole.kvtiers.tiers import HOST_WRITE_POLICIES, WRITE_THROUGH
from agentconsole.kvtiers.toolwait import DEFAULT_TOOL_WAIT_POLICY, available_tool_wait_policies
from agentconsole.scheduler.composition import DEFAULT_MAX_DECODE_PASSES
from agentconsole.scheduler.policies import DEFAULT_POLICY
from agentconsole.scheduler.policies import available as available_policies
from agentconsole.server.runtime.registry import available_runtimes


class Finite(click.FloatRange):
    """A ``FloatRange`` that refuses ``nan`` and ``inf`` too: click's passes ``nan`` through
    (no comparison with a bound fails), and no rate, SLO or speed here means either."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def server_url(value: str) -> str:
    """``--url``: an ``http(s)://host[:port]`` URL (a bare ``127.0.0.1:8000`` left the
    dashboard "reconnecting" for good, its scheme unsupported)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise click.BadParameter(f"expected http://HOST:PORT, got {value!r}")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="agentconsole")
def main() -> None:
    """Program-aware serving for LLM agents, with an operations console."""


@main.command()
@click.option("--workload", default=None, help="Named workload to generate (see --list).")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="JSONL trace file instead of a workload (--rate, --sweep and --loads rescale its"
    " arrivals: they refuse a trace whose programs all arrive at once).",
)
@click.option(
    "--policies",
    default="all",
    show_default=True,
    help="Comma-separated scheduling policies, or 'all'.",
)
@click.option(
    "--kv-policy",
    default=DEFAULT_TOOL_WAIT_POLICY,
    show_default=True,
    help="Tool-wait KV policy, or a comma-separated list to compare.",
)
@click.option(
    "--programs",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Programs to generate; a --trace runs whole unless this cuts it.",
)
@click.option(
    "--rate",
    type=Finite(min=0, min_open=True),
    default=None,
    help="Program arrivals per second (default: the workload's own).",
)
@click.option("--sweep", is_flag=True, help="Find each policy's highest rate meeting the SLO.")
@click.option(
    "--loads",
    default=None,
    metavar="X,Y,...",
    help="Run every policy at these multiples of the measured peak (e.g. 0.25,0.5,0.9,1.5,3,5).",
)
@click.option(
    "--slo-p95",
    type=Finite(min=0, min_open=True),
    default=None,
    help="P95 E2E SLO in seconds for --sweep (default: 3x the workload's P95 alone).",
)
@click.option("--gpu", default="H200-141GB", show_default=True)
@click.option("--model", default="llama-3.1-8b", show_default=True)
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--profile", default=None, help="Calibration profile (JSON file or bundled name).")
@click.option(
    "--max-running",
    type=click.IntRange(min=1),
    default=None,
    help="Engine --max-running-requests (default: the bench's engine default).",
)
@click.option(
    "--set",
    "workload_params",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a workload parameter (JSON value), e.g. --set p_slow_tool=0.05.",
)
@click.option(
    "--host-tier/--no-host-tier",
    default=True,
    show_default=True,
    help="Host-DRAM KV tier (HiCache); without it evicted KV is recomputed.",
)
@click.option(
    "--host-write-policy",
    type=click.Choice(HOST_WRITE_POLICIES),
    default=WRITE_THROUGH,
    show_default=True,
    help="When the host tier gets its copy (SGLang's --hicache-write-policy): write_through"
    " copies each node as it is computed, write_back when it is evicted (the engine runs no"
    " pass until the copy is done).",
)
@click.option(
    "--holds/--no-holds",
    default=False,
    show_default=True,
    help="Program-aware policies hold a queued call's cached context until it runs.",
)
@click.option(
    "--admission/--no-admission",
    default=True,
    show_default=True,
    help="Program-aware policies start a new program only while memory holds the started ones.",
)
@click.option(
    "--door-order",
    type=click.Choice(["shortest-first", "arrival"]),
    default="shortest-first",
    show_default=True,
    help="Which waiting program the door starts first: highest response ratio of its kind's"
    " expected run (learned from finished programs), or first come first served.",
)
@click.option(
    "--tenant-weight",
    "tenant_weights",
    multiple=True,
    metavar="TENANT=WEIGHT",
    help="A tenant's weight in the shares of service and of program starts (serve's"
    " limits.tenant_weights; unnamed tenants 1). Our policies only: stock-sglang has no shares.",
)
@click.option(
    "--rank-aware-steps/--no-rank-aware-steps",
    default=False,
    show_default=True,
    help="Run a worse-ranked prefill stall-free under better-ranked decoders (mixed chunks"
    " sized by the policy's rank), which SGLang with agentconsole's plugin does not do; the"
    " default runs whole chunks, deferred a bounded streak (--defer-prefill-steps), as serve"
    " on SGLang does.",
)
@click.option(
    "--mixed-chunk/--no-mixed-chunk",
    default=False,
    show_default=True,
    help="Decode rides along with prefill chunks (SGLang's --enable-mixed-chunk); the default"
    " stalls decoding during a prefill step, as SGLang ships and serve runs it.",
)
@click.option(
    "--defer-prefill-steps",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_DECODE_PASSES,
    show_default=True,
    help="Decode-only steps in a row a pending prefill waits while better-ranked calls decode"
    " (the plugin's rule around SGLang's _should_defer_prefill; 0: never, as stock SGLang).",
)
@click.option(
    "--replicas",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Data-parallel engine replicas behind the KV-aware router.",
)
@click.option(
    "--routing",
    default="affinity",
    show_default=True,
    help="How calls are placed over the replicas: affinity (what serve --dp does) or"
    " round-robin (SGLang's own data-parallel default, which stock-sglang always uses).",
)
@click.option(
    "--prefix-cache",
    default="ordinary",
    show_default=True,
    help="What the simulated prefix cache reuses after a mid-prompt insertion: ordinary (up to"
    " the insertion, as real engines) or relative (CacheSlide-style, the suffix at a correction"
    " cost), or ordinary,relative to compare them side by side.",
)
@click.option(
    "--models",
    default=None,
    metavar="NAME[:tpN][:xR],...",
    help="Several models, each on its own GPUs (e.g. llama-3.1-70b:tp4,llama-3.1-8b); each"
    " call's model is chosen by --model-rules (default for multi-model: those two).",
)
@click.option(
    "--model-rules",
    default="all",
    show_default=True,
    help="With --models: model selection rules (all-large, fixed-roles, finish-time), a"
    " comma-separated list run side by side with ratios to all-large, or 'all'.",
)
@click.option(
    "--cross-model-kv",
    default="none",
    show_default=True,
    help="With --models: none (count the prefix another model cached as lost cross-model"
    " reuse) or shared-prefill (reuse a compatible model's shared layers, recompute the"
    " rest), or none,shared-prefill side by side (stock-sglang always none).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --loads: draws of the workload per cell (seeds --seed on), each row their mean,"
    " each policy's P50/P95 paired with fcfs's same draw (mean and worst draw).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: CPU count).",
)
@click.option("--list", "list_only", is_flag=True, help="List workloads and policies.")
def bench(**options: object) -> None:
    """Replay a workload through every policy in virtual time and compare them side by side."""
    from agentconsole.bench.command import run_bench

    run_bench(**options)


@main.command("make-model")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--layers", type=click.IntRange(1, 64), default=2, show_default=True, help="Decoder layers."
)
@click.option(
    "--hidden",
    type=click.IntRange(8, 4096),
    default=64,
    show_default=True,
    help="Hidden width (a multiple of 8; the MLP is twice as wide).",
)
@click.option(
    "--like",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Derive from this model directory instead (a fine-tune of its upper layers).",
)
@click.option(
    "--keep-layers",
    type=click.IntRange(0, 64),
    default=None,
    help="With --like: the leading layers (and embeddings) kept bit for bit.",
)
def make_model(
    out_dir: Path,
    seed: int,
    layers: int,
    hidden: int,
    like: Path | None,
    keep_layers: int | None,
) -> None:
    """Write a tiny random Llama-style model with a locally trained tokenizer to OUT_DIR
    (two of different sizes make a multi-model ``serve``: docs/DEPLOY.md). With ``--like
    BASE --keep-layers K``: BASE with its embeddings and first K layers kept and the rest
    random, so ``/v1/models/compatibility`` finds their KV shared for K layers."""
    if (like is None) != (keep_layers is None):
        raise click.UsageError("--like and --keep-layers go together")
    given = click.get_current_context().get_parameter_source
    if like is not None and any(
        given(name) is click.core.ParameterSource.COMMANDLINE for name in ("layers", "hidden")
    ):  # they were ignored without a word: a variant has its base's shape
        raise click.UsageError(
            "--layers and --hidden make a new model: a --like variant has its base's"
        )
    if like is not None and keep_layers is not None:
        from agentconsole.server.runtime.sglang.tiny_model import ForeignFolder
        from agentconsole.server.runtime.sglang.tiny_variants import derive_variant

        try:
            path = derive_variant(like, out_dir, keep_layers=keep_layers, seed=seed)
        except ForeignFolder as error:
            raise click.BadParameter(str(error), param_hint="OUT_DIR") from None
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--keep-layers") from None
        except OSError as error:  # no model there (its config.json or weights missing)
            raise click.BadParameter(
                f"{like} is not a model folder: {error}", param_hint="--like"
            ) from None
        click.echo(f"tiny model ready: {path} ({like} with its first {keep_layers} layers)")
        return
    from agentconsole.server.runtime.sglang.tiny_model import ForeignFolder, make_tiny_model

    try:
        path = make_tiny_model(out_dir, seed=seed, layers=layers, hidden=hidden)
    except ForeignFolder as error:
        raise click.BadParameter(str(error), param_hint="OUT_DIR") from None
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--hidden") from None
    click.echo(f"tiny model ready: {path} ({layers} layers, hidden {hidden})")


@main.command()
@click.option(
    "--runtime",
    type=click.Choice(available_runtimes()),
    default=None,
    help="[sglang]",
)
@click.option(
    "--model",
    default=None,
    help="SGLang model path (on a GPU required; on a CPU the tiny model), or sim model preset.",
)
@click.option("--host", default=None, help="[127.0.0.1]")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="[8000]")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option(
    "--policy",
    default=None,
    help=f"Scheduling policy: {', '.join(available_policies())} [{DEFAULT_POLICY}]"
    " (bench --list's stock-sglang is a bench baseline, not a serve policy).",
)
@click.option(
    "--kv-policy",
    default=None,
    help=f"Tool-wait KV policy: {', '.join(available_tool_wait_policies())}"
    f" [{DEFAULT_TOOL_WAIT_POLICY}].",
)
@click.option("--time-scale", type=Finite(min=0), default=None, help="Sim only.")
@click.option(
    "--dp", type=click.IntRange(min=1), default=None, help="SGLang data-parallel ranks [1]."
)
@click.option(
    "--workers",
    default=None,
    callback=lambda _ctx, _param, value: value.split(",") if value else None,
    help="sglang-router: the SGLang workers' URLs, comma-separated.",
)
@click.option("--router", default=None, help="sglang-router: the router's URL.")
@click.option("--demo/--no-demo", default=None, help="Demo tenants and built-in agents.")
@click.option("--tui/--no-tui", default=None, help="Open the terminal dashboard.")
@click.option("--log-level", default=None)
@click.option(
    "--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
def serve(config_file: Path | None, **options: object) -> None:
    """Serve the OpenAI-compatible and program API (flags > AGENTCONSOLE_* env > --config)."""
    from agentconsole.serve import serve_command

    serve_command(config_file, options)


@main.command()
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("agentconsole.duckdb"),
    show_default=True,
)
def export(out_dir: Path, db: Path) -> None:
    """Write every store table to OUT_DIR as Parquet (stop serve first: it holds the file)."""
    from agentconsole.export import run_export

    for path in run_export(db, out_dir):
        click.echo(path)


@main.group()
def trace() -> None:
    """Traces of what a server recorded (what-if replay with ``bench --trace``)."""


@trace.command("export")
@click.option(
    "--db", type=click.Path(dir_okay=False, path_type=Path), default=Path("agentconsole.duckdb"),
    show_default=True, help="The store file (stop serve first: it holds the file).",
)  # fmt: skip
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--since", default=None, help="Programs arriving from (unix s or ISO 8601).")
@click.option("--until", default=None, help="Programs arriving before (unix s or ISO 8601).")
@click.option("--tenant", default=None, help="One tenant's programs only.")
def trace_export(
    db: Path, out: Path, since: str | None, until: str | None, tenant: str | None
) -> None:
    """Rebuild the recorded programs as a JSONL trace (arrivals from the window's start)."""
    from agentconsole.export import run_trace_export

    count = run_trace_export(db, out, since, until, tenant)
    click.echo(f"{count} programs -> {out}")


@main.command()
@click.option(
    "--model",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Model directory (default: the tiny CPU model, made once in the cache).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the fitted profile (load it with --profile) [default:"
    " cpu-2core__<model folder's name>__tp1.calibrated.json; tiny-llama without --model].",
)
@click.option("--programs", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--rate", type=Finite(min=0, min_open=True), default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--max-total-tokens", type=click.IntRange(min=1024), default=32768, show_default=True)
@click.option("--quick", is_flag=True, help="A smaller step grid (for tests).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def calibrate(**options: object) -> None:
    """Measure the live SGLang engine, write a simulator profile, report the simulator's error."""
    from agentconsole.calibrate import run_calibrate

    run_calibrate(**options)


@main.command()
@click.option(
    "--url",
    default="http://127.0.0.1:8000",
    show_default=True,
    callback=lambda ctx, param, value: server_url(value),
    help="Server URL.",
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="JSONL trace [the bundled seed-mix.small.jsonl].",
)
@click.option(
    "--api-key",
    default="sk-dev",
    show_default=True,
    envvar="AGENTCONSOLE_API_KEY",
    show_envvar=True,
    help="Key for every trace tenant not given by --key.",
)
@click.option("--key", "keys", multiple=True, metavar="TENANT=KEY", help="One tenant's key.")
@click.option(
    "--speed",
    type=Finite(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Divides the trace's arrival offsets, tool latencies and cancel times; LLM calls run"
    " at the server's pace and deadlines stay as recorded.",
)
@click.option(
    "--tools", type=click.Choice(["gateway", "agent"]), default="gateway", show_default=True
)
@click.option(
    "--token-scale",
    type=Finite(min=0),
    default=1.0,
    show_default=True,
    help="Scale prompt sizes (about 0.02 for the tiny CPU model).",
)
@click.option("--max-output-tokens", type=click.IntRange(min=1), default=None)
@click.option("--programs", "limit", type=click.IntRange(min=1), default=None, help="First N.")
@click.option(
    "--model",
    default="auto",
    show_default=True,
    help="The calls' model: a served model's name, or auto (the server's choice; any name"
    " on a server of one model).",
)
@click.option(
    "--id-prefix",
    default=None,
    help="Prefix of the programs' ids on the server (default: replay-<time>-, fresh each run,"
    " so a trace replays again on the same server; '' for the trace's own ids).",
)
def replay(
    url: str,
    trace_path: Path | None,
    api_key: str,
    keys: tuple[str, ...],
    speed: float,
    tools: str,
    token_scale: float,
    max_output_tokens: int | None,
    limit: int | None,
    model: str,
    id_prefix: str | None,
) -> None:
    """Drive a live server with a trace's programs in real time; print E2E p50/p95.

    Exits 1, after the summary, when any program failed (cancelled ones are the trace's own)."""
    from agentconsole.replay.command import parse_keys, run_replay_command

    run_replay_command(
        url,
        trace_path,
        parse_keys(keys, api_key),
        speed=speed,
        tools="agent" if tools == "agent" else "gateway",
        token_scale=token_scale,
        max_output_tokens=max_output_tokens,
        limit=limit,
        model=model,
        id_prefix=f"replay-{int(time.time())}-" if id_prefix is None else id_prefix,
    )


@main.command()
@click.option(
    "--url",
    envvar="AGENTCONSOLE_URL",
    default="http://127.0.0.1:8000",
    show_default=True,
    callback=lambda ctx, param, value: server_url(value),
    help="Server URL [env AGENTCONSOLE_URL].",
)
@click.option(
    "--key",
    envvar="AGENTCONSOLE_KEY",
    default="sk-operator",
    show_default=True,
    help="API key; operator actions need an operator key [env AGENTCONSOLE_KEY].",
)
def dashboard(url: str, key: str) -> None:
    """The terminal dashboard: a client of a running server's HTTP API and live feed."""
    from agentconsole.ui.tui.app import run_dashboard

    run_dashboard(url, key)

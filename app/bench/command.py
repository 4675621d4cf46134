"""The ``bench`` command: build the run matrix, run it in parallel, print and write reports."""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from agentconsole.bench.context_fit import refuse_overflow
from agentconsole.bench.html_report import write_html
from agentconsole.bench.loads import run_loads
from agentconsole.bench.models_table import ALL_LARGE, models_table
from agentconsole.bench.options import (
    check_outputs,
    check_trace,
    defaulted,
    names_of,
    parse_loads,
    settle_hardware,
    tenant_weights,
    workload_params,
)
from agentconsole.bench.runner import (
    BASELINES,
    BenchSetup,
    cost_model,
    load_programs,
    model_pools,
    model_setup,
    recorded_trace,
    run_one,
    trace_programs,
)
from agentconsole.bench.sweep import max_rate
from agentconsole.bench.table import (
    counterpart,
    loads_table,
    metrics_table,
    policy_of,
    prefix_cache_table,
    sweep_table,
    tenant_slowdown_table,
)
from agentconsole.export import make_parent
from agentconsole.kvtiers.router import get_router
from agentconsole.kvtiers.toolwait import available_tool_wait_policies
from agentconsole.sample_traces.format import TraceProgram
from agentconsole.sample_traces.generator import available_workloads
from agentconsole.scheduler.models import available_rules
from agentconsole.scheduler.policies import available
from agentconsole.server.runtime.sim.bound import ThroughputBound, throughput_bound
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.crossmodel import CROSS_MODEL_MODES
from agentconsole.server.runtime.sim.hardware import model as model_spec
from agentconsole.server.runtime.sim.prefixcache import PREFIX_CACHE_MODES

T = TypeVar("T")
STOCK = "stock-sglang"
#: the row the sweep tables' ratios are taken against: the first of these that ran, else the
#: first row (not runner.py's ``BASELINES``, engine set-ups: ``fcfs`` here is a policy's row)
RATIO_REFERENCES = (STOCK, "fcfs")
#: a workload's model when ``--model`` is not given: one whose window holds its contexts
#: (long-coding's reach 400K tokens, past Llama 3.1's 128K)
WORKLOAD_MODELS = {"long-coding": "qwen2.5-7b-1m"}
#: a workload's models when ``--models`` is not given: ``multi-model``'s candidates, the 70B
#: on 4 GPUs (tensor parallel: its weights and KV need more than one H200), the 8B on one
WORKLOAD_POOLS = {"multi-model": "llama-3.1-70b:tp4,llama-3.1-8b"}
#: default SLO: this multiple of the workload's P95 E2E when each program runs alone
DEFAULT_SLO_FACTOR = 3.0


def run_bench(**opts: Any) -> None:
    console = Console(stderr=False)
    if opts["list_only"]:
        console.print("workloads:", ", ".join(available_workloads()))
        console.print("policies:", ", ".join([*available(), *BASELINES]))
        console.print("kv policies:", ", ".join(available_tool_wait_policies()))
        return
    check_outputs(opts)
    if opts["trace_path"] and opts["workload"] is not None and not defaulted("workload"):
        # the trace would run and the workload be dropped without a word
        raise click.UsageError(
            f"--trace replays its own programs, --workload {opts['workload']} generates others:"
            " give one of them"
        )
    loads = parse_loads(opts["loads"]) if opts["loads"] is not None else None
    if not opts["workload"] and not opts["trace_path"]:
        opts["workload"] = "seed-mix"
    if opts["workload"] in WORKLOAD_MODELS and not opts["trace_path"] and defaulted("model"):
        opts["model"] = WORKLOAD_MODELS[opts["workload"]]
    if opts["workload"] in WORKLOAD_POOLS and not opts["trace_path"] and not opts["models"]:
        opts["models"] = WORKLOAD_POOLS[opts["workload"]]
    settle_hardware(opts)
    policies = names_of(opts["policies"], [*available(), *BASELINES], "policy")
    kv_policies = names_of(opts["kv_policy"], available_tool_wait_policies(), "kv policy")
    dims = _dimensions(opts)
    if opts["loads"] and any(len(values) > 1 for _, values in dims):
        raise click.UsageError(
            "--loads compares policies under one --prefix-cache mode, model rule and"
            " cross-model KV mode"
        )
    if opts["seeds"] > 1 and (not opts["loads"] or opts["trace_path"]):
        raise click.UsageError("--seeds draws a named workload again per --loads cell")
    if opts["slo_p95"] is not None and not opts["sweep"]:  # it ran without a word
        raise click.UsageError("--slo-p95 is the SLO of --sweep's search: give --sweep too")
    if opts["sweep"] and not opts["trace_path"] and opts["programs"] < 2:
        # one program arrives alone: no arrival rate to start the search from
        raise click.UsageError("--sweep scales the arrival rate: give --programs 2 or more")
    workload = None if opts["trace_path"] else opts["workload"]
    setup = BenchSetup(
        workload=workload,
        trace=opts["trace_path"],
        programs=opts["programs"],
        rate=opts["rate"],
        seed=opts["seed"],
        gpu=opts["gpu"],
        model=opts["model"],
        tp=opts["tp"],
        profile=opts["profile"],
        max_running=opts["max_running"],
        replicas=opts["replicas"],
        routing=opts["routing"],
        host_tier=opts["host_tier"],
        host_write_policy=opts["host_write_policy"],
        holds=opts["holds"],
        rank_aware_steps=opts["rank_aware_steps"],
        defer_prefill_steps=opts["defer_prefill_steps"],
        mixed_chunk=opts["mixed_chunk"],
        admission=opts["admission"],
        shortest_first=opts["door_order"] == "shortest-first",
        params=workload_params(opts["workload_params"], workload),
        models=opts["models"],
        tenant_weights=tenant_weights(opts["tenant_weights"]),
    )
    try:  # fail fast on a bad workload, trace, parameter or hardware, before forking workers
        if setup.trace is not None:
            setup = _trace_length(setup)
            check_trace(trace_programs(setup), opts)
        programs = load_programs(setup)
        _check_weighted_tenants(setup, programs)
        cost = cost_model(setup)
        for served in model_pools(setup):  # the top tier's is costed above, the others here
            served.cost()
        model_setup(setup, programs)
        get_router(setup.routing, 1)
    except (ValueError, KeyError) as exc:  # KeyError: an unknown GPU, model or profile
        raise click.UsageError(str(exc.args[0] if exc.args else exc)) from None
    _check_windows(setup, programs, cost, opts["seeds"])
    variants = _variants(setup, dims)
    setup = next(iter(variants.values()))
    cells = [(p, k, v) for p in policies for k in kv_policies for v in variants]

    def label(p: str, k: str, v: str) -> str:
        """The run's column: the policy, plus what varies (kv policy, the variant)."""
        return "+".join([p, *([k] if len(kv_policies) > 1 else []), *([v] if v else [])])

    jobs = opts["jobs"] or os.cpu_count() or 1
    with ProcessPoolExecutor(max_workers=jobs) as pool, _progress() as progress:
        runs = _gather(
            progress,
            "runs",
            {label(p, k, v): pool.submit(run_one, variants[v], p, k) for p, k, v in cells},
        )
        result: dict[str, Any] = {"setup": _setup_json(setup), "policies": runs}
        for field, values in dims:
            if len(values) > 1:
                result["setup"][field] = values
        title = f"{setup.label} on {_hardware(setup)}"
        if opts["sweep"]:
            slo = opts["slo_p95"]
            if slo is None:
                slo = DEFAULT_SLO_FACTOR * _ideal_p95(runs)
            start = next(iter(runs.values()))["rate_programs_per_s"]
            result["slo_p95_s"] = slo
            if not setup.models:  # the bound is of one model's replicas
                bound = throughput_bound(programs, cost, replicas=setup.replicas)
                result["throughput_bound"] = _bound_json(bound)
            result["sweep"] = _gather(
                progress,
                "sweep",
                {
                    label(p, k, v): pool.submit(max_rate, variants[v], p, k, slo, start)
                    for p, k, v in cells
                },
            )
        if loads:
            runs_at = [(label(p, k, v), p, k) for p, k, v in cells]
            result["load_sweep"] = run_loads(
                pool,
                setup,
                runs_at,
                loads,
                lambda what, fs: _gather(progress, what, fs),
                seeds=opts["seeds"],
            )
    # never squeeze the side-by-side table: a narrow terminal scrolls instead of truncating
    needed = 50 + 15 * len(runs)
    wide = Console(width=max(console.width, needed)) if console.width < needed else console
    wide.print(metrics_table(title, runs))
    shown: list[Table] = []  # the tables after the metrics one, for the HTML page too

    def show(table: Table, width: int) -> None:
        """Print ``table`` at least ``width`` wide, and keep it for the page."""
        Console(width=max(console.width, width)).print(table)
        shown.append(table)

    modes = dict(dims)["prefix_cache"]
    if len(modes) > 1:
        groups = _groups(cells, label, variants, "prefix_cache", runs)
        show(prefix_cache_table(groups, modes), 120)
    if setup.models:
        by_rule = _groups(cells, label, variants, "model_rule", runs, also="cross_model_kv")
        sweeps = _groups(
            cells, label, variants, "model_rule", result.get("sweep"), "cross_model_kv"
        )
        columns = len({c for by in by_rule.values() for c in by})
        for table in models_table(by_rule, sweeps):  # each column twice: value and ratio
            show(table, 60 + 26 * 2 * columns)
    if "sweep" in result:
        console.print(f"SLO: P95 E2E <= {result['slo_p95_s']:.1f} s")
        reference = _ratio_reference(result["sweep"])
        bound_rate = result.get("throughput_bound", {}).get("programs_per_s", math.nan)
        show(sweep_table(result["sweep"], reference, bound_rate), 110)
        floors = [name for name, row in result["sweep"].items() if not row["found"]]
        if floors:
            console.print(
                f"The SLO held at every rate tried for {', '.join(floors)}: the "
                f"{len(programs)} programs arrive as one burst the engine finishes in time, "
                "so no max rate was found (>=: the highest rate tried); more --programs."
            )
        ran = counterpart(result["sweep"], next(iter(result["sweep"])), reference)
        if "throughput_bound" in result and ran is not None and result["sweep"][ran]["found"]:
            # the reference's first run (several with a --kv-policy list: fcfs+keep, ...)
            console.print(
                f"No schedule can finish more than {bound_rate:.3f} programs/s on this "
                "hardware (perfect prefix reuse, free weights, prefill fully hidden under "
                f"decode: {result['throughput_bound']['seconds_per_program']:.2f} s of GPU per"
                f" program); 4x {ran} would be {4 * result['sweep'][ran]['max_rate']:.3f}."
            )
    if "load_sweep" in result:
        reference = _ratio_reference(result["load_sweep"]["loads"])
        show(loads_table(result["load_sweep"], reference), 175)
        by_tenant = tenant_slowdown_table(result["load_sweep"])
        if by_tenant is not None:
            show(by_tenant, 60)
    if opts["json_path"]:
        make_parent(opts["json_path"])
        Path(opts["json_path"]).write_text(json.dumps(_clean(result), indent=2) + "\n")
        console.print(f"wrote {opts['json_path']}")
    if opts["html_path"]:
        write_html(Path(opts["html_path"]), title, result, shown)
        console.print(f"wrote {opts['html_path']}")


def _trace_length(setup: BenchSetup) -> BenchSetup:
    """``setup`` with the programs to take from its trace: all of them unless ``--programs``
    was given; when it takes fewer than the trace has, one line on stderr says so (the rest
    of the trace is left out)."""
    assert setup.trace is not None
    recorded = len(recorded_trace(setup.trace))
    if defaulted("programs"):
        return replace(setup, programs=recorded)
    if recorded > setup.programs:
        click.echo(
            f"--programs {setup.programs}: running the first {setup.programs} of the"
            f" {recorded} programs in {setup.trace}",
            err=True,
        )
    return setup


def _check_windows(
    setup: BenchSetup, programs: list[TraceProgram], cost: CostModel, seeds: int
) -> None:
    """Refuse the run (``click.UsageError``) when an LLM call of ``programs``, or of the
    other ``--seeds`` draws of its workload, fits the context window of no model it may run
    on: serve would refuse it, the simulator would run it (``context_fit``). One model: the
    cost model's (a ``--profile``'s model too); several: each pool's preset."""
    pools = model_pools(setup)
    if pools:
        windows = {p.name: model_spec(p.name).context_window for p in pools}
        way_out = "{} in --models"
    else:
        windows = {cost.model.name: cost.model.context_window}
        way_out = "--model {}" if setup.profile is None else "--model {} (without --profile)"
    # each further draw is another workload: its contexts are its own
    draws = (load_programs(replace(setup, seed=setup.seed + k)) for k in range(1, seeds))
    refuse_overflow(itertools.chain(programs, *draws), windows, way_out)


def _dimensions(opts: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """What the runs vary besides the policies: the setup field and its values, each list
    in the order given (``all-large`` first among rules: the ratios are to it)."""
    modes = names_of(opts["prefix_cache"], list(PREFIX_CACHE_MODES), "prefix cache")
    crosses = names_of(opts["cross_model_kv"], list(CROSS_MODEL_MODES), "cross-model KV mode")
    if not opts["models"]:
        if not (defaulted("model_rules") and defaulted("cross_model_kv")):
            raise click.UsageError("--model-rules and --cross-model-kv need --models")
        return [("prefix_cache", modes)]
    rules = names_of(opts["model_rules"], available_rules(), "model rule")
    rules.sort(key=lambda r: r != ALL_LARGE)  # stable: the rest keep their order
    return [("prefix_cache", modes), ("model_rule", rules), ("cross_model_kv", crosses)]


def _variants(setup: BenchSetup, dims: list[tuple[str, list[str]]]) -> dict[str, BenchSetup]:
    """Every combination of the dimensions' values as a setup, keyed by the values of the
    dimensions that vary, joined by ``+`` (empty when none varies)."""
    out: dict[str, BenchSetup] = {}
    for combo in itertools.product(*(values for _, values in dims)):
        fields: dict[str, Any] = {n: v for (n, _), v in zip(dims, combo, strict=True)}
        key = "+".join(v for (_, values), v in zip(dims, combo, strict=True) if len(values) > 1)
        out[key] = replace(setup, **fields)
    return out


def _groups(
    cells: list[tuple[str, str, str]],
    label: Callable[[str, str, str], str],
    variants: dict[str, BenchSetup],
    field: str,
    rows: dict[str, Any] | None,
    also: str | None = None,
) -> dict[str, dict[str, Any]]:
    """``rows`` (by run label) regrouped for a side-by-side table: one group per run with
    ``field`` (and ``also``) taken out of its label, each mapping those values to its row."""
    groups: dict[str, dict[str, Any]] = {}
    if rows is None:
        return groups
    for p, k, v in cells:
        setup = variants[v]
        taken = [str(getattr(setup, f)) for f in (field, also) if f is not None]
        rest = "+".join(part for part in v.split("+") if part and part not in taken)
        column = "+".join(part for part in v.split("+") if part in taken) or taken[0]
        groups.setdefault(label(p, k, rest), {})[column] = rows[label(p, k, v)]
    return groups


def _hardware(setup: BenchSetup) -> str:
    """What the run's engines are, for the table's title (and the profile costing them)."""
    if setup.models:
        return f"{setup.gpu}: {setup.models}"
    costed = f", profile {setup.profile}" if setup.profile else ""
    return f"{setup.replicas} x {setup.gpu} x {setup.model} (tp {setup.tp}{costed})"


def _ratio_reference(rows: dict[str, Any]) -> str:
    """The policy ratios are taken to: the first of ``RATIO_REFERENCES`` that ran, else the
    first row's (for a load sweep, ``rows`` maps loads to their rows). A policy, not a row's
    label: with a ``--kv-policy`` list or variants the labels add ``+keep``, ``+relative``...,
    and the tables pair each row with the reference's that differs only in the policy."""
    names = next(iter(rows.values())) if rows and _is_load(next(iter(rows))) else rows
    policies = [policy_of(name) for name in names]
    for name in RATIO_REFERENCES:
        if name in policies:
            return name
    return policies[0]


def _is_load(key: str) -> bool:
    try:
        float(key)
    except ValueError:
        return False
    return True


def _progress() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    )


def _gather(progress: Progress, what: str, futures: dict[str, Future[T]]) -> dict[str, T]:
    task = progress.add_task(what, total=len(futures))
    done: dict[str, T] = {}

    def tick(_: Future[T]) -> None:
        progress.advance(task)

    for fut in futures.values():
        fut.add_done_callback(tick)
    for name, fut in futures.items():
        done[name] = fut.result()
    return done


def _ideal_p95(runs: dict[str, dict[str, Any]]) -> float:
    values = [float(r["ideal_e2e_p95_s"]) for r in runs.values()]
    values = [v for v in values if not math.isnan(v)]
    if not values:
        raise click.UsageError("--sweep needs --slo-p95 for a trace without ideal E2E")
    return values[0]


def _bound_json(bound: ThroughputBound) -> dict[str, float]:
    per = max(bound.programs, 1)
    return {
        "programs_per_s": bound.programs_per_s,
        "seconds_per_program": bound.seconds_per_program,
        "compute_s_per_program": bound.compute_s / per,
        "memory_s_per_program": bound.memory_s / per,
    }


def _check_weighted_tenants(setup: BenchSetup, programs: list[TraceProgram]) -> None:
    """A ``--tenant-weight`` naming no tenant of the workload would change nothing: refused,
    naming the tenants there are (a misspelt name is otherwise a silent equal-weight run)."""
    tenants = {p.tenant for p in programs}
    unknown = [t for t, _ in setup.tenant_weights if t not in tenants]
    if unknown:
        raise click.UsageError(
            f"--tenant-weight: no program of tenant {', '.join(map(repr, unknown))} in"
            f" {setup.label}; its tenants: {', '.join(sorted(tenants))}"
        )


def _setup_json(setup: BenchSetup) -> dict[str, Any]:
    return {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in ((f, getattr(setup, f)) for f in setup.__dataclass_fields__)
    }


def _clean(value: Any) -> Any:
    """JSON without NaN (null instead), so any JSON reader accepts the file."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value

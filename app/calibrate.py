"""``agentconsole calibrate``: fit the simulator to the live SGLang engine and report its error.

On this machine's CPU engine (the tiny model unless ``--model`` is given) it:

1. measures engine step times over a small grid of batch sizes x context lengths (the plugin
   records every step; ``server/runtime/sglang/calibration.py``),
2. measures what a call spends outside engine steps, fits the cost model and writes a
   ``Profile`` JSON that the simulated runtime loads (``--profile``, ``bench --profile``),
3. reports the simulator's relative error on each measured step, and
4. runs the same small workload (seed-mix scaled to the tiny model) on the real engine and in
   the simulator with the fitted profile, and reports the error on program end-to-end time.
   The real engine plays it through ``serve``'s own program glue (``replay_as_served``: the
   program driver under serve's default scheduling and tool-wait policies and its default
   door), so the simulator is fitted to what ``serve`` runs; the simulator runs the same
   defaults (``SimConfig``) on the real engine's KV pool (``--max-total-tokens``).

Goals: step time within 10%, program E2E within 15% (mean absolute relative error).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentconsole.export import check_output, make_parent
from agentconsole.replay.served import replay_as_served
from agentconsole.sample_traces.format import TraceProgram
from agentconsole.scheduler.metrics import percentile
from agentconsole.scheduler.policies import DEFAULT_POLICY
from agentconsole.scheduler.runtime import GenerationRequest, Runtime
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.live.replay import SegmentText
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime, default_model_dir
from agentconsole.server.runtime.sglang.calibration import (
    GridPoint,
    fit_profile,
    measure_call_overhead,
    measure_grid,
    step_errors,
    with_call_overhead,
)
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.textbook import TextBook
from agentconsole.server.runtime.sglang.workload_scale import tiny_seed_mix
from agentconsole.server.runtime.sim.calls import EngineConfig
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.profile import Profile, save_profile
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation
from agentconsole.settings import LimitsSection

GRID = tuple(GridPoint(b, c, 32) for b in (1, 4, 16) for c in (32, 256, 1024))
QUICK_GRID = tuple(GridPoint(b, c, 16) for b in (1, 8) for c in (64, 512))
STEP_GOAL, E2E_GOAL = 0.10, 0.15


@dataclass(slots=True)
class CalibrationReport:
    profile_path: str
    efficiency: dict[str, float]
    step_mean_abs_error: float
    step_max_abs_error: float
    steps: list[dict[str, float]] = field(default_factory=list)
    e2e_mean_abs_error: float = 0.0
    e2e_p50_real_s: float = 0.0
    e2e_p50_sim_s: float = 0.0
    e2e_p95_real_s: float = 0.0
    e2e_p95_sim_s: float = 0.0
    programs: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CalibrateOptions:
    """The ``calibrate`` command's options (see ``agentconsole calibrate --help``)."""

    model: Path | None
    out: Path
    programs: int
    rate: float
    seed: int
    max_total_tokens: int
    quick: bool
    json_path: Path | None


def profile_path(model: Path | None) -> Path:
    """Where a profile of ``model`` goes by default: named after its folder (the tiny CPU
    model's without one), so calibrating two models does not write one file twice."""
    name = model.resolve().name if model is not None else "tiny-llama"
    return Path(f"cpu-2core__{name}__tp1.calibrated.json")


def run_calibrate(**options: Any) -> CalibrationReport:
    """Run the whole calibration (see the module docstring); prints and returns the report.
    ``options`` are :class:`CalibrateOptions` fields."""
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    if options.get("out") is None:  # the command's default: named after the model
        options["out"] = profile_path(options.get("model"))
    opts = CalibrateOptions(**options)
    # refused before minutes of measuring, as ``bench`` checks its outputs (a --json in a
    # missing folder ended the run in a traceback, its report lost)
    check_output(opts.out, "--out")
    if opts.json_path is not None:
        check_output(opts.json_path, "--json")
    return asyncio.run(_calibrate(opts))


async def _calibrate(opts: CalibrateOptions) -> CalibrationReport:
    model = opts.model
    if model is None:
        from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

        model = make_tiny_model(default_model_dir_for_cli())
    settings = EngineSettings(model_path=model, max_total_tokens=opts.max_total_tokens)
    runtime = SGLangRuntime(settings, policy=DEFAULT_POLICY)
    print(f"calibrate: starting the engine ({model})", flush=True)
    await runtime.start()
    try:
        book = TextBook(runtime.engine.tokenizer_manager.tokenizer, seed=opts.seed)
        await _warm_up(runtime, book)
        print("calibrate: measuring the step grid", flush=True)
        points = await measure_grid(runtime, book, QUICK_GRID if opts.quick else GRID)
        overhead = await measure_call_overhead(runtime, book)
        profile = with_call_overhead(fit_profile(points), overhead)
        make_parent(opts.out)
        save_profile(profile, opts.out)
        errors = step_errors(profile, points)
        trace = tiny_seed_mix(opts.programs, opts.rate, opts.seed)
        print(f"calibrate: replaying {len(trace)} programs on the engine", flush=True)
        await runtime.flush_cache()
        real = await replay_as_serve_runs_it(runtime, trace, book)
        sim = _simulate(trace, profile, runtime)
    finally:
        await runtime.stop()
    report = _report(opts.out, profile, errors, real, sim)
    _print(report)
    if opts.json_path is not None:
        make_parent(opts.json_path)
        opts.json_path.write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
    return report


async def replay_as_serve_runs_it(
    runtime: Runtime, trace: list[TraceProgram], book: SegmentText
) -> dict[str, float]:
    """Each program's E2E seconds with ``trace`` played on ``runtime`` (started) through
    serve's own program glue under serve's defaults: the default scheduling policy, the
    default tool-wait policy, the door as ``limits.program_admission`` leaves it. The
    simulated side (:func:`_simulate`) runs the same defaults, so the error compares like
    with like."""
    door = LimitsSection().program_admission
    served = await replay_as_served(runtime, trace, book, policy=DEFAULT_POLICY, door=door)
    return {o.program_id: o.e2e_s for o in served.outcomes}


def default_model_dir_for_cli() -> Path:
    from agentconsole.server.runtime.registry import RuntimeOptions

    return default_model_dir(RuntimeOptions())


async def _warm_up(runtime: SGLangRuntime, book: TextBook) -> None:
    """A few calls so one-time costs (allocation, first kernels) stay out of the grid."""
    for i in range(3):
        ticket = CallTicket(f"warm/n{i}/1", "warm", f"n{i}", "calib", arrival=time.time())
        req = GenerationRequest(
            ticket,
            book.text(f"warm/{i}", 200),
            max_tokens=8,
            forced_output_tokens=8,
            cache_namespace="calib",
        )
        stream = runtime.submit(req)
        async for _ in stream:
            pass
        await stream.result()


def _simulate(
    trace: list[TraceProgram], profile: Profile, runtime: SGLangRuntime
) -> dict[str, float]:
    config = sim_config_of(runtime.engine.server_args)
    result = Simulation(trace, CostModel.from_profile(profile), config).run()
    return {
        pid: p.finished_at - p.created_at
        for pid, p in result.controller.programs.items()
        if p.finished_at is not None
    }


def sim_config_of(server_args: Any) -> SimConfig:
    """The simulated engine configured as the real one (``server_args``, SGLang's) runs."""
    return SimConfig(
        policy=DEFAULT_POLICY,
        engine=EngineConfig(
            max_running_requests=int(getattr(server_args, "max_running_requests", None) or 256),
            chunked_prefill_size=int(getattr(server_args, "chunked_prefill_size", None) or 4096),
            mixed_chunk=bool(getattr(server_args, "enable_mixed_chunk", False)),
            # SGLang runs whole prefill chunks (the plugin orders its queue and defers a
            # prefill for better-ranked decoders, ``defer_prefill_steps``; it does not size
            # mixed chunks by rank): simulate exactly that
            rank_aware_steps=False,
            # the real engine's KV pool (``--max-total-tokens``, always set on the CPU
            # engine): left unset, the simulator would size it from the profile's hardware
            # preset (millions of tokens), so its door budget and eviction would not be
            # the real engine's
            hbm_kv_tokens=int(server_args.max_total_tokens),
            host_kv_tokens=0,
        ),
    )


def _report(
    out: Path,
    profile: Profile,
    errors: list[tuple[Any, float]],
    real: dict[str, float],
    sim: dict[str, float],
) -> CalibrationReport:
    abs_err = [abs(e) for _, e in errors]
    common = sorted(set(real) & set(sim))
    e2e_err = [abs(sim[p] / real[p] - 1.0) for p in common if real[p] > 0]
    return CalibrationReport(
        profile_path=str(out),
        efficiency=asdict(profile.efficiency),
        step_mean_abs_error=statistics.fmean(abs_err) if abs_err else 0.0,
        step_max_abs_error=max(abs_err, default=0.0),
        steps=[{**asdict(p), "relative_error": e} for p, e in errors],
        e2e_mean_abs_error=statistics.fmean(e2e_err) if e2e_err else 0.0,
        e2e_p50_real_s=percentile([real[p] for p in common], 50, empty=0.0),
        e2e_p50_sim_s=percentile([sim[p] for p in common], 50, empty=0.0),
        e2e_p95_real_s=percentile([real[p] for p in common], 95, empty=0.0),
        e2e_p95_sim_s=percentile([sim[p] for p in common], 95, empty=0.0),
        programs=[{"program": p, "real_s": real[p], "sim_s": sim[p]} for p in common],
    )


def _print(r: CalibrationReport) -> None:
    def mark(err: float, goal: float) -> str:
        return "ok" if err <= goal else "MISSED"

    eff = r.efficiency
    print(f"profile written: {r.profile_path}")
    print("fitted: " + ", ".join(f"{k}={v:.4g}" for k, v in eff.items()))
    print(f"{'step':>32} {'measured ms':>12} {'simulated ms':>13} {'error':>8}")
    for s in r.steps:
        label = (
            f"prefill {s['prefill_tokens']} tok (+{s['prefill_context_tokens']} cached)"
            if s["prefill_tokens"]
            else f"decode batch {s['decode_batch']} ctx {s['decode_context']}"
        )
        sim_ms = s["seconds"] * (1 + s["relative_error"]) * 1e3
        print(f"{label:>32} {s['seconds'] * 1e3:12.2f} {sim_ms:13.2f} {s['relative_error']:+8.1%}")
    print(
        f"step time: mean |error| {r.step_mean_abs_error:.1%}, max {r.step_max_abs_error:.1%}"
        f" (goal {STEP_GOAL:.0%}: {mark(r.step_mean_abs_error, STEP_GOAL)})"
    )
    print(
        f"program E2E ({len(r.programs)} programs): mean |error| {r.e2e_mean_abs_error:.1%}"
        f" (goal {E2E_GOAL:.0%}: {mark(r.e2e_mean_abs_error, E2E_GOAL)}); "
        f"P50 real {r.e2e_p50_real_s:.2f}s sim {r.e2e_p50_sim_s:.2f}s, "
        f"P95 real {r.e2e_p95_real_s:.2f}s sim {r.e2e_p95_sim_s:.2f}s"
    )

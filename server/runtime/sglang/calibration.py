"""Calibrating the simulator against the live SGLang engine: measure steps, fit, compare.

* :func:`measure_grid` runs, for each (batch, context) of a small grid, ``batch`` concurrent
  calls with fresh prompts of ``context`` tokens and a forced output, then the same prompts
  again with a short new turn (prefill over a cached context, as agents do), with the plugin
  recording every engine step (``control.record_steps``, ``steps.py``). A step's time is
  SGLang's scheduling plus forward plus result processing, as in the simulator's step.
  Prefill steps are kept one by one; the decode steps of a grid point are summarised by
  their median.
* :func:`fit_profile` fits the cost model's ``mfu``, ``bw_eff``, ``step_overhead_s`` (with
  ``fit_efficiency``) and ``per_seq_overhead_s`` (a search around the slope of decode time
  over batch size, which ``fit_efficiency`` holds fixed) and returns a ``Profile``.
* :func:`step_errors` is the simulator's relative error on each measured step.
* :func:`measure_call_overhead` is what a call spends outside engine steps (tokenising,
  the scheduler's receive loop, detokenising, streaming): the cost model's
  ``call_overhead_s``, which no step measurement can see.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.control import STEPS_FILE
from agentconsole.server.runtime.sglang.textbook import TextBook
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.fit import fit_efficiency
from agentconsole.server.runtime.sim.hardware import gpu, model
from agentconsole.server.runtime.sim.profile import Efficiency, MeasuredStep, Profile


@dataclass(frozen=True, slots=True)
class GridPoint:
    batch: int
    context: int
    decode_tokens: int


async def measure_grid(
    runtime: SGLangRuntime,
    book: TextBook,
    grid: Sequence[GridPoint],
    *,
    repeats: int = 3,
    decode_by_interval: bool = False,
) -> list[MeasuredStep]:
    """Measured steps of ``grid`` on ``runtime`` (started, plugin on), each grid point run
    ``repeats`` times and summarised by medians (a shared machine is noisy). Changes the
    runtime's control (step recording on, then off again) and fills its cache with grid
    prompts."""
    points: list[MeasuredStep] = []
    async with _recording_steps(runtime) as steps_file:
        for n, g in enumerate(grid):
            rows: list[dict[str, Any]] = []
            for rep in range(repeats):
                steps_file.unlink(missing_ok=True)
                await _run_point(runtime, book, g, tag=f"{n}-{rep}")
                # no settle pause here: a lost last row barely moves a median, while an idle
                # pause lets the scheduler sleep and the next step pay its wake-up
                rows.extend(_read_steps(steps_file))
            points.extend(summarise(rows, decode_by_interval=decode_by_interval))
    return points


async def _run_point(runtime: SGLangRuntime, book: TextBook, g: GridPoint, tag: str) -> None:
    """Round 1: ``batch`` fresh prompts of ``context`` tokens. Round 2: the same prompts plus a
    short new turn, so the prefill reads ``context`` cached tokens (the agent pattern)."""
    keys = [f"calib/{tag}/{i}/{time.time_ns()}" for i in range(g.batch)]

    async def one(i: int, turn: int) -> None:
        prompt = book.text(keys[i], g.context) + book.text(f"{keys[i]}/turn", 16 * turn)
        await _call(runtime, f"calib-{tag}-{i}/turn{turn}/1", prompt, g.decode_tokens)

    for turn in (0, 1):
        await asyncio.gather(*(one(i, turn) for i in range(g.batch)))


async def measure_call_overhead(
    runtime: SGLangRuntime, book: TextBook, *, calls: int = 8, context: int = 256
) -> float:
    """Median time a call spends outside engine steps (seconds): ``calls`` single calls one
    after another, each call's wall time from ``submit`` to its result minus the recorded
    steps it ran in. Changes the runtime's control like :func:`measure_grid`."""
    spans: list[tuple[float, float, float]] = []  # (wall start, wall end, seconds)
    async with _recording_steps(runtime) as steps_file:
        steps_file.unlink(missing_ok=True)
        for i in range(calls):
            rid = f"calib-call-{i}-{time.time_ns()}/call/1"
            started, clock = time.time(), time.perf_counter()
            await _call(runtime, rid, book.text(rid, context), 16)
            spans.append((started, time.time(), time.perf_counter() - clock))
            await asyncio.sleep(_SETTLE_S)
        rows = _read_steps(steps_file)
    # a step belongs to the call whose span holds its start (calls run one at a time)
    outside: list[float] = [
        seconds - sum(float(r["seconds"]) for r in rows if begin <= r["start"] <= end)
        for begin, end, seconds in spans
    ]
    return max(statistics.median(outside), 0.0)


#: Pause after switching recording on and after a call: the plugin reads its control file
#: at most every 20 ms, and writes a step's row only after that step's output went out.
_SETTLE_S = 0.05


@asynccontextmanager
async def _recording_steps(runtime: SGLangRuntime) -> AsyncIterator[Path]:
    """Switch the plugin's step recording on for the block; yields the steps file."""
    runtime.control.state.record_steps = True
    runtime.control.write()
    try:
        await asyncio.sleep(_SETTLE_S)
        yield runtime.state_dir / STEPS_FILE
    finally:
        runtime.control.state.record_steps = False
        runtime.control.write()


async def _call(runtime: SGLangRuntime, rid: str, prompt: str, output_tokens: int) -> None:
    """One call with exactly ``output_tokens`` generated, run to its end (``rid``:
    program/node/attempt)."""
    program, node, _ = rid.split("/")
    ticket = CallTicket(rid, program, node, "calib", arrival=time.time())
    req = GenerationRequest(
        ticket,
        prompt,
        max_tokens=output_tokens,
        forced_output_tokens=output_tokens,
        cache_namespace="calib",
    )
    stream = runtime.submit(req)
    async for _ in stream:
        pass
    await stream.result()


def _read_steps(path: Any) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def summarise(
    rows: list[dict[str, Any]], *, decode_by_interval: bool = False
) -> list[MeasuredStep]:
    """Medians of like steps: prefill steps grouped by their size and cached context (to 1/8),
    decode steps by batch size.

    ``decode_by_interval`` (GPU, overlap scheduler on): a decode step's time is the interval
    between the starts of consecutive decode steps of the same batch, because SGLang overlaps
    the CPU work of one step with the GPU work of the previous one, so the phases' sum
    overstates a step."""
    if decode_by_interval:
        rows = _decode_intervals(rows)
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for row in rows:
        if row["prefill_tokens"] > 0:
            key = (0, _bucket(row["prefill_tokens"]), _bucket(row["prefill_context_tokens"]))
        elif row["decode_batch"] > 0:
            key = (1, row["decode_batch"], 0)
        else:
            continue
        groups.setdefault(key, []).append(row)
    out = []
    for (kind, _, _), items in sorted(groups.items()):
        pick = sorted(items, key=lambda r: r["seconds"])[len(items) // 2]
        if kind == 0:
            out.append(
                MeasuredStep(
                    seconds=pick["seconds"],
                    prefill_tokens=pick["prefill_tokens"],
                    prefill_attn_pairs=pick["prefill_attn_pairs"],
                    prefill_context_tokens=pick["prefill_context_tokens"],
                    prefill_context_sq=pick.get("prefill_context_sq", 0),
                )
            )
        else:
            out.append(
                MeasuredStep(
                    seconds=statistics.median(r["seconds"] for r in items),
                    decode_batch=pick["decode_batch"],
                    decode_context=round(statistics.median(r["decode_context"] for r in items)),
                )
            )
    return out


def _decode_intervals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [r for r in rows if r["prefill_tokens"] > 0]
    for row, nxt in itertools.pairwise(rows):
        same = row["prefill_tokens"] == nxt["prefill_tokens"] == 0
        if same and row["decode_batch"] == nxt["decode_batch"] > 0:
            out.append({**row, "seconds": nxt["start"] - row["start"]})
    return out


def _bucket(tokens: int) -> int:
    """``tokens`` rounded to its top three bits (groups sizes within about 1/8)."""
    if tokens < 8:
        return tokens
    shift = tokens.bit_length() - 3
    return (tokens >> shift) << shift


CPU_PRESET = ("cpu-2core", "tiny-llama")


def base_cost(
    efficiency: Efficiency | None = None, preset: tuple[str, str] = CPU_PRESET
) -> CostModel:
    """The cost model of ``preset`` (GPU and model names of ``server/runtime/sim/hardware.py``;
    default: the CPU engine serving the tiny model), tp 1."""
    return CostModel(gpu(preset[0]), model(preset[1]), 1, efficiency)


def fit_profile(
    points: Sequence[MeasuredStep],
    prior: Efficiency | None = None,
    *,
    preset: tuple[str, str] = CPU_PRESET,
    status: str = "measured on the live CPU engine (SGLang 0.5.23, torch_native, tiny-llama)",
) -> Profile:
    """A ``Profile`` of ``preset`` fitted to ``points`` (see the module docstring); requires
    decode points."""
    prior = prior or Efficiency()
    decode = [p for p in points if p.decode_batch > 0 and p.prefill_tokens == 0]
    hi = max(2.0 * _slope([(p.decode_batch, p.seconds) for p in decode]), 1e-6)

    def fitted(per_seq: float) -> tuple[float, Efficiency]:
        start = base_cost(replace(prior, per_seq_overhead_s=per_seq), preset)
        eff = fit_efficiency(start, points)
        return _sq_error(base_cost(eff, preset), points), eff

    # fit_efficiency holds per_seq_overhead_s fixed: search it, coarse grid then golden section
    grid = [hi * k / 10 for k in range(11)]
    best = min(grid, key=lambda x: fitted(x)[0])
    lo, up = max(best - hi / 10, 0.0), min(best + hi / 10, hi)
    ratio = (5**0.5 - 1) / 2
    for _ in range(25):
        a, b = up - ratio * (up - lo), lo + ratio * (up - lo)
        if fitted(a)[0] <= fitted(b)[0]:
            up = b
        else:
            lo = a
    _, eff = min((fitted(x) for x in (best, (lo + up) / 2)), key=lambda t: t[0])
    return Profile(
        gpu=preset[0],
        model=preset[1],
        tp=1,
        efficiency=eff,
        sources={
            "mfu": "fit_efficiency on the measured steps below (agentconsole calibrate)",
            **dict.fromkeys(
                (
                    "attention_mfu",
                    "bw_eff",
                    "step_overhead_s",
                    "prefill_overhead_s",
                    "prefill_context_token_s",
                    "prefill_context_sq_s",
                ),
                "fit_efficiency on the measured steps below",
            ),
            "per_seq_overhead_s": "1-D search (grid, golden section), fit_efficiency inside",
            "allreduce_latency_s": "unused (tp 1)",
            "allreduce_bw_eff": "unused (tp 1)",
            "status": status,
        },
        points=tuple(points),
    )


def with_call_overhead(profile: Profile, seconds: float) -> Profile:
    """``profile`` with ``call_overhead_s`` set to a measured ``seconds``."""
    return replace(
        profile,
        efficiency=replace(profile.efficiency, call_overhead_s=seconds),
        sources={
            **profile.sources,
            "call_overhead_s": "measure_call_overhead: a call's wall time minus its steps",
        },
    )


def step_errors(
    profile: Profile, points: Sequence[MeasuredStep]
) -> list[tuple[MeasuredStep, float]]:
    """(point, predicted / measured - 1) for each point under ``profile``."""
    cost = CostModel.from_profile(profile)
    return [(p, _predict(cost, p) / p.seconds - 1.0) for p in points if p.seconds > 0]


def _predict(cost: CostModel, p: MeasuredStep) -> float:
    return cost.step_seconds(
        p.prefill_tokens,
        p.prefill_attn_pairs,
        p.decode_batch,
        p.decode_context,
        p.prefill_context_tokens,
        p.prefill_context_sq,
    )


def _sq_error(cost: CostModel, points: Sequence[MeasuredStep]) -> float:
    return sum((_predict(cost, p) / p.seconds - 1.0) ** 2 for p in points if p.seconds > 0)


def _slope(xy: Sequence[tuple[float, float]]) -> float:
    if len({x for x, _ in xy}) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in xy)
    my = statistics.fmean(y for _, y in xy)
    den = sum((x - mx) ** 2 for x, _ in xy)
    return sum((x - mx) * (y - my) for x, y in xy) / den

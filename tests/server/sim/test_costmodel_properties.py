"""Invariants of the cost model: closed-form decode runs equal the loop, and costs are monotone."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentconsole.server.runtime.sim.costmodel import CostModel, attention_pairs, preset
from agentconsole.server.runtime.sim.hardware import GpuSpec, model
from agentconsole.server.runtime.sim.profile import MeasuredStep

PRESETS = [
    ("H200-141GB", "llama-3.1-8b", 1),
    ("H100-80GB", "llama-3.1-8b", 1),
    ("H200-141GB", "llama-3.1-70b", 4),
    ("H100-80GB", "llama-3.1-70b", 8),
    ("cpu-2core", "tiny-llama", 1),
]


def _loop(m: CostModel, batch: int, context: int, steps: int) -> float:
    return sum(m.decode_step_seconds(batch, context + j * batch) for j in range(steps))


def _is_compute_bound(m: CostModel, batch: int, context: int) -> bool:
    gemm, attention, memory, _ = m.roofline_terms(
        MeasuredStep(0.0, decode_batch=batch, decode_context=context)
    )
    eff = m.efficiency
    compute = gemm / eff.mfu + attention / (eff.attention_mfu or eff.mfu)
    return compute > memory / eff.bw_eff


@given(
    which=st.sampled_from(PRESETS),
    batch=st.integers(0, 1024),
    per_request=st.integers(0, 200_000),
    steps=st.integers(0, 400),
)
def test_closed_form_equals_loop(
    which: tuple[str, str, int], batch: int, per_request: int, steps: int
) -> None:
    m = preset(*which)
    got = m.decode_steps_seconds(batch, batch * per_request, steps)
    assert got == pytest.approx(_loop(m, batch, batch * per_request, steps), rel=1e-9, abs=1e-15)


@settings(max_examples=200)
@given(
    peak=st.floats(1e11, 1e16),
    bw=st.floats(1e9, 1e14),
    batch=st.integers(1, 2048),
    context=st.integers(0, 10_000_000),
    steps=st.integers(1, 300),
)
def test_closed_form_equals_loop_on_any_roofline(
    peak: float, bw: float, batch: int, context: int, steps: int
) -> None:
    # Extreme GPUs make either side's slope the larger one, so both crossover directions occur.
    g = GpuSpec("x", 200 * 2**30, peak, bw, 5e10, 9e11, 0)
    m = CostModel(g, model("llama-3.1-8b"))
    got = m.decode_steps_seconds(batch, context, steps)
    assert got == pytest.approx(_loop(m, batch, context, steps), rel=1e-9)


def test_closed_form_across_the_compute_to_memory_crossover() -> None:
    m = preset("H200-141GB", "llama-3.1-8b", 1)
    batch, context, steps = 512, 512 * 100, 1500
    assert _is_compute_bound(m, batch, context)
    assert not _is_compute_bound(m, batch, context + (steps - 1) * batch)
    assert m.decode_steps_seconds(batch, context, steps) == pytest.approx(
        _loop(m, batch, context, steps), rel=1e-12
    )


def test_closed_form_across_the_memory_to_compute_crossover() -> None:
    # With peak FLOP/s between 1.33x and 5.3x the bandwidth, short contexts are bound by the
    # weight reads and long ones by attention FLOPs (crossover near 80K tokens here).
    g = GpuSpec("slow-compute", 200 * 2**30, 3e13, 1e13, 5e10, 9e11, 0)
    m = CostModel(g, model("llama-3.1-8b"))
    batch, context, steps = 1, 76_000, 10_000
    assert not _is_compute_bound(m, batch, context)
    assert _is_compute_bound(m, batch, context + (steps - 1) * batch)
    assert m.decode_steps_seconds(batch, context, steps) == pytest.approx(
        _loop(m, batch, context, steps), rel=1e-12
    )


@given(
    which=st.sampled_from(PRESETS),
    batch=st.integers(1, 512),
    per_request=st.integers(0, 50_000),
    first=st.integers(0, 200),
    second=st.integers(0, 200),
)
def test_decode_runs_compose(
    which: tuple[str, str, int], batch: int, per_request: int, first: int, second: int
) -> None:
    m = preset(*which)
    ctx = batch * per_request
    whole = m.decode_steps_seconds(batch, ctx, first + second)
    parts = m.decode_steps_seconds(batch, ctx, first) + m.decode_steps_seconds(
        batch, ctx + first * batch, second
    )
    assert whole == pytest.approx(parts, rel=1e-9)


ARGS = st.tuples(*(st.integers(0, 2_000_000) for _ in range(5)))


@given(
    which=st.sampled_from(PRESETS), args=ARGS, index=st.integers(0, 4), extra=st.integers(1, 10**6)
)
def test_step_cost_is_monotone_in_every_argument(
    which: tuple[str, str, int], args: tuple[int, int, int, int, int], index: int, extra: int
) -> None:
    m = preset(*which)
    more = list(args)
    more[index] += extra
    assert m.step_seconds(*more) >= m.step_seconds(*args) >= 0.0


@given(
    which=st.sampled_from(PRESETS),
    new=st.integers(1, 100_000),
    cached=st.integers(0, 100_000),
    chunk=st.integers(1, 16_384),
)
def test_prefill_grows_with_prompt_and_prefix(
    which: tuple[str, str, int], new: int, cached: int, chunk: int
) -> None:
    m = preset(*which)
    assert m.prefill_seconds(new + 1, cached) > m.prefill_seconds(new, cached)
    assert m.prefill_seconds(new, cached + 1) >= m.prefill_seconds(new, cached)
    assert m.prefill_seconds(new, cached, chunk) >= m.prefill_seconds(new, cached) * (1 - 1e-12)


@given(which=st.sampled_from(PRESETS), low=st.floats(0.01, 1.0), high=st.floats(0.01, 1.0))
def test_hbm_capacity_grows_with_mem_fraction(
    which: tuple[str, str, int], low: float, high: float
) -> None:
    m = preset(*which)
    low, high = min(low, high), max(low, high)
    assert 0 <= m.hbm_kv_capacity_tokens(low) <= m.hbm_kv_capacity_tokens(high)


@given(
    chunk=st.integers(0, 8192),
    done=st.integers(0, 200_000),
    batch=st.integers(0, 256),
    context=st.integers(0, 2_000_000),
    steps=st.integers(1, 80),
)
@settings(max_examples=200, deadline=None)
def test_mixed_steps_closed_form_equals_the_loop(
    chunk: int, done: int, batch: int, context: int, steps: int
) -> None:
    cpu = preset("cpu-2core", "tiny-llama", 1)
    # the CPU shape with every prefill knob on, so each closed-form term is exercised
    knobs = replace(
        cpu.efficiency,
        prefill_overhead_s=2e-3,
        prefill_context_token_s=5e-6,
        prefill_context_sq_s=3e-9,
    )
    for cost in (
        preset("H200-141GB", "llama-3.1-8b", 1),
        CostModel(cpu.gpu, cpu.model, 1, knobs),
    ):
        loop = 0.0
        for j in range(steps):
            d = done + j * chunk if chunk else 0  # no chunk: no prompt context is read
            pairs = attention_pairs(chunk, d)
            loop += cost.step_seconds(chunk, pairs, batch, context + j * batch, d, d * d)
        closed = cost.mixed_steps_seconds(chunk, done, batch, context, steps)
        assert closed == pytest.approx(loop, rel=1e-9)

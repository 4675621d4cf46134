"""Replaying a trace (the stock arms' agents of the real-engine benchmarks) and measuring
steps (what calibrate fits) on the real engine, and exact-size prompt text from the engine's
own tokenizer."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentconsole.sample_traces.format import LLMNode
from agentconsole.server.runtime.sglang.calibration import (
    GridPoint,
    fit_profile,
    measure_call_overhead,
    measure_grid,
    with_call_overhead,
)
from agentconsole.server.runtime.sglang.replay import LiveReplay
from agentconsole.server.runtime.sglang.textbook import TextBook
from agentconsole.server.runtime.sglang.workload_scale import scaled_workload
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.simulation import CostServiceModel

pytestmark = pytest.mark.sglang


@pytest.fixture
def book(rt: Any) -> TextBook:
    return TextBook(rt.engine.tokenizer_manager.tokenizer, seed=3)


def test_text_has_the_exact_token_count_and_is_stable(book: TextBook) -> None:
    for n in (1, 5, 37, 400):
        text = book.text(f"seg-{n}", n)
        assert book.count(text) == n
        assert book.text(f"seg-{n}", n) == text
    a, b = book.text("a", 50), book.text("b", 70)
    assert book.count(a + b) == 120  # segments add up, so shared segments are shared prefixes
    assert book.text("a", 50) != book.text("b", 50)
    assert book.text("zero", 0) == ""


def test_replay_runs_programs_through_the_engine(
    rt: Any, run: Callable[[Awaitable[Any]], Any], book: TextBook
) -> None:
    trace = scaled_workload(
        "seed-mix", 3, 20.0, 5, token_factor=0.01, time_factor=0.02, max_context=1200
    )
    service = CostServiceModel(CostModel.from_profile("cpu-2core__tiny-llama__tp1"))
    outcomes = run(LiveReplay(rt, trace, book, service).run())
    assert [o.program_id for o in outcomes] == [p.id for p in trace]
    for program, outcome in zip(trace, outcomes, strict=True):
        if program.cancel_at_s is None:
            assert outcome.success
        # the trace's own cancel, when it came before the program's end
        assert outcome.cancelled == (program.cancel_at_s is not None and not outcome.success)
        llm = [n for n in program.nodes if isinstance(n, LLMNode)]
        assert 0 < outcome.calls <= len(llm)
        assert outcome.e2e_s > 0
    # later calls of a program reuse its context from the radix cache
    assert sum(o.cached_tokens for o in outcomes) > 0.5 * sum(o.prompt_tokens for o in outcomes)


def test_step_grid_is_measured_and_fitted(
    rt: Any, run: Callable[[Awaitable[Any]], Any], book: TextBook
) -> None:
    grid = [GridPoint(1, 64, 8), GridPoint(1, 512, 8)]
    points = run(measure_grid(rt, book, grid, repeats=1))
    prefill = [p for p in points if p.prefill_tokens > 0]
    decode = [p for p in points if p.decode_batch > 0]
    assert prefill
    assert decode
    assert all(p.seconds > 0 for p in points)
    assert any(p.prefill_context_tokens >= 500 for p in prefill)  # the second, cached turn
    assert not rt.control.state.record_steps  # switched off again
    profile = fit_profile(points)
    assert 0 < profile.efficiency.mfu <= 1


def test_call_overhead_is_the_part_of_a_call_outside_its_steps(
    rt: Any, run: Callable[[Awaitable[Any]], Any], book: TextBook
) -> None:
    started = time.perf_counter()
    overhead = run(measure_call_overhead(rt, book, calls=3, context=64))
    per_call = (time.perf_counter() - started) / 3
    # Positive (tokenising, the receive loop and detokenising cost something) and a part of
    # each call, not all of it: the engine steps themselves take the rest.
    assert 0.0 < overhead < per_call
    assert not rt.control.state.record_steps
    profile = with_call_overhead(
        fit_profile(run(measure_grid(rt, book, [GridPoint(1, 64, 8)], repeats=1))), overhead
    )
    assert profile.efficiency.call_overhead_s == overhead
    assert "call_overhead_s" in profile.sources

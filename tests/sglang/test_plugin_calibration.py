"""Calibration pieces without an engine: the fit recovers a known cost model, steps are
recorded and summarised as documented, and workloads scale consistently."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from agentconsole.sample_traces.format import LLMNode, ToolNode
from agentconsole.server.runtime.sglang.calibration import (
    _bucket,
    base_cost,
    fit_profile,
    step_errors,
    summarise,
)
from agentconsole.server.runtime.sglang.steps import StepRecorder
from agentconsole.server.runtime.sglang.workload_scale import longest_context, scaled_workload
from agentconsole.server.runtime.sim.costmodel import attention_pairs
from agentconsole.server.runtime.sim.profile import Efficiency, MeasuredStep


def _points(eff: Efficiency) -> list[MeasuredStep]:
    cost = base_cost(eff)
    points = []
    for batch in (1, 4, 16):
        for ctx in (64, 512, 2048):
            args = (0, 0, batch, batch * ctx, 0)
            points.append(MeasuredStep(cost.step_seconds(*args), 0, 0, batch, batch * ctx))
    for new in (32, 256, 1024, 4096):
        pairs = attention_pairs(new)
        points.append(MeasuredStep(cost.step_seconds(new, pairs), new, pairs))
    return points


def test_fit_recovers_a_known_profile() -> None:
    truth = Efficiency(mfu=0.2, bw_eff=0.3, step_overhead_s=0.002, per_seq_overhead_s=3e-4)
    points = _points(truth)
    profile = fit_profile(points)
    assert profile.gpu == "cpu-2core"
    assert profile.model == "tiny-llama"
    assert len(profile.points) == len(points)
    errors = [abs(e) for _, e in step_errors(profile, points)]
    assert max(errors) < 0.05


def _batch(extend: list[int] | None, reqs: int, prefix: list[int] | None = None) -> object:
    mode = SimpleNamespace(is_extend=lambda: extend is not None)
    req = SimpleNamespace(origin_input_ids=[0] * 10, output_ids=[0] * 2)
    return SimpleNamespace(
        forward_mode=mode, reqs=[req] * reqs, extend_lens=extend, prefix_lens=prefix
    )


def test_recorder_writes_one_line_per_completed_step(tmp_path: Path) -> None:
    rec = StepRecorder(tmp_path / "steps.jsonl")
    prefill = _batch([100, 20], 2, [0, 50])
    rec.scheduled(prefill, 0.001)
    rec.forward(prefill, prefill.reqs, [100, 20], 10.0, 0.02)  # type: ignore[attr-defined]
    rec.result(prefill, 0.003)
    decode = _batch(None, 3)
    rec.forward(decode, decode.reqs, [], 10.1, 0.004)  # type: ignore[attr-defined]
    rec.result(decode, 0.001)
    rec.result(_batch(None, 1), 0.5)  # never forwarded: nothing written
    rows = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    assert rows[0]["prefill_tokens"] == 120
    assert rows[0]["prefill_context_tokens"] == 50
    assert rows[0]["prefill_context_sq"] == 0 * 0 + 50 * 50
    assert rows[0]["prefill_attn_pairs"] == attention_pairs(100) + attention_pairs(20, 50)
    assert abs(rows[0]["seconds"] - 0.024) < 1e-12
    assert rows[1]["decode_batch"] == 3
    assert rows[1]["decode_context"] == 36
    assert rows[1]["sched_s"] == 0.0


def test_summarise_takes_medians_of_like_steps() -> None:
    def row(seconds: float, prefill: int = 0, ctx: int = 0, batch: int = 0) -> dict[str, float]:
        return {
            "seconds": seconds,
            "prefill_tokens": prefill,
            "prefill_attn_pairs": attention_pairs(prefill, ctx),
            "prefill_context_tokens": ctx,
            "decode_batch": batch,
            "decode_context": 100 * batch,
        }

    rows = [row(0.01, 1000), row(0.03, 1010), row(0.02, 990), row(0.002, batch=4)]
    rows += [row(0.004, batch=4), row(0.003, batch=4), row(0.5, 16, ctx=1000)]
    points = summarise(rows)
    prefill = [p for p in points if p.prefill_tokens]
    decode = [p for p in points if p.decode_batch]
    assert sorted(p.seconds for p in prefill) == [0.02, 0.5]  # median of the 1000-token three
    assert [(p.decode_batch, p.seconds) for p in decode] == [(4, 0.003)]
    assert _bucket(1000) == _bucket(990) != _bucket(2000)
    assert _bucket(5) == 5


def test_scaled_workload_is_consistent_and_fits_the_model() -> None:
    programs = scaled_workload(
        "seed-mix", 12, 1.0, 0, token_factor=0.02, time_factor=0.1, max_context=1900
    )
    assert len(programs) == 12
    assert max(longest_context(p) for p in programs) <= 1900 + 12  # rounding, one per segment
    sizes: dict[str, set[int]] = {}
    for p in programs:
        for seg in p.prefix:
            sizes.setdefault(seg.id, set()).add(seg.tokens)
    assert all(len(s) == 1 for s in sizes.values())  # a shared prefix id keeps one size
    tools = [n for p in programs for n in p.nodes if isinstance(n, ToolNode)]
    assert max(a.latency_s for n in tools for a in n.attempts) <= 1.0 + 1e-9  # 10 s -> 1 s
    assert min(n.output_tokens for p in programs for n in p.nodes if isinstance(n, LLMNode)) >= 1

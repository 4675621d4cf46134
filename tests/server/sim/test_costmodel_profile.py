"""Calibration profiles: bundled files, JSON round trip, and the least-squares efficiency fit."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from agentconsole.server.runtime.sim.costmodel import CostModel, attention_pairs, preset
from agentconsole.server.runtime.sim.fit import fit_efficiency
from agentconsole.server.runtime.sim.profile import (
    PROFILE_FORMAT,
    Efficiency,
    MeasuredStep,
    Profile,
    load_profile,
    profile_from_json,
    profile_name,
    profile_names,
    save_profile,
)


def test_every_bundled_profile_builds_the_preset_it_is_named_for() -> None:
    names = profile_names()
    assert "H200-141GB__llama-3.1-8b__tp1" in names
    assert "cpu-2core__tiny-llama__tp1" in names
    assert len(names) >= 7
    for name in names:
        p = load_profile(name)
        assert profile_name(p.gpu, p.model, p.tp) == name
        assert {"mfu", "bw_eff", "step_overhead_s"} <= set(p.sources)
        m = CostModel.from_profile(name)
        assert m.efficiency == p.efficiency
        assert m.decode_step_seconds(1, 1000) > 0


def test_profile_json_round_trip(tmp_path: Path) -> None:
    profile = Profile(
        "H200-141GB",
        "llama-3.1-8b",
        1,
        Efficiency(mfu=0.55, bw_eff=0.85, step_overhead_s=4e-4),
        {"mfu": "test"},
        (MeasuredStep(0.004, decode_batch=1, decode_context=1024), MeasuredStep(0.2, 8192, 9)),
    )
    path = tmp_path / "p.json"
    save_profile(profile, path)
    loaded = load_profile(path)
    assert loaded == profile
    assert load_profile(str(path)) == profile
    assert CostModel.from_profile(path).efficiency.mfu == 0.55
    # a file named otherwise is a file too (it was taken for a bundled name)
    other = tmp_path / "my.profile"
    save_profile(profile, other)
    assert load_profile(str(other)) == profile


def test_profile_loading_rejects_bad_input(tmp_path: Path) -> None:
    good = load_profile("H200-141GB__llama-3.1-8b__tp1").to_json()
    with pytest.raises(ValueError, match="format"):
        profile_from_json({**good, "format": 99})
    with pytest.raises(TypeError):
        profile_from_json({**good, "efficiency": {"mfu": 0.5, "mfuu": 0.1}})
    with pytest.raises(KeyError, match="known"):
        load_profile("no-such-profile")
    with pytest.raises(FileNotFoundError):
        load_profile(tmp_path / "missing.json")
    minimal = json.loads(
        json.dumps({"format": 1, "gpu": "cpu-2core", "model": "tiny-llama", "tp": 1})
    )
    assert profile_from_json(minimal).efficiency == Efficiency()


def test_profiles_are_written_in_the_current_format_and_format_1_still_reads() -> None:
    # Format 2 added efficiency fields: a build that knew only format 1 must refuse a new
    # profile by its format number instead of failing on an unknown field.
    profile = load_profile("H200-141GB__llama-3.1-8b__tp1")
    written = profile.to_json()
    assert written["format"] == PROFILE_FORMAT == 2
    assert "call_overhead_s" in written["efficiency"]
    assert profile_from_json(written) == profile
    old = {**written, "format": 1, "efficiency": {"mfu": 0.5}, "points": [{"seconds": 0.1}]}
    loaded = profile_from_json(old)
    assert loaded.efficiency.call_overhead_s == 0.0
    assert loaded.points[0].prefill_context_sq == 0


def _synthetic_points(truth: CostModel, noise: float, seed: int) -> list[MeasuredStep]:
    rng = random.Random(seed)
    points = []
    for batch in (1, 4, 16, 64, 128, 256):
        for ctx in (512, 4096, 20_000):
            step = MeasuredStep(0.0, decode_batch=batch, decode_context=batch * ctx)
            points.append(step)
    for new, cached in ((512, 0), (2048, 0), (8192, 0), (4096, 16_000), (256, 0)):
        points.append(MeasuredStep(0.0, new, attention_pairs(new, cached), 0, 0, cached))
    out = []
    for p in points:
        args = (p.prefill_tokens, p.prefill_attn_pairs, p.decode_batch, p.decode_context)
        t = truth.step_seconds(*args, p.prefill_context_tokens)
        out.append(
            MeasuredStep(t * (1 + rng.uniform(-noise, noise)), *args, p.prefill_context_tokens)
        )
    return out


@pytest.mark.parametrize(
    "which", [("H200-141GB", "llama-3.1-8b", 1), ("H100-80GB", "llama-3.1-70b", 4)]
)
def test_fit_recovers_known_efficiency(which: tuple[str, str, int]) -> None:
    prior = preset(*which)
    true = Efficiency(mfu=0.42, bw_eff=0.71, step_overhead_s=1.3e-3)
    truth = CostModel(prior.gpu, prior.model, prior.tp, true)
    fitted = fit_efficiency(prior, _synthetic_points(truth, 0.0, 0))
    assert fitted.mfu == pytest.approx(0.42, rel=1e-6)
    assert fitted.bw_eff == pytest.approx(0.71, rel=1e-6)
    assert fitted.step_overhead_s == pytest.approx(1.3e-3, rel=1e-6)
    assert fitted.allreduce_latency_s == prior.efficiency.allreduce_latency_s

    noisy = fit_efficiency(prior, _synthetic_points(truth, 0.03, 1))
    assert noisy.mfu == pytest.approx(0.42, rel=0.05)
    assert noisy.bw_eff == pytest.approx(0.71, rel=0.05)
    assert noisy.step_overhead_s == pytest.approx(1.3e-3, abs=3e-4)


def test_fit_recovers_prefill_overheads() -> None:
    """The CPU engine's shape: prefill steps cost more fixed time than decode steps, pay per
    cached context token, and per request convexly in its own context (steps extending
    several requests at once separate that from the total)."""
    prior = preset("cpu-2core", "tiny-llama", 1)
    true = replace(
        prior.efficiency,
        mfu=0.05,
        bw_eff=0.5,
        step_overhead_s=1.1e-3,
        prefill_overhead_s=1.9e-3,
        prefill_context_token_s=5e-6,
        prefill_context_sq_s=3e-9,
    )
    truth = CostModel(prior.gpu, prior.model, prior.tp, true)
    points = [
        MeasuredStep(truth.decode_step_seconds(b, b * ctx), decode_batch=b, decode_context=b * ctx)
        for b in (1, 8, 64)
        for ctx in (500, 4000)
    ]
    for new in (256, 1024, 4096):
        for cached in (0, 4096, 16384):
            pairs = attention_pairs(new, cached)
            seconds = truth.step_seconds(new, pairs, 0, 0, cached, cached * cached)
            points.append(MeasuredStep(seconds, new, pairs, 0, 0, cached, cached * cached))
    for requests in (4, 15):  # 16 new tokens each over 256 or 1,024 cached
        for cached in (256, 1024):
            new, pairs = 16 * requests, requests * attention_pairs(16, cached)
            ctx, sq = requests * cached, requests * cached * cached
            seconds = truth.step_seconds(new, pairs, 0, 0, ctx, sq)
            points.append(MeasuredStep(seconds, new, pairs, 0, 0, ctx, sq))
    fitted = fit_efficiency(prior, points)
    assert fitted.prefill_overhead_s == pytest.approx(1.9e-3, rel=5e-2)
    assert fitted.prefill_context_token_s == pytest.approx(5e-6, rel=5e-2)
    assert fitted.prefill_context_sq_s == pytest.approx(3e-9, rel=5e-2)
    assert fitted.step_overhead_s == pytest.approx(1.1e-3, rel=5e-2)


def test_fit_keeps_unconstrained_knobs_at_their_prior() -> None:
    prior = preset("H200-141GB", "llama-3.1-8b", 1)
    truth = CostModel(prior.gpu, prior.model, 1, Efficiency(bw_eff=0.6, step_overhead_s=1e-3))
    points = [
        MeasuredStep(
            truth.decode_step_seconds(b, b * 1000), decode_batch=b, decode_context=b * 1000
        )
        for b in (1, 2, 8, 32)
    ]
    fitted = fit_efficiency(prior, points)
    assert fitted.bw_eff == pytest.approx(0.6, rel=1e-6)
    assert fitted.step_overhead_s == pytest.approx(1e-3, rel=1e-6)
    assert fitted.mfu == pytest.approx(prior.efficiency.mfu, rel=1e-12)  # nothing to learn it from
    with pytest.raises(ValueError, match="seconds"):
        fit_efficiency(prior, [MeasuredStep(0.0, decode_batch=1)])

"""``bench --models``: the model selection rules side by side (ratios to all-large), and
``--cross-model-kv none,shared-prefill`` on a pair of KV-compatible models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from agentconsole.cli import main

ARGS = ["bench", "--workload", "multi-model", "--programs", "6", "--jobs", "1"]


def _bench(tmp_path: Path, *args: str) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "b.json"
    result = CliRunner().invoke(main, [*ARGS, *args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return result.output, json.loads(out.read_text())


def test_three_rules_side_by_side_on_the_default_models(tmp_path: Path) -> None:
    output, data = _bench(
        tmp_path, "--policies", "cp-cache", "--model-rules", "finish-time,fixed-roles,all-large"
    )
    runs = data["policies"]
    # all-large first (the ratios are to it), the others in the order given
    assert list(runs) == ["cp-cache+all-large", "cp-cache+finish-time", "cp-cache+fixed-roles"]
    assert data["setup"]["models"] == "llama-3.1-70b:tp4,llama-3.1-8b"
    assert data["setup"]["model_rule"] == ["all-large", "finish-time", "fixed-roles"]
    large, fixed = runs["cp-cache+all-large"], runs["cp-cache+fixed-roles"]
    assert large["models"]["llama-3.1-8b"]["calls"] == 0
    assert fixed["models"]["llama-3.1-8b"]["calls"] > 0
    assert large["cross_model_lost_tokens"] == 0
    assert fixed["cross_model_lost_tokens"] > 0  # moved calls prefill what the 70B holds
    assert large["finished"] == fixed["finished"] == 6
    assert "model selection rules, ratios to all-large" in output
    assert "fixed-roles / all-large" in output
    assert "calls on llama-3.1-8b" in output


def test_shared_prefill_against_none_on_compatible_models(tmp_path: Path) -> None:
    models = "llama-3.1-70b:tp4,llama-3.1-8b,llama-3.1-8b-verify"
    _, data = _bench(
        tmp_path,
        "--policies",
        "fcfs",
        "--models",
        models,
        "--set",
        "verifier=llama-3.1-8b-verify",
        "--model-rules",
        "fixed-roles",
        "--cross-model-kv",
        "none,shared-prefill",
    )
    runs = data["policies"]
    none, shared = runs["fcfs+none"], runs["fcfs+shared-prefill"]
    assert none["cross_model_lost_tokens"] > 0
    assert none["cross_model_reused_tokens"] == 0
    assert shared["cross_model_reused_tokens"] > 0
    assert 0 < shared["cross_model_recompute_tokens"] < shared["cross_model_reused_tokens"]
    assert shared["tokens_per_success"] < none["tokens_per_success"]


def test_model_flags_need_models_and_known_names() -> None:
    seed = ["bench", "--workload", "seed-mix", "--programs", "2", "--jobs", "1"]
    alone = CliRunner().invoke(main, [*seed, "--model-rules", "all-large"])
    assert alone.exit_code == 2
    assert "need --models" in alone.output
    bad = CliRunner().invoke(main, [*ARGS, "--model-rules", "cheapest"])
    assert bad.exit_code == 2
    assert "unknown model rule cheapest" in bad.output
    loads = CliRunner().invoke(main, [*ARGS, "--loads", "0.5"])
    assert loads.exit_code == 2
    assert "one --prefix-cache mode, model rule" in loads.output


def test_a_sweep_over_models_writes_its_page_without_a_bound(tmp_path: Path) -> None:
    """The throughput bound is one model's replicas', so a run over several has none: the
    sweep chart's title then leaves it out (it used to fail on the missing key at the end)."""
    page = tmp_path / "mm.html"
    args = ["--programs", "3", "--policies", "fcfs", "--model-rules", "all-large", "--sweep"]
    _, data = _bench(tmp_path, *args, "--slo-p95", "1e9", "--html", str(page))
    assert "throughput_bound" not in data
    assert data["sweep"]["fcfs"]["max_rate"] > 0
    text = page.read_text()
    assert "Highest rate with P95 E2E" in text
    assert "no schedule can exceed" not in text

"""``agentconsole bench``: the side-by-side table, its JSON and its self-contained HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plotly.offline import get_plotlyjs

from agentconsole.bench.runner import BASELINES
from agentconsole.bench.sweep import meets
from agentconsole.cli import main
from agentconsole.scheduler.policies import available

SMALL_TRACE = Path(__file__).parents[2] / "sample_traces" / "seed-mix.small.jsonl"


def _bench(tmp_path: Path, *args: str) -> tuple[str, dict[str, Any], str]:
    out_json, out_html = tmp_path / "b.json", tmp_path / "b.html"
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "--programs",
            "20",
            "--jobs",
            "1",
            "--json",
            str(out_json),
            "--html",
            str(out_html),
            *args,
        ],
    )
    assert result.exit_code == 0, result.output
    return result.output, json.loads(out_json.read_text()), out_html.read_text()


def test_every_policy_side_by_side_with_section19_metrics(tmp_path: Path) -> None:
    output, data, page = _bench(tmp_path, "--workload", "seed-mix", "--rate", "0.05")
    policies = data["policies"]
    assert isinstance(policies, dict)
    assert set(policies) == {*available(), *BASELINES}
    for name in available():
        assert name in output  # one column per policy in the printed table
        report = policies[name]
        for key in (
            "goodput_programs_per_s",
            "e2e_p50_s",
            "e2e_p95_s",
            "e2e_p99_s",
            "ttfp_p50_s",
            "ttft_p50_s",
            "tbt_p50_s",
            "tool_wait_mean_s",
            "cp_idle_queue_mean_s",
            "cp_idle_kv_mean_s",
            "cp_idle_tool_mean_s",
            "gpu_s_per_success",
            "tokens_per_success",
            "discarded_branch_tokens",
            "kv_hbm_mean_bytes",
            "kv_dram_mean_bytes",
            "prefix_hit_tokens",
            "migrations",
            "recomputes",
            "max_tenant_slowdown",
        ):
            assert key in report, key
        assert report["finished"] + report["cancelled"] + report["failed"] == 20
        assert report["prefix_hit_tokens"] > 0
        for tenant in report["tenants"].values():
            assert tenant["slowdown"] is None or tenant["slowdown"] >= 1.0
    assert "program success goodput" in output
    assert "E2E P95" in output
    # self-contained: plotly.js inlined, nothing fetched from anywhere
    assert "Plotly" in page
    assert len(page) > 1_000_000
    # nothing loaded from elsewhere (plotly.js itself only holds attribution links)
    assert not re.search(r"<script[^>]+src=", page)
    assert "<link" not in page
    # the page's own markup names no CDN (the inlined plotly.js carries an unused default
    # topojson URL for geo maps, which no chart here loads)
    own = page.replace(get_plotlyjs(), "")
    assert "cdn." not in own
    assert "https://" not in own


def test_sweep_reports_max_rate_and_ratio(tmp_path: Path) -> None:
    output, data, _ = _bench(
        tmp_path, "--policies", "fcfs,cp-cache", "--rate", "0.02", "--sweep", "--slo-p95", "200"
    )
    sweep = data["sweep"]
    assert isinstance(sweep, dict)
    assert set(sweep) == {"fcfs", "cp-cache"}
    for row in sweep.values():
        assert row["max_rate"] > 0
        assert row["e2e_p95_s"] <= 200
    # what the hardware allows (a short trace's burst can arrive faster than that: the bound
    # caps the rate a schedule sustains, which is what a long sweep measures)
    bound = data["throughput_bound"]
    assert bound["seconds_per_program"] == max(
        bound["compute_s_per_program"], bound["memory_s_per_program"]
    )
    assert bound["programs_per_s"] == pytest.approx(1 / bound["seconds_per_program"])
    assert "ratio to fcfs" in output
    assert "No schedule can finish more than" in output


def test_a_sweep_whose_slo_never_breaks_says_it_found_no_max_rate(tmp_path: Path) -> None:
    """Five programs arrive as one burst the engine finishes within the SLO at any rate: the
    search doubled the rate ten times and printed 60 programs/s as the max, 35,639% of what any
    schedule can finish, and "4x fcfs would be 243". It is a floor, said so, with no ratio."""
    out_json = tmp_path / "floor.json"
    args = ["bench", "--programs", "5", "--policies", "fcfs,cp-cache", "--jobs", "1"]
    result = CliRunner().invoke(main, [*args, "--sweep", "--json", str(out_json)])
    assert result.exit_code == 0, result.output
    data = json.loads(out_json.read_text())
    for row in data["sweep"].values():
        assert row["found"] is False
        assert all(ok for _, ok in row["probes"])  # no rate tried missed the SLO
    assert "no max rate was found" in result.output
    assert ">= " in result.output
    assert "would be" not in result.output


def test_sweep_on_a_trace_shorter_than_programs_finds_a_rate(tmp_path: Path) -> None:
    """The trace holds 20 programs, fewer than ``--programs`` (500 by default): each probe
    runs those 20, and is judged on finishing them (not 90% of 500, which none could)."""
    trace = Path(__file__).parents[2] / "sample_traces" / "seed-mix.small.jsonl"
    out_json = tmp_path / "sweep.json"
    args = ["bench", "--trace", str(trace), "--policies", "fcfs", "--jobs", "1"]
    args += ["--sweep", "--slo-p95", "1e9", "--json", str(out_json)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out_json.read_text())
    assert data["policies"]["fcfs"]["programs"] == 20
    assert data["sweep"]["fcfs"]["max_rate"] > 0


def test_a_sweep_probe_counts_only_the_programs_that_finished() -> None:
    """A cancelled or failed program is no success: 10 of 20 finished fails the 90% rule."""
    report = {"e2e_p95_s": 1.0, "programs": 20, "finished": 10, "cancelled": 8, "failed": 2}
    assert not meets(report, 10.0)
    assert meets({**report, "finished": 18, "cancelled": 2, "failed": 0}, 10.0)


def test_kv_policy_comparison_and_trace_input(tmp_path: Path) -> None:
    _, data, _ = _bench(
        tmp_path,
        "--trace",
        str(SMALL_TRACE),
        "--policies",
        "cp-cache",
        "--kv-policy",
        "keep,adaptive",
    )
    assert set(data["policies"]) == {"cp-cache+keep", "cp-cache+adaptive"}


def test_unknown_policy_is_a_clear_error() -> None:
    result = CliRunner().invoke(main, ["bench", "--policies", "nope"])
    assert result.exit_code != 0
    assert "unknown policy nope" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "slow_tool_kind=nope"], "not one of"),
        (["--set", "nope=1"], "has no parameter nope"),
        (["--gpu", "nope"], "no bundled profile"),
        (["--profile", "/nonexistent/p.json"], "--profile: cannot read /nonexistent/p.json"),
        (["--profile", "nope"], "--profile: no bundled profile 'nope'"),
        (["--set", "p_slow_tool=abc"], "--set: p_slow_tool takes float, got 'abc'"),
        (["--set", 'tenants="x"'], "--set: tenants takes int, got 'x'"),
        (["--set", "mix=[1, true, 1]"], "--set: mix takes Sequence[float]"),
        (["--set", "deadline_slack=fast"], "--set: deadline_slack takes float | None"),
        (["--rate", "nan"], "'nan' is not a finite number"),
        (["--sweep", "--slo-p95", "inf"], "'inf' is not a finite number"),
        (["--sweep", "--programs", "1"], "--sweep scales the arrival rate"),
        (
            ["--trace", str(SMALL_TRACE), "--set", "p_slow_tool=0.1"],
            "a --trace replays as recorded",
        ),
        # the models the workload filled in are named as its, not as a --models never given
        (
            ["--workload", "multi-model", "--profile", "cpu-2core__tiny-llama__tp1"],
            "--profile costs one model; the multi-model workload's pool"
            " (llama-3.1-70b:tp4,llama-3.1-8b) costs each of its own",
        ),
        (
            ["--workload", "multi-model", "--replicas", "2"],
            "give each model of the multi-model workload's pool (llama-3.1-70b:tp4,llama-3.1-8b)"
            " its replicas as NAME:xR in --models",
        ),
        (
            ["--models", "llama-3.1-8b", "--replicas", "2"],
            "give each model of --models (llama-3.1-8b) its replicas as NAME:xR",
        ),
    ],
)
def test_bad_workload_or_hardware_is_a_usage_error(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["bench", "--programs", "3", "--policies", "fcfs", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error:")  # one line says why


def test_program_aware_mechanisms_can_be_ablated(tmp_path: Path) -> None:
    _, data, _ = _bench(tmp_path, "--policies", "cp-cache", "--holds", "--no-admission")
    setup = data["setup"]
    assert setup["holds"] is True
    assert setup["admission"] is False


def test_steps_composed_by_admission_order_as_sglang_does(tmp_path: Path) -> None:
    """The default engine is the one SGLang runs with the plugin (it orders its queue, not its
    batches); with ``--rank-aware-steps`` a new prefill's chunks hide under the running calls'
    decode steps, so the same programs finish sooner."""
    args = ("--policies", "fcfs", "--rate", "0.1")
    _, ranked, _ = _bench(tmp_path, *args, "--rank-aware-steps")
    _, admitted, _ = _bench(tmp_path, *args)
    assert ranked["setup"]["rank_aware_steps"] is True
    assert admitted["setup"]["rank_aware_steps"] is False
    slower = admitted["policies"]["fcfs"]["e2e_p50_s"] / ranked["policies"]["fcfs"]["e2e_p50_s"]
    assert slower > 1.2
    assert admitted["policies"]["fcfs"]["tbt_p50_s"] > ranked["policies"]["fcfs"]["tbt_p50_s"]


def test_stock_sglang_and_the_load_sweep(tmp_path: Path) -> None:
    """``stock-sglang`` is fcfs with plain LRU, no host tier and no door; ``--loads`` runs
    every policy at multiples of the measured peak, with an infinite-cache oracle's hits."""
    output, data, _ = _bench(
        tmp_path,
        "--workload",
        "seed-mix",
        "--programs",
        "40",
        "--policies",
        "stock-sglang,cp-cache",
        "--loads",
        "0.5,3",
    )
    sweep = data["load_sweep"]
    assert sweep["peak_programs_per_s"] > 0
    assert set(sweep["loads"]) == {"0.5", "3"}
    assert 0 < sweep["oracle"]["hit_tokens"] <= sweep["oracle"]["prompt_tokens"]
    overloaded = sweep["loads"]["3"]
    for row in overloaded.values():
        assert row["prefix_hit_tokens"] <= sweep["oracle"]["hit_tokens"]
    for row in (*sweep["loads"]["0.5"].values(), *overloaded.values()):
        # the load the draw offered, beside its label (a Poisson draw of 40 arrivals)
        offered = row["rate_programs_per_s"] / sweep["peak_programs_per_s"]
        assert row["offered_share"] == pytest.approx(offered)
    assert (
        sweep["loads"]["0.5"]["cp-cache"]["offered_share"] < overloaded["cp-cache"]["offered_share"]
    )
    assert "offered" in output
    stock, aware = overloaded["stock-sglang"], overloaded["cp-cache"]
    # above capacity the stock engine thrashes; the program door keeps the peak rate
    assert aware["share_of_peak"] > stock["share_of_peak"]
    assert aware["recompute_tokens"] < stock["recompute_tokens"]
    assert "load sweep" in output


def test_the_peak_is_the_engines_whichever_policies_are_listed(tmp_path: Path) -> None:
    """Measured by thrashing ``fcfs`` alone, the peak was ``fcfs``'s saturated rate: a
    "1.5x" row ran below the engine's capacity, at a share of the peak above 100%."""
    args = ("--workload", "long-coding", "--programs", "30", "--loads", "1.5")
    _, alone, _ = _bench(tmp_path / "alone", *args, "--policies", "fcfs")
    _, both, _ = _bench(tmp_path / "both", *args, "--policies", "fcfs,cp-cache")
    sweep = alone["load_sweep"]
    assert sweep["peak_programs_per_s"] == both["load_sweep"]["peak_programs_per_s"]
    assert set(sweep["peak_by_policy"]) == {"fcfs", "cp-cache (peak only)"}
    assert set(sweep["loads"]["1.5"]) == {"fcfs"}  # measured, not run at the loads


def test_the_load_sweep_over_several_draws_pairs_each_with_fcfs(tmp_path: Path) -> None:
    """``--seeds N``: each cell runs N draws of the workload at the same rates, a row is their
    mean (each draw kept), and the table pairs every policy's P50/P95 with fcfs's same draw."""
    output, data, _ = _bench(
        tmp_path,
        "--workload",
        "seed-mix",
        "--programs",
        "20",
        "--policies",
        "fcfs,cp-cache",
        "--loads",
        "0.5",
        "--seeds",
        "2",
    )
    sweep = data["load_sweep"]
    assert sweep["seeds"] == [0, 1]
    cell = sweep["loads"]["0.5"]
    for row in cell.values():
        draws = row["draws"]
        assert len(draws) == 2
        assert row["e2e_p95_s"] == pytest.approx(sum(d["e2e_p95_s"] for d in draws) / 2)
    # two draws of one workload differ (the seed draws programs and arrivals anew)
    assert cell["fcfs"]["draws"][0] != cell["fcfs"]["draws"][1]
    ratios = [
        mine["e2e_p95_s"] / theirs["e2e_p95_s"]
        for mine, theirs in zip(cell["cp-cache"]["draws"], cell["fcfs"]["draws"], strict=True)
    ]
    assert "P95 / fcfs (worst)" in output
    # each draw is its own workload: its hits are a share of its own infinite cache's
    oracles = sweep["oracle_by_seed"]
    assert len(set(oracles)) > 1
    for row in cell.values():
        shares = [d["prefix_hit_tokens"] / o for d, o in zip(row["draws"], oracles, strict=True)]
        assert row["oracle_share"] == pytest.approx(sum(shares) / 2)
        assert row["oracle_share"] <= 1.0
    assert f"{sum(ratios) / 2:.3f} ({max(ratios):.3f})" in output


def test_several_draws_need_a_load_sweep(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["bench", "--programs", "5", "--seeds", "2"])
    assert result.exit_code == 2
    assert "--seeds" in result.output

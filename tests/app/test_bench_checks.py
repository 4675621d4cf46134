"""``bench``'s checks before any run: output paths, traces with no rate, ``--loads``,
``--slo-p95`` and ``--profile`` beside the options it replaces; and the ratio tables'
reference when the run labels carry a kv policy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from agentconsole.bench import command
from agentconsole.bench.table import loads_table, sweep_table
from agentconsole.cli import main
from agentconsole.sample_traces import dump_trace
from agentconsole.server.runtime.sglang.workload_scale import tiny_seed_mix

SMALL_TRACE = Path(__file__).parents[2] / "sample_traces" / "seed-mix.small.jsonl"
BENCH = ["bench", "--programs", "3", "--policies", "fcfs", "--jobs", "1"]
TINY_PROFILE = "cpu-2core__tiny-llama__tp1"


def _bench(*args: str) -> Result:
    return CliRunner().invoke(main, [*BENCH, *args])


def _usage_error(result: Result, *messages: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for message in messages:
        assert message in result.output


def _trace(tmp_path: Path, programs: int, arrival_s: float | None) -> Path:
    """The bundled small trace's first ``programs``, every arrival at ``arrival_s`` (None:
    as recorded)."""
    lines = [json.loads(line) for line in SMALL_TRACE.read_text().splitlines()][:programs]
    for line in lines:
        if arrival_s is not None:
            line["arrival_s"] = arrival_s
    path = tmp_path / f"t{programs}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_outputs_go_into_folders_made_for_them(tmp_path: Path) -> None:
    out_json, out_html = tmp_path / "a" / "b.json", tmp_path / "c" / "d" / "b.html"
    result = _bench("--json", str(out_json), "--html", str(out_html))
    assert result.exit_code == 0, result.output
    assert json.loads(out_json.read_text())["policies"]["fcfs"]["programs"] == 3
    assert "Plotly" in out_html.read_text()


@pytest.mark.parametrize("option", ["--json", "--html"])
def test_an_output_that_cannot_be_written_is_refused_before_any_run(
    tmp_path: Path, option: str, no_runs: None
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = _bench(option, str(blocker / "sub" / "b.out"))
    _usage_error(result, f"{option}: {blocker} is not a folder")


@pytest.mark.parametrize("loads", ["0", "-1", "0.5,nan", "inf", "x", ""])
def test_a_bad_loads_list_is_refused_before_any_run(loads: str, no_runs: None) -> None:
    _usage_error(_bench("--loads", loads), "--loads")


@pytest.mark.parametrize("slo", ["0", "-5"])
def test_a_slo_must_be_positive(slo: str, no_runs: None) -> None:
    _usage_error(_bench("--sweep", "--slo-p95", slo), "--slo-p95")


def test_a_slo_without_the_sweep_is_refused(no_runs: None) -> None:
    """It ran without a word: only ``--sweep`` searches for a rate meeting a SLO."""
    _usage_error(_bench("--slo-p95", "5"), "--slo-p95 is the SLO of --sweep's search")


def test_an_empty_trace_is_a_usage_error(tmp_path: Path, no_runs: None) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    _usage_error(_bench("--trace", str(empty)), "has no programs")


@pytest.mark.parametrize(
    ("programs", "args"),
    [(5, ["--sweep"]), (5, ["--loads", "1"]), (1, ["--rate", "1"]), (5, ["--rate", "2"])],
)
def test_a_trace_arriving_all_at_once_has_no_rate_to_scale(
    tmp_path: Path, programs: int, args: list[str], no_runs: None
) -> None:
    trace = _trace(tmp_path, programs, 0.0 if programs > 1 else 7.0)
    _usage_error(_bench("--trace", str(trace), *args), args[0], "all arrive at once")


def test_a_trace_arriving_all_at_once_still_runs_as_recorded(tmp_path: Path) -> None:
    result = _bench("--trace", str(_trace(tmp_path, 5, 0.0)))
    assert result.exit_code == 0, result.output


def test_the_profile_names_the_hardware(tmp_path: Path) -> None:
    out, trace = tmp_path / "b.json", tmp_path / "tiny.jsonl"
    # what the tiny model serves: seed-mix's calls would not fit its 2,048-token window
    dump_trace(tiny_seed_mix(3, rate=1.0, seed=0), trace)
    result = _bench("--profile", TINY_PROFILE, "--trace", str(trace), "--json", str(out))
    assert result.exit_code == 0, result.output
    setup = json.loads(out.read_text())["setup"]
    assert (setup["gpu"], setup["model"], setup["tp"]) == ("cpu-2core", "tiny-llama", 1)
    assert setup["profile"] == TINY_PROFILE
    title = " ".join(result.output.split())  # the title may wrap
    assert "1 x cpu-2core x tiny-llama (tp 1, profile" in title
    assert "H200" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", TINY_PROFILE, "--gpu", "H100-80GB"], "drop --gpu"),
        (["--profile", TINY_PROFILE, "--model", "llama-3.1-8b", "--tp", "1"], "drop --model, --tp"),
        (
            ["--profile", TINY_PROFILE, "--workload", "multi-model"],
            "the multi-model workload's pool",
        ),
        (["--workload", "multi-model", "--replicas", "2"], "NAME:xR"),
        (["--models", "llama-3.1-8b,llama-3.1-8b-verify", "--replicas", "3"], "NAME:xR"),
    ],
)
def test_options_a_run_would_ignore_are_refused(
    args: list[str], message: str, no_runs: None
) -> None:
    _usage_error(_bench(*args), message)


def _text(table: Any) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def _load_row(p95: float) -> dict[str, Any]:
    return {
        "throughput_programs_per_s": 1.0,
        "share_of_peak": 1.0,
        "e2e_p50_s": p95 / 2,
        "e2e_p95_s": p95,
        "recompute_tokens": 0,
        "oracle_share": 1.0,
    }


def test_the_load_table_prints_each_fcfs_ratio_once_and_no_nan() -> None:
    rows = {"fcfs": _load_row(math.nan), "cp-cache": _load_row(10.0)}
    loads = {"3": rows}
    sweep = {"peak_programs_per_s": 1.0, "seeds": [0], "loads": loads}
    text = _text(loads_table(sweep, command._ratio_reference(loads)))
    assert text.count("P95 / fcfs") == 1
    assert "nan" not in text


def test_ratios_are_to_the_reference_with_the_same_kv_policy() -> None:
    rows = {
        "fcfs+keep": _load_row(10.0),
        "fcfs+offload": _load_row(20.0),
        "cp-cache+keep": _load_row(5.0),
        "cp-cache+offload": _load_row(30.0),
    }
    reference = command._ratio_reference({"1": rows})
    assert reference == "fcfs"
    text = _text(loads_table({"peak_programs_per_s": 1.0, "loads": {"1": rows}}, reference))
    line = next(row for row in text.splitlines() if "cp-cache+offload" in row)
    assert "1.500" in line  # 30 over fcfs+offload's 20, not over the first row's 10
    rates = {label: {"max_rate": row["e2e_p95_s"]} for label, row in rows.items()}
    swept = _text(sweep_table(rates, command._ratio_reference(rates)))
    assert "ratio to fcfs" in swept
    assert "0.50x" in next(r for r in swept.splitlines() if "cp-cache+keep" in r)

"""What-if windows: the bench command, file names, pruning, and stopping a background run."""

from __future__ import annotations

import os
import time
from pathlib import Path

from click.testing import CliRunner

from agentconsole.cli import main
from agentconsole.sample_traces.codec import dump_trace
from agentconsole.server.runtime.sglang.workload_scale import tiny_seed_mix
from agentconsole.server.whatif.runs import BenchRunner
from agentconsole.server.whatif.window import (
    REPORT_SUFFIX,
    BenchHardware,
    bench_command,
    prune,
    trace_name,
)


def test_the_command_replays_every_program_under_every_policy_on_the_hardware() -> None:
    trace = Path("/data/whatif/window-x.jsonl")
    plain = bench_command(trace, 742, BenchHardware())
    assert plain == (
        "agentconsole", "bench", "--trace", str(trace), "--programs", "742", "--policies", "all",
    )  # fmt: skip
    sim = bench_command(
        trace, 3, BenchHardware(gpu="H100-80GB", model="qwen", tp=2, kv_policy="keep")
    )
    assert sim[8:] == (
        "--kv-policy", "keep", "--gpu", "H100-80GB", "--model", "qwen", "--tp", "2",
    )  # fmt: skip


def test_a_profiled_servers_command_is_one_bench_accepts(tmp_path: Path) -> None:
    """A simulated server on a calibration profile knows its GPU and tp too; the profile names
    its own, and bench refuses them beside it, so the command carries the profile alone."""
    trace = tmp_path / "window.jsonl"
    # a window the tiny model served: its calls fit its 2,048-token window (bench refuses
    # calls past the model's window, as serve does)
    dump_trace(tiny_seed_mix(2, rate=1.0, seed=0), trace)
    profile = "cpu-2core__tiny-llama__tp1"
    hardware = BenchHardware(gpu="H200-141GB", model=None, tp=1, profile=profile)
    argv = bench_command(trace, 2, hardware)
    assert argv[8:] == ("--profile", profile)
    result = CliRunner().invoke(main, [*argv[1:6], "--policies", "fcfs", *argv[8:]])
    assert result.exit_code == 0, result.output


def test_names_sort_by_time_and_never_collide() -> None:
    early, late = trace_name(1_700_000_000.0), trace_name(1_700_000_001.0)
    assert early < late
    assert early.startswith("window-20231114T221320Z-")
    assert early.endswith(".jsonl")
    assert len({trace_name(1_700_000_000.0) for _ in range(50)}) == 50


def test_prune_keeps_the_newest_and_the_one_being_benched(tmp_path: Path) -> None:
    traces = [tmp_path / trace_name(1_700_000_000.0 + i) for i in range(5)]
    for trace in traces:
        trace.write_text("{}\n")
        trace.with_name(trace.name + REPORT_SUFFIX).write_text("{}")
    other = tmp_path / "notes.txt"
    other.write_text("kept")
    deleted = prune(tmp_path, keep=2, spare=[traces[0]])
    assert sorted(deleted) == sorted(
        [traces[i] for i in (1, 2)]
        + [traces[i].with_name(traces[i].name + REPORT_SUFFIX) for i in (1, 2)]
    )
    left = sorted(p.name for p in tmp_path.iterdir())
    expected = [t.name for t in (traces[0], traces[3], traces[4])]
    expected += [n + REPORT_SUFFIX for n in expected] + ["notes.txt"]
    assert left == sorted(expected)


def test_prune_keeps_the_trace_written_last_of_one_second(tmp_path: Path) -> None:
    """Two exports in one second: their names sort by random tails, not by age."""
    first = tmp_path / "window-20231114T221320Z-ffffffff.jsonl"
    last = tmp_path / "window-20231114T221320Z-00000000.jsonl"
    for age, trace in ((10, first), (0, last)):
        trace.write_text("{}\n")
        os.utime(trace, (time.time() - age, time.time() - age))
    assert prune(tmp_path, keep=1) == [first]
    assert last.exists()


def test_stop_kills_a_run_in_progress(tmp_path: Path) -> None:
    runner = BenchRunner(timeout_s=300, jobs=1)
    trace = tmp_path / "window-x.jsonl"
    argv = ["agentconsole", "bench", "--workload", "seed-mix", "--programs", "20000"]
    run = runner.start(argv, trace, "agentconsole bench ...")
    was_busy = runner.busy  # read once: mypy would narrow the property for the later check
    time.sleep(0.5)
    started = time.monotonic()
    runner.stop()
    assert time.monotonic() - started < 10
    assert run.state == "stopped"
    assert run.error == "the server stopped"
    assert run.finished_at is not None
    assert was_busy
    assert not runner.busy
    assert not run.report.exists()

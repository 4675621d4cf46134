"""``benchmarks/bench_trace_fidelity.py`` measures ``serve`` as it runs by default: with no
flags, the session it records and replays runs serve's default scheduling and tool-wait
policies, and the replay's program door is the one serve ran."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from agentconsole.settings import LimitsSection, RuntimeSection

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    path = ROOT / "benchmarks" / "bench_trace_fidelity.py"
    spec = importlib.util.spec_from_file_location("bench_trace_fidelity", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_with_no_flags_the_session_runs_serves_default_policies() -> None:
    args = _bench().parse_args([])
    serve_default = RuntimeSection()  # what ``serve`` runs when nothing is configured
    assert (args.policy, args.kv_policy) == (serve_default.policy, serve_default.kv_policy)


def test_the_replay_runs_the_door_as_serve_ran_it(tmp_path: Path) -> None:
    bench = _bench()
    command = bench.replay_command(tmp_path / "t.jsonl", tmp_path / "o.json", "cp-cache", "keep")
    # the served config sets no limits, so serve ran its default door
    door_on = LimitsSection().program_admission
    assert ("--admission" in command, "--no-admission" in command) == (door_on, not door_on)

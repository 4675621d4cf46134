"""``bench --host-write-policy``: the host tier's write policy reaches the simulated engine
(SGLang's default, write-through, unless told), and the stock baseline has no host tier."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from agentconsole.bench.runner import BASELINES, BenchSetup, engine_config
from agentconsole.cli import main
from agentconsole.kvtiers.tiers import WRITE_BACK, WRITE_THROUGH


def test_the_write_policy_reaches_the_engine_and_stock_has_no_host_tier() -> None:
    assert engine_config(BenchSetup()).host_write_policy == WRITE_THROUGH
    written_back = engine_config(BenchSetup(host_write_policy=WRITE_BACK))
    assert written_back.host_write_policy == WRITE_BACK
    assert engine_config(BenchSetup(), BASELINES["stock-sglang"]).host_kv_tokens == 0


def test_stock_sglang_never_gets_the_simulators_rank_aware_steps() -> None:
    """``--rank-aware-steps`` is an engine of ours (stall-free steps composed by rank); the
    stock baseline, SGLang as shipped, composed its steps that way too under the flag (its
    TBT 33 ms against 239 ms without it in the reviewer's run)."""
    ranked = BenchSetup(rank_aware_steps=True)
    assert engine_config(ranked).rank_aware_steps
    assert not engine_config(ranked, BASELINES["stock-sglang"]).rank_aware_steps


def test_the_flag_is_recorded_and_an_unknown_policy_is_a_usage_error(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    args = ["bench", "--programs", "5", "--policies", "cp-cache", "--json", str(out)]
    result = CliRunner().invoke(main, [*args, "--host-write-policy", WRITE_BACK])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["setup"]["host_write_policy"] == WRITE_BACK
    refused = CliRunner().invoke(main, [*args, "--host-write-policy", "write_sometimes"])
    assert refused.exit_code == 2
    assert "write_through" in refused.output  # the choices are named

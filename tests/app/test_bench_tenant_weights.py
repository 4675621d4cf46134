"""``bench --tenant-weight``: the tenants' weights reach the fairness guard and the door as
``serve``'s ``limits.tenant_weights`` does, and ``stock-sglang`` runs with no guard at all (an
engine as shipped orders by its policy alone)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from agentconsole.bench.options import tenant_weights
from agentconsole.bench.runner import BASELINES, BenchSetup, fairness_config
from agentconsole.cli import main


def test_weights_parse_as_serve_takes_them() -> None:
    assert tenant_weights(["a=2", "b=0.5", "a=3"]) == (("a", 3.0), ("b", 0.5))
    assert tenant_weights(["a=1000000"]) == (("a", 1_000_000.0),)
    for bad in ("a", "=2", "a=0", "a=-1", "a=nan", "a=inf", "a=x", "a=1000001"):
        with pytest.raises(click.BadParameter, match="TENANT=WEIGHT"):
            tenant_weights([bad])


def test_the_stock_baseline_has_no_guard_and_ours_carry_the_weights() -> None:
    setup = BenchSetup(tenant_weights=(("tenant-heavy", 4.0),))
    stock = fairness_config(setup, BASELINES["stock-sglang"])
    assert not stock.enabled
    ours = fairness_config(setup)
    assert ours.enabled
    assert ours.weight("tenant-heavy") == 4.0
    assert ours.weight("other") == 1.0


def _overloaded(tmp_path: Path, *weights: str) -> tuple[str, dict[str, Any]]:
    out = tmp_path / f"b{len(weights)}.json"
    command = ["bench", "--workload", "two-tenants", "--programs", "200", "--policies"]
    command += ["cp-cache", "--loads", "3", "--jobs", "1", "--json", str(out), *weights]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0, result.output
    return result.output, json.loads(out.read_text())


def test_a_heavier_weight_for_one_tenant_makes_the_other_yield_at_overload(tmp_path: Path) -> None:
    _, equal = _overloaded(tmp_path)
    output, weighted = _overloaded(tmp_path, "--tenant-weight", "tenant-heavy=4")
    assert weighted["setup"]["tenant_weights"] == [["tenant-heavy", 4.0]]
    before = equal["load_sweep"]["loads"]["3"]["cp-cache"]["tenant_slowdown"]
    after = weighted["load_sweep"]["loads"]["3"]["cp-cache"]["tenant_slowdown"]
    # the light tenant, due a fifth of the service now rather than half, waits longer (the
    # heavy one, nine programs in ten, gains next to nothing per program from it)
    assert after["tenant-light"] > 1.2 * before["tenant-light"]
    assert after["tenant-heavy"] <= 1.02 * before["tenant-heavy"]
    assert "slowdown by tenant" in output


def test_a_weight_for_a_tenant_the_workload_lacks_is_refused() -> None:
    command = ["bench", "--workload", "two-tenants", "--programs", "10"]
    result = CliRunner().invoke(main, [*command, "--tenant-weight", "tenant-hevy=2"])
    assert result.exit_code == 2
    assert "no program of tenant 'tenant-hevy'" in result.output
    assert "tenant-heavy, tenant-light" in result.output

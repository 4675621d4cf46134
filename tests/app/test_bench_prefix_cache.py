"""``bench --prefix-cache ordinary,relative``: lost reuse and what a relative-position cache
buys, side by side, on a workload with mid-prompt insertions."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from agentconsole.cli import main

ARGS = ["bench", "--workload", "coding-agent", "--programs", "6", "--jobs", "1"]


def test_ordinary_and_relative_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    result = CliRunner().invoke(
        main,
        [
            *ARGS,
            "--policies",
            "fcfs,stock-sglang",
            "--prefix-cache",
            "ordinary,relative",
            "--set",
            "p_insert=0.5",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(out.read_text())["policies"]
    assert set(runs) == {"fcfs+ordinary", "fcfs+relative", "stock-sglang+ordinary",
                         "stock-sglang+relative"}  # fmt: skip
    ordinary, relative = runs["fcfs+ordinary"], runs["fcfs+relative"]
    assert ordinary["insertions"] == relative["insertions"] > 0
    assert ordinary["lost_reuse_tokens"] > 0
    assert ordinary["suffix_reused_tokens"] == ordinary["correction_tokens"] == 0
    assert relative["lost_reuse_tokens"] == 0
    assert relative["suffix_reused_tokens"] > 0
    assert 0 < relative["correction_tokens"] < relative["suffix_reused_tokens"]
    assert relative["tokens_per_success"] < ordinary["tokens_per_success"]
    # SGLang as shipped has no relative-position cache: the flag does not change it
    stock = runs["stock-sglang+relative"]
    assert stock["suffix_reused_tokens"] == 0
    assert stock["lost_reuse_tokens"] > 0
    assert "prefix cache after mid-prompt insertions" in result.output
    assert "relative / ordinary" in result.output
    assert "lost reuse tokens" in result.output


def test_one_mode_keeps_plain_labels_and_no_insertions_no_rows(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    result = CliRunner().invoke(main, [*ARGS, "--policies", "fcfs", "--json", str(out)])
    assert result.exit_code == 0, result.output
    runs = json.loads(out.read_text())["policies"]
    assert set(runs) == {"fcfs"}
    assert runs["fcfs"]["insertions"] == runs["fcfs"]["lost_reuse_tokens"] == 0
    assert "lost reuse tokens" not in result.output
    assert "prefix cache after" not in result.output


def test_unknown_mode_and_loads_with_two_modes_are_usage_errors() -> None:
    bad = CliRunner().invoke(main, [*ARGS, "--prefix-cache", "blend"])
    assert bad.exit_code == 2
    assert "unknown prefix cache blend" in bad.output
    both = CliRunner().invoke(
        main, [*ARGS, "--prefix-cache", "ordinary,relative", "--loads", "0.5"]
    )
    assert both.exit_code == 2
    assert "one --prefix-cache mode" in both.output

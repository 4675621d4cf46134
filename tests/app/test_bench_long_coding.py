"""``bench --workload long-coding`` serves it on its long-context model unless told otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentconsole.cli import main


@pytest.mark.parametrize(
    ("args", "expected"),
    [([], "qwen2.5-7b-1m"), (["--model", "llama-3.1-8b"], "llama-3.1-8b")],
)
def test_long_coding_defaults_to_its_long_context_model(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    out = tmp_path / "b.json"
    command = ["bench", "--workload", "long-coding", "--programs", "2", "--policies", "fcfs"]
    command += ["--jobs", "1", "--set", "max_steps=20", "--json", str(out), *args]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["setup"]["model"] == expected
    assert f"x {expected} (tp 1)" in result.output

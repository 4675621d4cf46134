"""The reliability suite (``benchmarks/reliability``, docs/RELIABILITY.md) at a tiny size: each
scenario runs as its one command against a real ``serve`` and must meet its criteria.

Run as a subprocess: mypy checks ``benchmarks`` as a folder of scripts, so the package is not
importable under the same name here. About a minute in all on 2 cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
TINY = {
    # a start's bound is loose here: CI shares its cores; the 5 s of the plan is the benchmark's
    "crash-loop": ["--rounds", "2", "--programs", "3", "--steps", "3", "--point-every", "2",
                   "--max-ready-s", "20"],
    "soak": ["--agents", "4", "--duration", "4", "--steps", "3", "--tool-seconds", "0.05"],
    "fuzz": ["--max-examples", "1"],
    "slow-clients": ["--per-kind", "10", "--timeout", "1", "--baseline", "1"],
    "quota-bypass": ["--trials", "1"],
}  # fmt: skip
#: criteria missed for a known cause outside the suite (docs/RELIABILITY.md), not asserted:
KNOWN: set[tuple[str, str]] = set()


@pytest.mark.parametrize("scenario", list(TINY))
def test_the_scenario_meets_its_criteria(scenario: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    argv = [*TINY[scenario], "--json", str(report), "--workdir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.reliability", scenario, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    criteria = json.loads(report.read_text())["criteria"]
    missed = [c for c in criteria if not c["passed"] and (scenario, c["name"]) not in KNOWN]
    assert criteria
    assert not missed, done.stdout[-3000:]

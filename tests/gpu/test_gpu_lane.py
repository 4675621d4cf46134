"""The GPU lane end to end (``benchmarks/gpu_lane.py --quick``): skipped without a CUDA GPU.

Checks what the lane must deliver, not how fast: a loadable calibration profile for the GPU
preset, finite step-time errors, and every program of the workload finished on our engine and
on stock SGLang's fcfs and lpm.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1800)
def test_gpu_lane_calibrates_and_compares(tmp_path: Path) -> None:
    from agentconsole.server.runtime.sim.profile import load_profile

    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_lane.py"),
            "--out",
            str(tmp_path),
            "--quick",
        ],
        check=True,
        timeout=1700,
    )
    report = json.loads((tmp_path / "gpu_lane.json").read_text())
    profile = load_profile(Path(report["profile"]))
    assert profile.model == "llama-3.1-8b"
    assert profile.gpu in ("H100-80GB", "H200-141GB")
    assert 0 < profile.efficiency.mfu <= 1
    assert profile.points
    assert 0 <= report["step_mean_abs_error"] < 10
    assert set(report["arms"]) == {"agentconsole", "sglang-fcfs", "sglang-lpm"}
    for arm in report["arms"].values():
        assert arm["finished"] >= arm["programs"] - 1  # seed-mix cancels about 1% of programs
        assert arm["e2e_p95_s"] > 0
    assert report["e2e_mean_abs_error"] >= 0

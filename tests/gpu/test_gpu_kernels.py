"""The roofline calibration without SGLang (``benchmarks/gpu_kernels.py``): it measures the
points ``fit_profile`` takes (a toy shape on the CPU here; the 8B shape on a GPU), and the
checked-in H200 measurement fits the cost model within a few percent."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.profile import MeasuredStep, load_profile

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "benchmarks" / "measured"


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/gpu_kernels.py`` loaded as a module (registered while the test runs:
    dataclasses look their module up while defining)."""
    spec = importlib.util.spec_from_file_location(
        "gpu_kernels", ROOT / "benchmarks" / "gpu_kernels.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_kernels", module)
    spec.loader.exec_module(module)
    return module


def test_the_toy_shape_measures_every_point_on_the_cpu(tmp_path: Path, script: ModuleType) -> None:
    pytest.importorskip("torch")
    report = script.main(["--out", str(tmp_path), "--tiny"])
    written = json.loads((tmp_path / "gpu_kernels.json").read_text())
    assert written == report
    steps = [MeasuredStep(**p) for p in report["points"]]
    assert len(steps) == len(script.TINY_DECODE) + len(script.TINY_PREFILL)
    assert all(s.seconds > 0 for s in steps)
    prefill = [s for s in steps if s.prefill_tokens]
    # two requests of 16 new tokens over 48 cached: 2 x (16 x 48 + 16 x 17 / 2) pairs
    assert (prefill[-1].prefill_tokens, prefill[-1].prefill_attn_pairs) == (32, 2 * (768 + 136))
    assert prefill[-1].prefill_context_sq == 2 * 48 * 48
    assert report["prefill_attention"] == "sdpa-expanded"  # FlashAttention needs a GPU
    # a decode point counts the KV it read: each context and its new token, in whole chunks
    decode = [(s.decode_batch, s.decode_context) for s in steps if s.decode_batch]
    assert decode == [(b, b * (c + 1)) for b, c in script.TINY_DECODE]  # one chunk each
    assert (script.read(1024), script.read(255)) == (1280, 256)


def test_the_h200_measurement_fits_within_a_few_percent(tmp_path: Path, script: ModuleType) -> None:
    out = tmp_path / "profile.json"
    summary = script.fit(MEASURED / "h200_gpu_kernels.json", out)
    assert summary["fitted_mean_abs_error"] < 0.05
    assert summary["bundled_mean_abs_error"] > 0.15  # the datasheet guess was optimistic
    fitted, shipped = (
        load_profile(out),
        load_profile(MEASURED / "H200-141GB__llama-3.1-8b__tp1.torch-kernels.json"),
    )
    assert (fitted.gpu, fitted.model) == ("H200-141GB", "llama-3.1-8b")
    assert fitted.efficiency.mfu == pytest.approx(shipped.efficiency.mfu, rel=1e-6)
    # the measured step of one 8B decode at 1K context is ~6 ms, as the profile says
    assert CostModel.from_profile(shipped).decode_step_seconds(1, 1024) == pytest.approx(
        0.006, rel=0.1
    )


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_the_8b_shape_measures_on_a_gpu(tmp_path: Path, script: ModuleType) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    report = script.main(["--out", str(tmp_path)])
    assert report["prefill_attention"] == "flash-varlen"
    assert all(p["seconds"] > 0 for p in report["points"])

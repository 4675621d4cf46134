"""Sanity figures of the roofline cost model against datasheet arithmetic and known SGLang rates."""

from __future__ import annotations

import pytest

from agentconsole.server.runtime.sim.costmodel import CostModel, attention_pairs, preset
from agentconsole.server.runtime.sim.hardware import GPUS, MODELS, gpu, model
from agentconsole.server.runtime.sim.profile import Efficiency

H200, H100 = "H200-141GB", "H100-80GB"
B8, B70 = "llama-3.1-8b", "llama-3.1-70b"


def test_kv_bytes_per_token_match_the_architecture() -> None:
    assert preset(H200, B8).kv_bytes_per_token == 131072
    m70 = preset(H200, B70, 8)
    assert m70.kv_bytes_per_token == 327680
    assert m70.kv_bytes_per_token_per_gpu == 327680 // 8
    assert preset(H200, B70, 4).kv_bytes_per_token_per_gpu == 327680 // 4


def test_layer_params_add_up_to_published_totals() -> None:
    for spec in MODELS.values():
        counted = spec.layer_params + 2 * spec.lm_head_params  # untied embedding + LM head
        assert counted == pytest.approx(spec.params, rel=0.01), spec.name


def test_h200_8b_kv_capacity_is_about_a_million_tokens() -> None:
    m = preset(H200, B8)
    assert 900_000 <= m.hbm_kv_capacity_tokens() <= 1_000_000
    assert m.hbm_kv_capacity_tokens(0.8) < m.hbm_kv_capacity_tokens(0.9)
    assert preset(H100, B8).hbm_kv_capacity_tokens() < m.hbm_kv_capacity_tokens()
    assert m.hbm_kv_capacity_tokens(0.05) == 0  # the weights alone do not fit
    assert m.dram_kv_capacity_tokens() > m.hbm_kv_capacity_tokens()
    with pytest.raises(ValueError, match="mem_fraction"):
        m.hbm_kv_capacity_tokens(0.0)


def test_decode_batch_one_is_weight_streaming() -> None:
    m = preset(H200, B8)
    t = m.decode_step_seconds(1, 1024)
    floor = (m.model.layer_params + m.model.lm_head_params) * 2 / m.gpu.hbm_bw
    assert floor < t
    assert 3.5e-3 <= t <= 5e-3


def test_prefill_8k_is_compute_bound() -> None:
    m = preset(H200, B8)
    t = m.prefill_seconds(8192)
    # 2 x 7.0e9 x 8192 + attention = 1.32e14 FLOPs; 989 TFLOP/s at mfu 0.6 gives 0.22 s.
    assert 0.15 <= t <= 0.30
    slow_memory = CostModel(m.gpu, m.model, 1, Efficiency(bw_eff=0.5))
    assert slow_memory.prefill_seconds(8192) == t


def test_h200_decodes_faster_than_h100() -> None:
    for batch in (1, 32, 128):
        ctx = batch * 20_000
        assert preset(H200, B8).decode_step_seconds(batch, ctx) < preset(
            H100, B8
        ).decode_step_seconds(batch, ctx)


def test_70b_tp8_beats_tp4_per_step() -> None:
    tp4, tp8 = preset(H200, B70, 4), preset(H200, B70, 8)
    for batch in (1, 32, 128):
        assert tp8.decode_step_seconds(batch, batch * 20_000) < tp4.decode_step_seconds(
            batch, batch * 20_000
        )
    assert tp8.prefill_seconds(8192) < tp4.prefill_seconds(8192)


def test_allreduce_costs_only_with_tensor_parallel() -> None:
    base = CostModel(gpu(H200), model(B70), 4, Efficiency(allreduce_latency_s=0.0))
    slow = CostModel(gpu(H200), model(B70), 4, Efficiency(allreduce_latency_s=1e-3))
    assert slow.decode_step_seconds(1, 100) - base.decode_step_seconds(1, 100) == pytest.approx(
        2 * 80 * 1e-3
    )
    solo = CostModel(gpu(H200), model(B8), 1, Efficiency(allreduce_latency_s=1e-3))
    assert solo.decode_step_seconds(1, 100) == preset(H200, B8).decode_step_seconds(1, 100)


def test_mixed_step_costs_less_than_separate_steps() -> None:
    m = preset(H200, B8)
    pairs = attention_pairs(2048, 4096)
    mixed = m.step_seconds(2048, pairs, 32, 32 * 4096, 4096)
    separate = m.step_seconds(2048, pairs, 0, 0, 4096) + m.decode_step_seconds(32, 32 * 4096)
    assert mixed < separate
    assert mixed >= m.step_seconds(2048, pairs, 0, 0, 4096)
    assert m.step_seconds() == 0.0


def test_chunked_prefill_reads_weights_per_chunk() -> None:
    m = preset(H200, B8)
    whole = m.prefill_seconds(80_000)
    chunked = m.prefill_seconds(80_000, chunk_tokens=8192)
    assert whole < chunked < whole * 1.05
    assert m.prefill_seconds(0) == 0.0
    assert m.prefill_seconds(1000, cached_tokens=50_000) > m.prefill_seconds(1000)
    assert attention_pairs(3) == 6
    assert attention_pairs(2, 10) == 23


def test_transfer_times() -> None:
    m = preset(H200, B8)
    assert m.transfer_seconds(55_000) == pytest.approx(55_000 * 131072 / 55e9)
    assert m.transfer_seconds(1000, "disk") > m.transfer_seconds(1000, "pcie")
    tp8 = preset(H200, B70, 8)
    assert tp8.transfer_seconds(1000) < preset(H200, B70, 4).transfer_seconds(1000)
    cpu = preset("cpu-2core", "tiny-llama", 1)
    with pytest.raises(ValueError, match="disk"):
        cpu.transfer_seconds(10, "disk")
    with pytest.raises(ValueError, match="nfs"):
        m.transfer_seconds(10, "nfs")


def test_cpu_preset_matches_measured_sglang_rates() -> None:
    # the project's fp32 tiny model on the real CPU engine (scripts/sglang_cpu/smoke_engine.py,
    # 2026-11-29): 870-990 tok/s single stream, 3,400-4,300 for 8, 7,500-9,400 for 64 requests;
    # the bundled profile is the calibrated fit, so it must land near (within ~25%)
    m = preset("cpu-2core", "tiny-llama", 1)
    assert 650 <= 1 / m.decode_step_seconds(1, 100) <= 1240
    assert 2550 <= 8 / m.decode_step_seconds(8, 8 * 100) <= 5400
    assert 5600 <= 64 / m.decode_step_seconds(64, 64 * 100) <= 11800


def test_invalid_deployments_are_rejected() -> None:
    with pytest.raises(ValueError, match="divide heads"):
        CostModel(gpu(H200), model(B8), 3)
    with pytest.raises(ValueError, match="interconnect"):
        CostModel(gpu("cpu-2core"), model("tiny-llama"), 2)
    with pytest.raises(ValueError, match="mfu"):
        Efficiency(mfu=1.5)
    with pytest.raises(KeyError, match="known"):
        preset(H200, B8, 2)
    with pytest.raises(KeyError, match="unknown GPU"):
        gpu("A100")
    with pytest.raises(KeyError, match="unknown model"):
        model("gpt-5")
    assert {"H100-80GB", "H200-141GB", "cpu-2core"} <= set(GPUS)

"""The tier model: capacities, optional DISK, transfer times."""

from __future__ import annotations

import math

import pytest

from agentconsole.kvtiers import Tier, TierModel, TierSpec


def test_transfer_time_uses_the_slower_link_and_latency() -> None:
    m = TierModel.build(
        kv_bytes_per_token=1000.0,
        hbm_tokens=10,
        dram_tokens=100,
        dram_bandwidth=1e6,
        disk_tokens=1000,
        disk_bandwidth=1e5,
        disk_latency_s=0.5,
    )
    assert m.bytes(3) == 3000.0
    assert m.transfer_seconds(1000, Tier.HBM, Tier.DRAM) == pytest.approx(1.0)
    assert m.transfer_seconds(1000, Tier.DRAM, Tier.HBM) == pytest.approx(1.0)
    assert m.transfer_seconds(1000, Tier.DISK, Tier.HBM) == pytest.approx(10.5)
    assert m.transfer_seconds(1000, Tier.DRAM, Tier.DISK) == pytest.approx(10.5)
    assert m.transfer_seconds(1000, Tier.DRAM, Tier.DRAM) == 0.0
    assert m.next_slower(Tier.HBM) is Tier.DRAM
    assert m.next_slower(Tier.DRAM) is Tier.DISK
    assert m.next_slower(Tier.DISK) is None


def test_disk_is_optional() -> None:
    m = TierModel.build(kv_bytes_per_token=2.0, hbm_tokens=10, dram_tokens=20)
    assert m.disk is None
    assert not m.has(Tier.DISK)
    assert m.capacity(Tier.DISK) == 0
    assert m.next_slower(Tier.DRAM) is None
    with pytest.raises(ValueError, match="absent"):
        m.transfer_seconds(5, Tier.HBM, Tier.DISK)
    no_dram = TierModel.build(kv_bytes_per_token=2.0, hbm_tokens=10)
    assert no_dram.next_slower(Tier.HBM) is None


def test_validation() -> None:
    with pytest.raises(ValueError, match="capacity"):
        TierSpec(-1)
    with pytest.raises(ValueError, match="bandwidth"):
        TierSpec(1, 0.0)
    with pytest.raises(ValueError, match="kv_bytes_per_token"):
        TierModel(0.0, TierSpec(1), TierSpec(1))
    assert math.isinf(TierSpec(1).bandwidth_bytes_per_s)

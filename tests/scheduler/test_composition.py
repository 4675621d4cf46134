"""The prefill-deferral rule: when an engine pass decodes instead of prefilling."""

from __future__ import annotations

from agentconsole.scheduler.composition import PrefillDeferral


def test_defers_while_a_decoder_outranks_the_best_pending_prefill() -> None:
    rule = PrefillDeferral(max_decode_passes=3)
    assert rule.defers([(1, 5.0), (3, 0.0)], (2, 0.0), decode_streak=0)
    assert not rule.defers([(3, 0.0), (4, 0.0)], (2, 0.0), decode_streak=0)


def test_the_streak_is_capped_so_the_prefill_always_runs() -> None:
    rule = PrefillDeferral(max_decode_passes=3)
    assert [rule.defers([0], 1, streak) for streak in range(5)] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert rule.passes_left(1) == 2
    assert rule.passes_left(7) == 0


def test_zero_passes_never_defers_as_stock_sglang() -> None:
    rule = PrefillDeferral(max_decode_passes=0)
    assert not rule.enabled
    assert not rule.defers([0], 1, decode_streak=0)


def test_nothing_pending_or_no_decoder_defers_nothing() -> None:
    rule = PrefillDeferral()
    assert not rule.defers([0], None, decode_streak=0)
    assert not rule.defers([], 1, decode_streak=0)

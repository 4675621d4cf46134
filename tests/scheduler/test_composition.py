"""The prefill-deferral rule: when an engine pass decodes instead of prefilling."""

from __future__ import annotations

from agentconsole.scheduler.composition import PrefillDeferral, passes_for

KEY_BETTER, KEY_PREFILL, KEY_WORSE = (1, 0.0), (2, 0.0), (3, 0.0)


def test_defers_a_long_prefill_while_a_decoder_outranks_it() -> None:
    rule = PrefillDeferral(max_decode_passes=3)
    assert rule.defers([KEY_BETTER, KEY_WORSE], KEY_PREFILL, 0, prefill_passes=4)
    assert not rule.defers([KEY_WORSE], KEY_PREFILL, 0, prefill_passes=4)


def test_a_one_pass_prefill_is_deferred_only_while_the_decoders_outnumber_its_waiters() -> None:
    # deferring gathers later prefills into one stall of the decoders, and holds back the
    # requests that pass would start: worth it for many decoders beside few newcomers
    rule = PrefillDeferral(max_decode_passes=3)
    many = [KEY_BETTER, KEY_WORSE, KEY_WORSE]
    assert rule.defers(many, KEY_PREFILL, 0, waiting_prefills=2)
    assert not rule.defers(many, KEY_PREFILL, 0, waiting_prefills=3)
    assert not rule.defers([KEY_BETTER], KEY_PREFILL, 0)  # one decoder, one newcomer
    assert rule.defers([KEY_BETTER], KEY_PREFILL, 0, prefill_passes=2, waiting_prefills=5)
    assert not rule.defers([KEY_WORSE, KEY_WORSE], KEY_PREFILL, 0, waiting_prefills=1)


def test_the_streak_is_capped_so_the_prefill_always_runs() -> None:
    rule = PrefillDeferral(max_decode_passes=3)
    decoders = [KEY_BETTER]
    assert [rule.defers(decoders, KEY_PREFILL, s, prefill_passes=9) for s in range(5)] == [
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
    assert not rule.defers([KEY_BETTER], KEY_PREFILL, 0, prefill_passes=9)


def test_nothing_pending_or_no_decoder_defers_nothing() -> None:
    rule = PrefillDeferral()
    assert not rule.defers([KEY_BETTER], None, 0, prefill_passes=9)
    assert not rule.defers([], KEY_PREFILL, 0, prefill_passes=9)


def test_passes_of_a_prefill() -> None:
    assert passes_for(100, None) == 1
    assert passes_for(100, -1) == 1
    assert passes_for(512, 512) == 1
    assert passes_for(513, 512) == 2
    assert passes_for(2048, 512) == 4


def test_a_call_is_deferred_at_most_its_share_of_its_own_service_in_all() -> None:
    """Streak after streak, a call the ranks put behind (a long program's, with no queue to
    order) stops being deferred once it waited its share of its predicted service."""
    rule = PrefillDeferral(max_decode_passes=8, max_deferred_share=0.3)
    decoders = [KEY_BETTER]
    assert rule.defers(decoders, KEY_PREFILL, 0, prefill_passes=9, deferred_s=2.9, service_s=10)
    assert not rule.defers(decoders, KEY_PREFILL, 0, prefill_passes=9, deferred_s=3, service_s=10)
    # a call with no predicted service has no such cap
    assert rule.defers(decoders, KEY_PREFILL, 0, prefill_passes=9, deferred_s=99, service_s=0)

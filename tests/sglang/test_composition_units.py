"""The plugin's step composition without SGLang (``composition.StepComposer``): fake requests
ranked by a plain key, as ``PluginState.rank_keys`` ranks real ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentconsole.scheduler.composition import PrefillDeferral
from agentconsole.server.runtime.sglang.composition import (
    StepComposer,
    admission_slots,
    keeps_one_chunked,
)


@dataclass
class Req:
    rid: str
    key: int  # its rank: smaller runs first
    prompt: int = 100
    done: bool = False
    origin_input_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.origin_input_ids = [0] * self.prompt

    def finished(self) -> bool:
        return self.done


def keys(reqs: list[Any]) -> list[Any]:
    return [r.key for r in reqs]


def test_a_better_ranked_decoder_defers_the_chunk_for_a_bounded_streak() -> None:
    composer = StepComposer(PrefillDeferral(max_decode_passes=3))
    nearly_done, fresh = Req("a", key=1), Req("b", key=9)
    passes = [composer.defer_prefill(keys, [nearly_done], fresh, []) for _ in range(8)]
    # three decode passes, one prefill, three more, ...
    assert passes == [True, True, True, False, True, True, True, False]
    assert composer.deferrals == 6


def test_no_deferral_for_a_better_ranked_prefill_or_nothing_pending() -> None:
    composer = StepComposer()
    assert not composer.defer_prefill(keys, [Req("a", key=5)], None, [Req("w", key=1)])
    assert not composer.defer_prefill(keys, [Req("a", key=5)], None, [])
    assert not composer.defer_prefill(keys, [], Req("b", key=9), [])
    # a finished request in the running batch decodes nothing
    assert not composer.defer_prefill(keys, [Req("a", key=1, done=True)], Req("b", key=9), [])


def test_a_better_ranked_arrival_at_the_queue_tail_is_seen() -> None:
    waiting = [Req(f"w{i}", key=50 + i) for i in range(40)]
    running = [Req("a", key=20)]
    assert StepComposer().defer_prefill(keys, running, None, waiting)
    waiting.append(Req("late", key=10))  # arrived since the last sort, better than "a"
    assert not StepComposer().defer_prefill(keys, running, None, waiting)


def test_a_decoder_keeps_the_key_it_was_first_seen_running_with() -> None:
    """As the simulator fixes a call's rank at admission: a long decode that would age into
    the fairness guard's starving tier does not come to defer every prefill."""
    composer = StepComposer(PrefillDeferral(max_decode_passes=100))
    long_decode, fresh = Req("a", key=5), Req("b", key=3)
    assert not composer.defer_prefill(keys, [long_decode], fresh, [])
    long_decode.key = 0  # what ranking it again now would say
    assert not composer.defer_prefill(keys, [long_decode], fresh, [])
    # a request seen running for the first time is ranked then
    assert composer.defer_prefill(keys, [long_decode, Req("c", key=1)], fresh, [])


def test_a_streak_ends_when_nothing_is_pending() -> None:
    composer = StepComposer(PrefillDeferral(max_decode_passes=2))
    a, b = Req("a", key=1), Req("b", key=9)
    assert composer.defer_prefill(keys, [a], b, [])
    assert not composer.defer_prefill(keys, [a], None, [])  # b was admitted meanwhile
    assert composer.defer_prefill(keys, [a], b, [])  # a new streak
    assert composer.defer_prefill(keys, [a], b, [])


def test_chunk_limit_reserves_room_for_outranking_waiting_requests_whole() -> None:
    chunked = Req("big", key=9, prompt=100_000)
    waiting = [Req("last-call", key=1, prompt=2_300), Req("worse", key=20, prompt=50)]
    resident = {"last-call": 2_000}  # its context is cached: 300 tokens of work
    limit = StepComposer.chunk_limit(keys, lambda reqs: resident, chunked, waiting, 4096, 64)
    assert limit == 4096 - 320  # 300 tokens, page-rounded
    # nothing outranks the chunk: no cap
    assert StepComposer.chunk_limit(keys, lambda r: {}, chunked, waiting[1:], 4096, 64) is None


def no_cache(reqs: list[Any]) -> dict[str, int]:
    return {}


def test_chunk_limit_keeps_room_only_for_requests_the_pass_can_admit() -> None:
    chunked = Req("big", key=9, prompt=100_000)
    waiting = [Req("first", key=1, prompt=300), Req("second", key=2, prompt=300)]
    both = StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64)
    assert both == 4096 - 2 * 320
    one = StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64, slots=1)
    assert one == 4096 - 320
    # the batch is full: nobody can be admitted, so the chunk keeps the whole pass
    assert StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64, slots=0) is None


def test_no_deferral_for_waiting_requests_the_pass_cannot_admit() -> None:
    composer = StepComposer(PrefillDeferral(max_decode_passes=3))
    nearly_done, fresh = Req("a", key=1), Req("b", key=9)
    assert composer.defer_prefill(keys, [nearly_done], None, [fresh], slots=1)
    # the batch is full: nothing would prefill anyway, so no streak is counted
    assert not composer.defer_prefill(keys, [nearly_done], None, [fresh], slots=0)
    assert composer.deferred_passes == 0
    # the chunked request's next chunk is pending whatever the slots
    assert composer.defer_prefill(keys, [nearly_done], fresh, [], slots=0)


def test_admission_slots_is_sglangs_own_count_unless_preemption_can_make_room() -> None:
    @dataclass
    class Batch:
        reqs: list[Any]

    class Scheduler:
        enable_priority_preemption = False

        def get_num_allocatable_reqs(self, running_bs: int, running_batch: Any = None) -> int:
            return 4 - running_bs

    batch = Batch([object(), object()])
    assert admission_slots(Scheduler(), batch) == 2
    assert admission_slots(Scheduler(), Batch([object()] * 6)) == 0  # never negative
    preempting = Scheduler()
    preempting.enable_priority_preemption = True
    assert admission_slots(preempting, batch) is None
    assert admission_slots(object(), batch) is None  # an SGLang without the count


def test_chunk_limit_always_leaves_the_chunk_a_page() -> None:
    chunked = Req("big", key=9, prompt=100_000)
    waiting = [Req("huge-but-better", key=1, prompt=10_000)]
    assert StepComposer.chunk_limit(keys, lambda r: {}, chunked, waiting, 4096, 64) is None
    assert StepComposer.chunk_limit(keys, lambda r: {}, chunked, waiting, 100, 64) is None


def test_a_second_chunked_request_is_refused_beside_the_in_flight_one() -> None:
    @dataclass
    class Admission:
        is_chunked: bool

    assert not keeps_one_chunked(Admission(is_chunked=True), has_chunked_req=True)
    assert keeps_one_chunked(Admission(is_chunked=False), has_chunked_req=True)
    assert keeps_one_chunked(Admission(is_chunked=True), has_chunked_req=False)
    assert keeps_one_chunked(object(), has_chunked_req=True)  # SGLang's AddReqResult verdict

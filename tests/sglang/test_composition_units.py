"""The plugin's step composition without SGLang (``composition.StepComposer``): fake requests
ranked by a plain key, as ``PluginState.rank_keys`` ranks real ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentconsole.scheduler.composition import PrefillDeferral
from agentconsole.server.runtime.sglang import plugin_state
from agentconsole.server.runtime.sglang.composition import (
    UNKNOWN_ROOM,
    PassRoom,
    StepComposer,
    admission_room,
    admission_slots,
    keeps_one_chunked,
)
from agentconsole.server.runtime.sglang.control import CONTROL_FILE, ControlState, write_json_atomic
from agentconsole.server.runtime.sglang.plugin_state import PluginState


@dataclass
class Req:
    rid: str
    key: int  # its rank: smaller runs first
    prompt: int = 100
    done: bool = False
    origin_input_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    max_new: int = 0

    def __post_init__(self) -> None:
        self.origin_input_ids = [0] * self.prompt
        self.sampling_params = SimpleNamespace(max_new_tokens=self.max_new, ignore_eos=False)

    def finished(self) -> bool:
        return self.done


def keys(reqs: list[Any]) -> list[Any]:
    return [r.key for r in reqs]


#: chunks smaller than the fake requests' 100-token prompts: every prefill here spans several
#: passes, which deferral is for whatever slots the batch has left
CHUNK = 32


def test_a_better_ranked_decoder_defers_the_chunk_for_a_bounded_streak() -> None:
    composer = StepComposer(PrefillDeferral(max_decode_passes=3))
    nearly_done, fresh = Req("a", key=1), Req("b", key=9)
    passes = [
        composer.defer_prefill(keys, [nearly_done], fresh, [], chunk_tokens=CHUNK) for _ in range(8)
    ]
    # three decode passes, one prefill, three more, ...
    assert passes == [True, True, True, False, True, True, True, False]
    assert composer.deferrals == 6


def test_no_deferral_for_a_better_ranked_prefill_or_nothing_pending() -> None:
    composer = StepComposer()
    assert not composer.defer_prefill(
        keys, [Req("a", key=5)], None, [Req("w", key=1)], chunk_tokens=CHUNK
    )
    assert not composer.defer_prefill(keys, [Req("a", key=5)], None, [], chunk_tokens=CHUNK)
    assert not composer.defer_prefill(keys, [], Req("b", key=9), [], chunk_tokens=CHUNK)
    # a finished request in the running batch decodes nothing
    assert not composer.defer_prefill(
        keys, [Req("a", key=1, done=True)], Req("b", key=9), [], chunk_tokens=CHUNK
    )


def test_a_better_ranked_arrival_at_the_queue_tail_is_seen() -> None:
    waiting = [Req(f"w{i}", key=50 + i) for i in range(40)]
    running = [Req("a", key=20)]
    assert StepComposer().defer_prefill(keys, running, None, waiting, chunk_tokens=CHUNK)
    waiting.append(Req("late", key=10))  # arrived since the last sort, better than "a"
    assert not StepComposer().defer_prefill(keys, running, None, waiting, chunk_tokens=CHUNK)


def test_a_decoder_keeps_the_key_it_was_first_seen_running_with() -> None:
    """As the simulator fixes a call's rank at admission: a long decode that would age into
    the fairness guard's starving tier does not come to defer every prefill."""
    composer = StepComposer(PrefillDeferral(max_decode_passes=100))
    long_decode, fresh = Req("a", key=5), Req("b", key=3)
    assert not composer.defer_prefill(keys, [long_decode], fresh, [], chunk_tokens=CHUNK)
    long_decode.key = 0  # what ranking it again now would say
    assert not composer.defer_prefill(keys, [long_decode], fresh, [], chunk_tokens=CHUNK)
    # a request seen running for the first time is ranked then
    assert composer.defer_prefill(
        keys, [long_decode, Req("c", key=1)], fresh, [], chunk_tokens=CHUNK
    )


def test_a_one_pass_prefill_waits_only_while_the_decoders_outnumber_its_waiters() -> None:
    composer = StepComposer(PrefillDeferral(max_decode_passes=3))
    decoders = [Req("a", key=1), Req("c", key=2), Req("d", key=3)]
    fresh = [Req("b", key=9), Req("e", key=10)]
    # one decoder beside one newcomer (the CPU engine at 2 requests): no gathering to pay
    assert not composer.defer_prefill(
        keys, decoders[:1], None, fresh[:1], chunk_tokens=4096, max_running=2
    )
    # three decoders, and room to start both newcomers: gathering them pays
    assert composer.defer_prefill(keys, decoders, None, fresh, chunk_tokens=4096, max_running=8)
    # three decoders, room to start one of ten newcomers (the pass's slots bound them)
    many = [Req(f"w{i}", key=9 + i) for i in range(10)]
    assert composer.defer_prefill(keys, decoders, None, many, chunk_tokens=4096, max_running=4)
    assert not composer.defer_prefill(keys, decoders, None, many, chunk_tokens=4096, max_running=16)


def test_a_waiting_prefill_is_sized_by_what_the_device_does_not_hold() -> None:
    composer = StepComposer(PrefillDeferral(max_decode_passes=3))
    decoder, warm = Req("a", key=1), Req("b", key=9, prompt=300)
    assert not composer.defer_prefill(  # 10 tokens uncached: one pass
        keys,
        [decoder],
        None,
        [warm],
        residency=lambda reqs: {"b": 290},
        chunk_tokens=CHUNK,
        max_running=2,
    )
    assert composer.defer_prefill(keys, [decoder], None, [warm], chunk_tokens=CHUNK, max_running=2)


def test_a_streak_ends_when_nothing_is_pending() -> None:
    composer = StepComposer(PrefillDeferral(max_decode_passes=2))
    a, b = Req("a", key=1), Req("b", key=9)
    assert composer.defer_prefill(keys, [a], b, [], chunk_tokens=CHUNK)
    assert not composer.defer_prefill(keys, [a], None, [])  # b was admitted meanwhile
    assert composer.defer_prefill(keys, [a], b, [], chunk_tokens=CHUNK)  # a new streak
    assert composer.defer_prefill(keys, [a], b, [], chunk_tokens=CHUNK)


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
    one = StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64, PassRoom(slots=1))
    assert one == 4096 - 320
    # the batch is full: nobody can be admitted, so the chunk keeps the whole pass
    full = PassRoom(slots=0)
    assert StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64, full) is None


def test_no_deferral_for_waiting_requests_the_pass_cannot_admit() -> None:
    composer = StepComposer(PrefillDeferral(max_decode_passes=3))
    nearly_done, fresh = Req("a", key=1), Req("b", key=9)
    assert composer.defer_prefill(
        keys, [nearly_done], None, [fresh], PassRoom(slots=1), chunk_tokens=CHUNK
    )
    # the batch is full: nothing would prefill anyway, so no streak is counted
    assert not composer.defer_prefill(
        keys, [nearly_done], None, [fresh], PassRoom(slots=0), chunk_tokens=CHUNK
    )
    assert composer.deferred_passes == 0
    # the chunked request's next chunk is pending whatever the slots
    assert composer.defer_prefill(
        keys, [nearly_done], fresh, [], PassRoom(slots=0), chunk_tokens=CHUNK
    )


def test_admission_slots_is_sglangs_own_count_unless_preemption_can_make_room() -> None:
    @dataclass
    class Batch:
        reqs: list[Any]

    @dataclass
    class Kv:
        holds_kv: bool

    @dataclass
    class Chunked:
        kv: Kv

    class Scheduler:
        """SGLang's count: request rows free (plus those held by counted requests) within
        the batch limit, minus nothing promised."""

        enable_priority_preemption = False
        chunked_req: Any = None
        limit, free_rows = 8, 100

        def get_num_allocatable_reqs(
            self, running_bs: int, running_batch: Any = None, num_held_rows: int = 0
        ) -> int:
            return min(self.limit - running_bs, self.free_rows + num_held_rows)

    scheduler = Scheduler()
    assert admission_slots(scheduler, Batch([object()] * 6)) == 2
    assert admission_slots(scheduler, Batch([object()] * 9)) == 0  # never negative
    # a chunk in flight is one of the admitted (SGLang counts it in its admission loop)
    scheduler.chunked_req = Chunked(Kv(holds_kv=True))
    assert admission_slots(scheduler, Batch([object()] * 6)) == 1
    assert admission_slots(scheduler, Batch([object()] * 7)) == 0  # SGLang admits none
    scheduler.free_rows = 0  # its held row is free to it: room for the chunk alone
    assert admission_slots(scheduler, Batch([object()] * 2)) == 0
    scheduler.enable_priority_preemption = True
    assert admission_slots(scheduler, Batch([])) is None
    assert admission_slots(object(), Batch([])) is None  # an SGLang without the count


def test_chunk_limit_keeps_no_room_the_kv_pool_cannot_admit_into() -> None:
    """SGLang admits a waiting request only if its prompt, its decode reserve and a page fit
    in the KV budget the chunk's own reservation leaves; room kept for one that does not fit
    would only slow the chunk."""
    chunked = Req("big", key=9, prompt=100_000, max_new=500)
    waiting = [Req("first", key=1, prompt=300, max_new=200), Req("second", key=2, prompt=300)]
    cap = 4096 - 320
    # the capped chunk and its page (its decode comes with its last piece only), then
    # "first": 300 + 200 + 64
    fits = PassRoom(tokens=cap + 64 + 564 + 1)
    assert StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64, fits) == cap
    short = PassRoom(tokens=cap + 64 + 564)
    assert StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64, short) is None
    # room for both: the second's check counts what the first's admission reserves
    # (320 + 64 + 200), beside a chunk capped twice
    both = PassRoom(tokens=(4096 - 640 + 64) + 584 + 364 + 0.5)
    assert StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64, both) == 3456
    less = PassRoom(tokens=(4096 - 640 + 64) + 584 + 364 - 0.5)
    assert StepComposer.chunk_limit(keys, no_cache, chunked, waiting, 4096, 64, less) == cap


def test_a_chunk_ending_in_the_pass_reserves_its_decode_too() -> None:
    ending = Req("ending", key=9, prompt=500, max_new=100)
    waiting = [Req("first", key=1, prompt=300, max_new=200)]
    # its last piece: 500 tokens page-rounded, a page, its whole decode; then "first"
    needed = 512 + 64 + 100 + 564
    room = PassRoom(tokens=needed + 1)
    assert StepComposer.chunk_limit(keys, no_cache, ending, waiting, 4096, 64, room) == 3776
    room = PassRoom(tokens=needed)
    assert StepComposer.chunk_limit(keys, no_cache, ending, waiting, 4096, 64, room) is None


def test_an_admitted_requests_cached_prefix_is_locked_out_of_the_evictable_room() -> None:
    chunked = Req("big", key=9, prompt=100_000)
    waiting = [Req("warm", key=1, prompt=300, max_new=200)]
    warm = {"warm": 200}  # 100 tokens to prefill, 200 resident that admission locks
    needed = (4096 - 128 + 64) + 200 + 100 + 200 + 64
    room = PassRoom(tokens=needed + 1)
    limit = StepComposer.chunk_limit(keys, lambda r: warm, chunked, waiting, 4096, 64, room)
    assert limit == 4096 - 128
    room = PassRoom(tokens=needed)
    assert StepComposer.chunk_limit(keys, lambda r: warm, chunked, waiting, 4096, 64, room) is None


def test_admission_room_is_sglangs_prefill_budget_less_the_running_decodes() -> None:
    class Budget:
        def __init__(self, mixed: int) -> None:
            # free + evictable, less the mixed decode rows, as SGLang's PrefillBudget starts
            self.remaining_total = 10_000 - mixed

    class Allocator:
        def create_prefill_budget(self, tree_cache: Any, num_mixed_decode_tokens: int) -> Budget:
            return Budget(num_mixed_decode_tokens)

    def running(max_new: int, done: int, ignore_eos: bool) -> Any:
        params = SimpleNamespace(max_new_tokens=max_new, ignore_eos=ignore_eos)
        return SimpleNamespace(sampling_params=params, output_ids=[0] * done)

    scheduler = SimpleNamespace(
        enable_priority_preemption=False,
        chunked_req=None,
        waiting_queue=[Req("w", key=1)],
        is_mixed_chunk=False,
        token_to_kv_pool_allocator=Allocator(),
        tree_cache=object(),
        new_token_ratio_tracker=SimpleNamespace(current=0.5),
    )
    batch = SimpleNamespace(reqs=[running(1_001, 200, False), running(9_000, 0, True)])
    # read only while a chunked prefill is in flight (no other pass asks for it)
    assert admission_room(scheduler, batch).tokens is None
    scheduler.chunked_req = Req("big", key=9)
    room = admission_room(scheduler, batch)
    # 801 left x the new-token ratio (not rounded); an ignore_eos request's whole clipped rest
    assert room.tokens == 10_000 - 400.5 - 4096
    assert room.decode_clip == 4096  # SGLang's CLIP_MAX_NEW_TOKENS
    assert room.slots is None  # this scheduler has no request count
    scheduler.is_mixed_chunk = True  # a decode row of each running request rides along
    assert admission_room(scheduler, batch).tokens == 10_000 - 2 - 400.5 - 4096
    broken = SimpleNamespace(**{**vars(scheduler), "token_to_kv_pool_allocator": None})
    assert admission_room(broken, batch).tokens is None


def test_a_pass_whose_count_fails_leaves_no_count_behind(tmp_path: Path) -> None:
    class Broken:
        enable_priority_preemption = False
        chunked_req = None
        waiting_queue: tuple[Any, ...] = ()

        def get_num_allocatable_reqs(self, *args: Any, **kwargs: Any) -> int:
            raise RuntimeError("odd state")

    state = PluginState(tmp_path)
    state._admission_room = PassRoom(slots=3, tokens=1_000)  # left by an earlier pass
    state.defer_prefill(Broken(), SimpleNamespace(reqs=[]))
    assert state._admission_room == UNKNOWN_ROOM


def test_a_fresh_arrival_is_sized_by_one_live_match_not_as_wholly_uncached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that arrived after the queue's last live match: the deferral reads what the
    device holds of it (one match, kept until the next live match), so a prompt whose
    uncached rest fits one pass runs beside one decoder instead of waiting as a long one."""
    matched: list[str] = []

    def holds_all_but_ten(tree: Any, reqs: list[Any]) -> dict[str, int]:
        matched.extend(r.rid for r in reqs)
        return {r.rid: r.prompt - 10 for r in reqs}

    monkeypatch.setattr(plugin_state, "waiting_residency", holds_all_but_ten)
    state = PluginState(tmp_path)
    state.rank_keys = keys  # type: ignore[method-assign]  # plain keys, no tickets
    fresh = Req("fresh", key=5, prompt=100_000)  # 25 chunks were it all uncached
    scheduler = SimpleNamespace(
        waiting_queue=[fresh],
        chunked_req=None,
        tree_cache=object(),
        chunked_prefill_size=4096,
        max_running_requests=2,
    )
    batch = SimpleNamespace(reqs=[Req("decoder", key=1)])
    assert not state.defer_prefill(scheduler, batch)
    assert not state.defer_prefill(scheduler, batch)
    assert matched == ["fresh"]  # matched once, then read from the kept match
    assert state._resident == {}  # the ranking still reads only the live match


def test_only_a_pass_that_capped_its_chunk_guards_admission(tmp_path: Path) -> None:
    state = PluginState(tmp_path)
    state.rank_keys = keys  # type: ignore[method-assign]  # plain keys, no tickets
    chunked = Req("big", key=9, prompt=100_000)
    tree = SimpleNamespace(disable=False)  # no live match: nothing resident
    assert state.chunk_limit(chunked, [Req("first", key=1, prompt=300)], 4096, 64, tree)
    assert state.chunk_capped
    assert state.chunk_limit(chunked, [Req("worse", key=20, prompt=300)], 4096, 64, tree) is None
    assert not state.chunk_capped  # the next pass's chunk took its whole budget


def test_chunk_limit_always_leaves_the_chunk_a_page() -> None:
    chunked = Req("big", key=9, prompt=100_000)
    waiting = [Req("huge-but-better", key=1, prompt=10_000)]
    assert StepComposer.chunk_limit(keys, lambda r: {}, chunked, waiting, 4096, 64) is None
    assert StepComposer.chunk_limit(keys, lambda r: {}, chunked, waiting, 100, 64) is None


def test_a_second_chunked_request_is_refused_beside_a_capped_chunk() -> None:
    @dataclass
    class Admission:
        is_chunked: bool

    chunked, whole = Admission(is_chunked=True), Admission(is_chunked=False)
    assert not keeps_one_chunked(chunked, has_chunked_req=True, chunk_capped=True)
    assert keeps_one_chunked(whole, has_chunked_req=True, chunk_capped=True)
    assert keeps_one_chunked(chunked, has_chunked_req=False, chunk_capped=True)
    # SGLang's AddReqResult verdict passes as it is
    assert keeps_one_chunked(object(), has_chunked_req=True, chunk_capped=True)
    # no cap this pass: SGLang admits as it always does (the chunk took its budget)
    assert keeps_one_chunked(chunked, has_chunked_req=True, chunk_capped=False)


def test_a_policy_switch_ranks_the_running_requests_anew(tmp_path: Path) -> None:
    """The keys kept for running requests were made under the old policy: compared with the
    pending prefills' keys under the new one (a cp-cache key of a few seconds against an
    fcfs arrival time), every prefill was deferred, or none."""
    write_json_atomic(tmp_path / CONTROL_FILE, ControlState(version=1).to_json())
    state = PluginState(tmp_path)
    state.composer._running_keys["decoder"] = 5.0  # kept under the first policy
    state._apply(ControlState(version=2, policy="fcfs"))
    assert state.composer._running_keys == {}


def test_a_request_is_deferred_at_most_its_share_of_its_service_in_all() -> None:
    """The plugin counts the seconds each pending prefill was deferred, each deferred pass at
    its predicted length, and stops deferring one that waited its share of its ticket's
    predicted service (``PrefillDeferral.max_deferred_share``), however many streaks that
    took; the pass that starts under the cap runs whole."""
    composer = StepComposer(PrefillDeferral(max_decode_passes=2, max_deferred_share=0.5))
    nearly_done, fresh = Req("a", key=1), Req("b", key=9)
    service = {"b": 2.0}  # predicted seconds: deferred 1 s in all at most

    def ask() -> bool:
        return composer.defer_prefill(
            keys,
            [nearly_done],
            fresh,
            [],
            chunk_tokens=CHUNK,
            service_s=lambda req: service.get(req.rid, 0.0),
            pass_s=0.3,
        )

    # passes of 0.3 s: two deferred, one prefill, two more (the second starts at 0.9 s, under
    # the cap, and ends at 1.2 s), one prefill, then every pass prefills
    assert [ask() for _ in range(7)] == [True, True, False, True, True, False, False]
    assert composer.deferred_s("b") == pytest.approx(1.2)

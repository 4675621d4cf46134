"""Step composition inside SGLang's scheduler: which work a pass runs, by the policy's rank.

The plugin's ordering decides which waiting request is admitted next; without this module
SGLang still decides what each pass runs by admission order alone: an admitted chunked prefill
takes every pass's whole chunk until it is done, and a pending prefill always runs before the
running batch decodes. So a nearly done program's last call (the overview's section 4) waits
for every chunk of a fresh long prompt admitted just before it, then decodes only when no
prefill is pending. Two decisions fix that, both by rank (``ordering.Orderer`` keys):

* :meth:`StepComposer.chunk_limit` (``SchedulePolicy.shortest_prefill_chunk_limit``): the
  in-flight chunk shrinks to leave room for the waiting requests that outrank it, so they
  prefill in this pass beside it (whole: SGLang tracks one chunked request, see
  :func:`keeps_one_chunked`), as many as the pass has room for (:func:`admission_room`: its
  request slots and KV tokens as SGLang's admission counts them; room no one could be
  admitted into is not kept);
* :meth:`StepComposer.defer_prefill` (around ``Scheduler._should_defer_prefill``): while a
  running request outranks every pending prefill (one that fits a pass only while the
  decoders outnumber the requests the pass would start), the pass decodes instead, at most
  ``PrefillDeferral.max_decode_passes`` passes in a row and, summed over its streaks, a
  share of the request's predicted service (the simulator's engine applies the same rule,
  ``EngineConfig.defer_prefill_steps``).

Both only read the requests; this object keeps the streak of deferred passes and each running
request's key from when it was first seen running.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from operator import itemgetter
from typing import Any

from agentconsole.scheduler.composition import PrefillDeferral, passes_for
from agentconsole.server.runtime.sglang import symbols

#: ranks a list of SGLang requests: their effective keys, in the same order (a report: it
#: changes no state of the ordering)
RankKeys = Callable[[list[Any]], list[Any]]
#: request id -> prompt tokens resident on the device now, for the given waiting requests
Residency = Callable[[list[Any]], dict[str, int]]
#: a request's predicted service in seconds, from its ticket (0.0: unknown)
ServiceOf = Callable[[Any], float]


@dataclass(frozen=True, slots=True)
class PassRoom:
    """What one engine pass can admit beside its running batch, as SGLang's admission counts
    it; None where unknown (no bound is applied then)."""

    #: waiting requests it can admit (request slots; the in-flight chunked request excluded)
    slots: int | None = None
    #: KV tokens free or evictable, less the running requests' expected decode (SGLang's
    #: ``PrefillAdder`` budget before the chunk and the new requests reserve theirs; read
    #: only while a chunked prefill is in flight)
    tokens: float | None = None
    #: SGLang's cap on the decode tokens a request's admission reserves
    #: (``CLIP_MAX_NEW_TOKENS``)
    decode_clip: int = 4096  # SGLang's default (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION)


UNKNOWN_ROOM = PassRoom()

#: waiting requests looked at from each end of the queue: its head is the order of the last
#: sort, its tail the arrivals since (a long queue is not ranked whole on every decode pass)
_LOOK = 16


class StepComposer:
    def __init__(self, deferral: PrefillDeferral | None = None) -> None:
        self.deferral = deferral or PrefillDeferral()
        self.deferred_passes = 0  # passes in a row that decoded with a prefill pending
        self.deferrals = 0  # passes deferred since start (status)
        #: request id -> its key when first seen running, as the simulator fixes a call's
        #: rank at admission: a long decode must not age into the fairness guard's starving
        #: tier and defer every prefill behind it; and a pass ranks only new decoders
        self._running_keys: dict[str, Any] = {}
        #: request id -> seconds its prefill was deferred so far, each deferred pass counted
        #: at its predicted length (the deferral's cap in all,
        #: ``PrefillDeferral.max_deferred_share``)
        self._deferred_s: dict[str, float] = {}

    def rules_changed(self) -> None:
        """The keys' rules changed (a policy or fairness switch): the running requests' kept
        keys were made under the old ones and must not be compared with new keys."""
        self._running_keys.clear()

    def defer_prefill(
        self,
        rank_keys: RankKeys,
        running: Sequence[Any],
        chunked: Any | None,
        waiting: Sequence[Any],
        room: PassRoom = UNKNOWN_ROOM,
        *,
        residency: Residency = lambda reqs: {},
        chunk_tokens: int | None = None,
        max_running: int | None = None,
        service_s: ServiceOf = lambda req: 0.0,
        pass_s: float = 0.0,
    ) -> bool:
        """Whether this pass should decode the ``running`` requests and leave the pending
        prefill (the ``chunked`` request's next chunk, or a ``waiting`` one the pass has
        ``room`` to admit) for later (``PrefillDeferral.defers``: the best pending prefill's
        passes from its uncached prompt, by ``residency``, in chunks of ``chunk_tokens``; the
        requests the pass would start, by the free ones of SGLang's ``max_running`` slots;
        the seconds it was deferred so far, each deferred pass counted as ``pass_s``, against
        its predicted ``service_s``); counts the streak and the deferred seconds. Predicted,
        not measured, pass lengths: tensor-parallel ranks must count alike (``lockstep``)."""
        decoders = [r for r in running if not r.finished()]
        pending = _pending(chunked, waiting if room.slots != 0 else ())
        if not decoders:
            self._running_keys.clear()
        if not (self.deferral.enabled and decoders and pending):
            self.deferred_passes = 0
            return False
        if self.deferred_passes >= self.deferral.max_decode_passes:
            self.deferred_passes = 0  # this pass prefills; the next streak starts after it
            return False
        known = self._running_keys
        new = [r for r in decoders if r.rid not in known]
        keys = rank_keys([*new, *pending])
        known.update((r.rid, key) for r, key in zip(new, keys, strict=False))
        if len(known) > 2 * len(decoders):  # forget the requests that left the batch
            self._running_keys = known = {r.rid: known[r.rid] for r in decoders}
        best, best_key = min(zip(pending, keys[len(new) :], strict=True), key=itemgetter(1))
        defers = self.deferral.defers(
            [known[r.rid] for r in decoders],
            best_key,
            self.deferred_passes,
            prefill_passes=passes_for(_uncached(best, chunked, residency), chunk_tokens),
            waiting_prefills=_admissible(pending, chunked, room, max_running, len(decoders)),
            deferred_s=self._deferred_s.get(best.rid, 0.0),
            service_s=service_s(best),
        )
        if not defers:
            self.deferred_passes = 0
            return False
        self.deferred_passes += 1
        self.deferrals += 1
        self._deferred_s[best.rid] = self._deferred_s.get(best.rid, 0.0) + pass_s
        if len(self._deferred_s) > 2 * len(pending) + _LOOK:  # forget requests no longer pending
            self._deferred_s = {
                r.rid: self._deferred_s[r.rid] for r in pending if r.rid in self._deferred_s
            }
        return True

    def deferred_s(self, rid: str) -> float:
        """Seconds the prefill of request ``rid`` was deferred so far (passes credited)."""
        return self._deferred_s.get(rid, 0.0)

    @staticmethod
    def chunk_limit(
        rank_keys: RankKeys,
        residency: Residency,
        chunked: Any,
        waiting: Sequence[Any],
        budget: int,
        page_size: int,
        room: PassRoom = UNKNOWN_ROOM,
    ) -> int | None:
        """The token cap on ``chunked``'s next chunk that leaves room, within the pass's
        ``budget``, for the head of ``waiting`` (sorted: best first) that outranks it, each
        request's uncached prompt whole, as many requests as the pass has ``room`` for
        (slots, and KV tokens as SGLang's admission counts them: the capped chunk's
        reservation, then each request's prompt, decode reserve, a page and its cached prefix,
        which admission locks out of the evictable tokens); None: no cap."""
        if budget < 2 * page_size or not waiting or room.slots == 0:
            return None
        head = list(waiting[: _LOOK if room.slots is None else min(room.slots, _LOOK)])
        keys = rank_keys([chunked, *head])
        ahead = [req for req, key in zip(head, keys[1:], strict=True) if key < keys[0]]
        if not ahead:
            return None
        resident = residency(ahead)
        chunk_left = _prompt_left(chunked)
        reserved = 0  # chunk tokens given up
        admitted = 0.0  # KV the admitted requests take (locked prefix, prompt, decode, a page)
        for req in ahead:
            cached = resident.get(req.rid, 0)
            work = _prompt_total(req) - cached
            charge = _pages(max(work, 1), page_size)
            if reserved + charge > budget - page_size:
                break
            if room.tokens is not None:
                # SGLang admits the request only if its prompt, its decode reserve and a page
                # fit in what the capped chunk's reservation and the requests admitted before
                # it leave, with its cached prefix locked (no longer evictable): room it could
                # not be admitted into would only slow the chunk
                chunk = _chunk_reserve(
                    chunked, budget - reserved - charge, chunk_left, page_size, room.decode_clip
                )
                need = cached + max(work, 1) + _decode_left(req, room.decode_clip) + page_size
                if chunk + admitted + need >= room.tokens:
                    break
                # what its admission then reserves: the decode from its whole max_new_tokens
                admitted += cached + charge + page_size + _decode_all(req, room.decode_clip)
            reserved += charge
        if not reserved:
            return None
        return (budget - reserved) // page_size * page_size


def _pages(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size) * page_size


def _prompt_left(chunked: Any) -> int:
    """Prompt tokens the chunked request has still to prefill (its next chunks' most)."""
    fill = getattr(chunked, "full_untruncated_fill_ids", None)
    if fill is None:
        return len(chunked.origin_input_ids)
    return len(fill) - int(getattr(chunked, "prefix_len", 0))


def _prompt_total(req: Any) -> int:
    """Tokens a waiting request's prefill covers: its prompt and what it decoded before (a
    retracted request resumes with its output)."""
    return len(req.origin_input_ids) + len(req.output_ids)


def _chunk_reserve(chunked: Any, cap: int, left: int, page_size: int, clip: int) -> int:
    """The KV SGLang reserves for the chunked request's next piece under ``cap``: the piece,
    page-rounded, a page, and, when the piece ends its prompt, its decode."""
    piece = _pages(min(cap, left), page_size) + page_size
    return piece + (_decode_all(chunked, clip) if left <= cap else 0)


def _max_new(req: Any) -> int:
    return getattr(getattr(req, "sampling_params", None), "max_new_tokens", None) or 0


def _decode_left(req: Any, clip: int) -> int:
    """The decode SGLang's admission check counts for ``req``: its remaining
    ``max_new_tokens``, clipped."""
    return min(max(_max_new(req) - len(req.output_ids), 0), clip)


def _decode_all(req: Any, clip: int) -> int:
    """The decode SGLang's admission then reserves: the whole ``max_new_tokens``, clipped
    (a retracted request's tokens already generated are not subtracted)."""
    return min(_max_new(req), clip)


def admission_room(scheduler: Any, running_batch: Any) -> PassRoom:
    """What SGLang can admit beside ``running_batch`` in this pass (:class:`PassRoom`): its
    request slots (:func:`admission_slots`) and, while a chunked prefill is in flight with
    requests waiting (the only pass that asks), its KV budget as its ``PrefillAdder`` starts
    the pass (free and evictable tokens, less the mixed decode rows and each running
    request's expected decode); either None when it cannot be read."""
    slots = admission_slots(scheduler, running_batch)
    if getattr(scheduler, "chunked_req", None) is None or not scheduler.waiting_queue:
        return PassRoom(slots)
    return PassRoom(slots, *_admission_tokens(scheduler, running_batch))


@cache
def _sglang_decode_clip() -> int:
    return int(symbols.load(symbols.CLIP_MAX_NEW_TOKENS))


def _admission_tokens(scheduler: Any, running_batch: Any) -> tuple[float | None, int]:
    try:
        clip = _sglang_decode_clip()
        reqs = getattr(running_batch, "reqs", None) or []
        mixed = len(reqs) if getattr(scheduler, "is_mixed_chunk", False) else 0
        budget = scheduler.token_to_kv_pool_allocator.create_prefill_budget(
            scheduler.tree_cache, num_mixed_decode_tokens=mixed
        )
        ratio = float(scheduler.new_token_ratio_tracker.current)
        decoding = 0.0
        for req in reqs:
            params = req.sampling_params
            left = min(params.max_new_tokens - len(req.output_ids), clip)
            decoding += left * (1.0 if params.ignore_eos else ratio)
        return float(budget.remaining_total) - decoding, clip
    except Exception:  # another SGLang's allocator or state: no bound
        return None, UNKNOWN_ROOM.decode_clip


def admission_slots(scheduler: Any, running_batch: Any) -> int | None:
    """How many waiting requests SGLang can admit beside ``running_batch`` in this pass: its
    own count (``get_num_allocatable_reqs``, as its admission loop asks it, the in-flight
    chunked request counted among the admitted and its held row among the free), less that
    chunked request; None when unknown or when priority preemption can make room by evicting
    running requests."""
    if getattr(scheduler, "enable_priority_preemption", False):
        return None
    count = getattr(scheduler, "get_num_allocatable_reqs", None)
    if count is None:
        return None
    chunked = getattr(scheduler, "chunked_req", None)
    held = int(bool(getattr(getattr(chunked, "kv", None), "holds_kv", False)))
    reqs = getattr(running_batch, "reqs", None) or []
    try:
        allocatable = int(count(len(reqs), running_batch=running_batch, num_held_rows=held))
    except Exception:  # another SGLang's signature or state: no count, no bound
        return None
    return max(allocatable - (chunked is not None), 0)


def keeps_one_chunked(admission: Any, has_chunked_req: bool, chunk_capped: bool) -> bool:
    """False when admitting a waiting request as ``admission`` (SGLang's prefill shape) would
    start a second chunked prefill beside an in-flight one whose chunk this pass capped
    (``chunk_capped``): the room the cap left is for requests whole, as under SGLang's own
    shortest-prefill-first (whose guard is this one), so the request waits for a pass with
    room for it whole. In a pass without a cap SGLang admits as it always does (the chunk
    took the pass's whole budget, or ends in it): refusing there held back admissions stock
    SGLang makes (docs/BENCHMARKS.md section 8)."""
    if not (chunk_capped and has_chunked_req):
        return True
    return not bool(getattr(admission, "is_chunked", False))


def _uncached(req: Any, chunked: Any | None, residency: Residency) -> int:
    """Prompt tokens ``req``'s prefill has still to compute: the in-flight ``chunked``
    request's rest, or a waiting request's prompt less what the device holds of it."""
    if req is chunked:
        return _prompt_left(req)
    return _prompt_total(req) - residency([req]).get(req.rid, 0)


def _admissible(
    pending: Sequence[Any],
    chunked: Any | None,
    room: PassRoom,
    max_running: int | None,
    decoders: int,
) -> int:
    """How many of the ``pending`` requests a prefill pass would start: the chunked one and
    the waiting ones, as many as its slots allow (``room.slots``, else the free ones of
    ``max_running``; unbounded when neither is known)."""
    waiting = len(pending) - (chunked is not None)
    slots = room.slots
    if slots is None and max_running is not None:
        slots = max(max_running - decoders - (chunked is not None), 0)
    return (chunked is not None) + (waiting if slots is None else min(waiting, slots))


def _pending(chunked: Any | None, waiting: Sequence[Any]) -> list[Any]:
    ends = [*waiting[:_LOOK], *waiting[max(len(waiting) - _LOOK, _LOOK) :]]
    return [chunked, *ends] if chunked is not None else ends

"""Cache-aware routing score: which worker should run a call, given its cached prefix and load.

Owns :class:`WorkerState`, :class:`RouteWeights`, :func:`route_cost`, :func:`choose_worker`,
and the placement rules built on them, chosen by name (:func:`get_router`): ``affinity``
(:class:`AffinityRouter`: a program's first call by the score, later calls sticky) and
``round-robin`` (every call to the next rank, the baseline).
The score follows NVIDIA Dynamo's KV-aware router (lowest wins)::

    credit    = hbm_hits + sum over slower tiers t of max(0, hits_t - load_seconds_t / c)
                (0 when all tiers' hits together are under min_hit_share x prompt)
    prefill   = max(active_prefill + prompt - overlap_weight * credit, 0)
    decode    = active_decode + prompt
    cost      = prefill_load_scale * prefill + decode

where ``load_seconds_t = tiers.transfer_seconds(hits_t, t, HBM)`` and ``c`` is the prefill cost
per token: a hit on DRAM or disk is worth its tokens minus the prefill-equivalent of loading it,
so a slow link makes a lower-tier hit worth less (full credit when no tier model or ``c`` is
given). ``overlap_weight = 0`` is pure load balancing. A hit under ``min_hit_share`` of the
prompt counts nothing, as in SGLang's own cache-aware router (``--cache-threshold``, 0.3): every
prompt opens with a chat template's few tokens, and crediting that head sent each new program
to the one rank that held it while ranks of equal load (a tie, broken by programs mapped) stood
idle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from agentconsole.kvtiers.tiers import ALL_TIERS, Tier, TierModel
from agentconsole.scheduler.registry import Registry


@dataclass(frozen=True, slots=True)
class WorkerState:
    """One candidate worker: the call's hit tokens there by tier (``Match.tokens_by_tier``)
    and the tokens it is already prefilling and decoding."""

    name: str
    hit_tokens_by_tier: Sequence[int]
    active_prefill_tokens: int = 0
    active_decode_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RouteWeights:
    """Knobs of the score (Dynamo's ``prefill_load_scale`` and KV-overlap score weight, SGLang
    router's ``cache_threshold`` as ``min_hit_share``)."""

    prefill_load_scale: float = 1.0
    overlap_weight: float = 1.0
    recompute_seconds_per_token: float = 0.0
    tiers: TierModel | None = None
    min_hit_share: float = 0.3


def overlap_credit(hit_tokens_by_tier: Sequence[int], weights: RouteWeights) -> float:
    """Prefill tokens a worker's cached prefix saves, lower tiers discounted by load time."""
    credit = float(hit_tokens_by_tier[Tier.HBM])
    c = weights.recompute_seconds_per_token
    for tier in ALL_TIERS[1:]:
        hits = hit_tokens_by_tier[tier]
        if hits <= 0:
            continue
        if weights.tiers is None or c <= 0:
            credit += hits
        else:
            load = weights.tiers.transfer_seconds(hits, tier, Tier.HBM)
            credit += max(0.0, hits - load / c)
    return credit


def route_cost(prompt_tokens: int, worker: WorkerState, weights: RouteWeights) -> float:
    """Cost of running a ``prompt_tokens`` call on ``worker`` (lower is better)."""
    raw_prefill = worker.active_prefill_tokens + prompt_tokens
    hits = worker.hit_tokens_by_tier
    credit = 0.0
    if sum(hits) >= weights.min_hit_share * prompt_tokens:
        credit = weights.overlap_weight * overlap_credit(hits, weights)
    prefill = max(raw_prefill - credit, 0.0)
    decode = worker.active_decode_tokens + prompt_tokens
    return weights.prefill_load_scale * prefill + decode


def choose_worker(prompt_tokens: int, workers: Sequence[WorkerState], weights: RouteWeights) -> int:
    """Index of the lowest-cost worker (the first on ties); ``ValueError`` if none."""
    if not workers:
        raise ValueError("choose_worker: no workers")
    best, best_cost = 0, route_cost(prompt_tokens, workers[0], weights)
    for i in range(1, len(workers)):
        cost = route_cost(prompt_tokens, workers[i], weights)
        if cost < best_cost:
            best, best_cost = i, cost
    return best


# -- which worker runs a program's calls: placement rules shared by the simulator and serve ----
#: does ``rank`` still hold some of ``program``'s context? (the caller's own view of its caches)
Holds = Callable[[str, int], bool]
#: the candidate ranks' :class:`WorkerState`, in the order given (asked only when placing)
WorkersOf = Callable[[Sequence[int]], Sequence[WorkerState]]

_MAX_PROGRAMS = 16_384  # mapped programs kept (least recent dropped: they are placed again)


class ProgramRouter(Protocol):
    """Chooses the worker of each call of a program. The simulator's ``ReplicaRouter`` and
    SGLang's ``RankRouter`` both ask one of these, so ``bench --replicas N`` places programs as
    ``serve --dp N`` does; each supplies its own view of loads, hits and resident contexts."""

    @property
    def name(self) -> str:
        """The name it is chosen by (``--routing``)."""
        ...

    @property
    def places_by_score(self) -> bool:
        """Whether a program not kept on its rank goes to the open ranks of lowest
        :func:`route_cost` (so a probe can tell where it may land), or to any open rank."""
        ...

    def route(self, program_id: str, prompt_tokens: int, holds: Holds, workers: WorkersOf) -> int:
        """The rank of the program's next call (``prompt_tokens`` its prompt); records it."""
        ...

    def preview(self, program_id: str, prompt_tokens: int, holds: Holds, workers: WorkersOf) -> int:
        """The rank :meth:`route` would choose now, changing nothing (a model the selector
        may not pick is asked where it would run the call, not told it runs it)."""
        ...

    def rank_of(self, program_id: str) -> int | None:
        """The rank the program is mapped to now (None: not placed, released, or no mapping)."""
        ...

    def release(self, program_id: str) -> None:
        """The program's KV was given up, or the program ended: place its next call (if any)
        again."""
        ...

    def drain(self, rank: int) -> None: ...

    def undrain(self, rank: int) -> None: ...


#: the placement rules by name (``--routing``); each registers after its class (see
#: ``scheduler.registry``: this module is compiled)
ROUTERS: Registry[ProgramRouter] = Registry("routing")


class _Ranks:
    """``size`` ranks, some drained (nothing new is placed there)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a router needs at least one rank")
        self.size = size
        self.drained: set[int] = set()

    def open_ranks(self) -> list[int]:
        """Ranks new work may go to (every rank when all are drained: work must go somewhere)."""
        return [r for r in range(self.size) if r not in self.drained] or list(range(self.size))

    def drain(self, rank: int) -> None:
        if not 0 <= rank < self.size:
            raise ValueError(f"no data-parallel rank {rank} (ranks 0..{self.size - 1})")
        self.drained.add(rank)

    def undrain(self, rank: int) -> None:
        self.drained.discard(rank)


class AffinityRouter(_Ranks):
    """``affinity``: a program's first call goes to the lowest :func:`route_cost`; its later
    calls stay there (its KV is there) until the KV is released, the rank no longer holds any of
    its context (``holds``) or the rank is drained; then the next call is placed again. Ties go
    to the rank with the fewest programs mapped to it (a mapped program is load to come), then
    to the lowest rank. Mappings of programs whose rank lost their context are dropped; that is
    done when counting them matters (a tie), which gives the same choices as dropping them at
    every placement without a pass over every mapped program per placement."""

    name: ClassVar[str] = "affinity"
    places_by_score: ClassVar[bool] = True

    def __init__(self, size: int, weights: RouteWeights | None = None) -> None:
        super().__init__(size)
        self.weights = weights or RouteWeights()
        self._rank_of: OrderedDict[str, int] = OrderedDict()  # least recently routed first

    def route(self, program_id: str, prompt_tokens: int, holds: Holds, workers: WorkersOf) -> int:
        chosen = self._choose(program_id, prompt_tokens, holds, workers, forget=True)
        self._rank_of[program_id] = chosen
        self._rank_of.move_to_end(program_id)
        while len(self._rank_of) > _MAX_PROGRAMS:
            self._rank_of.popitem(last=False)
        return chosen

    def preview(self, program_id: str, prompt_tokens: int, holds: Holds, workers: WorkersOf) -> int:
        return self._choose(program_id, prompt_tokens, holds, workers, forget=False)

    def _choose(
        self, program_id: str, prompt_tokens: int, holds: Holds, workers: WorkersOf, *, forget: bool
    ) -> int:
        """The rank of the call; ``forget`` drops lost mappings first where a tie counts them
        (a preview counts them as they stand: the same choice but in such a tie)."""
        rank = self._rank_of.get(program_id)
        if rank is not None and rank not in self.drained and holds(program_id, rank):
            return rank
        candidates = self.open_ranks()
        states = workers(candidates)
        costs = [route_cost(prompt_tokens, w, self.weights) for w in states]
        best = min(costs)
        tied = [r for r, cost in zip(candidates, costs, strict=True) if cost == best]
        if len(tied) == 1:
            return tied[0]
        if forget:
            self.forget_lost(holds)
        mapped = self.programs_per_rank()
        return min(tied, key=mapped.__getitem__)  # the first of the fewest

    def forget_lost(self, holds: Holds) -> None:
        """Drop the mappings of programs whose (open) rank no longer holds their context."""
        lost = [
            program
            for program, rank in self._rank_of.items()
            if rank not in self.drained and not holds(program, rank)
        ]
        for program in lost:
            del self._rank_of[program]

    def rank_of(self, program_id: str) -> int | None:
        return self._rank_of.get(program_id)

    def release(self, program_id: str) -> None:
        self._rank_of.pop(program_id, None)

    def programs_per_rank(self) -> list[int]:
        counts = [0] * self.size
        for rank in self._rank_of.values():
            counts[rank] += 1
        return counts


ROUTERS.register(AffinityRouter)


class RoundRobinRouter(_Ranks):
    """``round-robin``: every call to the next open rank in turn, whatever its program or
    cache (SGLang's own data-parallel default, ``load_balance_method=round_robin``): the
    baseline affinity is measured against."""

    name: ClassVar[str] = "round-robin"
    places_by_score: ClassVar[bool] = False

    def __init__(self, size: int, weights: RouteWeights | None = None) -> None:
        super().__init__(size)
        self._next = 0

    def route(self, program_id: str, prompt_tokens: int, holds: Holds, workers: WorkersOf) -> int:
        chosen = self.preview(program_id, prompt_tokens, holds, workers)
        self._next += 1
        return chosen

    def preview(self, program_id: str, prompt_tokens: int, holds: Holds, workers: WorkersOf) -> int:
        candidates = self.open_ranks()
        return candidates[self._next % len(candidates)]

    def rank_of(self, program_id: str) -> int | None:
        return None

    def release(self, program_id: str) -> None:
        pass


ROUTERS.register(RoundRobinRouter)


def get_router(name: str, size: int, weights: RouteWeights | None = None) -> ProgramRouter:
    """A fresh router named ``name`` over ``size`` ranks (``KeyError`` for an unknown name,
    listing the known ones)."""
    return ROUTERS.create(name, size=size, weights=weights)

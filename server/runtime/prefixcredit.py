"""How much of a new program's first prompt counts as cached when there are several replicas
or several models: one rule for ``bench --replicas N`` (``sim/simulation.py``) and
``serve --dp N`` (``sglang/kvview.py``), and for ``bench --models`` and ``serve`` over several
models (``live/intake.py``).

The program door sizes a new program by what its first prompt does not find cached
(``scheduler.doorroom.door_size``). Each replica (a data-parallel rank) has its own prefix cache,
so only what the replica its first call runs on holds saves anything. That replica is not
known at the door: the call is placed when it is sent, and the loads may change meanwhile. So
the credit is the least prefix held over the replicas the placement rule could choose now
(:func:`likely_ranks`): the program's own replica while it keeps one; else, for a rule that
places by score (``affinity``: ``kvtiers.router.route_cost``, cached tokens against load),
the replicas of the lowest score, all of them on a tie (the tie is broken by programs mapped,
which may change before the call is placed); for a rule that places without one (round robin,
SGLang's own controller when calls are not pinned), every replica it may use. Crediting the
most any replica holds counted cache the program would usually not land on, which made
``bench`` start programs ``serve`` would have kept waiting.

With several models (``bench --models``, ``serve`` over a fleet) each model's engines keep
their own prefix cache and the selector picks the first call's model only when it is sent, so
that call may run on any of its node's candidate models (none given: every served model,
:func:`likely_models`) and only what it finds where it runs saves anything. The credit is the
least over those candidates of each model's own credit (:func:`least_over_models`), each
model's own being the rule above over that model's replicas: ``bench`` asks each candidate
pool's router (``Simulation._held_at_arrival``), ``serve`` each candidate model's runtime with
the prompt in that model's tokens (``ModelDesk.held_for_new_program``). Crediting the most any
engine held, or the default model's probe alone, counted cache on models the call may not run
on. The two functions live in ``scheduler.models.doorcredit`` (``serve``'s live code reaches
no runtime module) and are re-exported here, the one place the whole rule is stated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from agentconsole.kvtiers.router import RouteWeights, WorkersOf, route_cost
from agentconsole.scheduler.models.doorcredit import least_over_models, likely_models

__all__ = ["credited_prefix", "least_over_models", "likely_models", "likely_ranks"]


def likely_ranks(
    candidates: Sequence[int],
    prompt_tokens: int,
    weights: RouteWeights,
    workers: WorkersOf | None,
    pinned: int | None = None,
) -> list[int]:
    """The ranks a program's next call may go to, changing nothing: ``[pinned]`` when the
    program keeps a rank (the caller checks it still holds its context and is not drained);
    else, with ``workers`` (the candidates' states, asked only here: a rule that scores),
    the ``candidates`` of the lowest ``route_cost`` for a ``prompt_tokens`` prompt, all of
    them on a tie; without (a rule that places by no score), every candidate."""
    if pinned is not None:
        return [pinned]
    if workers is None:
        return list(candidates)
    costs = [route_cost(prompt_tokens, state, weights) for state in workers(candidates)]
    lowest = min(costs)
    return [r for r, cost in zip(candidates, costs, strict=True) if cost == lowest]


def credited_prefix(ranks: Iterable[int], held_on: Callable[[int], int]) -> int:
    """The prompt tokens credited as cached: the least ``held_on(rank)`` over ``ranks`` (the
    call may go to any of them, so only what all of them hold is sure). No rank: none."""
    return min((held_on(r) for r in ranks), default=0)

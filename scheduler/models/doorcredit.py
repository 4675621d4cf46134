"""How much of a new program's first prompt counts as cached when several models serve it:
one rule for ``bench --models`` (``server/runtime/sim/simulation.py``) and ``serve`` over
several models (``server/live/intake.py``), stated with the single-model rule in
``server/runtime/prefixcredit.py`` (which re-exports it for the simulator; ``serve``'s live
code reaches no runtime module, so the rule lives here, below both).

Each model's engines keep their own prefix cache, and the selector picks the model of the first
call only when it is sent. So the first call may run on any of its node's candidate models
(:func:`likely_models`), and only what it finds where it runs saves anything: the credit is the
least over those models of each model's own credit (:func:`least_over_models`), each model's
being the single-model rule over its likely replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence


def likely_models(candidates: Sequence[str], served: Collection[str]) -> list[str]:
    """The models a call may run on: its ``candidates`` that are ``served``, in their order;
    none given, or none served, every served model (in ``served``'s order), as the selector's
    placement treats them. Changes nothing."""
    listed = [name for name in candidates if name in served]
    return listed or list(served)


def least_over_models(models: Iterable[str], credit_of: Callable[[str], int]) -> int:
    """The prompt tokens credited as cached for a first call that may run on any of
    ``models``: the least ``credit_of(model)`` (that model's own credit), since only what
    every one of them holds is sure. No model: none. Changes nothing."""
    return min((credit_of(name) for name in models), default=0)

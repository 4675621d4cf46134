"""Effective keys remembered between scheduler passes, so a pass ranks only what changed.

With priority preemption on, SGLang orders its waiting queue on every pass (each decode step),
and the plugin's full key of one request costs about 4 us of Python: 4 ms a pass with 1,000
requests waiting, a fifth of an H200 decode step, paid exactly when program-aware order
matters most (a long queue). Yet a key changes only when what it is computed from changes
(the ticket, an operator boost, the live cache match, an operator preempt, the tenant's share
standing) or with time, and the policies' keys move with time in two ways only: in steps (a
call enters the urgency band, a program starves) and, inside the urgency band, down by the
time that passed (its slack shrinks). So a key is computed once, then again at the end of a
horizon: if both agree, it holds for every pass of the horizon whose inputs are the same; if
the second is the first less the horizon, it *drifts*, and a later pass takes the first less
the time since (the caller keeps which, beside the key, and does that arithmetic). Any other
difference (a call about to become urgent or starving) is computed again on every pass, as
before.

This is exact for keys that, once changed by time, do not change back (the urgency band and
starvation only grow with time); a policy whose key goes back and forth within a horizon
would see a key stale by up to that horizon. Which inputs count is the caller's (the tuple it
passes); tuples compare by identity first, so an unchanged ticket object costs nothing.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

Value = TypeVar("Value")

#: how long a key that did not move over it stands (seconds of decision time): a tenth of a
#: second reranks a steady queue every few passes on this engine; a second is short against
#: the calls' seconds, and costs at most that much lateness to a policy that breaks the rule
#: in the module docstring
DEFAULT_HORIZON_S = 1.0


@dataclass(slots=True)
class Memo(Generic[Value]):
    """One remembered key: what it was computed from, when, and until when it holds."""

    inputs: tuple[Hashable | object, ...]
    value: Value
    computed_at: float
    valid_until: float


class KeyMemo(Generic[Value]):
    """Request id -> the key computed for it, with what it was computed from and until when it
    holds. ``horizon_s`` 0 turns the memo off (every lookup misses)."""

    def __init__(self, horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self.horizon_s = horizon_s
        self._memos: dict[str, Memo[Value]] = {}
        self.reused = 0  # lookups answered from the memo
        self.computed = 0  # keys stored (the caller computed each twice: now and at the horizon)

    def get(
        self, rid: str, inputs: tuple[Hashable | object, ...], now: float
    ) -> Memo[Value] | None:
        """What is remembered for ``rid`` if it was computed from equal ``inputs`` and still
        holds at ``now`` (a clock that went back invalidates it); else None."""
        memo = self._memos.get(rid)
        if memo is None or not memo.computed_at <= now <= memo.valid_until:
            return None
        if memo.inputs != inputs:
            return None
        self.reused += 1
        return memo

    def put(
        self,
        rid: str,
        inputs: tuple[Hashable | object, ...],
        value: Value,
        now: float,
        *,
        holds: bool,
    ) -> None:
        """Remember ``value`` for ``rid``: for the horizon if it ``holds`` over it (computed
        again at ``now + horizon_s``, it stood or drifted), else only for passes at ``now``."""
        if self.horizon_s <= 0.0:
            return
        self._memos[rid] = Memo(inputs, value, now, now + self.horizon_s if holds else now)
        self.computed += 1

    def retain(self, live: set[str]) -> None:
        """Forget every request not in ``live`` (it left the scheduler)."""
        memos = self._memos
        for rid in [rid for rid in memos if rid not in live]:
            del memos[rid]

    def clear(self) -> None:
        """Forget everything (the policy or its configuration changed)."""
        self._memos.clear()

    def __len__(self) -> int:
        return len(self._memos)

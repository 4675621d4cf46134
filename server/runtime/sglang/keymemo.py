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
the time since (:class:`KeyMotion`). Any other difference (a call about to become urgent or
starving) is computed again on every pass, as before.

This is exact for keys that, once changed by time, do not change back (the urgency band and
starvation only grow with time); a policy whose key goes back and forth within a horizon
would see a key stale by up to that horizon. What a key is computed from is
:func:`key_inputs`; tuples compare by identity first, so an unchanged request costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang.ranked import Candidate, Ranked

Value = TypeVar("Value")

#: how long a key that did not move over it stands (seconds of decision time): a tenth of a
#: second reranks a steady queue every few passes on this engine; a second is short against
#: the calls' seconds, and costs at most that much lateness to a policy that breaks the rule
#: in the module docstring
DEFAULT_HORIZON_S = 1.0


@dataclass(slots=True)
class Memo(Generic[Value]):
    """One remembered key: what it was computed from, when, and until when it holds."""

    inputs: tuple[object, ...]
    value: Value
    computed_at: float
    valid_until: float


class KeyMemo(Generic[Value]):
    """Request id -> the key computed for it, with what it was computed from and until when it
    holds. ``horizon_s`` 0 turns the memo off (every lookup misses)."""

    def __init__(self, horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self.horizon_s = horizon_s
        self._memos: dict[str, Memo[Value]] = {}
        self.reused = 0  # decisions' lookups answered from the memo
        self.computed = 0  # keys stored (the caller computed each twice: now and at the horizon)

    def get(
        self, rid: str, inputs: tuple[object, ...], now: float, *, counted: bool = True
    ) -> Memo[Value] | None:
        """What is remembered for ``rid`` if it was computed from equal ``inputs`` and still
        holds at ``now`` (a clock that went back invalidates it); else None. ``counted``:
        count it in ``reused`` (a report's reads are not)."""
        memo = self._memos.get(rid)
        if memo is None or not memo.computed_at <= now <= memo.valid_until:
            return None
        if memo.inputs != inputs:
            return None
        self.reused += counted
        return memo

    def put(
        self,
        rid: str,
        inputs: tuple[object, ...],
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


def key_inputs(
    candidate: Candidate,
    ticket: CallTicket | None,
    boosts: Mapping[str, float],
    underserved: frozenset[str],
    recompute_s_per_token: float,
) -> tuple[object, ...]:
    """Everything a key reads besides the clock, the policy and the guard's rules (their owner
    clears the memo when those change): the candidate (its ticket and clock offset, first
    sight, preempt, live match), the ticket it is ranked by (an operator's override, compared
    by value), the program's boost, whether its tenant is behind its share, and the prefill
    rate when the live match changes the ticket (``ordering.refreshed``; the rate moves with
    every prefill, so it counts only where it is read)."""
    if ticket is None:
        return (candidate, None)
    resident = candidate.resident_tokens
    priced = resident is not None and min(resident, ticket.prompt_tokens) != ticket.cached_tokens
    return (
        candidate,
        ticket,
        boosts.get(ticket.program_id),
        ticket.tenant in underserved,
        recompute_s_per_token if priced else 0.0,
    )


@dataclass(frozen=True, slots=True)
class KeyMotion:
    """A key as it moves with time while its inputs stand: its effective key and its policy
    key each either stand (``False``) or drift (``True``: down by the time that passed, a call
    in the urgency band whose slack shrinks)."""

    ranked: Ranked
    key_drifts: bool = False
    policy_drifts: bool = False
    drifts: bool = field(init=False)  # either does (read on every pass: a field, not a property)

    def __post_init__(self) -> None:
        object.__setattr__(self, "drifts", self.key_drifts or self.policy_drifts)

    def at(self, elapsed_s: float) -> Ranked:
        """The key ``elapsed_s`` seconds after it was computed."""
        if not self.drifts:
            return self.ranked
        r = self.ranked
        tier, key, seq = r.key
        moved = (tier, key - elapsed_s, seq) if self.key_drifts else r.key
        policy_key = r.policy_key - elapsed_s if self.policy_drifts else r.policy_key
        return Ranked(r.candidate, moved, policy_key, r.tenant, r.program_id)

    @staticmethod
    def between(now: Ranked, later: Ranked, horizon_s: float) -> KeyMotion | None:
        """How the key moved from ``now`` to ``later``, ``horizon_s`` after; None if it did
        otherwise than stand or drift (a tier changed: computed again on every pass)."""
        if later.key[0] != now.key[0] or later.key[2] != now.key[2]:
            return None
        key = _motion(now.key[1], later.key[1], horizon_s)
        policy = _motion(now.policy_key, later.policy_key, horizon_s)
        if key is None or policy is None:
            return None
        return KeyMotion(now, key, policy)


#: how close a fall must be to the horizon to count as a drift: keys are computed from clock
#: readings near 1.8e9 s, rounded to 0.24 us; a step of another size is far from it
_DRIFT_TOLERANCE_S = 1e-6


def _motion(now: float, later: float, horizon_s: float) -> bool | None:
    """False if a key stood over the horizon, True if it fell by it, else None."""
    if later == now:
        return False
    if abs(later - now + horizon_s) <= _DRIFT_TOLERANCE_S:
        return True
    return None

"""The plugin's decisions as pure functions: queue order, preemption victims, service meter.

Everything here runs inside SGLang's scheduler process but imports nothing of SGLang, so it
is unit-tested on its own. For tickets as queued the order is exactly the simulator's: for
each waiting call ``FairnessGuard.effective_key(ticket, policy.key(ticket, now), now,
underserved)`` with the same policy objects (``get_policy``) and the same guard, ties broken
by arrival in the scheduler. The plugin keys every waiting call again on each pass (a
deadline's or a drain's slack shrinks as the call waits; the simulator's queue keys a call once
and follows how its key moves, ``Policy.moving_key``, to the same order) and refreshes its
cache inputs with the tree's live match (:func:`refreshed`), since the real cache moves while
the call waits. Two tiers are added behind the guard's four (0 starving of an
underserved tenant, 1 underserved tenant, 2 starving, 3 normal):

* tier 4, *demoted*: a call the operator preempted, until it runs again. Its starvation clock
  restarts at the preempt, so the aging bound still brings it back.
* tier 5, *untracked*: requests without a ticket (SGLang's own health checks, clients that talk
  to the engine directly). They run FCFS among themselves behind every ticketed call, and the
  aging bound (``beta * service_floor_s`` after they arrived) promotes them to tier 2, so they
  never starve.

Tier -1 is the adapter's health probe: one token, always first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentconsole.scheduler.fairness import STARVING_TIERS, TIER_STARVING, FairnessGuard
from agentconsole.scheduler.policies import DEFAULT_POLICY, get_policy
from agentconsole.scheduler.policies.base import Policy
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang.keymemo import KeyMemo, KeyMotion, key_inputs
from agentconsole.server.runtime.sglang.ranked import Candidate, EffectiveKey, Ranked
from agentconsole.server.runtime.sglang.wire import CallKind

TIER_PROBE, TIER_DEMOTED, TIER_UNTRACKED = -1, 4, 5


class Orderer:
    """Computes effective keys with one policy and one fairness guard (state: the guard's
    per-tenant service, fed by :class:`ServiceMeter`, and the policy chosen by name)."""

    def __init__(self, guard: FairnessGuard, policy: str = DEFAULT_POLICY) -> None:
        self.guard = guard
        self.policy_name = policy
        self.policy: Policy = get_policy(policy)

    def set_policy(self, name: str) -> bool:
        """Switch to the policy registered as ``name``; False (policy kept) if unknown."""
        if name == self.policy_name:
            return True
        try:
            self.policy = get_policy(name)
        except KeyError:
            return False
        self.policy_name = name
        return True

    def rank(
        self,
        candidates: Sequence[Candidate],
        wall: float,
        *,
        boosts: Mapping[str, float] | None = None,
        tickets: Mapping[str, CallTicket] | None = None,
        remember: bool = True,
        recompute_s_per_token: float = 0.0,
        memo: KeyMemo[KeyMotion] | None = None,
        memo_store: bool = True,
    ) -> list[Ranked]:
        """Effective keys of ``candidates`` at wall-clock time ``wall``, in input order.

        ``boosts`` (program -> amount) replaces the tickets' boost: the operator's boost
        reaches calls already queued. ``tickets`` (rid -> ticket) replaces a request's ticket
        (re-prioritisation). Does not mutate the candidates' tickets; with ``remember=False``
        it leaves the guard's standing share decision alone too (``FairnessGuard.underserved``).
        A candidate's ``resident_tokens`` refresh its ticket at ``recompute_s_per_token``
        (:func:`refreshed`). ``memo`` answers the keys whose inputs did not change and that
        stand or drift over its horizon (``keymemo``); with ``memo_store`` (a decision, not a
        report) it remembers the ones computed here and counts what it answered. The keys are
        the same either way.
        """
        boosts = boosts or {}
        tickets = tickets or {}
        if memo is not None and memo.horizon_s <= 0.0:
            memo = None  # off: rank as if there were none (no second key at the horizon)
        bases = [
            tickets.get(c.rid) or (c.wire.ticket if c.wire is not None else None)
            for c in candidates
        ]
        backlogged = {t.tenant for t in bases if t is not None}
        underserved = self.guard.underserved(backlogged, wall, remember=remember)
        out = []
        for c, base in zip(candidates, bases, strict=True):
            inputs: tuple[object, ...] = ()
            if memo is not None:
                inputs = key_inputs(c, base, boosts, underserved, recompute_s_per_token)
                known = memo.get(c.rid, inputs, wall, counted=memo_store)
                if known is not None:
                    kept = known.value
                    out.append(kept.at(wall - known.computed_at) if kept.drifts else kept.ranked)
                    continue
            boost = boosts.get(base.program_id) if base is not None and boosts else None
            ticket = base.but(boost=boost) if base is not None and boost is not None else base
            ranked = self._one(c, ticket, wall, underserved, recompute_s_per_token)
            if memo is not None and memo_store:
                h = memo.horizon_s
                later = self._one(c, ticket, wall + h, underserved, recompute_s_per_token)
                motion = KeyMotion.between(ranked, later, h)
                memo.put(c.rid, inputs, motion or KeyMotion(ranked), wall, holds=bool(motion))
            out.append(ranked)
        return out

    def _one(
        self,
        c: Candidate,
        ticket: CallTicket | None,
        wall: float,
        underserved: frozenset[str],
        recompute_s_per_token: float,
    ) -> Ranked:
        seq = c.seq
        if ticket is None or c.wire is None:
            synthetic = CallTicket(c.rid, "", "", "", arrival=c.first_seen)
            starve = self.guard.starve_at(synthetic)
            key = (TIER_STARVING, starve, seq) if wall >= starve else (TIER_UNTRACKED, 0.0, seq)
            return Ranked(c, key, math.inf, "", "")
        now = c.wire.now(wall)
        if c.wire.kind is CallKind.PROBE:
            return Ranked(c, (TIER_PROBE, 0.0, seq), 0.0, ticket.tenant, ticket.program_id)
        ticket = ticket.but(seq=seq)
        if c.resident_tokens is not None:
            ticket = refreshed(ticket, c.resident_tokens, recompute_s_per_token)
        if c.preempted_at is not None:
            ticket = ticket.but(arrival=max(ticket.arrival, c.wire.now(c.preempted_at)))
        policy_key = self.policy.key(ticket, now)
        key = self.guard.effective_key(ticket, policy_key, now, underserved)
        if c.preempted_at is not None and key[0] not in STARVING_TIERS:
            key = (TIER_DEMOTED, policy_key, seq)
        return Ranked(c, key, policy_key, ticket.tenant, ticket.program_id)


def refreshed(ticket: CallTicket, resident_tokens: int, recompute_s_per_token: float) -> CallTicket:
    """``ticket`` with its cache inputs brought up to date: ``resident_tokens`` of its prompt
    are on the device now, where ``ticket.cached_tokens`` were when it was queued.

    A request waits, and meanwhile the cache moves: its context is evicted by others' work, or
    a sibling computes the prefix it shares. SGLang's ``lpm`` reorders by the live match every
    pass; the ticket alone would price the cache as it was at submit. Tokens lost since then
    add their recompute to the restore cost and the remaining critical path; tokens gained
    come off the restore cost, then off the call's service estimate. Priced at
    ``recompute_s_per_token``, the engine's measured prefill time per token
    (``ServiceMeter.prefill_token_s``, its configured value under tensor parallelism; 0
    returns the ticket as it is). Approximate where the device match is: a loss to a host
    tier is priced as a recompute (an upper bound on its reload), and the match counts whole
    pages and no sliding-window or Mamba state.
    """
    resident = min(resident_tokens, ticket.prompt_tokens)
    delta = ticket.cached_tokens - resident
    if delta == 0 or recompute_s_per_token <= 0.0:
        return ticket
    if delta > 0:  # lost since queued
        lost_s = delta * recompute_s_per_token
        return ticket.but(
            cached_tokens=resident,
            restore_cost_s=ticket.restore_cost_s + lost_s,
            remaining_cp_s=ticket.remaining_cp_s + lost_s,
        )
    gained_s = -delta * recompute_s_per_token
    from_restore = min(gained_s, ticket.restore_cost_s)
    from_service = min(gained_s - from_restore, ticket.service_estimate_s)
    return ticket.but(
        cached_tokens=resident,
        restore_cost_s=ticket.restore_cost_s - from_restore,
        service_estimate_s=ticket.service_estimate_s - from_service,
        remaining_cp_s=max(0.0, ticket.remaining_cp_s - from_restore - from_service),
    )


@dataclass(frozen=True, slots=True)
class RunningView:
    """A running request as the preemption decision needs it."""

    rid: str
    key: EffectiveKey
    resident_s: float
    remaining_s: float
    restore_s: float
    protected: bool = False  # e.g. the health probe, or a request without a ticket
    #: times it came back from the waiting queue after running (each doubles its residency)
    preemptions: int = 0


def preemption_victims(
    want: EffectiveKey,
    running: Sequence[RunningView],
    rule: PreemptionRule,
    *,
    preemptive: bool,
) -> list[str]:
    """Running requests the waiting one (effective key ``want``) may displace, worst first.

    The simulator's rule (``PreemptionRule.allows``: better key, minimum residency, remaining
    work larger than the restore cost) applied to every running request; SGLang then preempts
    from the front of this list until the waiting request fits. Empty when the policy is not
    preemptive.
    """
    if not preemptive or not rule.enabled:
        return []
    allowed = [
        r
        for r in running
        if not r.protected
        and rule.allows(want, r.key, r.resident_s, r.remaining_s, r.restore_s, r.preemptions)
    ]
    allowed.sort(key=lambda r: r.key, reverse=True)
    return [r.rid for r in allowed]


def preemption_priorities(
    victims: Sequence[str], others: Sequence[str], threshold: int
) -> tuple[int, dict[str, int]]:
    """Temporary ``Req.priority`` values that make SGLang's ``preempt_to_schedule`` (higher
    value = more important; a difference above ``threshold`` allows preemption) pick exactly
    ``victims``, worst first, and never ``others``. Returns (waiting request's priority,
    running rid -> priority)."""
    top = len(victims) + threshold + 1
    prio = {rid: n for n, rid in enumerate(victims)}
    prio.update({rid: top for rid in others if rid not in prio})
    return top, prio


class ServiceMeter:
    """Credits measured engine time to tenants (for the guard's share rule) and keeps running
    estimates of a decode step and of prefill time (for the preemption rule).

    Step time is split between the requests of a step in proportion to the tokens each
    computed (its prefill chunk, or 1 when decoding), as the simulator does. Prefill time is
    fitted online as ``fixed + per_token * tokens`` (exponentially weighted least squares), since
    on small steps the fixed part dominates and a plain per-token average would be far off.

    ``deterministic`` (tensor parallelism, see ``lockstep``): the guard is credited the tokens
    each request computed instead of measured seconds (each rank measures its own), and the
    estimates keep their configured values; ``service_s`` still reports measured seconds.
    """

    def __init__(
        self, guard: FairnessGuard, *, smoothing: float = 0.1, deterministic: bool = False
    ) -> None:
        self.guard = guard
        self.smoothing = smoothing
        self.deterministic = deterministic
        self.decode_step_s = 0.005
        self.prefill_fixed_s = 0.005
        self.prefill_token_s = 2e-5
        self._sums = [0.0] * 5  # weighted n, x, x^2, y, x*y of (tokens, seconds)
        self.service_s: dict[str, float] = {}  # tenant -> total seconds (for the status file)

    def credit(
        self, shares: Sequence[tuple[str, int]], seconds: float, wall: float, *, prefill: bool
    ) -> None:
        """Credit ``seconds`` of one step to ``shares`` ((tenant, tokens): per request, or
        summed per tenant, alike; the empty tenant, for requests without a ticket, is not
        credited)."""
        total = sum(tokens for _, tokens in shares)
        if total <= 0 or (seconds <= 0 and not self.deterministic):
            return
        for tenant, tokens in shares:
            if tenant and tokens > 0:
                part = max(seconds, 0.0) * tokens / total
                self.guard.record_service(tenant, tokens if self.deterministic else part, wall)
                self.service_s[tenant] = self.service_s.get(tenant, 0.0) + part
        if self.deterministic or seconds <= 0:
            return
        if prefill:
            self._fit_prefill(float(total), seconds)
        else:
            self.decode_step_s += self.smoothing * (seconds - self.decode_step_s)

    def _fit_prefill(self, x: float, y: float) -> None:
        decay = 1.0 - self.smoothing / 2
        s = self._sums
        for i, v in enumerate((1.0, x, x * x, y, x * y)):
            s[i] = s[i] * decay + v
        n, sx, sxx, sy, sxy = s
        det = n * sxx - sx * sx
        if det <= 1e-9 * max(n * sxx, 1.0):
            return  # every sample the same size so far: nothing to separate
        slope = (n * sxy - sx * sy) / det
        self.prefill_token_s = max(slope, 0.0)
        self.prefill_fixed_s = max((sy - self.prefill_token_s * sx) / n, 0.0)

    def remaining_s(self, ticket: CallTicket | None, generated: int) -> float:
        """Expected decode time left for a running request (at least one step)."""
        expected = ticket.expected_output_tokens if ticket is not None else 0.0
        return max(expected - generated, 1.0) * self.decode_step_s

    def restore_s(self, context_tokens: int) -> float:
        """Time to recompute ``context_tokens`` of KV if a preempted request lost it."""
        return self.prefill_fixed_s + context_tokens * self.prefill_token_s

"""What the plugin's ordering works on: a waiting or running request as the orderer sees it
(:class:`Candidate`) and its effective key (:class:`Ranked`). Plain values, shared by the
orderer (``ordering``), its key memo (``keymemo``), the request book and the status report."""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.server.runtime.sglang.wire import WireTicket

#: (tier, key, tie-break): lower runs first (``ordering``'s tiers, then the policy's key)
EffectiveKey = tuple[int, float, int]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A request as the orderer sees it: its id, its ticket (if any), when the plugin first saw
    it (wall clock), its place in the order requests were first seen (the tie-break between
    equal keys: ``RequestBook`` numbers them, so it never changes while a request waits), if
    the operator preempted it and it has not run since, when, and how much of its prompt the
    device holds now."""

    rid: str
    wire: WireTicket | None
    first_seen: float
    seq: int
    preempted_at: float | None = None
    #: prompt tokens resident on the device now (None: not looked up); see
    #: ``ordering.refreshed``
    resident_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Ranked:
    """A candidate's effective key, the policy's own key inside it, and whose call it is."""

    candidate: Candidate
    key: EffectiveKey
    policy_key: float
    tenant: str
    program_id: str

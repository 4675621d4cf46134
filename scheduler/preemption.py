"""When a better-ranked waiting call may displace a running one.

Preemption is worth it only if it does not flap and does not cost more than it saves (seed
section 5): a running call is protected for ``min_residency_s`` after it started (or resumed),
doubled for every time it was already preempted (so no call is bounced forever), and it is not
preempted when finishing it would take less time than restoring its KV later. A running call
that was starving (the aging bound's tiers) is displaced only by another starving call: a share
moving (an underserved tenant's call ranks before another tenant's starving one) must not take
back what the aging bound gave, nor flip back when the share flips.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.scheduler.fairness import STARVING_TIERS


@dataclass(frozen=True, slots=True)
class PreemptionRule:
    enabled: bool = True
    min_residency_s: float = 1.0
    #: preempt only if the victim's remaining work exceeds this multiple of its restore cost
    cost_ratio: float = 1.0

    def allows(
        self,
        waiting_key: tuple[int, float, int],
        running_key: tuple[int, float, int],
        resident_s: float,
        victim_remaining_s: float,
        victim_restore_s: float,
        victim_preemptions: int = 0,
    ) -> bool:
        """True if the waiting call should displace the running one."""
        if not self.enabled or waiting_key >= running_key:
            return False
        # a share's move never takes back what the aging bound gave (a tier below the guard's,
        # the SGLang plugin's health probe at -1, is not a share's and passes)
        taken_back = running_key[0] in STARVING_TIERS and waiting_key[0] not in STARVING_TIERS
        if taken_back and waiting_key[0] >= 0:
            return False
        if resident_s < self.min_residency_s * 2.0 ** min(victim_preemptions, 16):
            return False
        return victim_remaining_s > self.cost_ratio * victim_restore_s

"""When a better-ranked waiting call may displace a running one.

Preemption is worth it only if it does not flap and does not cost more than it saves (seed
section 5): a running call is protected for ``min_residency_s`` after it started (or resumed),
doubled for every time it was already preempted (so no call is bounced forever), and it is not
preempted when finishing it would take less time than restoring its KV later.
"""

from __future__ import annotations

from dataclasses import dataclass


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
        if resident_s < self.min_residency_s * 2.0 ** min(victim_preemptions, 16):
            return False
        return victim_remaining_s > self.cost_ratio * victim_restore_s

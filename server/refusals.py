"""How much of the refused calls the audit table keeps: a rate, and a bounded target.

A caller without an operator key can make the server refuse as often as it can send. Were
every refusal audited in full, one tenant's flood would push every operator action out of the
newest rows of ``GET /v1/operator/audit`` and grow the audit table without bound (charged to
no tenant's ``stored_bytes``). So the core API's refusals (``live.operator.OperatorDesk``) and
the tool gateway's (``gateway.audit.Auditor``) go through one :class:`RefusalBudget`, shared by
the server, and keep at most :data:`MAX_REFUSED_TARGET_CHARS` of the target they name
(:func:`refused_target`). Operator keys' refusals are always audited: they are no flood.
Callers without a valid key name themselves (each invented key is another ``unknown-<hash>``),
so they all share one caller's allowance (:func:`is_keyless`): rotating keys on every request
cannot fill the minute and hide the tenants' refusals.

This module imports nothing of the server, so the core and the gateway both use it without an
import cycle (the gateway imports the API, which imports the core).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: the longest target an audit row keeps of a refused call's path (a path of any length
#: reaches the refusal before routing limits it)
MAX_REFUSED_TARGET_CHARS = 200


#: how ``api.auth.KeyRing.actor_of`` names a caller it could not resolve (it uses these): one
#: without a key, and one with a key of no one's (``unknown-<key hash prefix>``)
NO_KEY_ACTOR = "anonymous"
UNKNOWN_KEY_ACTOR_PREFIX = "unknown-"


def is_keyless(actor: str) -> bool:
    """Whether ``actor`` is how the core names a caller without a valid key (never a key id:
    those are ``key-`` and ``operator-`` prefixed)."""
    return actor == NO_KEY_ACTOR or actor.startswith(UNKNOWN_KEY_ACTOR_PREFIX)


def refused_target(target: str) -> str:
    """What an audit row keeps of a refused call's ``target``."""
    return target[:MAX_REFUSED_TARGET_CHARS]


class RefusalBudget:
    """How many refused calls of callers without an operator key are audited: at most
    ``per_minute`` in each minute, and at most ``per_actor`` of one actor's (one tenant's
    flood must not use up the minute and hide another caller's refusals), all the callers
    without a valid key together counting as one actor; the rest are counted and logged once
    the minute ends."""

    def __init__(self, per_minute: int = 600, per_actor: int = 60) -> None:
        self.per_minute = per_minute
        self.per_actor = per_actor
        self._minute_start = float("-inf")
        self._taken = 0
        #: this minute's audited refusals per actor (at most ``per_minute`` entries)
        self._by_actor: dict[str, int] = {}
        #: this minute's audited refusals of callers without a valid key, all of them together
        #: (kept apart from ``_by_actor``: a tenant may be named like a keyless caller)
        self._keyless_taken = 0
        self.dropped = 0  # in the current minute

    def take(self, now: float, actor: str = "", *, keyless: bool = False) -> bool:
        """Count one refusal of ``actor`` at ``now`` (wall-clock seconds); True when it is to
        be audited. ``keyless``: the caller presented no valid key, so its share is the one
        all such callers have, whatever ``actor`` its audit row names."""
        if now - self._minute_start >= 60.0:
            if self.dropped:
                log.warning(
                    "%d refused calls of callers without an operator key were not audited "
                    "(over %d a minute, or %d of one caller)",
                    self.dropped,
                    self.per_minute,
                    self.per_actor,
                )
            self._minute_start, self._taken, self.dropped = now, 0, 0
            self._keyless_taken = 0
            self._by_actor.clear()
        taken_by_actor = self._keyless_taken if keyless else self._by_actor.get(actor, 0)
        if self._taken >= self.per_minute or taken_by_actor >= self.per_actor:
            self.dropped += 1
            return False
        self._taken += 1
        if keyless:
            self._keyless_taken += 1
        else:
            self._by_actor[actor] = taken_by_actor + 1
        return True

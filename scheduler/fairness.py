"""The fairness guard every policy runs under.

Two rules, both mechanism rather than policy, so they apply to whichever policy orders:

* **Aging bound** (Autellix's wait/service promotion): a call whose program has waited more than
  ``beta`` times the service it received (at least ``service_floor_s``) is *starving* and goes
  before every call of its share class that is not, oldest starvation first.
* **Weighted tenant share**: each tenant's recent service (exponentially decayed) is compared
  with its weighted share among the tenants that have calls waiting; a tenant below
  ``(1 - share_slack)`` of its share is *underserved* and its calls go before those of the other
  tenants, starving or not. A light tenant is never starved by a flooding one: a tenant that
  floods has every program starving at once, and were starvation to outrank the share, all of
  them would go first.

The result is an effective key ``(tier, key)``: tier 0 a starving call of an underserved tenant,
1 the other calls of underserved tenants, 2 a starving call of any other tenant, 3 the rest;
starving calls by starvation time, the others by policy key. No program waits forever: its
wait is bounded by ``beta`` times its service, plus, for a tenant that is not underserved, the
time another tenant below its share takes to reach it (its recent service, decaying with
``half_life_s``, up to ``(1 - share_slack)`` of its weighted share: under a flood about a
half-life, longer the larger that tenant's weight). Once running, a starving call is displaced
only by another starving call (:class:`~agentconsole.scheduler.preemption.PreemptionRule`).
Both the simulator's queue and the SGLang plugin order by it. The program door shares its
admissions by the same notion of a share (:func:`below_share`), over the memory each tenant's
started programs hold rather than service.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from agentconsole.scheduler.ticket import CallTicket

#: the guard's tiers, best first (module docstring): a starving call ranks before the other calls
#: of its share class, and an underserved tenant's calls before everyone else's
TIER_STARVING_UNDERSERVED, TIER_UNDERSERVED, TIER_STARVING, TIER_NORMAL = 0, 1, 2, 3
STARVING_TIERS = frozenset({TIER_STARVING_UNDERSERVED, TIER_STARVING})
#: the largest tenant weight a configuration takes (serve's settings and bench alike)
MAX_TENANT_WEIGHT = 1_000_000.0


@dataclass(frozen=True, slots=True)
class FairnessConfig:
    enabled: bool = True
    beta: float = 10.0  # max program wait / service before promotion
    # service assumed for programs that received less: without it a new program (no service
    # yet) would starve at once and every policy would collapse into FIFO under load
    service_floor_s: float = 5.0
    share_slack: float = 0.25
    half_life_s: float = 30.0  # memory of a tenant's recent service
    refresh_s: float = 0.05  # how long a tenant-share decision stands
    tenant_weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a weight of 0 divides every share by zero, mid-serving; refused where it is given
        for tenant, weight in self.tenant_weights.items():
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not 0.0 < weight <= MAX_TENANT_WEIGHT
            ):
                raise ValueError(
                    f"tenant_weights[{tenant!r}] must be a number > 0 and <= "
                    f"{MAX_TENANT_WEIGHT:g}, got {weight!r}"
                )

    def weight(self, tenant: str) -> float:
        return self.tenant_weights.get(tenant, 1.0)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> FairnessConfig:
        """The config a runtime's ``fairness`` settings (``runtime.extra.fairness``, a dict
        of fields) describe, read as the SGLang plugin reads them (unknown keys ignored), so
        ``serve``'s door and its engines' guard share by the same weights."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (settings or {}).items() if k in known})


class FairnessGuard:
    """Holds per-tenant decayed service; answers starvation and share questions."""

    __slots__ = ("_cache", "_decay_per_s", "_service", "config")
    config: FairnessConfig
    _decay_per_s: float

    def __init__(self, config: FairnessConfig | None = None) -> None:
        self._service: dict[str, tuple[float, float]] = {}  # tenant -> (value, as of time)
        # the last share decision: (time, waiting tenants, answer); shares move slowly, so a
        # decision stands for ``refresh_s`` (this sits on every scheduling decision)
        self._cache: tuple[float, frozenset[str], frozenset[str]] | None = None
        self.configure(config or FairnessConfig())

    def configure(self, config: FairnessConfig) -> None:
        """Run under ``config`` from now on: its half-life decays the service recorded so far
        from the time each tenant's was last updated, and the standing share decision is
        dropped (it was taken under the old rules)."""
        decay_per_s = math.log(2) / max(config.half_life_s, 1e-9)  # raises before any change
        self.config, self._decay_per_s = config, decay_per_s
        self._cache = None

    def starve_at(self, ticket: CallTicket) -> float:
        """The time at which ``ticket`` becomes starving (+inf with the guard disabled)."""
        if not self.config.enabled:
            return math.inf
        floor = max(ticket.program_service_s, self.config.service_floor_s)
        return ticket.arrival + self.config.beta * floor - ticket.program_wait_s

    def record_service(self, tenant: str, seconds: float, now: float) -> None:
        """Credit ``tenant`` with ``seconds`` of GPU service received at ``now``."""
        service = self._service
        value, since = service.get(tenant, (0.0, now))
        if now > since:  # recent_service, inlined: this runs for every block of every engine
            value *= math.exp(-self._decay_per_s * (now - since))
        service[tenant] = (value + seconds, now)

    def recent_service(self, tenant: str, now: float) -> float:
        value, since = self._service.get(tenant, (0.0, now))
        if now <= since:
            return value
        return value * math.exp(-self._decay_per_s * (now - since))

    def underserved(
        self, backlogged: Iterable[str], now: float, *, remember: bool = True
    ) -> frozenset[str]:
        """Tenants among ``backlogged`` (tenants with waiting calls) below their share.

        Shares are among the tenants competing now: the backlogged ones plus those that
        received service recently (a tenant whose calls all run is still competing).
        ``remember=False`` neither reads nor replaces the standing decision (a report that
        must not change what later decisions see)."""
        if not self.config.enabled:
            return frozenset()
        waiting = frozenset(backlogged)
        if not waiting:
            return frozenset()
        if not remember:
            return self._underserved(waiting, now)
        cache = self._cache
        if (
            cache is not None
            and cache[1] == waiting
            and 0 <= now - cache[0] < self.config.refresh_s
        ):
            return cache[2]
        answer = self._underserved(waiting, now)
        self._cache = (now, waiting, answer)
        return answer

    def _underserved(self, waiting: frozenset[str], now: float) -> frozenset[str]:
        service = {t: self.recent_service(t, now) for t in self._service.keys() | waiting}
        return below_share(service, waiting, self.config)

    def tier(self, ticket: CallTicket, now: float, underserved: frozenset[str]) -> int:
        return tier_of(now >= self.starve_at(ticket), ticket.tenant in underserved)

    def effective_key(
        self, ticket: CallTicket, policy_key: float, now: float, underserved: frozenset[str]
    ) -> tuple[int, float, int]:
        """The full sort key: starving calls by starvation time, the rest by policy key."""
        tier = self.tier(ticket, now, underserved)
        if tier in STARVING_TIERS:
            return (tier, self.starve_at(ticket), ticket.seq)
        return (tier, policy_key, ticket.seq)


def tier_of(starving: bool, underserved: bool) -> int:
    """The tier of a call that is (or not) starving, of a tenant that is (or not) underserved."""
    if underserved:
        return TIER_STARVING_UNDERSERVED if starving else TIER_UNDERSERVED
    return TIER_STARVING if starving else TIER_NORMAL


def below_share(
    received: Mapping[str, float], waiting: frozenset[str], config: FairnessConfig
) -> frozenset[str]:
    """Tenants among ``waiting`` that received less than ``(1 - share_slack)`` of their
    weighted share of everything ``received`` (per tenant; a waiting tenant missing from it
    received nothing): the guard's *underserved* over recent service, and the program door's
    over the memory its started programs hold (``scheduler.doorline``), one notion of a share.

    Shares are among the tenants competing: the waiting ones plus those that received more
    than a trifle (a tenant whose work all runs still competes). Nobody is below its share
    while fewer than two tenants compete, or before anything was received."""
    amounts = dict(received)
    for tenant in waiting:
        amounts.setdefault(tenant, 0.0)
    total = sum(amounts.values())
    if total <= 0:
        return frozenset()
    competing = [t for t, v in amounts.items() if t in waiting or v > 1e-3 * total]
    if len(competing) < 2:
        return frozenset()
    weight_sum = sum(config.weight(t) for t in competing)
    limit = (1.0 - config.share_slack) * total / weight_sum
    return frozenset(t for t in waiting if amounts[t] < limit * config.weight(t))

"""What a kind of program needs, learned online: how large its working set gets, and how
long it runs once started.

Agent programs grow: every step appends its tool results and its answer to the context, so a
coding session that starts at 20K tokens ends at 200K (or at its compaction threshold). A door
that sized programs by their first call admitted too many of them, whose contexts then outgrew
memory together (issue 12). :class:`PeakEstimator` learns, per kind of program (its
``workload`` or ``agent`` label, else its tenant), the peak private context programs of that
kind reached (an exponentially weighted mean over finished ones), and predicts a running
program's peak as the larger of that and what it holds now, so the prediction is corrected as
the program grows. The same mean of the seconds from start to finish (:class:`RunTimes`) is
what the door orders waiting programs by.

A kind is a name in its tenant's namespace (:data:`KindKey`): labels are the client's to
choose, so a kind learned across tenants let one tenant's programs, labelled with another's
kind (or its unlabelled fallback, ``tenant:<name>``), make that tenant's programs look huge at
the door or long in its line. Every learner here is keyed by (tenant, kind) and never falls
back to another tenant's figures: a tenant's first program of a kind is predicted from its own
history alone (what it holds now; for its run, its tenant's other kinds), never from what
other tenants' programs taught.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from agentconsole.scheduler.bounded import TenantLru

#: weight of a newly finished program in its kind's mean peak
LEARNING_RATE = 0.2

#: what a program's growth and run are learned under: its tenant and its kind (a kind is a name
#: in its tenant's namespace; see the module docstring)
KindKey = tuple[str, str]


def program_kind(labels: Mapping[str, str], tenant: str) -> str:
    """The kind a program's growth is learned under, within its tenant's namespace."""
    return labels.get("workload") or labels.get("agent") or f"tenant:{tenant}"


def kind_key(labels: Mapping[str, str], tenant: str) -> KindKey:
    """What a program of ``tenant`` with ``labels`` is learned under: (tenant, kind)."""
    return tenant, program_kind(labels, tenant)


class KindMeans:
    """An exponentially weighted mean of one quantity of finished programs, per (tenant,
    kind): each tenant's kinds apart, so nothing one tenant's programs teach reaches
    another's. A tenant's kinds held are at most
    :data:`~agentconsole.scheduler.bounded.KEYS_PER_TENANT` (its labels are the client's):
    past it, its least recently used kind is forgotten and predicted again as a kind none of
    its programs finished yet."""

    def __init__(self, learning_rate: float = LEARNING_RATE) -> None:
        self.learning_rate = learning_rate
        self._means: TenantLru[float] = TenantLru()

    def observe(self, key: KindKey, value: float) -> None:
        """A program of ``key`` (tenant, kind) ended with ``value`` (ignored unless
        positive)."""
        if value <= 0:
            return
        tenant, kind = key
        known = self._means.get(tenant, kind)
        mean = float(value) if known is None else known + self.learning_rate * (value - known)
        self._means.put(tenant, kind, mean)

    def known(self, key: KindKey) -> float | None:
        """The learned mean of ``key`` (None before one of its programs finished)."""
        tenant, kind = key
        return self._means.get(tenant, kind)

    def tenant_mean(self, tenant: str) -> float | None:
        """The mean over ``tenant``'s kinds learned (None before one of its programs
        finished): what its kind not seen yet is taken for, from its own history alone. Summed
        exactly (``fsum``): the kinds are held in order of use, which reading them changes, and
        a sum in that order would move the mean by a rounding as they are read."""
        means = self._means.values_of(tenant)
        return math.fsum(means) / len(means) if means else None

    def adopt(self, other: KindMeans) -> None:
        """Start over from what ``other`` learned."""
        self._means = other._means.copy()

    def items(self) -> list[tuple[KindKey, float]]:
        """Every (tenant, kind) learned and its mean, by tenant and kind."""
        return sorted(((tenant, kind), mean) for tenant, kind, mean in self._means.items())


class RunTimes:
    """Seconds from the door to the end of finished programs, per (tenant, kind): the
    tenant's own programs of the kind, else the mean of the tenant's own kinds (a kind it has
    not finished yet is taken for an average one of its own), else nothing learned. Never
    another tenant's: a label names only its own tenant's kinds."""

    def __init__(self, learning_rate: float = LEARNING_RATE) -> None:
        self._means = KindMeans(learning_rate)

    def adopt(self, other: RunTimes) -> None:
        """Start over from what ``other`` learned (a server that has run a while)."""
        self._means.adopt(other._means)

    def learned(self) -> list[tuple[str, str, float]]:
        """(tenant, kind, mean seconds) of every tenant's kinds learned, by tenant and kind."""
        return [(tenant, kind, mean) for (tenant, kind), mean in self._means.items()]

    def observe(self, key: KindKey, seconds: float) -> None:
        """A program of ``key`` (tenant, kind) ran ``seconds`` from its start to its end."""
        self._means.observe(key, seconds)

    def expected(self, key: KindKey, running_s: float = 0.0) -> float | None:
        """The expected run of a program of ``key`` (tenant, kind); None before any of the
        tenant's programs finished (the line is then first come first served, as on a new
        server). A kind none of the tenant's programs finished yet is taken for an average
        one of the tenant's kinds, and runs at least ``running_s``, how long the tenant's
        longest running program of the kind has run so far (it has not finished: it is no
        short one)."""
        own = self._means.known(key)
        if own is not None:
            return own
        average = self._means.tenant_mean(key[0])
        return None if average is None else max(average, running_s)


class PeakEstimator(KindMeans):
    """Mean peak private tokens of finished programs, per (tenant, kind)."""

    def predict(self, key: KindKey, current_tokens: int) -> int:
        """The predicted peak of a program of ``key`` that holds ``current_tokens`` now: its
        tenant's kind's learned peak; a kind the tenant has not finished yet is taken for its
        largest kind learned (sized by what it holds, a tenant naming each program a new
        kind passed the door with every program at its first prompt); nothing learned of the
        tenant: what it holds."""
        learned = self.known(key)
        if learned is None:
            kinds = self._means.values_of(key[0])
            learned = max(kinds) if kinds else None
        return max(current_tokens, int(learned)) if learned is not None else current_tokens

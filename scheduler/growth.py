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
"""

from __future__ import annotations

from collections.abc import Mapping

#: weight of a newly finished program in its kind's mean peak
LEARNING_RATE = 0.2


def program_kind(labels: Mapping[str, str], tenant: str) -> str:
    """The kind a program's growth is learned under."""
    return labels.get("workload") or labels.get("agent") or f"tenant:{tenant}"


class KindMeans:
    """An exponentially weighted mean of one quantity of finished programs, per kind."""

    def __init__(self, learning_rate: float = LEARNING_RATE) -> None:
        self.learning_rate = learning_rate
        self._means: dict[str, float] = {}

    def observe(self, kind: str, value: float) -> None:
        """A program of ``kind`` ended with ``value`` (ignored unless positive)."""
        if value <= 0:
            return
        known = self._means.get(kind)
        if known is None:
            self._means[kind] = float(value)
        else:
            self._means[kind] = known + self.learning_rate * (value - known)

    def known(self, kind: str) -> float | None:
        """The learned mean of ``kind`` (None before one finished)."""
        return self._means.get(kind)

    def adopt(self, other: KindMeans) -> None:
        """Start over from what ``other`` learned."""
        self._means = dict(other._means)

    def items(self) -> list[tuple[str, float]]:
        """Every kind learned and its mean, by kind."""
        return sorted(self._means.items())

    def expected(self, kind: str) -> float | None:
        """The learned mean of ``kind``, else the mean over the kinds learned (a kind not
        seen yet is taken for an average one); None before any program finished."""
        known = self._means.get(kind)
        if known is not None or not self._means:
            return known
        return sum(self._means.values()) / len(self._means)


class RunTimes:
    """Seconds from the door to the end of finished programs, per (tenant, kind): a tenant's
    own programs of the kind first, else the kind's over all tenants, else the mean of all
    kinds. A tenant's labels never outweigh another tenant's own history."""

    def __init__(self, learning_rate: float = LEARNING_RATE) -> None:
        self._own = KindMeans(learning_rate)
        self._shared = KindMeans(learning_rate)

    def adopt(self, other: RunTimes) -> None:
        """Start over from what ``other`` learned (a server that has run a while)."""
        self._own.adopt(other._own)
        self._shared.adopt(other._shared)

    def learned(self) -> list[tuple[str, str, float]]:
        """(tenant, kind, mean seconds) of every tenant's kinds learned, by tenant and kind."""
        learned: list[tuple[str, str, float]] = []
        for key, mean in self._own.items():
            tenant, kind = key.split("\0", 1)
            learned.append((tenant, kind, mean))
        return learned

    def observe(self, key: tuple[str, str], seconds: float) -> None:
        """A program of ``key`` (tenant, kind) ran ``seconds`` from its start to its end."""
        tenant, kind = key
        self._own.observe(f"{tenant}\0{kind}", seconds)
        self._shared.observe(kind, seconds)

    def expected(self, key: tuple[str, str], running_s: float = 0.0) -> float | None:
        """The expected run of a program of ``key`` (None before any program finished). A kind
        nobody's programs finished yet runs at least ``running_s``, how long the longest
        running program of the kind has run so far (it has not finished: it is no short one)."""
        tenant, kind = key
        own = self._own.known(f"{tenant}\0{kind}")
        if own is not None:
            return own
        shared = self._shared.known(kind)
        if shared is not None:
            return shared
        overall = self._shared.expected(kind)
        return None if overall is None else max(overall, running_s)


class PeakEstimator(KindMeans):
    """Mean peak private tokens of finished programs, per kind."""

    def predict(self, kind: str, current_tokens: int) -> int:
        """The predicted peak of a program of ``kind`` that holds ``current_tokens`` now."""
        learned = self.known(kind)
        return max(current_tokens, int(learned)) if learned is not None else current_tokens

"""Online estimators: output length, tool latency, remaining program work.

Estimates are wrong, so they are updated online and every prediction's error is recorded
(seed sections 5 and 17): :class:`PredictionLog` keeps per-kind error statistics that the
bench report and the console show.

Every estimate is learned per tenant: what it is keyed by (a program's ``model`` or
``workload`` label, a tool's name) is the client's to choose, so a key shared across tenants
let one tenant's calls and programs, labelled like another's, set that tenant's predictions
(its calls' expected output, its programs' remaining work, its tools' latencies). A tenant's
first call, program or tool of a key is predicted from its own history or the prior, never
from what another tenant's taught.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from agentconsole.scheduler.latency import LogNormal

#: what an estimate is learned under: a tenant and one of its keys (a label, a tool)
TenantKey = tuple[str, str]


@dataclass(slots=True)
class ErrorStats:
    """Running error statistics of one kind of prediction."""

    count: int = 0
    abs_error_sum: float = 0.0
    rel_error_sum: float = 0.0
    bias_sum: float = 0.0  # predicted - actual

    def add(self, predicted: float, actual: float) -> None:
        err = predicted - actual
        self.count += 1
        self.abs_error_sum += abs(err)
        self.bias_sum += err
        self.rel_error_sum += abs(err) / max(abs(actual), 1e-9)

    @property
    def mean_abs_error(self) -> float:
        return self.abs_error_sum / self.count if self.count else 0.0

    @property
    def mean_rel_error(self) -> float:
        return self.rel_error_sum / self.count if self.count else 0.0

    @property
    def bias(self) -> float:
        return self.bias_sum / self.count if self.count else 0.0


class PredictionLog:
    """Error statistics per prediction kind (``output_tokens``, ``tool_latency_s``, ...)."""

    def __init__(self) -> None:
        self.stats: dict[str, ErrorStats] = defaultdict(ErrorStats)

    def record(self, kind: str, predicted: float, actual: float) -> None:
        self.stats[kind].add(predicted, actual)

    def summary(self) -> dict[str, dict[str, float]]:
        return {
            kind: {
                "count": s.count,
                "mean_abs_error": s.mean_abs_error,
                "mean_rel_error": s.mean_rel_error,
                "bias": s.bias,
            }
            for kind, s in sorted(self.stats.items())
        }


@dataclass(slots=True)
class _Welford:
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0


DEFAULT_TOOL_PRIOR = LogNormal(mu=0.0, sigma=1.0)  # median 1 s, heavy tail


class ToolLatencyEstimator:
    """Per tenant and tool, a log-normal fit of observed latencies, falling back to the
    tenant's tools of the kind, then to a prior, until ``min_samples`` observations exist."""

    def __init__(
        self,
        prior: LogNormal = DEFAULT_TOOL_PRIOR,
        min_samples: int = 5,
        log: PredictionLog | None = None,
    ) -> None:
        self._prior = prior
        self._min = min_samples
        self._fits: dict[TenantKey, _Welford] = defaultdict(_Welford)
        self._cache: dict[TenantKey, LogNormal] = {}
        self.log = log or PredictionLog()

    def distribution(self, tenant: str, tool: str, kind: str = "") -> LogNormal:
        """The current latency distribution of ``tenant``'s ``tool`` (no side effects)."""
        for key in _tool_keys(tenant, tool, kind):
            if key in self._cache:
                return self._cache[key]
        return self._prior

    def observe(self, tenant: str, tool: str, kind: str, latency_s: float) -> None:
        """Record an observed latency; logs the error of the mean prediction first."""
        predicted = self.distribution(tenant, tool, kind).mean()
        self.log.record("tool_latency_s", predicted, latency_s)
        self.learn(tenant, tool, kind, latency_s)

    def learn(self, tenant: str, tool: str, kind: str, latency_s: float) -> None:
        """Fit an observed latency into ``tenant``'s ``tool``'s and its kind's distributions
        (no log)."""
        x = math.log(max(latency_s, 1e-4))
        for key in _tool_keys(tenant, tool, kind):
            fit = self._fits[key]
            fit.add(x)
            if fit.n >= self._min:
                self._cache[key] = LogNormal(fit.mean, max(fit.std, 0.05))


def _tool_keys(tenant: str, tool: str, kind: str) -> tuple[TenantKey, TenantKey]:
    """What a tenant's tool's latency is learned under: the tool, then its kind."""
    return (tenant, tool), (tenant, f"kind:{kind}")


class OutputLengthEstimator:
    """Exponentially weighted mean of output tokens per tenant and key (model or node label),
    falling back to the tenant's mean over its keys, then to a prior."""

    def __init__(
        self, prior: float = 256.0, alpha: float = 0.05, log: PredictionLog | None = None
    ) -> None:
        self._prior = prior
        self._alpha = alpha
        self._mean: dict[TenantKey, float] = {}
        self.log = log or PredictionLog()

    def predict(self, tenant: str, key: str = "") -> float:
        """The expected output tokens of a call of ``tenant``'s ``key`` (``""``: any)."""
        own = self._mean.get((tenant, key))
        return own if own is not None else self._mean.get((tenant, ""), self._prior)

    def observe(self, tenant: str, key: str, actual: int) -> None:
        self.log.record("output_tokens", self.predict(tenant, key), actual)
        for k in {key, ""}:
            old = self._mean.get((tenant, k))
            self._mean[tenant, k] = actual if old is None else old + self._alpha * (actual - old)


class RemainingWorkEstimator:
    """Expected remaining LLM calls of a program given how many it has completed.

    Non-clairvoyant: learns the distribution of total calls per program class (its tenant and
    ``workload`` label) from finished programs and answers with the mean residual life
    E[total - k | total > k]. Until enough of the tenant's programs of the class finished it
    assumes ``prior_calls`` in total.
    """

    def __init__(
        self, prior_calls: float = 8.0, max_calls: int = 512, log: PredictionLog | None = None
    ) -> None:
        self._prior = prior_calls
        self._max = max_calls
        # per class: histogram of total calls, and its suffix sums, rebuilt lazily
        self._hist: dict[TenantKey, list[int]] = defaultdict(lambda: [0] * (max_calls + 1))
        self._residual: dict[TenantKey, list[float]] = {}
        self.log = log or PredictionLog()

    def remaining_calls(self, tenant: str, label: str, completed: int) -> float:
        key = tenant, label
        table = self._residual.get(key)
        if table is None:
            table = self._rebuild(key)
        if table and completed < len(table) and table[completed] >= 0:
            return table[completed]
        return max(self._prior - completed, 1.0)

    def observe_finished(
        self, tenant: str, label: str, total_calls: int, predictions: list[tuple[int, float]]
    ) -> None:
        """Learn from ``tenant``'s finished program of ``label``; ``predictions`` are
        (completed, predicted remaining) pairs made during its life, whose errors are logged."""
        for completed, predicted in predictions:
            self.log.record("remaining_calls", predicted, total_calls - completed)
        key = tenant, label
        self._hist[key][min(total_calls, self._max)] += 1
        self._residual.pop(key, None)

    def _rebuild(self, key: TenantKey) -> list[float]:
        hist = self._hist.get(key)
        if hist is None or sum(hist) < 5:
            self._residual[key] = []
            return []
        # residual[k] = E[total - k | total > k]; -1 marks "no data beyond k"
        table = [-1.0] * (self._max + 1)
        count = 0
        total = 0
        for k in range(self._max, -1, -1):
            if count:
                table[k] = total / count - k
            count += hist[k]
            total += hist[k] * k
        self._residual[key] = table
        return table

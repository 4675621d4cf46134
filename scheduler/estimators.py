"""Online estimators: output length, tool latency, remaining program work.

Estimates are wrong, so they are updated online and every prediction's error is recorded
(seed sections 5 and 17): :class:`PredictionLog` keeps per-kind error statistics that the
bench report and the console show.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from agentconsole.scheduler.latency import LogNormal


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
    """Per-tool log-normal fit of observed latencies, falling back to the tool kind, then to a
    prior, until ``min_samples`` observations exist."""

    def __init__(
        self,
        prior: LogNormal = DEFAULT_TOOL_PRIOR,
        min_samples: int = 5,
        log: PredictionLog | None = None,
    ) -> None:
        self._prior = prior
        self._min = min_samples
        self._fits: dict[str, _Welford] = defaultdict(_Welford)
        self._cache: dict[str, LogNormal] = {}
        self.log = log or PredictionLog()

    def distribution(self, tool: str, kind: str = "") -> LogNormal:
        """The current latency distribution for ``tool`` (no side effects)."""
        for key in (tool, f"kind:{kind}"):
            if key in self._cache:
                return self._cache[key]
        return self._prior

    def observe(self, tool: str, kind: str, latency_s: float) -> None:
        """Record an observed latency; logs the error of the mean prediction first."""
        self.log.record("tool_latency_s", self.distribution(tool, kind).mean(), latency_s)
        self.learn(tool, kind, latency_s)

    def learn(self, tool: str, kind: str, latency_s: float) -> None:
        """Fit an observed latency into ``tool``'s and its kind's distributions (no log)."""
        x = math.log(max(latency_s, 1e-4))
        for key in (tool, f"kind:{kind}"):
            fit = self._fits[key]
            fit.add(x)
            if fit.n >= self._min:
                self._cache[key] = LogNormal(fit.mean, max(fit.std, 0.05))


class OutputLengthEstimator:
    """Exponentially weighted mean of output tokens per key (model or node label)."""

    def __init__(
        self, prior: float = 256.0, alpha: float = 0.05, log: PredictionLog | None = None
    ) -> None:
        self._prior = prior
        self._alpha = alpha
        self._mean: dict[str, float] = {}
        self.log = log or PredictionLog()

    def predict(self, key: str = "") -> float:
        return self._mean.get(key, self._mean.get("", self._prior))

    def observe(self, key: str, actual: int) -> None:
        self.log.record("output_tokens", self.predict(key), actual)
        for k in {key, ""}:
            old = self._mean.get(k)
            self._mean[k] = actual if old is None else old + self._alpha * (actual - old)


class RemainingWorkEstimator:
    """Expected remaining LLM calls of a program given how many it has completed.

    Non-clairvoyant: learns the distribution of total calls per program class from finished
    programs and answers with the mean residual life E[total - k | total > k]. Until enough
    programs finished it assumes ``prior_calls`` in total.
    """

    def __init__(
        self, prior_calls: float = 8.0, max_calls: int = 512, log: PredictionLog | None = None
    ) -> None:
        self._prior = prior_calls
        self._max = max_calls
        # per class: histogram of total calls, and its suffix sums, rebuilt lazily
        self._hist: dict[str, list[int]] = defaultdict(lambda: [0] * (max_calls + 1))
        self._residual: dict[str, list[float]] = {}
        self.log = log or PredictionLog()

    def remaining_calls(self, label: str, completed: int) -> float:
        table = self._residual.get(label)
        if table is None:
            table = self._rebuild(label)
        if table and completed < len(table) and table[completed] >= 0:
            return table[completed]
        return max(self._prior - completed, 1.0)

    def observe_finished(
        self, label: str, total_calls: int, predictions: list[tuple[int, float]]
    ) -> None:
        """Learn from a finished program; ``predictions`` are (completed, predicted remaining)
        pairs made during its life, whose errors are logged."""
        for completed, predicted in predictions:
            self.log.record("remaining_calls", predicted, total_calls - completed)
        self._hist[label][min(total_calls, self._max)] += 1
        self._residual.pop(label, None)

    def _rebuild(self, label: str) -> list[float]:
        hist = self._hist.get(label)
        if hist is None or sum(hist) < 5:
            self._residual[label] = []
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
        self._residual[label] = table
        return table

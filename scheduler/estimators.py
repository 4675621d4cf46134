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
from dataclasses import dataclass, field

from agentconsole.scheduler.bounded import TenantLru
from agentconsole.scheduler.latency import LogNormal


@dataclass(slots=True)
class ErrorStats:
    """Running error statistics of one kind of prediction."""

    count: int = 0
    abs_error_sum: float = 0.0
    rel_error_sum: float = 0.0
    #: the predictions with a relative error: those whose actual was not 0 (a call that
    #: generated nothing, a program with no call left has none: a zero's relative error is
    #: unbounded, and one such made the mean billions)
    rel_count: int = 0
    bias_sum: float = 0.0  # predicted - actual

    def add(self, predicted: float, actual: float) -> None:
        err = predicted - actual
        self.count += 1
        self.abs_error_sum += abs(err)
        self.bias_sum += err
        if actual != 0.0:
            self.rel_count += 1
            self.rel_error_sum += abs(err) / abs(actual)

    @property
    def mean_abs_error(self) -> float:
        return self.abs_error_sum / self.count if self.count else 0.0

    @property
    def mean_rel_error(self) -> float:
        """Over the predictions whose actual was not 0 (0.0: none)."""
        return self.rel_error_sum / self.rel_count if self.rel_count else 0.0

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


@dataclass(slots=True)
class _ToolFit:
    """The latencies of a tenant's tool (or kind of tool) and their fit, once there are
    enough of them to predict by."""

    samples: _Welford = field(default_factory=_Welford)
    fitted: LogNormal | None = None


class ToolLatencyEstimator:
    """Per tenant and tool, a log-normal fit of observed latencies, falling back to the
    tenant's tools of the kind, then to a prior, until ``min_samples`` observations exist.

    A tenant's learner holds at most :data:`~agentconsole.scheduler.bounded.KEYS_PER_TENANT`
    tools (tool names are the client's), and as many kinds: past it, the least recently used
    tool is forgotten and predicted again as a tool never seen (its kind's fit, else the
    prior)."""

    def __init__(
        self,
        prior: LogNormal = DEFAULT_TOOL_PRIOR,
        min_samples: int = 5,
        log: PredictionLog | None = None,
    ) -> None:
        self._prior = prior
        self._min = min_samples
        # tools and kinds apart: a tool's name is the client's, and may be any string
        self._tool_fits: TenantLru[_ToolFit] = TenantLru()
        self._kind_fits: TenantLru[_ToolFit] = TenantLru()
        self.log = log or PredictionLog()

    def distribution(self, tenant: str, tool: str, kind: str = "") -> LogNormal:
        """The current latency distribution of ``tenant``'s ``tool`` (changes no estimate)."""
        fit = self._tool_fits.get(tenant, tool)
        if fit is None or fit.fitted is None:
            fit = self._kind_fits.get(tenant, kind)  # the tool, then its kind
        return fit.fitted if fit is not None and fit.fitted is not None else self._prior

    def observe(self, tenant: str, tool: str, kind: str, latency_s: float) -> None:
        """Record an observed latency; logs the error of the mean prediction first."""
        predicted = self.distribution(tenant, tool, kind).mean()
        self.log.record("tool_latency_s", predicted, latency_s)
        self.learn(tenant, tool, kind, latency_s)

    def learn(self, tenant: str, tool: str, kind: str, latency_s: float) -> None:
        """Fit an observed latency into ``tenant``'s ``tool``'s and its kind's distributions
        (no log)."""
        x = math.log(max(latency_s, 1e-4))
        for fit in (
            self._kind_fits.setdefault(tenant, kind, _ToolFit),
            self._tool_fits.setdefault(tenant, tool, _ToolFit),
        ):
            fit.samples.add(x)
            if fit.samples.n >= self._min:
                fit.fitted = LogNormal(fit.samples.mean, max(fit.samples.std, 0.05))


class OutputLengthEstimator:
    """Exponentially weighted mean of output tokens per tenant and key (model or node label),
    falling back to the tenant's mean over its keys, then to a prior.

    A tenant's learner holds at most :data:`~agentconsole.scheduler.bounded.KEYS_PER_TENANT`
    keys (the labels are the client's): past it, the least recently used is forgotten and
    predicted again as a key never seen, by the tenant's mean (which every call refreshes, so
    it is never the one forgotten)."""

    def __init__(
        self, prior: float = 256.0, alpha: float = 0.05, log: PredictionLog | None = None
    ) -> None:
        self._prior = prior
        self._alpha = alpha
        self._means: TenantLru[float] = TenantLru()
        self.log = log or PredictionLog()

    def predict(self, tenant: str, key: str = "") -> float:
        """The expected output tokens of a call of ``tenant``'s ``key`` (``""``: any)."""
        means = self._means
        own = means.get(tenant, key)
        if own is not None:
            return own
        overall = means.get(tenant, "")
        return overall if overall is not None else self._prior

    def observe(self, tenant: str, key: str, actual: int, *, expected: float | None = None) -> None:
        """Learn ``actual`` for ``tenant``'s ``key``; the error log records it against
        ``expected`` (what the call's ticket expected: the estimate capped at its
        ``max_tokens``), else this estimator's prediction. A call capped at 50 tokens that made
        50 was logged as an error of 103 against the uncapped mean nobody ranked by."""
        predicted = self.predict(tenant, key) if expected is None else expected
        self.log.record("output_tokens", predicted, actual)
        means = self._means
        for k in ("", key) if key else ("",):  # the key last: the more recently used
            old = means.get(tenant, k)
            means.put(tenant, k, actual if old is None else old + self._alpha * (actual - old))

    def learned(self, tenant: str, key: str = "") -> float | None:
        """The mean learned for ``tenant``'s ``key`` itself (``""``: over its keys), with no
        fallback; None before one of its calls ended (or once it was forgotten)."""
        return self._means.get(tenant, key)

    def restore(self, tenant: str, key: str, mean: float) -> None:
        """Take ``mean`` for ``tenant``'s ``key`` as learned (a restart: what an earlier run
        had learned, :meth:`learned`); logs nothing."""
        self._means.put(tenant, key, float(mean))


@dataclass(slots=True)
class _CallsClass:
    """One program class's finished programs: how many made each total of calls, and the
    residual-life table built from them when first asked (None: to build)."""

    totals: list[int]
    residual: list[float] | None = None


class RemainingWorkEstimator:
    """Expected remaining LLM calls of a program given how many it has completed.

    Non-clairvoyant: learns the distribution of total calls per program class (its tenant and
    ``workload`` label) from finished programs and answers with the mean residual life
    E[total - k | total > k]. Until enough of the tenant's programs of the class finished it
    assumes ``prior_calls`` in total.

    A tenant's learner holds at most :data:`~agentconsole.scheduler.bounded.KEYS_PER_TENANT`
    classes (labels are the client's; each holds a histogram of ``max_calls + 1`` counts): past
    it, the least recently used is forgotten and predicted by the prior again, as a label never
    seen, until enough of its programs finish anew. A label asked about that none of the
    tenant's programs finished stores nothing.
    """

    def __init__(
        self, prior_calls: float = 8.0, max_calls: int = 512, log: PredictionLog | None = None
    ) -> None:
        self._prior = prior_calls
        self._max = max_calls
        self._classes: TenantLru[_CallsClass] = TenantLru()
        self.log = log or PredictionLog()

    def remaining_calls(self, tenant: str, label: str, completed: int) -> float:
        known = self._classes.get(tenant, label)
        if known is not None:
            table = known.residual
            if table is None:
                table = known.residual = _residual_life(known.totals)
            if completed < len(table) and table[completed] >= 0:
                return table[completed]
        return max(self._prior - completed, 1.0)

    def observe_finished(
        self, tenant: str, label: str, total_calls: int, predictions: list[tuple[int, float]]
    ) -> None:
        """Learn from ``tenant``'s finished program of ``label``; ``predictions`` are
        (completed, predicted remaining) pairs made during its life, whose errors are logged."""
        for completed, predicted in predictions:
            self.log.record("remaining_calls", predicted, total_calls - completed)
        size = self._max + 1
        known = self._classes.setdefault(tenant, label, lambda: _CallsClass([0] * size))
        known.totals[min(total_calls, self._max)] += 1
        known.residual = None


#: finished programs of a class before its own histogram predicts (the prior until then)
_MIN_FINISHED = 5


def _residual_life(totals: list[int]) -> list[float]:
    """``table[k]`` = E[total - k | total > k] of the histogram ``totals`` (-1: none made more
    than k calls); empty, so every answer is the prior's, before :data:`_MIN_FINISHED`
    programs finished."""
    if sum(totals) < _MIN_FINISHED:
        return []
    top = len(totals) - 1
    table = [-1.0] * (top + 1)
    count = 0
    total = 0
    for k in range(top, -1, -1):
        if count:
            table[k] = total / count - k
        count += totals[k]
        total += totals[k] * k
    return table

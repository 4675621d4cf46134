"""``GET /metrics``: Prometheus text, ``agentconsole_*`` series, no per-program labels.

Counters are read at scrape time from the :class:`MetricsAggregator`'s counts (the numbers
the consoles show) and from ``counters`` (the mid-prompt insertion books' totals), histograms
are filled from the hub's events as they pass (the per-call ones with one bisect each,
:class:`_Histogram`), and gauges are read from the runtime snapshot and
the live service. Labels stay bounded (``tier``, ``state``, ``action``, ``outcome``, ``kind``):
never a program, node, call or tenant id (``/metrics`` needs no key, so a tenant label would
publish the tenants' names; per-tenant figures are in ``/v1/tenants``).

The engine's own series follow ours: with the SGLang runtime and SGLang's metrics on (the
default), SGLang's processes write Prometheus multiprocess files into a folder of the
runtime's (``metrics_dir()``); each scrape merges them (``sglang:*`` series, SGLang's names,
labels and help) into the same exposition. Their names never collide with ``agentconsole_*``.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind, Scalar
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.runtime import RuntimeSnapshot

#: Prometheus's text format; the charset is Litestar's to add (it appends ``charset=utf-8``
#: to every ``text/*`` type, so naming it here sent it twice)
CONTENT_TYPE = "text/plain; version=0.0.4"
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_LONG = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

#: aggregator count -> (series name without prefix, help)
_COUNTS = {
    "programs": ("programs_created_total", "Programs created."),
    "calls_finished": ("llm_calls_finished_total", "LLM calls that finished."),
    "calls_aborted": ("llm_calls_aborted_total", "LLM calls aborted (cancel, disconnect, quota)."),
    "calls_failed": (
        "llm_calls_failed_total",
        "LLM calls the engine ended itself or the runtime failed mid-answer.",
    ),
    "computed_tokens": ("prompt_tokens_computed_total", "Prompt tokens prefilled (not cached)."),
    "output_tokens": ("generation_tokens_total", "Tokens generated."),
    "prefix_hit_tokens": ("prefix_cache_hit_tokens_total", "Prompt tokens served from cache."),
    "ghost_tokens": ("ghost_tokens_total", "Tokens generated after a cancel or disconnect."),
    "discarded_branch_tokens": ("discarded_branch_tokens_total", "Tokens of discarded branches."),
    "recompute_tokens": ("kv_recompute_tokens_total", "KV tokens recomputed after eviction."),
    "cross_model_lost_tokens": (
        "cross_model_lost_tokens_total",
        "Prompt tokens prefilled on one model that another served model had cached.",
    ),
}
#: help of the counters read from elsewhere than the aggregator (``counters``)
_COUNTER_HELP = {
    "prompt_insertions_total": "LLM calls whose prompt inserted tokens mid-prompt.",
    "prompt_inserted_tokens_total": "Tokens inserted mid-prompt.",
    "lost_reuse_tokens_total": "Prompt tokens prefilled again because of mid-prompt insertions.",
    "store_commits_refused_total": (
        "Store commits the disk refused (full, read-only), first tries and retries."
    ),
    "store_checkpoints_total": "Store checkpoints run.",
    "store_checkpoints_skipped_total": (
        "Store checkpoints due and not run (no room on the disk, a held batch)."
    ),
    "store_items_dropped_total": (
        "Store rows and events given up (queue overflow, a disk refusing at shutdown)."
    ),
}
_KV_KINDS = ("offloaded", "reloaded", "dropped", "evicted", "recomputed")
log = logging.getLogger(__name__)
ENGINE_PREFIX = "sglang:"
MetricsDir = Callable[[], Path | None]
EventData = Mapping[str, Scalar]


class _EngineSeries(Collector):
    """SGLang's series: its processes' multiprocess files, merged across processes the way
    each metric's mode says, then the ``sglang:*`` families SGLang registered in this
    process's default registry. Its tokenizer manager runs in the server's process, where
    ``prometheus_client`` was imported before the engine set ``PROMETHEUS_MULTIPROC_DIR``, so
    those (TTFT, end-to-end latency, prompt tokens) are kept in memory rather than in files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def collect(self) -> Iterator[Metric]:
        seen: set[str] = set()
        if self.directory.is_dir():
            files = CollectorRegistry(auto_describe=False)
            MultiProcessCollector(files, path=str(self.directory))  # type: ignore[no-untyped-call]
            for family in files.collect():
                seen.add(family.name)
                yield family
        for family in REGISTRY.collect():
            if family.name.startswith(ENGINE_PREFIX) and family.name not in seen:
                yield family


def engine_metrics(directory: Path) -> bytes:
    """The exposition of SGLang's own series (``_EngineSeries``); empty when there are none."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_EngineSeries(directory))
    return generate_latest(registry)


def runtime_metrics_dir(snapshot: Callable[[], RuntimeSnapshot]) -> MetricsDir | None:
    """The ``metrics_dir`` of the runtime whose bound ``snapshot`` method is given (the
    SGLang runtime has one), or None."""
    found = getattr(getattr(snapshot, "__self__", None), "metrics_dir", None)
    return found if callable(found) else None


class _Histogram(Collector):
    """An unlabelled histogram observed on the hot path (every call): one bisect and two
    additions, where ``prometheus_client.Histogram.observe`` takes a lock for the sum and one
    for the bucket; the same exposition (buckets, count, sum, created) at scrape."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name, self.documentation = name, documentation
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is at least ``value``."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def collect(self) -> Iterator[Metric]:
        cumulative, buckets = 0, []
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), float(cumulative)))  # type: ignore[no-untyped-call]
        family = HistogramMetricFamily(
            self.name, self.documentation, buckets=buckets, sum_value=self.sum
        )
        family.add_sample(f"{self.name}_created", {}, self.created)
        yield family


class _Scrape(Collector):
    def __init__(
        self,
        metrics: MetricsAggregator,
        snapshot: Callable[[], RuntimeSnapshot],
        gauges: Callable[[], dict[str, float]],
        counters: Callable[[], dict[str, float]],
    ) -> None:
        self.metrics = metrics
        self.snapshot = snapshot
        self.gauges = gauges
        self.counters = counters

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        counts = self.metrics.counts
        for key, (name, text) in _COUNTS.items():
            yield CounterMetricFamily(f"agentconsole_{name}", text, value=counts.get(key, 0.0))
        ended = CounterMetricFamily(
            "agentconsole_programs_ended_total", "Programs that ended, by state.", labels=["state"]
        )
        for state in ("finished", "failed", "cancelled"):
            ended.add_metric([state], counts.get(state, 0.0))
        yield ended
        moves = CounterMetricFamily(
            "agentconsole_kv_moves_total", "KV tier operations, by kind.", labels=["kind"]
        )
        for kind in _KV_KINDS:
            moves.add_metric([kind], counts.get(f"kv.{kind}_count", 0.0))
        yield moves
        snap = self.snapshot()
        yield GaugeMetricFamily(
            "agentconsole_requests_running", "LLM calls running.", value=len(snap.running)
        )
        yield GaugeMetricFamily(
            "agentconsole_requests_waiting", "LLM calls queued.", value=len(snap.queued)
        )
        used = GaugeMetricFamily(
            "agentconsole_kv_tier_used_tokens", "KV tokens resident per tier.", labels=["tier"]
        )
        cap = GaugeMetricFamily(
            "agentconsole_kv_tier_capacity_tokens", "KV capacity per tier.", labels=["tier"]
        )
        size = GaugeMetricFamily(
            "agentconsole_kv_tier_bytes", "KV bytes resident per tier.", labels=["tier"]
        )
        for tier, usage in snap.tiers.items():
            used.add_metric([tier], usage.used_tokens)
            cap.add_metric([tier], usage.capacity_tokens)
            size.add_metric([tier], usage.used_bytes)
        yield from (used, cap, size)
        for name, value in self.gauges().items():
            yield GaugeMetricFamily(f"agentconsole_{name}", name.replace("_", " "), value=value)
        for name, value in self.counters().items():
            text = _COUNTER_HELP.get(name, name.replace("_", " "))
            yield CounterMetricFamily(f"agentconsole_{name}", text, value=value)


class PrometheusMetrics:
    """Owns a private registry; :meth:`observe` is a hub subscriber."""

    def __init__(
        self,
        metrics: MetricsAggregator,
        snapshot: Callable[[], RuntimeSnapshot],
        gauges: Callable[[], dict[str, float]],
        *,
        counters: Callable[[], dict[str, float]] = dict,
        engine_metrics_dir: MetricsDir | None = None,
    ) -> None:
        """``counters``: more counters read at scrape (name without prefix -> value; the
        mid-prompt insertion books'). ``engine_metrics_dir``: where the engine writes
        Prometheus multiprocess files (default: the ``metrics_dir`` method of the runtime
        ``snapshot`` belongs to)."""
        self.engine_metrics_dir = engine_metrics_dir or runtime_metrics_dir(snapshot)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Scrape(metrics, snapshot, gauges, counters))
        r = self.registry
        self.ttft = _Histogram(
            "agentconsole_time_to_first_token_seconds", "LLM call TTFT.", _LATENCY
        )
        self.e2e = _Histogram("agentconsole_llm_call_seconds", "LLM call end to end.", _LATENCY)
        self.queue = _Histogram("agentconsole_llm_queue_seconds", "LLM call queue time.", _LATENCY)
        for histogram in (self.ttft, self.e2e, self.queue):
            r.register(histogram)
        self.tool = Histogram(
            "agentconsole_tool_seconds", "Tool latency.", ["outcome"], buckets=_LONG, registry=r
        )
        self.program = Histogram(
            "agentconsole_program_e2e_seconds", "Program end to end.", buckets=_LONG, registry=r
        )
        self.decisions = Counter(
            "agentconsole_kv_decisions", "Tool-wait KV decisions.", ["action"], registry=r
        )
        self.operator = Counter(
            "agentconsole_operator_actions",
            "Operator actions, by whether they acted (ok) or were refused (any caller's).",
            ["action", "result"],
            registry=r,
        )

    def observe(self, event: Event) -> None:
        """Hub subscriber: fill the histograms and labelled counters (one dict lookup for
        the events no series counts)."""
        fill = _FILLS.get(event.kind)
        if fill is not None:
            fill(self, event.data)

    def _first_token(self, data: EventData) -> None:
        self.ttft.observe(number(data, "ttft_s"))

    def _call_finished(self, data: EventData) -> None:
        self.e2e.observe(number(data, "e2e_s"))
        self.queue.observe(number(data, "queue_s"))

    def _tool_finished(self, data: EventData) -> None:
        self.tool.labels(str(data.get("outcome", "ok"))).observe(number(data, "latency_s"))

    def _program_finished(self, data: EventData) -> None:
        self.program.observe(number(data, "e2e_s"))

    def _kv_decision(self, data: EventData) -> None:
        self.decisions.labels(str(data.get("action", ""))).inc()

    def _operator_action(self, data: EventData) -> None:
        acted = str(data.get("result", "")) == "ok"
        self.operator.labels(str(data.get("action", "")), "ok" if acted else "refused").inc()

    def render(self) -> bytes:
        """The exposition text: our series, then the engine's own (if it writes any)."""
        text = generate_latest(self.registry)
        return text + self._engine_text()

    def _engine_text(self) -> bytes:
        """The engine's series (empty without any, or when they cannot be read). Finding the
        folder is guarded too: a runtime failing to name it must not fail our series."""
        directory: Path | None = None
        try:
            directory = self.engine_metrics_dir() if self.engine_metrics_dir else None
            return b"" if directory is None else engine_metrics(directory)
        except Exception:  # a half-written file must not fail the scrape of ours
            log.warning("cannot read the engine's metrics in %s", directory, exc_info=True)
            return b""


_FILLS: dict[EventKind, Callable[[PrometheusMetrics, EventData], None]] = {
    EventKind.CALL_FIRST_TOKEN: PrometheusMetrics._first_token,
    EventKind.CALL_FINISHED: PrometheusMetrics._call_finished,
    EventKind.TOOL_FINISHED: PrometheusMetrics._tool_finished,
    EventKind.PROGRAM_FINISHED: PrometheusMetrics._program_finished,
    EventKind.KV_DECISION: PrometheusMetrics._kv_decision,
    EventKind.OPERATOR_ACTION: PrometheusMetrics._operator_action,
}

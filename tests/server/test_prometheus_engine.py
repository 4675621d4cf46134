"""``/metrics`` merges the engine's own series (Prometheus multiprocess files, as SGLang's
processes write them) after ours; a runtime with ``metrics_dir()`` is found on its own; a
missing or broken folder never fails the scrape."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.runtime import RuntimeSnapshot
from agentconsole.server.prometheus import PrometheusMetrics, engine_metrics

_WRITER = """
from prometheus_client import Counter, Gauge
Counter("sglang:demo_requests", "Requests.", ["model"]).labels("tiny").inc(3)
Gauge("sglang:demo_running", "Running.", multiprocess_mode="max").set(2)
"""


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of multiprocess files written by two engine processes."""
    folder = tmp_path_factory.mktemp("prometheus")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", _WRITER], env=env, check=True)
    return folder


class _Runtime:
    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def snapshot(self) -> RuntimeSnapshot:
        return RuntimeSnapshot("fake", "fcfs")

    def metrics_dir(self) -> Path | None:
        return self.folder


def _lines(metrics: PrometheusMetrics) -> list[str]:
    return metrics.render().decode().splitlines()


def test_engine_series_follow_ours_summed_across_processes(engine_dir: Path) -> None:
    runtime = _Runtime(engine_dir)
    explicit = PrometheusMetrics(
        MetricsAggregator(), runtime.snapshot, dict, engine_metrics_dir=runtime.metrics_dir
    )
    found = PrometheusMetrics(MetricsAggregator(), runtime.snapshot, dict)
    for metrics in (explicit, found):
        lines = _lines(metrics)
        ours = lines.index(next(x for x in lines if x.startswith("agentconsole_")))
        engine = lines.index('sglang:demo_requests_total{model="tiny"} 6.0')
        assert ours < engine
        assert "sglang:demo_running 2.0" in lines
        assert "# TYPE sglang:demo_requests_total counter" in lines  # SGLang's help and type
    assert b"sglang:demo_running" in engine_metrics(engine_dir)


def test_no_folder_or_a_broken_one_leaves_our_series(tmp_path: Path) -> None:
    missing = PrometheusMetrics(MetricsAggregator(), _Runtime(tmp_path / "absent").snapshot, dict)
    assert not any(x.startswith("sglang:demo") for x in _lines(missing))
    off = PrometheusMetrics(MetricsAggregator(), _Runtime(None).snapshot, dict)
    assert any(x.startswith("agentconsole_programs_created_total") for x in _lines(off))
    (tmp_path / "counter_1.db").write_bytes(b"\xff" * 64)  # a corrupt (half-written) file
    broken = PrometheusMetrics(MetricsAggregator(), _Runtime(tmp_path).snapshot, dict)
    assert any(x.startswith("agentconsole_programs_created_total") for x in _lines(broken))


def test_a_runtime_failing_to_name_its_folder_leaves_our_series() -> None:
    class _Failing(_Runtime):
        def metrics_dir(self) -> Path | None:
            raise AttributeError("no state folder")

    failing = PrometheusMetrics(MetricsAggregator(), _Failing(None).snapshot, dict)
    assert any(x.startswith("agentconsole_programs_created_total") for x in _lines(failing))

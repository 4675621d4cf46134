"""Store benchmark: event ingest rate and append-to-ack latency on a real DuckDB store.

Run: ``.venv/bin/python benchmarks/bench_store.py [--events N] [--seconds S] [--dir PATH]``.
Goals (issue "Serve"): ingest >= 100,000 events/s; p99 append-to-ack <= 50 ms.

* ``ingest``: one producer thread emits N pre-built events (fire and forget) as fast as it
  can, then waits for a flush; rate = N / (first emit -> flush acknowledged).
* ``durable write``: a producer appends acknowledged rows to the main file (an audit row, the
  same path as tool intents and tool registrations) at a paced rate R for S seconds; each
  latency is from ``put_durable()`` to the future resolving (after its batch's COMMIT).
* ``event append``: the same with acknowledged events, which go to the event log file.
* ``+ bg``: the same with a second thread emitting a background event firehose.
* ``event emit -> committed``: fire-and-forget events at a paced rate (``serve``'s path); the
  time from ``emit()`` until the event's batch has committed, i.e. what a crash could lose.
  Not a goal of its own: it is the event lane's linger (``StoreConfig.event_linger_s``, chosen
  for the API's tail, docs/BENCHMARKS.md section 7) plus one commit, and the row checks that
  bound (linger + 50 ms).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.store import OperatorAction, Store, StoreConfig


def _events(n: int) -> list[Event]:
    kinds = list(EventKind)
    now = time.time()
    return [
        Event(
            t=now + i * 1e-6,
            kind=kinds[i % len(kinds)],
            program_id=f"prog-{i % 500}",
            node_id=f"node-{i % 20}",
            attempt=i % 3,
            tenant=f"tenant-{i % 4}",
            data={"tokens": i % 4096, "cached": i % 1024, "ok": True, "dur_s": 0.25},
        )
        for i in range(n)
    ]


def bench_ingest(store: Store, n: int) -> dict[str, float]:
    """Fire-and-forget ingest of ``n`` events; returns rates and batch figures."""
    events = _events(n)
    before = store.writer.stats.batches
    start = time.perf_counter()
    emit = store.writer.emit
    for event in events:
        emit(event)
    enqueued = time.perf_counter()
    store.writer.flush().result(timeout=600)
    done = time.perf_counter()
    batches = store.writer.stats.batches - before
    return {
        "events": n,
        "enqueue_per_s": n / (enqueued - start),
        "ingest_per_s": n / (done - start),
        "mean_batch": n / max(batches, 1),
        "dropped": store.writer.stats.dropped,
    }


def _paced_acks(submit: Callable[[], Future[Any]], rate: float, seconds: float) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    pending: list[Future[Any]] = []
    interval = 1.0 / rate
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        target = start + i * interval
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent = time.perf_counter()
        future = submit()

        def done(_: Future[Any], sent: float = sent) -> None:
            with lock:
                latencies.append(time.perf_counter() - sent)

        future.add_done_callback(done)
        pending.append(future)
    for future in pending:
        future.result(timeout=60)
    return latencies


def bench_latency(
    store: Store,
    submit: Callable[[], Future[Any]],
    rate: float,
    seconds: float,
    background: float,
) -> dict[str, float]:
    """Latency of ``submit()`` to its future resolving at ``rate`` calls/s, with
    ``background`` events/s emitted by another thread."""
    stop = threading.Event()

    def load() -> None:
        events = _events(10_000)
        chunk = max(1, int(background / 100))
        i = 0
        while not stop.is_set():
            tick = time.perf_counter()
            for _ in range(chunk):
                store.writer.emit(events[i % len(events)])
                i += 1
            time.sleep(max(0.0, 0.01 - (time.perf_counter() - tick)))

    thread = threading.Thread(target=load, daemon=True)
    if background > 0:
        thread.start()
    try:
        lat = sorted(_paced_acks(submit, rate, seconds))
    finally:
        stop.set()
        if background > 0:
            thread.join()
    return {
        "acked": len(lat),
        "p50_ms": statistics.median(lat) * 1e3,
        "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1e3,
        "max_ms": lat[-1] * 1e3,
    }


def bench_emit_lag(store: Store, rate: float, seconds: float) -> dict[str, float]:
    """Fire-and-forget events emitted at ``rate`` per second: time from ``emit()`` until the
    batch holding the event has committed (how much a crash could lose).

    One producer, so the lane commits the events in emit order; a monitor thread samples the
    committed-event count every 0.5 ms, and event ``i`` is committed at the first sample that
    counts it.
    """
    store.writer.flush().result(timeout=60)
    base = store.writer.stats.events_written
    events = _events(10_000)
    n = int(rate * seconds)
    per_ms = max(1, int(rate / 1000))
    emitted: list[float] = []
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter(), store.writer.stats.events_written - base))
            time.sleep(0.0005)

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    start = time.perf_counter()
    while len(emitted) < n:
        delay = start + len(emitted) / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        now = time.perf_counter()
        for _ in range(min(per_ms, n - len(emitted))):
            store.writer.emit(events[len(emitted) % len(events)])
            emitted.append(now)
    store.writer.flush().result(timeout=60)
    stop.set()
    watcher.join()
    samples.append((time.perf_counter(), store.writer.stats.events_written - base))
    lags, sample = [], 0
    for i, sent in enumerate(emitted):
        while samples[sample][1] < i + 1:
            sample += 1
        lags.append(samples[sample][0] - sent)
    lags.sort()
    return {
        "p50_ms": statistics.median(lags) * 1e3,
        "p99_ms": lags[int(len(lags) * 0.99) - 1] * 1e3,
        "max_ms": lags[-1] * 1e3,
    }


def main() -> None:
    """Run the measurements and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=2_000.0, help="acked appends per second")
    parser.add_argument("--background", type=float, default=50_000.0, help="emitted events/s")
    parser.add_argument(
        "--emit-rate",
        type=float,
        default=15_000.0,
        help="emitted events/s for the commit-lag row (the API emits ~7 per call)",
    )
    parser.add_argument(
        "--linger-ms",
        type=float,
        default=None,
        help="both lanes' linger (default: the store's own, StoreConfig)",
    )
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        config = StoreConfig()
        if args.linger_ms is not None:
            linger = args.linger_ms / 1e3
            config = replace(config, linger_s=linger, event_linger_s=linger)
        with Store.open(Path(tmp) / "bench.duckdb", config) as store:
            event = _events(1)[0]
            action = OperatorAction(time.time(), "bench", "boost", "prog-1", "ok")
            paths: dict[str, Callable[[], Future[Any]]] = {
                "durable write": lambda: store.writer.put_durable(action),
                "event append": lambda: store.writer.append(event),
            }
            ingest = bench_ingest(store, args.events)
            lags = [
                (
                    f"event emit -> committed @ {rate:,.0f}/s",
                    bench_emit_lag(store, rate, args.seconds),
                )
                for rate in (args.emit_rate, args.background)
            ]
            rows = [
                (
                    f"{name} @ {args.rate:,.0f}/s{suffix}",
                    bench_latency(store, submit, args.rate, args.seconds, bg),
                )
                for bg, suffix in ((0.0, ""), (args.background, f" + {args.background:,.0f}/s bg"))
                for name, submit in paths.items()
            ]
    print(f"{'measurement':48s} {'value':>12s}  goal")
    print(f"{'ingest (emit -> committed) ev/s':48s} {ingest['ingest_per_s']:12,.0f}  >= 100,000")
    print(f"{'  enqueue only, ev/s':48s} {ingest['enqueue_per_s']:12,.0f}")
    print(f"{'  mean batch (events/commit)':48s} {ingest['mean_batch']:12,.0f}")
    print(f"{'  dropped':48s} {ingest['dropped']:12,.0f}  0")
    lag_bound = f"<= {config.event_linger_s * 1e3 + 50:.0f} (linger + 50)"
    for (name, res), bound in [*((lag, lag_bound) for lag in lags), *((r, "<= 50") for r in rows)]:
        print(f"{name + ' p50 ms':48s} {res['p50_ms']:12.2f}")
        print(f"{name + ' p99 ms':48s} {res['p99_ms']:12.2f}  {bound}")
        print(f"{name + ' max ms':48s} {res['max_ms']:12.2f}")


if __name__ == "__main__":
    main()

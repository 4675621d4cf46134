"""Child process for the checkpoint-room tests: fills a store's event log until the storage
refuses it, then gives it room again, and reports as JSON on its last stdout line.

Run as ``python full_disk_child.py <mode> <db_path> <arg>``:

* ``fsize <bytes>``: no file may grow past the event log's size at open plus ``<bytes>``
  (``RLIMIT_FSIZE``, set after the open; with SIGXFSZ ignored, as CPython itself does at
  start, a write past it fails with EFBIG), unprivileged; room comes back when the limit is
  lifted.
* ``disk <size>``: ``<db_path>`` lies on a tmpfs of its own, full at its size; room comes back
  when it is remounted at ``<size>`` (root only).

Acknowledged events (``StoreWriter.append``) are written in rounds of :data:`ROUND` until a
round is not acknowledged within :data:`HOLD_WAIT_S` (held, or refused). Two JSON lines: what
was found when the storage refused (printed at once), then what came of giving it room,
with every ``seq`` acknowledged, first and late (a held batch is acknowledged once it
commits).
"""

from __future__ import annotations

import json
import logging
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.store import Store, StoreClosedError, StoreConfig
from agentconsole.server.store.event_log import event_log_path
from agentconsole.server.store.preflight import wal_path

#: The checkpoint size of these tests: several checkpoints fit before the room runs out.
THRESHOLD = "1MB"
#: Acknowledged events a round; each carries :data:`PAD` bytes, ~440 KB of WAL a round.
ROUND = 200
PAD = 2000
#: How long a round may take before it counts as held; a commit takes milliseconds here.
HOLD_WAIT_S = 3.0
#: Most bytes written before giving up on the storage ever refusing (a test bug).
MAX_WRITTEN = 200_000_000


def _event(i: int) -> Event:
    return Event(
        t=float(i),
        kind=EventKind.CALL_FINISHED,
        program_id=f"p{i % 7}",
        node_id=f"n{i}",
        tenant="t",
        data={"i": i, "pad": "x" * PAD},
    )


def _wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _fill(store: Store) -> tuple[list[int], list[Future[int]]]:
    """Append rounds until one is not acknowledged; the acknowledged seqs and the futures of
    the round that was not (pending while held)."""
    acked: list[int] = []
    written = 0
    while written < MAX_WRITTEN:
        futures = [store.writer.append(_event(written + n)) for n in range(ROUND)]
        written += ROUND * PAD
        try:
            acked.extend(future.result(timeout=HOLD_WAIT_S) for future in futures)
        except (FutureTimeout, StoreClosedError):
            done = [f for f in futures if f.done() and f.exception() is None]
            acked.extend(f.result() for f in done)
            return acked, [f for f in futures if not f.done()]
    raise AssertionError("the storage never refused a write")


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0  # a checkpoint removes the WAL


def _say(report: dict[str, Any]) -> None:
    print(json.dumps(report), flush=True)


def main(mode: str, db: Path, arg: str) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    store = Store.open(db, StoreConfig(checkpoint_threshold=THRESHOLD, storage_retry_s=0.05))
    if mode == "fsize":
        limit = event_log_path(db).stat().st_size + int(arg)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    lane = store.writer._events
    acked, pending = _fill(store)
    full: dict[str, Any] = {
        "checkpoints": lane.stats.checkpoints,
        "alive": store.writer.alive,
        "holding": lane.holding,
        "failure": repr(store.writer.failure),
        "wal_bytes": _size(wal_path(event_log_path(db))),
        "pending": len(pending),
    }
    try:
        store.writer.append(_event(-1))
        full["refused"] = None
    except StoreClosedError as error:  # the API answers it 503
        full["refused"] = str(error)
    _say(full)

    if mode == "fsize":
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    else:
        subprocess.run(["mount", "-o", f"remount,size={arg}", str(db.parent)], check=True)
    alive_again = _wait_until(lambda: store.writer.alive, 10)
    late = [future.result(timeout=10) for future in pending]
    acked += [*late, store.writer.append(_event(-2)).result(timeout=10)]
    checkpointed = _wait_until(lambda: lane.stats.checkpoints > full["checkpoints"], 10)
    _say(
        {
            "alive_again": alive_again,
            "checkpointed_again": checkpointed,
            "wal_bytes": _size(wal_path(event_log_path(db))),
            "late_acks": len(late),
            "acked": sorted(acked),
            "closed_cleanly": store.close(),
        }
    )


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])

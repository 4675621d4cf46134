"""Open-time settings of the store: DuckDB configuration and group-commit knobs."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: What DuckDB is told its automatic checkpoint threshold is: a WAL size never reached, so
#: DuckDB never checkpoints inside a COMMIT. A checkpoint that cannot write (a full disk)
#: invalidates the whole instance, and inside a COMMIT it strikes a batch that did commit
#: (DuckDB 2.0.1: "Transaction COMMIT succeeded and is durable, but the autocheckpoint
#: failed ... The database has been invalidated"), so the lanes checkpoint instead, at
#: ``checkpoint_threshold``, where they can look for room first (``lane.py``). An exabyte
#: (DuckDB's largest unit is TB, and its sizes are 64-bit). It also turns off DuckDB's "skip
#: the WAL and checkpoint" path for big commits, which runs only when a checkpoint is due.
DUCKDB_CHECKPOINT_THRESHOLD = "1000000TB"

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")
#: DuckDB's units for a size setting: KB, MB, GB, TB in powers of 1000, KiB... in 1024.
_SIZE_UNITS = {
    **dict.fromkeys(("b", "byte", "bytes"), 1),
    **{letter: 1000**power for power, letter in enumerate("kmgt", 1)},
    **{letter + "b": 1000**power for power, letter in enumerate("kmgt", 1)},
    **{letter + "ib": 1024**power for power, letter in enumerate("kmgt", 1)},
}


def parse_size(text: str) -> int:
    """Bytes in a size as DuckDB's settings write it (``"2MB"``, ``"1.5 GiB"``, ``"512kb"``);
    raises :class:`ValueError` for anything else."""
    match = _SIZE.fullmatch(text.lower())
    if match is None or match[2] not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (e.g. 2MB, 512KiB)")
    return int(float(match[1]) * _SIZE_UNITS[match[2]])


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """How the store opens DuckDB and batches writes.

    ``memory_limit`` is passed in the open-time configuration on purpose: a ``SET`` after
    connect takes effect only after WAL replay, and a replay that runs out of memory turns a
    restart into a crash loop. Leave head-room for replaying a full WAL
    (``checkpoint_threshold``, more while checkpoints wait for disk space).
    """

    memory_limit: str = "1GB"
    #: DuckDB worker threads. One: the lane's own thread runs each statement, so DuckDB
    #: never takes both of a 2-core machine's cores from the serving thread (measured: the
    #: API's throughput 1,800-2,000 -> 2,150-2,600 calls/s, ingest 215 k -> 290 k events/s).
    threads: int = 1
    #: WAL size at which a writer lane checkpoints its file, after the batch that reached it
    #: (one setting for both files; DuckDB's own automatic checkpoint is off in effect:
    #: :data:`DUCKDB_CHECKPOINT_THRESHOLD`). Skipped while the disk lacks room for it, or a
    #: lane holds a batch the files refused; the WAL then grows past it (``lane.py``). A
    #: checkpoint stalls its file's writes, so small and frequent beats large and rare: with
    #: the event log's small row groups (``event_log.ROW_GROUP_SIZE``) a 2 MB WAL checkpoints
    #: in 10-35 ms here, where DuckDB's default of 16 MB took 40-80 ms. A size as DuckDB
    #: writes one (:func:`parse_size`).
    checkpoint_threshold: str = "2MB"
    #: Most rows (events plus records) committed in one transaction.
    max_batch_rows: int = 5000
    #: How long the main lane gathers work after a first item nobody waits on, in seconds.
    #: An item someone waits on never lingers: it ends a linger at once, and a batch it
    #: starts is committed at once; nor does a lane linger while a full batch is queued. So
    #: only fire-and-forget rows wait (each call's prompt blocks, the projector's rows), and
    #: a crash can lose at most this much of them, as with Postgres' asynchronous commit
    #: (``wal_writer_delay``, 200 ms by default); the projector's rows are rebuilt from the
    #: event log on restart anyway.
    #:
    #: Why not 0: every batch costs the serving thread 1-2 ms of waiting however small it is.
    #: duckdb-python takes the GIL back after each task of a statement, and CPython 3.11 asks
    #: a GIL holder to yield only when no switch happened during the waiter's whole switch
    #: interval, so each retake restarts the waiter's clock and a request that arrives during
    #: a batch waits until the commit's fsync releases the GIL. At 0 the main lane committed
    #: once per call (the prompt blocks); 200 ms for both lanes took the API's sequential p99
    #: from 2.9-3.5 ms to 1.15-1.19 ms in alternated runs (docs/BENCHMARKS.md section 7).
    linger_s: float = 0.2
    #: The same for the event lane, whose bulk is fire-and-forget events (at 20 ms, ~50
    #: batches a second each took 1-2 ms from the serving thread). A crash loses at most the
    #: events of the last linger; acknowledged ones (``StoreWriter.append``) never wait.
    event_linger_s: float = 0.2
    #: Queue length above which fire-and-forget events are dropped (and counted).
    max_queue: int = 1_000_000
    #: Idle time after which the writer checkpoints if anything was committed since.
    idle_checkpoint_s: float = 5.0
    #: How often a failed batch is retried on a transaction conflict before it fails.
    conflict_retries: int = 3
    #: Seconds between retries of a batch whose commit the storage refused (disk full,
    #: read-only file system); meanwhile the store refuses writes (``lane.py``).
    storage_retry_s: float = 1.0
    #: Run DuckDB in a process of its own (``dbprocess.py``): its statements then take no
    #: GIL from the serving thread (``remote.py`` forwards each call). Off, DuckDB runs in the
    #: caller's process: tools, tests and benchmarks that open a store for a moment.
    own_process: bool = False

    def __post_init__(self) -> None:
        parse_size(self.checkpoint_threshold)  # a typo fails the open, not the lane's thread

    @property
    def checkpoint_threshold_bytes(self) -> int:
        """:attr:`checkpoint_threshold` in bytes."""
        return parse_size(self.checkpoint_threshold)

    def duckdb_config(self) -> dict[str, str | bool | int | float | list[str]]:
        """The ``config`` mapping for ``duckdb.connect``."""
        return {
            "memory_limit": self.memory_limit,
            "threads": str(self.threads),
            "checkpoint_threshold": DUCKDB_CHECKPOINT_THRESHOLD,
        }

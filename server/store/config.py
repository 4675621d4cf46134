"""Open-time settings of the store: DuckDB configuration and group-commit knobs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """How the store opens DuckDB and batches writes.

    ``memory_limit`` is passed in the open-time configuration on purpose: a ``SET`` after
    connect takes effect only after WAL replay, and a replay that runs out of memory turns a
    restart into a crash loop. Leave head-room for replaying a full WAL
    (``checkpoint_threshold``).
    """

    memory_limit: str = "1GB"
    #: DuckDB worker threads. One: the lane's own thread runs each statement, so DuckDB
    #: never takes both of a 2-core machine's cores from the serving thread (measured: the
    #: API's throughput 1,800-2,000 -> 2,150-2,600 calls/s, ingest 215 k -> 290 k events/s).
    threads: int = 1
    #: WAL size that triggers DuckDB's automatic checkpoint inside a COMMIT (one setting for
    #: both files). A checkpoint stalls its file's writes, so small and frequent beats large
    #: and rare: with the event log's small row groups (``event_log.ROW_GROUP_SIZE``) a 2 MB
    #: WAL checkpoints in 10-35 ms here, where DuckDB's default of 16 MB took 40-80 ms.
    checkpoint_threshold: str = "2MB"
    #: Most rows (events plus records) committed in one transaction.
    max_batch_rows: int = 5000
    #: How long the main lane gathers work after a first item nobody waits on, in seconds.
    #: 0 commits as soon as the queue is empty: batches then grow on their own while a commit
    #: (an fsync) is under way. An item someone waits on never lingers: it ends a linger at
    #: once, and a batch it starts is committed at once. Nor does a lane linger while a full
    #: batch is queued.
    linger_s: float = 0.0
    #: The same for the event lane. Fire-and-forget events are its bulk, and each batch has
    #: a fixed cost of ~1.4 ms of the writer's CPU and GIL time (DuckDB's Python layer,
    #: the commit) taken from the serving thread: at 5 ms that was a fifth of a core under
    #: the API's load. 20 ms keeps it to ~50 batches a second while an event still reaches
    #: the disk within ~50 ms of being emitted (p99), which bounds what a crash can lose
    #: (docs/BENCHMARKS.md sections 6 and 7).
    event_linger_s: float = 0.02
    #: Queue length above which fire-and-forget events are dropped (and counted).
    max_queue: int = 1_000_000
    #: Idle time after which the writer checkpoints if anything was committed since.
    idle_checkpoint_s: float = 5.0
    #: How often a failed batch is retried on a transaction conflict before it fails.
    conflict_retries: int = 3

    def duckdb_config(self) -> dict[str, str | bool | int | float | list[str]]:
        """The ``config`` mapping for ``duckdb.connect``."""
        return {
            "memory_limit": self.memory_limit,
            "threads": str(self.threads),
            "checkpoint_threshold": self.checkpoint_threshold,
        }

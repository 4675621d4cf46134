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
    threads: int = 2
    #: WAL size that triggers DuckDB's automatic checkpoint inside a COMMIT, per file. Each
    #: stalls that file's writes for 40-130 ms here (a checkpoint on another connection stalls
    #: them just the same), which is why events have a file of their own; 2-4 MB gave no
    #: better ack p99 under load than DuckDB's 16 MB.
    checkpoint_threshold: str = "16MB"
    #: Most rows (events plus records) committed in one transaction.
    max_batch_rows: int = 5000
    #: How long the main lane gathers work after a first item nobody waits on, in seconds.
    #: 0 commits as soon as the queue is empty: batches then grow on their own while a commit
    #: (an fsync) is under way. A batch that starts with an item someone waits on is committed
    #: at once; such an item arriving during a linger waits for the rest of it.
    linger_s: float = 0.0
    #: The same for the event lane. Fire-and-forget events are its bulk, and each batch costs
    #: the serving threads a wake-up and some GIL time: gathering 5 ms of them per commit
    #: took ~0.5 ms off the API's p99 (docs/BENCHMARKS.md section 7).
    event_linger_s: float = 0.005
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

"""Counters and timestamps of the writer, for ``/ready``, ``/metrics`` and the console."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Protocol


class _Sized(Protocol):
    @property
    def n_events(self) -> int: ...

    @property
    def n_rows(self) -> int: ...


@dataclass(slots=True)
class WriterStats:
    """Written by the writer thread only, except ``dropped`` (producers; approximate).

    ``busy_since`` is the monotonic start of the batch being written (``None`` when idle): a
    value that keeps growing means the writer is stuck even though its thread is alive.
    """

    events_written: int = 0
    rows_written: int = 0
    batches: int = 0
    dropped: int = 0
    failed_items: int = 0
    #: commits the storage refused (disk full, read-only), first tries and retries of a held
    #: batch together
    storage_failures: int = 0
    checkpoints: int = 0
    #: checkpoints due and not run: the disk lacked room, a batch was held, or DuckDB refused
    checkpoints_skipped: int = 0
    commits_since_checkpoint: int = 0
    last_batch_rows: int = 0
    last_commit_s: float = 0.0
    max_commit_s: float = 0.0
    last_commit_wall: float | None = None
    last_commit_mono: float | None = None
    busy_since: float | None = None

    def committed(self, batch: _Sized, seconds: float) -> None:
        """Record one committed batch that took ``seconds`` to write."""
        self.events_written += batch.n_events
        self.rows_written += batch.n_rows
        self.batches += 1
        self.commits_since_checkpoint += 1
        self.last_batch_rows = batch.n_rows
        self.last_commit_s = seconds
        self.max_commit_s = max(self.max_commit_s, seconds)
        self.last_commit_wall = time.time()
        self.last_commit_mono = time.monotonic()

    def checkpointed(self) -> None:
        """Record one successful ``CHECKPOINT``."""
        self.checkpoints += 1
        self.commits_since_checkpoint = 0

    @classmethod
    def merged(cls, parts: Iterable[WriterStats]) -> WriterStats:
        """One view of several writers' stats: counts add up, the latest commit's figures
        and the longest stall win."""
        parts = list(parts)
        out = cls()
        for f in fields(cls):
            if f.type == "int":
                setattr(out, f.name, sum(getattr(p, f.name) for p in parts))
        out.max_commit_s = max((p.max_commit_s for p in parts), default=0.0)
        committed = [p for p in parts if p.last_commit_mono is not None]
        if committed:
            latest = max(committed, key=lambda p: p.last_commit_mono or 0.0)
            out.last_batch_rows = latest.last_batch_rows
            out.last_commit_s = latest.last_commit_s
            out.last_commit_wall = latest.last_commit_wall
            out.last_commit_mono = latest.last_commit_mono
        busy = [p.busy_since for p in parts if p.busy_since is not None]
        out.busy_since = min(busy, default=None)
        return out

    def stuck_for(self, now: float | None = None) -> float:
        """Seconds the current batch has been running (0 when idle)."""
        started = self.busy_since
        return 0.0 if started is None else (now or time.monotonic()) - started

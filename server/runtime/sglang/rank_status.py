"""The plugin's reports of every data-parallel rank, read by the adapter and merged.

With ``dp_size > 1`` each rank's scheduler writes its own ``status`` and ``placement`` files
(``control.rank_file``); the adapter reads them all (mtime-cached) and merges them into the one
engine view the rest of the server knows: queues and running batches side by side, KV pools and
counters summed, the control version the *slowest* rank applied (a change is in force only once
every rank has it). With one rank there is one file of each and nothing is merged. Pure Python;
no SGLang import.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from agentconsole.server.runtime.sglang.control import (
    PLACEMENT_FILE,
    STATUS_FILE,
    CachedJsonFile,
    marker_files,
    rank_file,
)
from agentconsole.server.runtime.sglang.status import Placement, SchedulerStatus

T = TypeVar("T")


def rank_ids(ranks: int) -> list[int | None]:
    """The rank of each file: ``[None]`` (unsuffixed names) without data parallelism."""
    return [None] if ranks <= 1 else list(range(ranks))


def merge_statuses(statuses: Sequence[SchedulerStatus]) -> SchedulerStatus:
    """One status for the whole engine (see the module docstring); ``statuses`` not empty.
    Waits are aligned to the newest report, so ``queued_calls`` ages them correctly."""
    if len(statuses) == 1:
        return statuses[0]
    newest = max(s.written_at for s in statuses)
    merged = SchedulerStatus(
        pid=statuses[0].pid,
        written_at=newest,
        control_version=min(s.control_version for s in statuses),
        policy=statuses[0].policy,
        paused=all(s.paused for s in statuses),
        kv_bytes_per_token=max(s.kv_bytes_per_token for s in statuses),
        last_error=next((s.last_error for s in statuses if s.last_error), ""),
    )
    for s in statuses:
        lag = newest - s.written_at
        merged.queued += [dataclasses.replace(q, waited_s=q.waited_s + lag) for q in s.queued]
        merged.running += s.running
        for name in (
            "kv_used_tokens",
            "kv_capacity_tokens",
            "kv_evictable_tokens",
            "batch_slots",
            "host_used_tokens",
            "host_capacity_tokens",
            "evicted_tokens",
            "preemptions",
            "prefill_deferrals",
            "chunk_caps",
            "kv_room_unknown",
            "keys_reused",
            "keys_computed",
            "errors",
            "late_controls",  # tp > 1: any rank group's late control read
        ):
            setattr(merged, name, getattr(merged, name) + getattr(s, name))
        merged.busy_s += s.busy_s
        for program, tokens in s.retained_tokens.items():
            merged.retained_tokens[program] = merged.retained_tokens.get(program, 0) + tokens
        for tenant, seconds in s.tenant_service_s.items():
            merged.tenant_service_s[tenant] = merged.tenant_service_s.get(tenant, 0.0) + seconds
    # eviction passes are numbered per rank: telemetry reads them per rank, never merged
    return merged


def merge_placements(placements: Sequence[Placement]) -> Placement:
    """Each program's largest resident context on any rank (the oldest sweep's time: a reader
    comparing it with a context's time must not take a stale rank for a fresh one)."""
    if len(placements) == 1:
        return placements[0]
    programs: dict[str, tuple[int, int]] = {}
    for placement in placements:
        for program, found in placement.programs.items():
            if found[0] > programs.get(program, (0, 0))[0]:
                programs[program] = found
    return Placement(min(p.written_at for p in placements), programs)


class _ParsedFile(Generic[T]):
    """One rank's file, parsed once per version: serve reads the status up to 20 times a
    second (its queue reads, the console, snapshots) and a status lists every queued request
    (2 ms to parse at 4,000). Every reader gets the same object until the file changes, so
    readers must not change it (none does)."""

    def __init__(self, file: CachedJsonFile, parse: Callable[[dict[str, Any]], T]) -> None:
        self.file = file
        self.parse = parse
        self._data: dict[str, Any] | None = None
        self._parsed: T | None = None

    def read(self, now: float) -> T | None:
        """The file's content, parsed (None: missing, unreadable or malformed)."""
        data, _ = self.file.poll(now)
        if data is not self._data:
            try:
                parsed = self.parse(data) if data is not None else None
            except (TypeError, ValueError, IndexError):
                parsed = None
            self._data, self._parsed = data, parsed
        return self._parsed


def _read_each(files: Sequence[_ParsedFile[T]]) -> list[T | None]:
    """Each file's content, parsed (None: missing, unreadable or malformed)."""
    now = time.monotonic()
    return [f.read(now) for f in files]


def clear_reports(state_dir: Path, ranks: int) -> None:
    """Remove what an earlier engine's plugin left in ``state_dir`` (each rank's status and
    placement, the markers): read as this engine's, they would pass the start-up check before
    its plugin runs and acknowledge control versions it never applied."""
    for rank in rank_ids(ranks):
        for name in (STATUS_FILE, PLACEMENT_FILE):
            (state_dir / rank_file(name, rank)).unlink(missing_ok=True)
    for marker in marker_files(state_dir):
        marker.unlink(missing_ok=True)


class RankFiles:
    """The ``status`` and ``placement`` files of every rank of one engine."""

    def __init__(self, state_dir: Path, ranks: int) -> None:
        ids = rank_ids(ranks)
        self._status = [
            _ParsedFile(
                CachedJsonFile(state_dir / rank_file(STATUS_FILE, r), min_interval_s=0.0),
                SchedulerStatus.from_json,
            )
            for r in ids
        ]
        self._placement = [
            _ParsedFile(
                CachedJsonFile(state_dir / rank_file(PLACEMENT_FILE, r), min_interval_s=0.2),
                Placement.from_json,
            )
            for r in ids
        ]
        #: the last merge and the ranks' statuses it was made of (merged again on a change)
        self._merged: tuple[list[SchedulerStatus], SchedulerStatus] | None = None

    def statuses(self) -> list[SchedulerStatus | None]:
        """Each rank's latest status, in rank order (None: not written yet, or unreadable)."""
        return _read_each(self._status)

    def status(self) -> SchedulerStatus | None:
        """The engine's merged status; None until every rank has reported. Shared by every
        reader until a rank's file changes: read it, never change it."""
        statuses = self.statuses()
        present = [s for s in statuses if s is not None]
        if len(present) != len(statuses):
            return None
        last = self._merged
        if last is not None and all(a is b for a, b in zip(last[0], present, strict=True)):
            return last[1]
        merged = merge_statuses(present)
        self._merged = (present, merged)
        return merged

    def placements(self) -> list[Placement | None]:
        """Each rank's latest placement sweep, in rank order (None before its first)."""
        return _read_each(self._placement)

    def placement(self) -> Placement | None:
        """The merged placement of the ranks that swept (None before any did)."""
        present = [p for p in self.placements() if p is not None]
        return merge_placements(present) if present else None

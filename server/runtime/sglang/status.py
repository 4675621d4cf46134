"""What the plugin reports from inside SGLang's scheduler: ``status.json``, ``placement.json``
and their reading.

The plugin writes a :class:`SchedulerStatus` a few times a second (and at once after applying a
control change); the adapter turns it into the ``RuntimeSnapshot`` the server shows and its
engine events (evictions, busy time). :class:`Placement` is written after each placement
sweep (at most once a second). Queued and
running entries are small lists rather than objects to keep the file cheap to write on every
loop pass of a busy scheduler. Pure Python; no SGLang import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from agentconsole.scheduler.runtime import QueuedCall, RunningCall, TierUsage


# QueuedEntry and RunningEntry are not frozen: a status lists every queued request ten times a
# second, and a frozen dataclass's constructor costs four times a plain one's; treat them as
# values all the same (nothing here changes one in place)
@dataclass(slots=True)
class QueuedEntry:
    rid: str
    program_id: str
    tenant: str
    tier: int  # fairness tier (``ordering``): 0-3 the guard's, 4 demoted, 5 untracked
    key: float  # policy key (lower runs first)
    waited_s: float
    prompt_tokens: int = 0  # what the call needs admitted (its whole prompt, before hits)
    #: output tokens it holds already: a call retracted (by an operator's preempt, or by SGLang
    #: under memory pressure) waits with its output so far, and resumes from it
    generated: int = 0


@dataclass(slots=True)
class RunningEntry:
    rid: str
    program_id: str
    tenant: str
    context_tokens: int
    generated: int
    running_s: float


@dataclass(slots=True)
class SchedulerStatus:
    pid: int = 0
    written_at: float = 0.0  # wall clock
    control_version: int = 0  # the last control.json version the plugin applied
    policy: str = ""
    paused: bool = False
    queued: list[QueuedEntry] = field(default_factory=list)
    running: list[RunningEntry] = field(default_factory=list)
    kv_used_tokens: int = 0
    kv_capacity_tokens: int = 0
    kv_evictable_tokens: int = 0
    kv_bytes_per_token: int = 0
    #: requests the scheduler runs at once (SGLang's ``max_running_requests``)
    batch_slots: int = 0
    retained_tokens: dict[str, int] = field(default_factory=dict)  # program -> kept, its own
    tenant_service_s: dict[str, float] = field(default_factory=dict)
    #: HiCache's host tier (GPU only; zero without HiCache)
    host_used_tokens: int = 0
    host_capacity_tokens: int = 0
    #: seconds of forward passes since the scheduler started (the engine's busy time)
    busy_s: float = 0.0
    #: tokens evicted from the device radix cache since start, and the latest eviction
    #: passes as ``[seq, wall time, tokens]`` (``plugin_telemetry.EvictionLog``)
    evicted_tokens: int = 0
    evictions: list[list[float]] = field(default_factory=list)
    preemptions: int = 0
    #: passes that decoded while a worse-ranked prefill waited (``composition``), since start
    prefill_deferrals: int = 0
    #: passes whose in-flight chunk shrank to let outranking waiting requests in
    chunk_caps: int = 0
    #: passes whose KV room SGLang did not show (the chunk cap counted slots alone); stays 0
    kv_room_unknown: int = 0
    #: request keys the ordering took from the last passes (``keymemo``) and computed, since
    #: start: how much of each pass's ranking was reused
    keys_reused: int = 0
    keys_computed: int = 0
    errors: int = 0
    last_error: str = ""
    #: scheduler loop passes since start and their recent rate (tensor parallelism only: the
    #: control writer plans the pass its ranks switch at from them, ``control.apply_step``)
    step: int = 0
    steps_per_s: float = 0.0
    #: control versions this scheduler read after the pass they were due at (tensor
    #: parallelism: its ranks may have disagreed for a few passes; should stay 0)
    late_controls: int = 0

    def to_json(self) -> dict[str, Any]:
        """The file's JSON: a shallow read of the fields (it shares this status's dicts and
        lists: serialise it at once), entries as plain rows. Not
        ``asdict``: its deep copy of every queued entry was a third of what publishing cost
        the scheduler 10 times a second (py-spy, CPU seed-mix run)."""
        data = {name: getattr(self, name) for name in _STATUS_FIELDS}
        data["queued"] = list(map(_queued_row, self.queued))  # tuples: JSON arrays
        data["running"] = list(map(_running_row, self.running))
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SchedulerStatus:
        """Inverse of :meth:`to_json`; raises ``TypeError``/``ValueError`` on a bad file."""
        plain = {k: v for k, v in data.items() if k not in ("queued", "running")}
        status = cls(**plain)
        status.queued = [QueuedEntry(*row) for row in data.get("queued", [])]
        status.running = [RunningEntry(*row) for row in data.get("running", [])]
        return status

    def queued_calls(self, now: float) -> tuple[QueuedCall, ...]:
        """The waiting queue in run order, waits advanced to ``now`` (wall clock)."""
        age = max(now - self.written_at, 0.0)
        return tuple(
            QueuedCall(q.rid, q.program_id, q.tenant, q.key, q.waited_s + age) for q in self.queued
        )

    def running_calls(self) -> tuple[RunningCall, ...]:
        return tuple(
            RunningCall(r.rid, r.program_id, r.tenant, r.context_tokens, r.generated, r.running_s)
            for r in self.running
        )

    def device_tier(self) -> TierUsage:
        return TierUsage(
            self.kv_used_tokens,
            self.kv_capacity_tokens,
            self.kv_used_tokens * self.kv_bytes_per_token,
        )

    def host_tier(self) -> TierUsage | None:
        """HiCache's host tier (None without HiCache)."""
        if self.host_capacity_tokens <= 0:
            return None
        return TierUsage(
            self.host_used_tokens,
            self.host_capacity_tokens,
            self.host_used_tokens * self.kv_bytes_per_token,
        )


_STATUS_FIELDS = tuple(f.name for f in fields(SchedulerStatus))
#: an entry's fields in order, read in C (a status lists every queued request)
_queued_row = attrgetter(*(f.name for f in fields(QueuedEntry)))
_running_row = attrgetter(*(f.name for f in fields(RunningEntry)))


@dataclass(frozen=True, slots=True)
class Placement:
    """``placement.json``: the tokens of each tracked program's last context resident on the
    device, and how many of them are its own (the exclusive suffix of its radix path; the rest
    is a prefix other sequences share). Written by the plugin after each placement sweep."""

    written_at: float = 0.0  # wall clock
    #: program id -> (resident tokens, private tokens)
    programs: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "written_at": self.written_at,
            "programs": {k: list(v) for k, v in self.programs.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Placement:
        """Inverse of :meth:`to_json`; raises ``TypeError``/``ValueError`` on a bad file."""
        programs = {
            str(k): (int(v[0]), int(v[1])) for k, v in dict(data.get("programs", {})).items()
        }
        return cls(float(data.get("written_at", 0.0)), programs)

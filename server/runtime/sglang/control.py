"""Live control of the plugin inside SGLang's scheduler process, through a small state folder.

The adapter (server process) and the plugin (spawned scheduler process) share one directory,
whose path reaches the scheduler in the environment variable ``AGENTCONSOLE_SGLANG_STATE_DIR``
(inherited when SGLang spawns it). Three kinds of files, each replaced atomically
(write to a temporary name, then ``os.replace``), so a reader never sees half a file:

* ``control.json`` — written by the adapter: policy name, drain flag, operator boosts,
  re-prioritised tickets, preempt requests, tool-wait retention hints, fairness and preemption
  settings, and a ``version`` that grows by one with every change.
* ``status.json`` — written by the plugin a few times a second: the waiting queue in policy
  order, the running batch, KV use, per-tenant service and the control ``version`` it applied
  (the adapter waits on that to confirm a change reached the scheduler).
* ``placement.json`` — written by the plugin at most once a second: for each program it tracks,
  the tokens of its last context still resident on the device (``status.Placement``).
* ``steps.jsonl`` — only while ``record_steps`` is on (calibration): one line per engine step
  with its composition and timing.
* with several data-parallel ranks (``dp_size > 1``) each rank's scheduler writes its own
  ``status``, ``placement`` and ``steps`` files, named by :func:`rank_file`
  (``status.rank1.json``); ``control.json`` stays shared (every rank applies the same
  settings). With one rank the names are unchanged.
* with tensor parallelism (``tp_size > 1``) every rank's scheduler must take the same decisions
  at the same step, so a control change is not applied when a rank reads it but at the loop
  pass named in ``apply_at_step`` (per status file: each data-parallel group counts its own
  passes), which the writer puts a little ahead of the step the group last reported
  (:func:`apply_step`), or two passes after a request sent after the write arrived; only
  tensor rank 0 writes the status, placement and steps files (``lockstep``).
* ``plugin-<pid>.json`` — the marker the plugin's policy writes when SGLang constructs it in a
  scheduler process: proof that the plugin is active where it must be (SGLang only logs plugin
  load failures).

Why files rather than a socket or SGLang RPC: the scheduler loop is synchronous and owned by
SGLang; a ``stat`` per loop pass (rate-limited, with mtime caching) costs microseconds and
needs no thread, no port and no change to SGLang's message types, and the folder doubles as a
debugging record. Pure Python; no SGLang import.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

STATE_DIR_ENV = "AGENTCONSOLE_SGLANG_STATE_DIR"
CONTROL_FILE = "control.json"
STATUS_FILE = "status.json"
STEPS_FILE = "steps.jsonl"
PLACEMENT_FILE = "placement.json"
MARKER_PREFIX = "plugin-"


def rank_file(name: str, rank: int | None) -> str:
    """The file ``name`` of data-parallel ``rank`` (None: SGLang runs without data
    parallelism, and the name is ``name`` itself): ``status.json`` -> ``status.rank1.json``."""
    if rank is None:
        return name
    stem, dot, suffix = name.partition(".")
    return f"{stem}.rank{rank}{dot}{suffix}"


@dataclass(frozen=True, slots=True)
class RetentionHint:
    """A tool-wait decision for a program's last context: ``keep`` until ``until`` (wall clock),
    or ``drop`` / ``offload`` (evict first). ``seq`` tells a repeated hint from a new one."""

    action: str
    until: float
    seq: int


@dataclass(slots=True)
class ControlState:
    version: int = 0
    policy: str = "cp-cache"
    paused: bool = False
    #: program id -> operator boost (replaces the boost in that program's tickets)
    boosts: dict[str, float] = field(default_factory=dict)
    #: call id -> ticket params (``CallTicket.to_params``) replacing the submitted ticket
    tickets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: call id -> wall time the operator preempted it
    preempted: dict[str, float] = field(default_factory=dict)
    retention: dict[str, RetentionHint] = field(default_factory=dict)
    #: ``FairnessConfig`` fields (``tenant_weights`` as a dict)
    fairness: dict[str, Any] = field(default_factory=dict)
    #: ``PreemptionRule`` fields
    preemption: dict[str, Any] = field(default_factory=dict)
    #: ``PrefillDeferral`` fields (``max_decode_passes``; 0 turns it off)
    deferral: dict[str, Any] = field(default_factory=dict)
    #: calibration: the plugin appends every engine step to ``steps.jsonl``
    record_steps: bool = False
    #: wall time of the write (a lockstep plugin's decision clock never runs behind it)
    written_at: float = 0.0
    #: the newest version a caller waits to see acknowledged in ``status.json`` (an operator
    #: action): the plugin writes its status at once on applying it. The changes written on
    #: every call (tool-wait hints, re-ranks, forgetting an ended call) wait for none and
    #: show at the next periodic write (a status lists the whole queue: long under load)
    ack_version: int = 0
    #: status file name -> the loop pass from which the schedulers writing it apply this
    #: version; only read with tensor parallelism (``lockstep``), where every rank must switch
    #: at the same pass. Empty: apply when read (tp=1, or no status to plan from yet)
    apply_at_step: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["retention"] = {k: asdict(v) for k, v in self.retention.items()}
        return data

    @classmethod
    def from_options(cls, extra: Mapping[str, Any]) -> ControlState:
        """The initial state a runtime's options ask for (``RuntimeOptions.extra``: the
        ``fairness``, ``preemption`` and ``deferral`` settings, each a dict of fields)."""
        return cls(
            fairness=dict(extra.get("fairness") or {}),
            preemption=dict(extra.get("preemption") or {}),
            deferral=dict(extra.get("deferral") or {}),
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ControlState:
        """Inverse of :meth:`to_json`; unknown keys are ignored (versions may differ)."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["retention"] = {
            str(k): RetentionHint(str(v["action"]), float(v["until"]), int(v["seq"]))
            for k, v in dict(data.get("retention", {})).items()
        }
        return cls(**kwargs)


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``data`` as JSON in one step (temporary file + ``os.replace``)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # one string, not ``json.dump``: that streams through the pure-Python encoder, and
            # the plugin writes its status (every queued request) ten times a second
            fh.write(json.dumps(data, separators=(",", ":")))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class CachedJsonFile:
    """Reads a JSON file again only when its mtime or size changed, at most every
    ``min_interval_s`` (the plugin polls it on every scheduler loop pass)."""

    __slots__ = ("_checked", "_data", "_sig", "min_interval_s", "path")

    def __init__(self, path: Path, min_interval_s: float = 0.02) -> None:
        self.path = path
        self.min_interval_s = min_interval_s
        self._checked = -1e300
        self._sig: tuple[int, int, int] | None = None
        self._data: dict[str, Any] | None = None

    def poll(self, now: float, *, force: bool = False) -> tuple[dict[str, Any] | None, bool]:
        """(content, changed since the previous call). ``now`` is any monotonic clock;
        ``force`` looks at the file even if it was looked at less than the interval ago."""
        if not force and now - self._checked < self.min_interval_s:
            return self._data, False
        self._checked = now
        try:
            st = os.stat(self.path)
        except OSError:
            return self._data, False
        # the inode too: each write replaces the file, and two writes of the same size within
        # the filesystem's mtime granularity must not look like one (ranks would disagree)
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        if sig == self._sig:
            return self._data, False
        data = read_json(self.path)
        if data is None:  # replaced between stat and read: try again next time
            return self._data, False
        self._sig, self._data = sig, data
        return data, True


#: a control change is applied this long (in the group's own loop passes, at its reported
#: rate) after the writer's newest view of the group, plus ``_LEAD_MIN_STEPS``: the time every
#: rank needs to see the new file (ranks poll it on every pass and move within one pass of
#: each other, since each pass starts with SGLang's broadcast of the received requests)
LEAD_S = 0.25
_LEAD_MIN_STEPS = 2
#: writes closer than this share their passes (a burst: one operator action, several files)
BURST_S = 0.02


def apply_step(step: int, steps_per_s: float, age_s: float) -> int:
    """The loop pass at which a group that reported pass ``step`` ``age_s`` seconds ago,
    running ``steps_per_s`` passes a second, applies a control change written now."""
    rate = steps_per_s if math.isfinite(steps_per_s) and steps_per_s > 0 else 0.0
    ahead = rate * (max(age_s, 0.0) + LEAD_S)
    return step + math.ceil(min(ahead, 1e9)) + _LEAD_MIN_STEPS


def plan_apply_steps(
    state_dir: Path, wall: float, previous: ControlState | None = None
) -> dict[str, int]:
    """``apply_at_step`` for a control change written at ``wall``: one entry per status
    file that reports a loop pass (only lockstep plugins do; the others apply when they
    read). ``previous``: the version this one replaces; written less than ``BURST_S`` before,
    its passes are kept (a rank may never see a version replaced that fast, so it must not
    apply before its successor), and a group's pass never goes back."""
    burst = previous is not None and 0 <= wall - previous.written_at < BURST_S
    plan: dict[str, int] = {}
    for path in sorted(state_dir.glob("status*.json")):
        data = read_json(path)
        if data is None or not isinstance(data.get("step"), int) or data["step"] <= 0:
            continue
        age = wall - float(data.get("written_at", wall))
        step = apply_step(data["step"], float(data.get("steps_per_s", 0.0)), age)
        before = previous.apply_at_step.get(path.name) if previous is not None else None
        if before is not None and (burst or before > step):
            step = before
        plan[path.name] = step
    return plan


class ControlWriter:
    """The adapter's side of ``control.json``: keeps the state, bumps ``version``, writes."""

    def __init__(self, state_dir: Path, initial: ControlState | None = None) -> None:
        self.path = state_dir / CONTROL_FILE
        self.state = initial or ControlState()
        self.write()

    def write(self, *, ack: bool = False) -> int:
        """Bump the version, stamp the write time and the pass each lockstep rank group
        applies it at, and write the state; returns the new version. ``ack``: the caller
        will wait for the version in ``status.json`` (``ControlState.ack_version``)."""
        previous = ControlState(written_at=self.state.written_at)
        previous.apply_at_step = self.state.apply_at_step
        self.state.version += 1
        if ack:
            self.state.ack_version = self.state.version
        self.state.written_at = time.time()
        self.state.apply_at_step = plan_apply_steps(
            self.path.parent, self.state.written_at, previous
        )
        write_json_atomic(self.path, self.state.to_json())
        return self.state.version


def marker_files(state_dir: Path) -> list[Path]:
    """The plugin markers in ``state_dir`` (one per scheduler process that built the policy)."""
    return sorted(state_dir.glob(f"{MARKER_PREFIX}*.json"))

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
  tensor rank 0 writes the status, placement and steps files (``lockstep``). A rank reads the
  file once a pass, so a version replaced within a pass may be seen by one rank and not by
  another: each write also carries the earlier versions not yet surely past their pass
  (``ControlState.earlier``, as changes against the newest; :func:`earlier_versions`), so every
  rank holds every version before its pass, whichever of them it happened to read.
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
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from agentconsole.scheduler.policies import DEFAULT_POLICY

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
    or ``recompute`` / ``offload`` (evict first), or ``release``; any other action is refused by
    the retention marks. ``seq`` tells a repeated hint from a new one."""

    action: str
    until: float
    seq: int


@dataclass(slots=True)
class ControlState:
    version: int = 0
    policy: str = DEFAULT_POLICY
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
    #: the earlier versions still pending when this one was written, oldest first, each as
    #: its changes against this one (:func:`earlier_versions`; :meth:`earlier_state` rebuilds
    #: it): a lockstep rank that never read one of them still applies it at its pass. Only
    #: the file carries them (a writer's own state keeps this empty); absent in older files
    earlier: list[dict[str, Any]] = field(default_factory=list)

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
        kwargs["retention"] = _hints(data.get("retention", {}))
        earlier = data.get("earlier")
        kwargs["earlier"] = (
            [e for e in earlier if isinstance(e, dict)] if isinstance(earlier, list) else []
        )
        return cls(**kwargs)

    def earlier_state(self, entry: Mapping[str, Any]) -> ControlState:
        """The earlier version ``entry`` of :attr:`earlier` describes, whole: this state
        with the entry's own fields and changes (the maps it leaves alone are shared)."""
        known = _STATE_FIELDS
        changes: dict[str, Any] = {
            k: v for k, v in entry.items() if k in known and k not in _KEYED and k != "earlier"
        }
        sets, drops = entry.get("set") or {}, entry.get("drop") or {}
        for name in _KEYED:
            put, gone = sets.get(name), drops.get(name)
            if not put and not gone:
                continue
            merged = dict(getattr(self, name))
            merged.update(_hints(put or {}) if name == "retention" else dict(put or {}))
            for key in gone or ():
                merged.pop(key, None)
            changes[name] = merged
        return replace(self, earlier=[], **changes)


def _hints(data: Any) -> dict[str, RetentionHint]:
    return {
        str(k): RetentionHint(str(v["action"]), float(v["until"]), int(v["seq"]))
        for k, v in dict(data).items()
    }


_STATE_FIELDS = frozenset(f.name for f in fields(ControlState))
#: what an entry of ``ControlState.earlier`` always carries whole (small, and its own)
_OWN = ("version", "written_at", "ack_version", "apply_at_step")
#: the maps an entry carries as changes against the newest state, key by key (``set``: the
#: entry's value where it differs, ``drop``: keys the entry lacks); any other field that
#: differs from the newest's is carried whole
_KEYED = ("boosts", "tickets", "preempted", "retention")
_NOT_WHOLE = frozenset((*_OWN, *_KEYED, "earlier", "set", "drop"))
_MISSING: Any = object()


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
#: writes closer than this share their passes (a burst: one operator action, several files),
#: while those stay at least half the lead ahead (writes that keep coming closer than this
#: must not keep a pass the group has reached)
BURST_S = 0.02


def apply_step(step: int, steps_per_s: float, age_s: float, lead_s: float = LEAD_S) -> int:
    """The loop pass at which a group that reported pass ``step`` ``age_s`` seconds ago,
    running ``steps_per_s`` passes a second, applies a control change written now
    (``lead_s`` ahead of where it is now, plus ``_LEAD_MIN_STEPS``)."""
    rate = steps_per_s if math.isfinite(steps_per_s) and steps_per_s > 0 else 0.0
    ahead = rate * (max(age_s, 0.0) + lead_s)
    return step + math.ceil(min(ahead, 1e9)) + _LEAD_MIN_STEPS


#: an earlier version stays in the file until every group it is planned for has reported a
#: pass this far past its own (the reporting rank is at least there, every other rank at most
#: one pass behind it: all of them have read the file for every pass up to the version's)
_SETTLED_STEPS = 3
#: at most this many earlier versions ride along (the oldest go first: written many passes
#: ago at any write rate the engine sees, every rank has read them already)
MAX_EARLIER = 32


#: status file name -> (loop pass, passes a second, written at; None: not said)
Reported = Mapping[str, tuple[int, float, float | None]]


def reported_steps(state_dir: Path) -> dict[str, tuple[int, float, float | None]]:
    """What every group that reports a loop pass (only lockstep plugins do) last reported
    (``Reported``)."""
    found: dict[str, tuple[int, float, float | None]] = {}
    for path in sorted(state_dir.glob("status*.json")):
        data = read_json(path)
        if data is None or not isinstance(data.get("step"), int) or data["step"] <= 0:
            continue
        at = data.get("written_at")
        found[path.name] = (
            data["step"],
            float(data.get("steps_per_s", 0.0)),
            None if at is None else float(at),
        )
    return found


def plan_apply_steps(
    state_dir: Path, wall: float, previous: ControlState | None = None
) -> dict[str, int]:
    """``apply_at_step`` for a control change written at ``wall``: one entry per status
    file that reports a loop pass (only lockstep plugins do; the others apply when they
    read). ``previous``: the version this one replaces; written less than ``BURST_S`` before,
    its passes are kept while still half the lead ahead (one operator action's several
    writes switch together), and a group's pass never goes back."""
    return _plan(reported_steps(state_dir), wall, previous)


def _plan(reported: Reported, wall: float, previous: ControlState | None) -> dict[str, int]:
    burst = previous is not None and 0 <= wall - previous.written_at < BURST_S
    plan: dict[str, int] = {}
    for name, (reported_step, rate, at) in reported.items():
        age = wall - (wall if at is None else at)
        step = apply_step(reported_step, rate, age)
        before = previous.apply_at_step.get(name) if previous is not None else None
        if before is None:
            plan[name] = step
            continue
        # a burst keeps the pass while half the lead ahead: a chain of writes closer than
        # BURST_S must not hold a pass the group is reaching
        if before > step or (burst and before >= apply_step(reported_step, rate, age, LEAD_S / 2)):
            step = before
        plan[name] = step
    return plan


def earlier_versions(
    new: Mapping[str, Any], previous: Mapping[str, Any] | None, reported: Mapping[str, int]
) -> list[dict[str, Any]]:
    """``ControlState.earlier`` of the state ``new`` (its JSON) written over the file content
    ``previous``: that content's own version and the earlier versions it carried, each as
    its changes against ``new``, less those every group has left behind (``reported``:
    status file name -> the pass it reported; ``_SETTLED_STEPS``) and those planned for no
    group (due wherever read). Costs one comparison of the two states' maps and a look at
    the keys each entry or this write changed, not a copy of every version."""
    if previous is None or not _newer(new.get("version"), previous.get("version")):
        return []  # the first write, or a writer that started its count again
    entries = [e for e in previous.get("earlier") or () if isinstance(e, dict)]
    entries.append({k: previous[k] for k in _OWN if k in previous})
    kept = [e for e in entries if _unsettled(e, reported)][-MAX_EARLIER:]
    if not kept:
        return []
    whole = {
        k
        for k in previous.keys() | new.keys()
        if k not in _NOT_WHOLE and previous.get(k, _MISSING) != new.get(k, _MISSING)
    }
    keyed: dict[str, set[str]] = {}
    for name in _KEYED:
        old, now = previous.get(name) or {}, new.get(name) or {}
        if old != now:
            keyed[name] = {
                k for k in old.keys() | now.keys() if old.get(k, _MISSING) != now.get(k, _MISSING)
            }
    return [_rebase(e, previous, new, whole, keyed) for e in kept]


def _newer(version: Any, than: Any) -> bool:
    return isinstance(version, int) and isinstance(than, int) and version > than


def _unsettled(entry: Mapping[str, Any], reported: Mapping[str, int]) -> bool:
    plan = entry.get("apply_at_step")
    if not isinstance(plan, dict):
        return False
    for name, due in plan.items():
        step = reported.get(name)
        if step is None or not isinstance(due, int) or step < due + _SETTLED_STEPS:
            return True
    return False


def _rebase(
    entry: Mapping[str, Any],
    previous: Mapping[str, Any],
    new: Mapping[str, Any],
    whole: set[str],
    keyed: Mapping[str, set[str]],
) -> dict[str, Any]:
    """``entry`` (changes against ``previous``) as changes against ``new``: only the fields
    and keys the entry changed or this write changed can differ."""
    out = {k: entry[k] for k in _OWN if k in entry}
    for name in whole | (entry.keys() - _NOT_WHOLE):
        value = entry[name] if name in entry else previous.get(name, _MISSING)
        if value is not _MISSING and value != new.get(name, _MISSING):
            out[name] = value
    sets, drops = entry.get("set") or {}, entry.get("drop") or {}
    for name in _KEYED:
        put, gone = sets.get(name) or {}, set(drops.get(name) or ())
        keys = put.keys() | gone | keyed.get(name, set())
        if not keys:
            continue
        old, now = previous.get(name) or {}, new.get(name) or {}
        put_now: dict[str, Any] = {}
        gone_now: list[str] = []
        for key in keys:
            value = put[key] if key in put else _MISSING if key in gone else old.get(key, _MISSING)
            if value == now.get(key, _MISSING):
                continue
            if value is _MISSING:
                gone_now.append(key)
            else:
                put_now[key] = value
        if put_now:
            out.setdefault("set", {})[name] = put_now
        if gone_now:
            out.setdefault("drop", {})[name] = sorted(gone_now)
    return out


def stamp(
    state: ControlState, state_dir: Path, previous: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Make ``state`` the next write of the control file in ``state_dir`` whose content is now
    ``previous`` (None: none yet): stamp its write time and the pass each lockstep group
    applies it at, and return the JSON to write, carrying the earlier versions still pending
    (:func:`earlier_versions`)."""
    prior = None
    if previous is not None:
        plan = previous.get("apply_at_step")
        prior = ControlState(
            written_at=float(previous.get("written_at") or 0.0),
            apply_at_step=dict(plan) if isinstance(plan, dict) else {},
        )
    state.written_at = time.time()
    reported = reported_steps(state_dir)
    state.apply_at_step = _plan(reported, state.written_at, prior)
    state.earlier = []
    data = state.to_json()
    data["earlier"] = earlier_versions(data, previous, {k: v[0] for k, v in reported.items()})
    return data


class ControlWriter:
    """The adapter's side of ``control.json``: keeps the state, bumps ``version``, writes."""

    def __init__(self, state_dir: Path, initial: ControlState | None = None) -> None:
        self.path = state_dir / CONTROL_FILE
        self.state = initial or ControlState()
        self._written: dict[str, Any] | None = None  # the file's content, as last written
        self.write()

    def write(self, *, ack: bool = False) -> int:
        """Bump the version, stamp the write time and the pass each lockstep rank group
        applies it at, and write the state with the earlier versions still pending
        (:func:`stamp`); returns the new version. ``ack``: the caller will wait for the
        version in ``status.json`` (``ControlState.ack_version``)."""
        self.state.version += 1
        if ack:
            self.state.ack_version = self.state.version
        data = stamp(self.state, self.path.parent, self._written)
        write_json_atomic(self.path, data)
        self._written = data
        return self.state.version


def marker_files(state_dir: Path) -> list[Path]:
    """The plugin markers in ``state_dir`` (one per scheduler process that built the policy)."""
    return sorted(state_dir.glob(f"{MARKER_PREFIX}*.json"))

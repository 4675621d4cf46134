"""What keeps the plugin's decisions identical on every tensor-parallel rank (``tp_size > 1``).

With tensor parallelism every rank runs its own scheduler over the same requests (rank 0
receives them and broadcasts them at the start of every loop pass), and each must form the
very same batch, or the ranks' collectives hang. SGLang's own scheduling is deterministic; the
plugin must be too, so under tensor parallelism (*lockstep*) it takes its inputs only from what
every rank sees alike:

* **time**: :class:`DecisionClock`, the newest sender wall clock among the requests the
  scheduler has seen (``WireTicket.sent``) and the control version it applied
  (``ControlState.written_at``), never the rank's own clock. Aging, deadlines, residency and
  retention deadlines move when news arrives (a request, a control write), not while the
  engine only drains what it holds; a call never starves for it, since the queue it waits in
  only shrinks then.
* **control**: :class:`ControlGate` holds each ``control.json`` version a rank reads until the
  loop pass the writer planned for its group (``ControlState.apply_at_step``), or until two
  passes after a request sent after the write arrived, whichever is first; loop passes count
  alike on every rank (each pass starts with SGLang's broadcast). A rank reads the file once
  a pass, so two ranks may read different subsets of the versions (one replaced within a
  pass is seen by some ranks only, whatever its age); the file therefore also carries every
  earlier version not yet past its pass (``ControlState.earlier``), and the gate holds those
  it has not held or applied, so each rank holds every version before its pass.
* **tenant share**: credited in tokens computed, not in measured seconds; the preemption cost
  estimates keep their configured values instead of learning from measured step times, and so
  does the decode pass length the prefill deferral's cap counts (``composition.StepComposer``).
* **files**: only tensor (and pipeline) rank 0 writes status, placement and steps files.

Pure Python except :func:`layout`, which reads SGLang's published ranks best effort.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

from agentconsole.server.runtime.sglang import symbols
from agentconsole.server.runtime.sglang.control import ControlState

#: passes after the decision clock reached a control write's time before it applies (one
#: for the news to reach every rank's clock, one for a rank a pass behind to read the file)
_AFTER_NEWS = 2
_HISTORY = 4096  # clock advances remembered (a rank reading control later is late anyway)


@dataclass(frozen=True, slots=True)
class Layout:
    """This scheduler's place among the ranks that share its batches."""

    tp_size: int = 1
    tp_rank: int = 0
    pp_size: int = 1
    pp_rank: int = 0

    @property
    def lockstep(self) -> bool:
        """True when other schedulers must take this one's decisions in step."""
        return self.tp_size * self.pp_size > 1

    @property
    def writer(self) -> bool:
        """True for the one rank of the group that writes the group's files."""
        return self.tp_rank == 0 and self.pp_rank == 0


def layout() -> Layout:
    """This process's tensor/pipeline layout as SGLang published it (one rank if unknown)."""
    try:
        parallel = symbols.load(symbols.PARALLEL)()
        values = [int(getattr(parallel, n)) for n in ("tp_size", "tp_rank", "pp_size", "pp_rank")]
    except Exception:  # not published yet, or another SGLang build
        return Layout()
    return Layout(*values)


class DecisionClock:
    """Wall-clock time as every rank knows it: the newest time it has been told, and the
    loop pass at which it was told each newer time (so every rank can name the pass at which
    the clock first reached a given time, however late it asks)."""

    __slots__ = ("_nows", "_passes", "now")

    def __init__(self) -> None:
        self.now = 0.0
        self._nows: deque[float] = deque(maxlen=_HISTORY)
        self._passes: deque[int] = deque(maxlen=_HISTORY)

    def observe(self, told: float | None, step: int) -> None:
        """Move ``now`` forward to ``told`` (a request's send time, a control write), told
        during loop pass ``step``."""
        if told is not None and told > self.now:
            self.now = told
            if self._passes and self._passes[-1] == step:
                self._nows[-1] = told
            else:
                self._nows.append(told)
                self._passes.append(step)

    def reached_at(self, when: float) -> int | None:
        """The first pass at which ``now`` was at least ``when``: None if it is not yet, 0 if
        that is older than the history kept."""
        if when > self.now:
            return None
        i = bisect.bisect_left(self._nows, when)
        if i == 0 and len(self._nows) == self._nows.maxlen:
            return 0
        return self._passes[i] if i < len(self._passes) else self._passes[-1]


class StepRate:
    """Loop passes per second of this scheduler between two status writes (reported for the
    control writer's plan, never an input of a decision)."""

    __slots__ = ("_last", "per_s")

    def __init__(self) -> None:
        self.per_s = 0.0
        self._last: tuple[int, float] | None = None

    def observe(self, step: int, wall: float) -> None:
        """Pass ``step`` was reached at ``wall``: the rate since the previous call."""
        last = self._last
        self._last = (step, wall)
        if last is not None and wall > last[1]:
            self.per_s = max(step - last[0], 0) / (wall - last[1])


class ControlGate:
    """The control versions one rank has read and not applied yet (``key``: the rank group's
    status file name). A version is due at the pass its ``apply_at_step`` names for the group,
    or ``_AFTER_NEWS`` passes after the decision clock reached its ``written_at`` (a request
    sent after the write has arrived: by then every rank has read the file, which was written
    before that request was sent), whichever comes first. The second bounds the delay on an
    idle engine, whose loop passes come once a second.

    Why every rank applies the same version at every pass, whichever versions it read: each
    rank reads the file at the start of every pass, and the writer plans each version far
    enough ahead that every rank reads the file after the version was written and before
    its pass; every file written until all ranks are past that pass carries the version
    (itself or in ``earlier``, with its own plan and write time). So at each pass every rank
    holds every version due by then that is newer than the one last applied, which is the
    same on every rank (by induction over the passes, as is the decision clock that the
    news rule reads); :meth:`due` takes the newest of those, a function of the versions alone.
    Versions not due yet may be held on one rank and not another; they are not looked at."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._pending: dict[int, ControlState] = {}
        #: the version ``due`` last returned: it and older ones are not held again when a
        #: later file carries them (-1: none yet, or the writer started its count again)
        self._applied = -1
        self.late = 0  # versions read after their pass (ranks may have disagreed)

    def _due_at(self, control: ControlState, clock: DecisionClock) -> float:
        planned = control.apply_at_step.get(self.key)
        if planned is None:
            return 0  # no pass planned for this group (tp=1 writers, start-up): at once
        reached = clock.reached_at(control.written_at) if control.written_at > 0 else None
        return min(planned, reached + _AFTER_NEWS if reached is not None else math.inf)

    def offer(self, control: ControlState, step: int, clock: DecisionClock) -> None:
        """Hold ``control``, read during pass ``step``, and the earlier versions its file
        carries that this rank has neither held nor applied (a version read after its pass
        is due at once, and counted in ``late``)."""
        if control.version < self._applied:
            self._applied = -1  # a writer that started its count again: take its versions
        for entry in control.earlier:
            version = entry.get("version")
            if isinstance(version, int) and version < control.version and self._wants(version):
                self._hold(control.earlier_state(entry), step, clock)
        if self._wants(control.version):
            self._hold(control, step, clock)

    def _wants(self, version: int) -> bool:
        return version > self._applied and version not in self._pending

    def _hold(self, control: ControlState, step: int, clock: DecisionClock) -> None:
        if 0 < self._due_at(control, clock) < step:
            self.late += 1
        self._pending[control.version] = control

    def due(self, step: int, clock: DecisionClock) -> ControlState | None:
        """The newest held version due at pass ``step`` (None: none); it and every older
        version are dropped, so each rank applies the same version at the same pass."""
        if not self._pending:
            return None
        ready = [v for v, c in self._pending.items() if self._due_at(c, clock) <= step]
        if not ready:
            return None
        newest = max(ready)
        control = self._pending[newest]
        for v in [v for v in self._pending if v <= newest]:
            del self._pending[v]
        self._applied = newest
        return control

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
  loop pass the writer planned for its group (``ControlState.apply_at_step``); loop passes
  count alike on every rank (each pass starts with SGLang's broadcast).
* **tenant share**: credited in tokens computed, not in measured seconds; the preemption cost
  estimates keep their configured values instead of learning from measured step times.
* **files**: only tensor (and pipeline) rank 0 writes status, placement and steps files.

Pure Python except :func:`layout`, which reads SGLang's published ranks best effort.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.server.runtime.sglang import symbols
from agentconsole.server.runtime.sglang.control import ControlState

#: weight of the newest interval in the loop-pass rate estimate
_RATE_SMOOTHING = 0.2


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
    """Wall-clock time as every rank knows it: the newest time it has been told."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0

    def observe(self, told: float | None) -> None:
        """Move ``now`` forward to ``told`` (a request's send time, a control write)."""
        if told is not None and told > self.now:
            self.now = told


class StepRate:
    """Loop passes per second of this scheduler, smoothed (reported for the control writer's
    plan, never an input of a decision)."""

    __slots__ = ("_last", "per_s")

    def __init__(self) -> None:
        self.per_s = 0.0
        self._last: tuple[int, float] | None = None

    def observe(self, step: int, wall: float) -> None:
        """Fold in that pass ``step`` was reached at ``wall``."""
        last = self._last
        self._last = (step, wall)
        if last is None or wall <= last[1] or step <= last[0]:
            return
        rate = (step - last[0]) / (wall - last[1])
        self.per_s = (
            rate if self.per_s == 0.0 else self.per_s + _RATE_SMOOTHING * (rate - self.per_s)
        )


class ControlGate:
    """The control versions one rank has read and not applied yet, each due at the pass its
    ``apply_at_step`` names for this rank's group (``key``: the group's status file name)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._pending: dict[int, tuple[int, ControlState]] = {}  # version -> (due, state)
        self.late = 0  # versions read after their pass (ranks may have disagreed)

    def offer(self, control: ControlState, step: int) -> None:
        """Hold ``control``, read during pass ``step``. A version without a pass for this
        group (tp=1, or written before the group reported one) is due at once; one read
        after its pass is due at once too, and counted in ``late``."""
        due = control.apply_at_step.get(self.key, 0)
        if 0 < due < step:
            self.late += 1
        self._pending[control.version] = (due, control)

    def due(self, step: int) -> ControlState | None:
        """The newest held version due at pass ``step`` (None: none); it and every older
        version are dropped, so each rank applies the same version at the same pass."""
        ready = [v for v, (due, _) in self._pending.items() if due <= step]
        if not ready:
            return None
        newest = max(ready)
        control = self._pending[newest][1]
        for v in [v for v in self._pending if v <= newest]:
            del self._pending[v]
        return control

"""The consoles' view of ``GET /v1/operator/door``: the program admission door's counts and
what it learned from finished programs (each tenant's kinds' runs from the door to the end,
which order its line, and each tenant's kinds' peak private context, which sizes a program).

The endpoint shows every tenant's figures, so it is the operator's: a tenant key gets 403.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentconsole.httpclient import jsonread as j


@dataclass(frozen=True, slots=True)
class KindRun:
    """One tenant's kind of program and its learned run from the door to the end."""

    tenant: str
    kind: str
    expected_run_s: float


@dataclass(frozen=True, slots=True)
class LearnedKind:
    """One row of what the door learned: a tenant's kind with its run and its peak (kinds are
    names in their tenant's namespace).

    ``expected_run_s`` is None for a kind whose peak is known but no run (the two are learned
    apart, so one can come without the other); ``peak_tokens`` is None for a kind with a run
    but no peak yet.
    """

    tenant: str
    kind: str
    expected_run_s: float | None
    peak_tokens: float | None


@dataclass(frozen=True, slots=True)
class Door:
    """The door: on or off and its order, its budget for private contexts (None until it is
    sized from the engines' memory, and on a runtime that reports none), the started
    programs' predicted peaks and what they hold now, who waits, and what it learned."""

    enabled: bool
    order: str
    budget_tokens: int | None
    #: of that budget, the room kept for the prefixes the started programs share (0 from a
    #: server that does not say)
    reserved_tokens: int
    predicted_tokens: int
    held_tokens: int
    waiting: int
    waited_total: int
    boundary_parks: int
    runs: tuple[KindRun, ...]
    #: (tenant, kind) -> mean peak private tokens
    peaks: Mapping[tuple[str, str], float]

    @property
    def sized(self) -> bool:
        """Whether the door has a budget (an unsized door admits every program)."""
        return self.budget_tokens is not None

    @property
    def fill(self) -> float | None:
        """Predicted tokens as a share of the budget (may pass 1); None when not sized or
        the budget is 0."""
        if not self.budget_tokens:
            return None
        return self.predicted_tokens / self.budget_tokens

    def learned(self) -> tuple[LearnedKind, ...]:
        """Each tenant's kinds with their run and their peak, by tenant and kind, then the
        kinds with a peak but no run."""
        rows = [
            LearnedKind(r.tenant, r.kind, r.expected_run_s, self.peaks.get((r.tenant, r.kind)))
            for r in sorted(self.runs, key=lambda r: (r.tenant, r.kind))
        ]
        with_run = {(r.tenant, r.kind) for r in self.runs}
        rows += [
            LearnedKind(tenant, kind, None, peak)
            for (tenant, kind), peak in sorted(self.peaks.items())
            if (tenant, kind) not in with_run
        ]
        return tuple(rows)

    @staticmethod
    def parse(data: Any) -> Door:
        """Parse the answer object (a null or missing budget: not sized)."""
        d = j.obj(data)
        budget = j.opt_num(d, "budget_tokens")
        runs = tuple(
            KindRun(j.text(r, "tenant"), j.text(r, "kind"), j.num(r, "expected_run_s"))
            for r in j.objects(d.get("runs"))
        )
        peaks = {
            (j.text(p, "tenant"), j.text(p, "kind")): peak
            for p in j.objects(d.get("peaks"))
            if (peak := j.opt_num(p, "peak_private_tokens")) is not None
        }
        return Door(
            enabled=j.flag(d, "enabled"),
            order=j.text(d, "order", "?"),
            budget_tokens=None if budget is None else int(budget),
            reserved_tokens=int(j.opt_num(d, "reserved_tokens") or 0),
            predicted_tokens=j.integer(d, "predicted_tokens"),
            held_tokens=j.integer(d, "held_tokens"),
            waiting=j.integer(d, "waiting"),
            waited_total=j.integer(d, "waited_total"),
            boundary_parks=j.integer(d, "boundary_parks"),
            runs=runs,
            peaks=peaks,
        )

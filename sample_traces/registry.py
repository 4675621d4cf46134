"""The workload registry: named, seeded trace generators chosen by name.

Every workload is a function ``(n_programs, rate, seed, **params) -> list[TraceProgram]`` that
is deterministic for its arguments (a private ``random.Random(seed)``, no global state) and
returns programs in arrival order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentconsole.sample_traces.format import TraceProgram
from agentconsole.sample_traces.workloads.coding_agent import coding_agent
from agentconsole.sample_traces.workloads.long_coding import long_coding
from agentconsole.sample_traces.workloads.multi_model import multi_model
from agentconsole.sample_traces.workloads.seed_mix import seed_mix
from agentconsole.sample_traces.workloads.two_tenants import two_tenants
from agentconsole.sample_traces.workloads.wide_fanout import wide_fanout


@dataclass(frozen=True, slots=True)
class Workload:
    """A named generator with a one-line summary and the source of its figures."""

    name: str
    summary: str
    build: Callable[..., list[TraceProgram]]

    def parameters(self) -> dict[str, Any]:
        """The tunable keyword parameters with their defaults (beyond n_programs/rate/seed)."""
        sig = inspect.signature(self.build)
        return {name: p.default for name, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY}


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "seed-mix",
            "serial / 4-way fan-out / repair loop, 80K shared prefix, 1% timeouts+cancels "
            "(seed §19)",
            seed_mix,
        ),
        Workload(
            "coding-agent",
            "13-round code repair: 15K tools + 60K repo + 5K issue, ~2K/round (seed §16)",
            coding_agent,
        ),
        Workload(
            "two-tenants",
            "bursty heavy tenant (90%) beside a light one, seed-mix shapes (seed §13)",
            two_tenants,
        ),
        Workload(
            "wide-fanout",
            "LATS-style tree search, fan-out 4-8, discarded branches (Autellix MCTS)",
            wide_fanout,
        ),
        Workload(
            "long-coding",
            "Claude Code / Codex sessions: 17-1500 steps, ~150K context, compaction, subagents "
            "(TraceLab)",
            long_coding,
        ),
        Workload(
            "multi-model",
            "seed-mix with roles: planner/writer on the large model, tool selection, schema "
            "checks and verification may run on a small one (issue 14)",
            multi_model,
        ),
    )
}


def available_workloads() -> list[str]:
    """Names of the registered workloads, in registration order."""
    return list(WORKLOADS)


def generate(
    name: str, n_programs: int, rate: float, seed: int = 0, **overrides: Any
) -> list[TraceProgram]:
    """Generate ``n_programs`` programs of workload ``name`` (``rate`` programs/s, ``seed``).

    ``overrides`` set the workload's keyword parameters (see :meth:`Workload.parameters`).
    Raises ``KeyError`` for an unknown workload and ``ValueError`` for an unknown parameter
    or an invalid value.
    """
    try:
        workload = WORKLOADS[name]
    except KeyError:
        choices = ", ".join(available_workloads())
        raise KeyError(f"unknown workload {name!r}; choose from {choices}") from None
    unknown = sorted(set(overrides) - set(workload.parameters()))
    if unknown:
        raise ValueError(
            f"workload {name!r} has no parameter {', '.join(unknown)}; "
            f"it takes {', '.join(workload.parameters())}"
        )
    return workload.build(n_programs, rate, seed, **overrides)

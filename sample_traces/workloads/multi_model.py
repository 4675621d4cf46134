"""``multi-model``: seed-mix programs whose LLM calls are marked with a role and candidates.

Overview section 9 and issue 14: a planner and a writer need the large model; schema checks,
tool selection and verification may run on a small one. Each program is the seed-mix program
of the same seed and index (same shapes, sizes, tools, arrivals), renamed to this workload,
and every LLM call carries its role and the models it may run on: ``(large,)`` for
``planner``/``writer``, ``(small, large)`` for the rest, so a selector can still send one to
the large model (when the small one is backed up, or the program's KV sits there).

``verifier`` (optional) names a third model, such as a fine-tune of the small one, listed
first for the checking roles (``schema-check``, ``verify``): then a program's calls alternate
between the small model and its fine-tune, which is where cross-model KV sharing can pay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from agentconsole.sample_traces.format import LLMNode, TraceProgram
from agentconsole.sample_traces.workloads.builder import program_id
from agentconsole.sample_traces.workloads.seed_mix import NAME as SEED_MIX
from agentconsole.sample_traces.workloads.seed_mix import seed_mix

NAME = "multi-model"
#: roles that need the large model's quality
LARGE_ROLES = ("planner", "writer")
#: roles a small model may serve
SMALL_ROLES = ("tool-select", "schema-check", "verify")
#: roles a ``verifier`` model, when given, is listed first for
CHECK_ROLES = ("schema-check", "verify")


def multi_model(
    n_programs: int = 20,
    rate: float = 1.0,
    seed: int = 0,
    *,
    large: str = "llama-3.1-70b",
    small: str = "llama-3.1-8b",
    tenants: int = 4,
    mix: Sequence[float] = (1.0, 1.0, 1.0),
    verifier: str | None = None,
) -> list[TraceProgram]:
    """``n_programs`` seed-mix programs (``tenants``, ``mix`` as there) with roles and
    candidate models ``large`` / ``small`` (and ``verifier`` first for the checking roles).
    Raises ``ValueError`` if the names are not distinct or empty, and whatever seed-mix
    raises."""
    names = [large, small, *([verifier] if verifier is not None else [])]
    if not all(names) or len(set(names)) != len(names):
        raise ValueError(f"need distinct model names, got {names}")
    programs = seed_mix(n_programs, rate, seed, tenants=tenants, mix=mix)
    return [
        _marked(p, program_id(NAME, seed, i), large, small, verifier)
        for i, p in enumerate(programs)
    ]


def _marked(
    program: TraceProgram, new_id: str, large: str, small: str, verifier: str | None
) -> TraceProgram:
    """``program`` under ``new_id`` (its private prefix segments renamed with it) with every
    LLM call's role and candidates set."""
    old = f"{program.id}/"
    prefix = tuple(
        replace(s, id=new_id + "/" + s.id.removeprefix(old)) if s.id.startswith(old) else s
        for s in program.prefix
    )
    llm = [n for n in program.nodes if isinstance(n, LLMNode)]
    roles = {n.id: _role(program.shape, k, len(llm), n) for k, n in enumerate(llm)}
    nodes = tuple(
        replace(n, role=roles[n.id], candidates=_candidates(roles[n.id], large, small, verifier))
        if isinstance(n, LLMNode)
        else n
        for n in program.nodes
    )
    assert program.workload == SEED_MIX  # the renaming above relies on seed-mix's ids
    return replace(program, id=new_id, workload=NAME, prefix=prefix, nodes=nodes)


def _role(shape: str, k: int, count: int, node: LLMNode) -> str:
    """The role of the ``k``-th of ``count`` LLM calls of a program of ``shape``: the first
    plans, the last writes the answer (a repair loop's last call verifies the passing tests,
    its patches are written); calls in between pick tools and check their schemas in turn."""
    if k == 0:
        return "planner"
    if shape == "repair":
        return "verify" if k == count - 1 else "writer"
    if k == count - 1:
        return "writer"
    return "tool-select" if k % 2 else "schema-check"


def _candidates(role: str, large: str, small: str, verifier: str | None) -> tuple[str, ...]:
    if role in LARGE_ROLES:
        return (large,)
    if verifier is not None and role in CHECK_ROLES:
        return (verifier, small, large)
    return (small, large)

"""The multi-model workload: seed-mix programs with roles and candidate models."""

from __future__ import annotations

import pytest

from agentconsole.sample_traces.codec import dumps_program, loads_trace, validate_trace
from agentconsole.sample_traces.format import LLMNode
from agentconsole.sample_traces.generator import generate


def test_same_programs_as_seed_mix_with_roles_and_candidates() -> None:
    base = generate("seed-mix", 30, 0.1, seed=3)
    marked = generate("multi-model", 30, 0.1, seed=3, large="L", small="S")
    validate_trace(marked)
    assert loads_trace("\n".join(dumps_program(p) for p in marked)) == marked
    for a, b in zip(base, marked, strict=True):
        assert b.id == a.id.replace("seed-mix", "multi-model")
        assert (b.shape, b.arrival_s, b.tenant) == (a.shape, a.arrival_s, a.tenant)
        assert [p.tokens for p in b.prefix] == [p.tokens for p in a.prefix]
        assert f"{b.id}/task" in {p.id for p in b.prefix}
        llm = [n for n in b.nodes if isinstance(n, LLMNode)]
        assert llm[0].role == "planner"
        assert llm[-1].role == ("verify" if b.shape == "repair" else "writer")
        for node in llm:
            large_only = node.role in ("planner", "writer")
            assert node.candidates == (("L",) if large_only else ("S", "L"))
        # the seed-mix trace itself carries none of it
        assert all(n.role is None and not n.candidates for n in a.nodes if isinstance(n, LLMNode))
    roles = {n.role for p in marked for n in p.nodes if isinstance(n, LLMNode)}
    assert roles == {"planner", "writer", "verify", "tool-select", "schema-check"}


def test_model_names_must_differ() -> None:
    with pytest.raises(ValueError, match="distinct"):
        generate("multi-model", 2, 0.1, large="x", small="x")


def test_candidates_must_not_repeat() -> None:
    with pytest.raises(ValueError, match="repeat"):
        LLMNode(id="n0", prompt_tokens=1, output_tokens=1, candidates=("a", "a"))

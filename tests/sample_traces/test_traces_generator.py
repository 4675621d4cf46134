"""The generator: determinism, DAG validity for any seed and size, parameters, CLI, samples."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentconsole.sample_traces as sample_traces
from agentconsole.sample_traces import (
    WORKLOADS,
    Branch,
    LLMNode,
    Outcome,
    ToolNode,
    available_workloads,
    dumps_program,
    generate,
    load_trace,
    nominal_duration_s,
    parse_program,
    program_to_dict,
    validate_trace,
)
from agentconsole.sample_traces.generator import main

SAMPLES = Path(sample_traces.__file__).parent
MODULE = "agentconsole.sample_traces.generator"


def test_registry_lists_the_workloads() -> None:
    assert available_workloads() == [
        "seed-mix",
        "coding-agent",
        "two-tenants",
        "wide-fanout",
        "long-coding",
        "multi-model",
    ]
    params = WORKLOADS["seed-mix"].parameters()
    assert (
        params["shared_prefix_tokens"]
        + params["tenant_prefix_tokens"]
        + params["task_context_tokens"]
        == 80_000
    )


@pytest.mark.parametrize("name", available_workloads())
def test_same_seed_same_trace_other_seed_other_trace(name: str) -> None:
    first = generate(name, 30, 1.0, 5)
    again = generate(name, 30, 1.0, 5)
    assert [dumps_program(p) for p in first] == [dumps_program(p) for p in again]
    other = generate(name, 30, 1.0, 6)
    assert [p.arrival_s for p in first] != [p.arrival_s for p in other]
    assert [p.nodes for p in first] != [p.nodes for p in other]


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(available_workloads()),
    n=st.integers(0, 12),
    rate=st.floats(0.01, 100.0),
    seed=st.integers(0, 2**40),
)
def test_any_seed_and_size_gives_valid_programs(name: str, n: int, rate: float, seed: int) -> None:
    programs = generate(name, n, rate, seed)
    assert len(programs) == n
    validate_trace(programs)
    arrivals = [p.arrival_s for p in programs]
    assert arrivals == sorted(arrivals)
    for program in programs:
        assert parse_program(program_to_dict(program)) == program  # re-runs every check
        assert program.workload == name
        seen: set[str] = set()
        for node in program.nodes:
            assert set(node.parents) <= seen
            seen.add(node.id)
        life = nominal_duration_s(program)
        if program.cancel_at_s is not None:
            assert 0 < program.cancel_at_s < life
        assert program.deadline_s is not None
        assert program.deadline_s >= life
        final = program.nodes[-1]
        assert isinstance(final, LLMNode)
        assert final.branch is Branch.MAIN


def test_unknown_workload_and_parameter() -> None:
    with pytest.raises(KeyError, match="choose from seed-mix"):
        generate("nope", 1, 1.0)
    with pytest.raises(ValueError, match="has no parameter colour"):
        generate("seed-mix", 1, 1.0, colour="red")


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("seed-mix", {"mix": (1.0, 0.0)}),
        ("seed-mix", {"mix": (0.0, 0.0, 0.0)}),
        ("seed-mix", {"tenants": 0}),
        ("coding-agent", {"rounds": 4}),
        ("two-tenants", {"heavy_share": 1.0}),
        ("two-tenants", {"burst_gap_s": 0.0}),
        ("wide-fanout", {"min_width": 9}),
        ("wide-fanout", {"min_depth": 0}),
    ],
)
def test_bad_parameters_are_value_errors(name: str, overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  (each workload words its own message)
        generate(name, 3, 1.0, 0, **overrides)


@pytest.mark.parametrize("name", available_workloads())
@pytest.mark.parametrize(("n", "rate"), [(-1, 1.0), (1, 0.0)])
def test_bad_sizes_are_value_errors(name: str, n: int, rate: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        generate(name, n, rate)


def test_overrides_take_effect() -> None:
    serial = generate("seed-mix", 30, 1.0, 0, mix=[1, 0, 0], serial_rounds=3, p_timeout=0.0)
    assert {p.shape for p in serial} == {"serial"}
    assert all(sum(isinstance(n, LLMNode) for n in p.nodes) == 3 for p in serial)
    assert all(len(n.attempts) == 1 for p in serial for n in p.nodes if isinstance(n, ToolNode))
    bare = generate(
        "seed-mix",
        30,
        1.0,
        0,
        p_cancel=1.0,
        deadline_slack=None,
        shared_prefix_tokens=0,
        task_context_tokens=0,
    )
    assert all(p.cancel_at_s is not None and p.deadline_s is None for p in bare)
    assert all([s.id for s in p.prefix] == [f"{p.tenant}/profile"] for p in bare)


def test_retries_follow_timeouts_only_when_allowed() -> None:
    programs = generate("seed-mix", 400, 1.0, 1, p_timeout=0.3)
    retried = single = 0
    for node in (n for p in programs for n in p.nodes if isinstance(n, ToolNode)):
        outcomes = [a.outcome for a in node.attempts]
        assert all(o is Outcome.TIMEOUT for o in outcomes[:-1])
        if node.side_effect and not node.idempotent:
            assert len(outcomes) == 1
            single += 1
        elif outcomes[-1] is Outcome.TIMEOUT:
            assert len(outcomes) == 3  # gave up after max_attempts
        retried += len(outcomes) > 1
    assert retried > 100
    assert single > 0


def test_cli_writes_what_generate_returns(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    assert (
        main(
            [
                "--workload",
                "wide-fanout",
                "--programs",
                "3",
                "--rate",
                "2",
                "--seed",
                "4",
                "--set",
                "max_depth=3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert load_trace(out) == generate("wide-fanout", 3, 2.0, 4, max_depth=3)


def test_cli_list_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    listing = capsys.readouterr().out
    assert all(f"{name}:" in listing for name in available_workloads())
    assert main(["--set", "nope=1"]) == 2
    assert "has no parameter nope" in capsys.readouterr().err
    # an empty trace (exit 0) was refused by the bench it was made for
    with pytest.raises(SystemExit) as refused:
        main(["--programs", "0"])
    assert refused.value.code == 2
    assert "at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["seed-mix", "two-tenants"])
def test_committed_samples_match_the_documented_command(name: str, tmp_path: Path) -> None:
    """If this fails the generator changed: rerun the command in sample_traces/README.md."""
    out = tmp_path / "x.jsonl"
    cmd = [
        sys.executable,
        "-m",
        MODULE,
        "--workload",
        name,
        "--programs",
        "20",
        "--rate",
        "1",
        "--seed",
        "0",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, env={"PYTHONHASHSEED": "123"})
    assert out.read_text() == (SAMPLES / f"{name}.small.jsonl").read_text()


def _tool_latencies(programs: list[Any]) -> list[tuple[str, float]]:
    return [
        (node.tool_kind.value, node.duration_s)
        for program in programs
        for node in program.nodes
        if isinstance(node, ToolNode)
    ]


def test_slow_tools_last_minutes_under_a_timeout_raised_to_match() -> None:
    plain = _tool_latencies(generate("seed-mix", n_programs=30, rate=0.05, seed=4))
    assert max(seconds for _, seconds in plain) <= 30.0  # timeouts and retries included
    programs = generate("seed-mix", n_programs=30, rate=0.05, seed=4, p_slow_tool=0.2)
    slow = [s for _, s in _tool_latencies(programs) if s >= 30.0]
    assert 0.1 < len(slow) / len(_tool_latencies(programs)) < 0.3
    assert max(slow) <= 300.0
    for program in programs:
        for node in program.nodes:
            if isinstance(node, ToolNode):
                assert node.duration_s <= node.timeout_s * len(node.attempts)


def test_slow_tool_kind_makes_only_that_kind_slow() -> None:
    programs = generate(
        "seed-mix", n_programs=30, rate=0.05, seed=4, p_slow_tool=1.0, slow_tool_kind="test_run"
    )
    latencies = _tool_latencies(programs)
    assert any(kind == "test_run" for kind, _ in latencies)
    for kind, seconds in latencies:
        assert (seconds >= 30.0) == (kind == "test_run"), (kind, seconds)
    with pytest.raises(ValueError, match=r"not one of .*test_run"):
        generate("seed-mix", n_programs=2, rate=0.05, slow_tool_kind="nope")

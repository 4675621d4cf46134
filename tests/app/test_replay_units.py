"""Replay building blocks: key assignment, prompt synthesis, options, summary."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.cli import main
from agentconsole.replay import ReplayOptions, ReplaySummary, assign_keys
from agentconsole.replay.results import ProgramOutcome
from agentconsole.replay.text import CHARS_PER_TOKEN, chat_body, segment_text
from agentconsole.sample_traces import LLMNode, PrefixSegment, TraceProgram, generate


def _program(tenant: str, pid: str = "p") -> TraceProgram:
    return TraceProgram(
        id=pid,
        tenant=tenant,
        workload="w",
        shape="serial",
        arrival_s=0.0,
        prefix=(PrefixSegment(id="platform/sys", tokens=100, public=True),),
        nodes=(
            LLMNode(id="a", prompt_tokens=50, output_tokens=300),
            LLMNode(id="b", parents=("a",), prompt_tokens=10, output_tokens=7),
        ),
    )


def test_keys_go_to_their_tenant_else_the_default_else_in_turn() -> None:
    programs = [_program(t, t) for t in ("tenant-a", "x", "y", "z")]
    assert assign_keys(programs, {"tenant-a": "ka", "*": "kd"}) == {
        "tenant-a": "ka",
        "x": "kd",
        "y": "kd",
        "z": "kd",
    }
    spread = assign_keys(programs, {"t1": "k1", "t2": "k2"})
    assert spread == {"tenant-a": "k1", "x": "k2", "y": "k1", "z": "k2"}
    with pytest.raises(ValueError, match="no API key"):
        assign_keys(programs, {})


@given(st.text(min_size=1, max_size=20), st.integers(0, 5000), st.sampled_from([0.02, 0.5, 1.0]))
def test_segment_text_is_deterministic_and_sized(key: str, tokens: int, scale: float) -> None:
    text = segment_text(key, tokens, scale)
    assert text == segment_text(key, tokens, scale)
    assert len(text) == max(round(tokens * scale), 1) * CHARS_PER_TOKEN


def test_a_later_call_extends_the_earlier_prompt() -> None:
    program = _program("t")
    a, b = program.nodes
    assert isinstance(a, LLMNode)
    assert isinstance(b, LLMNode)
    first = chat_body(program, a, model="m", token_scale=1.0, max_output_tokens=None)
    second = chat_body(program, b, model="m", token_scale=1.0, max_output_tokens=5)
    assert first["messages"][0] == second["messages"][0]
    assert first["messages"][0]["role"] == "system"
    assert len(first["messages"][0]["content"]) == 100 * CHARS_PER_TOKEN
    assert second["messages"][1]["content"].startswith(first["messages"][1]["content"])
    assert (first["max_tokens"], second["max_tokens"]) == (300, 5)
    assert first["ignore_eos"] is True


def test_options_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="speed"):
        ReplayOptions(speed=0)
    with pytest.raises(ValueError, match="token_scale"):
        ReplayOptions(token_scale=-1)


def test_summary_counts_states_and_quantiles_finished_programs_only() -> None:
    outcomes = tuple(ProgramOutcome(f"p{i}", "t", "finished", float(i)) for i in range(1, 11))
    summary = ReplaySummary((*outcomes, ProgramOutcome("c", "t", "cancelled", 99.0)), 12.0)
    assert summary.count("finished") == 10
    assert summary.e2e(50) == pytest.approx(5.5)  # q in 0..100, as every percentile here
    assert summary.e2e(95) == pytest.approx(9.55)
    assert "finished: 10  cancelled: 1" in summary.render()
    assert "p50 5.50 s  p95 9.55 s" in summary.render()


def test_a_summary_with_no_finished_program_has_no_e2e() -> None:
    summary = ReplaySummary((ProgramOutcome("c", "t", "cancelled", 99.0),), 1.0)
    assert summary.e2e(50) is None
    assert "E2E (finished): n/a" in summary.render()


def test_the_bundled_generator_feeds_the_replayer() -> None:
    programs = generate("seed-mix", n_programs=3, rate=1.0, seed=1)
    assert set(assign_keys(programs, {"*": "k"}).values()) == {"k"}


def test_a_replay_whose_programs_failed_exits_1_after_its_summary() -> None:
    """Nothing listens on port 9: every program fails, and the command says so by its exit
    code (a script must not read a replay that did not go through as one that did)."""
    args = ["replay", "--url", "http://127.0.0.1:9", "--tools", "agent"]
    result = CliRunner().invoke(main, [*args, "--programs", "2", "--speed", "1000"])
    assert result.exit_code == 1, result.output
    assert "failed: 2" in result.output  # the summary comes first
    assert "2 of 2 programs failed" in result.output


def test_each_replay_names_its_programs_afresh_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second replay of a trace on the same server failed every program (409: the ids of
    the first run); and a server of several models refused the calls' model ``default``."""
    from agentconsole.replay import command

    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(command, "run_replay_command", lambda *a, **kw: runs.append(kw))
    times = iter((1_000.0, 1_001.0))
    monkeypatch.setattr("agentconsole.cli.time.time", lambda: next(times))
    args = ["replay", "--url", "http://127.0.0.1:9", "--api-key", "k"]
    for extra in ([], [], ["--id-prefix", ""]):
        assert CliRunner().invoke(main, [*args, *extra]).exit_code == 0
    assert [run["id_prefix"] for run in runs] == ["replay-1000-", "replay-1001-", ""]
    assert {run["model"] for run in runs} == {"auto"}


@pytest.mark.parametrize("command", ["replay", "dashboard"])
def test_a_url_without_its_scheme_is_refused(command: str) -> None:
    """``dashboard --url 127.0.0.1:8000`` showed "reconnecting" for good."""
    result = CliRunner().invoke(main, [command, "--url", "127.0.0.1:8000"])
    assert result.exit_code == 2, result.output
    assert "expected http://HOST:PORT" in result.output

"""``agentconsole trace export``: a served session (real HTTP, real DuckDB file) rebuilt as a
trace in the project's format, which ``bench --trace`` runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentconsole.cli import main
from agentconsole.replay import ReplayOptions, run_replay
from agentconsole.sample_traces import LLMNode, ToolNode, TraceProgram, generate, load_trace
from tests.server.api.harness import chat_body, gateway_server

CLI = str(Path(sys.executable).with_name("agentconsole"))
SMALL = {
    "serial_rounds": 3,
    "fanout_stages": 1,
    "task_context_tokens": 800,
    "shared_prefix_tokens": 600,
    "tenant_prefix_tokens": 200,
    "p_cancel": 0.0,
    "tenants": 1,
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[TraceProgram]]:
    """A store file recording three replayed programs of one tenant and one cancelled one."""
    db = tmp_path_factory.mktemp("trace") / "session.duckdb"
    programs = generate("seed-mix", n_programs=3, rate=5.0, seed=3, **SMALL)
    with gateway_server(db) as server:
        summary = asyncio.run(
            run_replay(server.url, {"tenant-a": "sk-a"}, programs, options=ReplayOptions(speed=20))
        )
        assert summary.count("finished") == 3, summary.render()
        with server.client("sk-b") as client:
            headers = {"X-Program-Id": "cancelled-1", "X-Node-Id": "n0"}
            answer = client.post(
                "/v1/chat/completions", json=chat_body(max_tokens=4), headers=headers
            )
            assert answer.status_code == 200
            assert client.post("/v1/programs/cancelled-1/cancel").status_code == 200
    return db, programs


def _export(db: Path, out: Path, *extra: str) -> list[TraceProgram]:
    result = CliRunner().invoke(
        main, ["trace", "export", "--db", str(db), "--out", str(out), *extra]
    )
    assert result.exit_code == 0, result.output
    return load_trace(out)


def test_the_session_comes_back_as_a_trace(
    session: tuple[Path, list[TraceProgram]], tmp_path: Path
) -> None:
    db, played = session
    exported = {p.id: p for p in _export(db, tmp_path / "t.jsonl")}
    assert set(exported) == {p.id for p in played} | {"cancelled-1"}
    arrivals = sorted(p.arrival_s for p in exported.values())
    assert arrivals[0] == 0.0
    for original in played:
        rebuilt = exported[original.id]
        assert rebuilt.tenant == "tenant-a"
        assert [(n.id, n.kind, n.parents) for n in rebuilt.nodes] == [
            (n.id, n.kind, n.parents) for n in original.nodes
        ]
        for before, after in zip(original.nodes, rebuilt.nodes, strict=True):
            if isinstance(before, LLMNode):
                assert isinstance(after, LLMNode)
                assert after.output_tokens == before.output_tokens
            else:
                assert isinstance(after, ToolNode)
                assert len(after.attempts) == len(before.attempts)
                assert after.attempts[-1].outcome == before.attempts[-1].outcome
                # the recorded latency at speed 20, plus the agent's own time around it
                assert after.duration_s >= before.duration_s / 20 * 0.9
        # the platform and tenant prefix, shared by the three programs, is recovered
        assert rebuilt.prefix
        assert rebuilt.prefix[0].tokens >= 512
    assert len({p.prefix[0].id for p in (exported[o.id] for o in played)}) == 1
    cancelled = exported["cancelled-1"]
    assert cancelled.tenant == "tenant-b"
    assert cancelled.cancel_at_s is not None
    assert [n.id for n in cancelled.nodes] == ["n0"]
    assert cancelled.prefix == ()


def test_the_trace_goes_into_a_folder_made_for_it(
    session: tuple[Path, list[TraceProgram]], tmp_path: Path
) -> None:
    db, played = session
    assert len(_export(db, tmp_path / "new" / "folder" / "t.jsonl")) == len(played) + 1


def test_an_out_that_cannot_be_written_is_refused_before_reading_the_store(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "t.jsonl"
    result = CliRunner().invoke(
        main, ["trace", "export", "--db", str(tmp_path / "none.duckdb"), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert f"--out: {blocker} is not a folder" in result.output


def test_an_out_that_is_a_store_is_never_written_over(
    session: tuple[Path, list[TraceProgram]], tmp_path: Path
) -> None:
    """``--out`` given the ``--db`` itself replaced the store with a 2 KB trace."""
    db, _ = session
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(db.read_bytes())
    result = CliRunner().invoke(main, ["trace", "export", "--db", str(copy), "--out", str(copy)])
    assert result.exit_code == 2, result.output
    assert "is a DuckDB database" in result.output
    assert copy.read_bytes() == db.read_bytes()


def test_a_window_that_ends_before_it_starts_is_refused(tmp_path: Path) -> None:
    """It wrote an empty trace, which bench then refused."""
    argv = ["trace", "export", "--db", str(tmp_path / "none.duckdb")]
    window = ["--since", "2026-01-02T00:00:00", "--until", "2026-01-01T00:00:00"]
    result = CliRunner().invoke(main, [*argv, "--out", str(tmp_path / "t.jsonl"), *window])
    assert result.exit_code == 2, result.output
    assert "must come before --until" in result.output
    assert not (tmp_path / "t.jsonl").exists()


def test_window_and_tenant_filters(
    session: tuple[Path, list[TraceProgram]], tmp_path: Path
) -> None:
    db, _ = session
    only_b = _export(db, tmp_path / "b.jsonl", "--tenant", "tenant-b")
    assert [p.id for p in only_b] == ["cancelled-1"]
    # an empty window writes nothing and says so (an empty trace, which bench refuses)
    argv = ["trace", "export", "--db", str(db), "--out", str(tmp_path / "none.jsonl")]
    empty = CliRunner().invoke(main, [*argv, "--since", "2999-01-01T00:00:00"])
    assert empty.exit_code == 1, empty.output
    assert "no program arrived in the window" in empty.output
    assert not (tmp_path / "none.jsonl").exists()
    everything = _export(db, tmp_path / "all.jsonl", "--since", "0", "--until", "4102444800")
    assert min(p.arrival_s for p in everything) > 1e9  # arrivals count from --since


def test_bench_runs_the_exported_trace(
    session: tuple[Path, list[TraceProgram]], tmp_path: Path
) -> None:
    db, _ = session
    trace = tmp_path / "t.jsonl"
    _export(db, trace)
    out = tmp_path / "bench.json"
    args = ["--policies", "fcfs", "--jobs", "1", "--json", str(out)]
    subprocess.run(
        [CLI, "bench", "--trace", str(trace), *args],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    run = json.loads(out.read_text())["policies"]["fcfs"]
    assert run["e2e_p50_s"] > 0

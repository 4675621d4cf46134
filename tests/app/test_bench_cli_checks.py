"""``bench`` decides as ``serve`` would, before any run: calls past the model's context window
are refused, stock SGLang runs with none of agentconsole's placement or cross-model KV, bad
``--models`` texts and conflicting flags are one-line usage errors, a ``--trace`` runs whole
unless ``--programs`` cuts it (and says so), a ratio needs another policy, and the HTML page
carries the tables the terminal printed."""

from __future__ import annotations

import gc
import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner, Result
from rich.table import Table

from agentconsole.bench import command, runner
from agentconsole.bench.context_fit import call_contexts, overflow
from agentconsole.bench.runner import BenchSetup, run_one
from agentconsole.bench.table import loads_table, sweep_table
from agentconsole.cli import main
from agentconsole.sample_traces.codec import dump_trace
from agentconsole.sample_traces.format import (
    Insert,
    LLMNode,
    Outcome,
    PrefixSegment,
    ToolAttempt,
    ToolNode,
    TraceProgram,
)
from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.program import ToolKind
from agentconsole.server.runtime.sim import simulation
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.models import parse_models
from agentconsole.server.runtime.sim.programs import ProgramRun, build_contexts
from agentconsole.server.runtime.sim.simulation import SimConfig

SMALL_TRACE = Path(__file__).parents[2] / "sample_traces" / "seed-mix.small.jsonl"
BENCH = ["bench", "--policies", "fcfs", "--jobs", "1"]
LONG = ["--workload", "long-coding", "--programs", "6"]  # contexts up to 350K tokens
TWO_MODELS = "llama-3.1-70b:tp4,llama-3.1-8b"


def _bench(*args: str) -> Result:
    return CliRunner().invoke(main, [*BENCH, *args])


def _usage_error(result: Result, *messages: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error:")  # one line says why
    for message in messages:
        assert message in result.output


def test_one_file_for_the_json_and_the_page_is_refused_before_any_run(tmp_path: Path) -> None:
    out = str(tmp_path / "report")
    _usage_error(_bench("--programs", "2", "--json", out, "--html", out), "name one file")


def _passed_the_checks(result: Result) -> None:
    """The run got as far as starting its workers (``no_runs`` stops it there)."""
    assert isinstance(result.exception, AssertionError), result.output
    assert "a run started" in str(result.exception)


# -- 1. the context window ----------------------------------------------------------------------


def _simulated(program: TraceProgram) -> dict[str, int]:
    """Each LLM call's prompt as the simulator builds it, plus its output."""
    run = ProgramRun.of(program)
    build_contexts(run, preset(), 8192)
    return {
        node.id: sum(b.tokens for b in run.contexts[node.id]) + node.output_tokens
        for node in program.nodes
        if isinstance(node, LLMNode)
    }


@pytest.mark.parametrize(
    ("workload", "params"),
    [
        ("seed-mix", {}),
        ("coding-agent", {"p_insert": 0.5}),  # mid-prompt insertions
        ("two-tenants", {}),
        ("wide-fanout", {}),
        ("multi-model", {}),
        ("long-coding", {}),
        # compactions and subagents early (the simulator's long-coding test's sessions)
        (
            "long-coding",
            {"steps_median": 60.0, "steps_sigma": 0.3, "max_steps": 90, "window_tokens": 200_000},
        ),
    ],
)
def test_call_contexts_are_the_simulators_prompts_plus_output(
    workload: str, params: dict[str, Any]
) -> None:
    programs = generate(workload, n_programs=4, rate=0.05, seed=5, **params)
    for program in programs:
        counted = {node.id: tokens for node, tokens in call_contexts(program)}
        assert counted == _simulated(program)


def _tool(node_id: str, parent: str, result: int) -> ToolNode:
    attempt = ToolAttempt(latency_s=1.0, outcome=Outcome.OK)
    return ToolNode(
        id=node_id,
        parents=(parent,),
        tool="grep",
        tool_kind=ToolKind.SEARCH,
        timeout_s=10.0,
        result_tokens=result,
        attempts=(attempt,),
    )


def test_call_contexts_of_compactions_insertions_and_joined_tools() -> None:
    prefix = (PrefixSegment(id="sys", tokens=1000, public=True),)
    nodes = (
        LLMNode(id="a", prompt_tokens=100, output_tokens=10),
        _tool("t1", "a", 30),
        _tool("t2", "a", 40),
        LLMNode(id="b", parents=("t1", "t2"), prompt_tokens=5, output_tokens=20),
        LLMNode(id="c", parents=("b",), prompt_tokens=7, output_tokens=9, compact=True),
        _tool("t3", "c", 11),
        _tool("t4", "b", 13),
        LLMNode(id="d", parents=("t3", "t4"), prompt_tokens=3, output_tokens=2),  # two starters
        LLMNode(
            id="e",
            parents=("d",),
            prompt_tokens=4,
            output_tokens=6,
            compact=True,
            insert=Insert(after="sys", tokens=50),
        ),
        LLMNode(id="f", parents=("e",), prompt_tokens=8, output_tokens=1),
    )
    program = TraceProgram(
        id="p", tenant="t", workload="unit", shape="s", arrival_s=0.0, prefix=prefix, nodes=nodes
    )
    counted = {node.id: tokens for node, tokens in call_contexts(program)}
    assert counted == _simulated(program)
    assert counted["b"] == 1000 + 100 + 10 + 30 + 40 + 5 + 20
    assert counted["c"] == 1000 + 20 + 7 + 9  # a fresh context: the prefix and b's output


def _program(prompt: int, candidates: tuple[str, ...] = ()) -> TraceProgram:
    node = LLMNode(id="n", prompt_tokens=prompt, output_tokens=100, candidates=candidates)
    return TraceProgram(id="p", tenant="t", workload="unit", shape="s", arrival_s=0, nodes=(node,))


def test_a_call_needs_one_model_it_may_run_on_to_hold_it() -> None:
    windows = {"llama-3.1-8b": 131_072, "qwen2.5-7b-1m": 1_010_000}
    assert overflow([_program(131_000)], {"llama-3.1-8b": 131_072}) is not None  # output too
    assert overflow([_program(130_972)], {"llama-3.1-8b": 131_072}) is None
    assert overflow([_program(200_000)], windows) is None  # no candidates: every model
    only_small = overflow([_program(200_000, ("llama-3.1-8b",))], windows)
    assert only_small is not None
    assert (only_small.calls, only_small.longest, only_small.window) == (1, 200_100, 131_072)
    assert overflow([_program(10**9)], {"unstated": None}) is None  # no window, no limit


def test_a_long_coding_run_past_the_models_window_is_refused(no_runs: None) -> None:
    _usage_error(
        _bench(*LONG, "--model", "llama-3.1-8b"),
        "do not fit the model they run on",
        "llama-3.1-8b's context window of 131,072 tokens",
        "context_length_exceeded",
        "--model qwen2.5-7b-1m",
    )


def test_a_long_trace_on_the_default_model_is_refused(tmp_path: Path, no_runs: None) -> None:
    trace = tmp_path / "long.jsonl"
    dump_trace(generate("long-coding", n_programs=6, rate=0.05, seed=0), trace)
    _usage_error(_bench("--trace", str(trace)), "llama-3.1-8b's context window")
    _passed_the_checks(_bench("--trace", str(trace), "--model", "qwen2.5-7b-1m"))


def test_several_models_refuse_only_what_none_of_them_holds(no_runs: None) -> None:
    _usage_error(
        _bench(*LONG, "--models", TWO_MODELS),
        "fit no model they may run on",
        "qwen2.5-7b-1m in --models",
    )
    _passed_the_checks(_bench(*LONG, "--models", "llama-3.1-8b,qwen2.5-7b-1m"))


def test_a_profiles_model_window_counts(no_runs: None) -> None:
    _usage_error(
        _bench("--programs", "3", "--profile", "cpu-2core__tiny-llama__tp1"),
        "tiny-llama's context window of 2,048 tokens",
        "(without --profile)",
    )


# -- 2. stock SGLang as shipped -----------------------------------------------------------------


@dataclass
class _Configs:
    seen: list[SimConfig] = field(default_factory=list)


def test_stock_sglang_takes_no_placement_or_cross_model_kv_from_the_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configs = _Configs()
    real = simulation.Simulation

    def recording(programs: Any, cost: Any, config: SimConfig) -> Any:
        configs.seen.append(config)
        return real(programs, cost, config)

    monkeypatch.setattr(runner, "Simulation", recording)  # what run_one builds
    setup = BenchSetup(
        programs=2,
        models="llama-3.1-8b,llama-3.1-8b-verify",
        routing="affinity",
        cross_model_kv="shared-prefill",
    )
    run_one(setup, "stock-sglang", "keep")
    run_one(setup, "fcfs", "keep")
    stock, ours = configs.seen
    assert (stock.routing, stock.engine.cross_model.name) == ("round-robin", "none")
    assert (ours.routing, ours.engine.cross_model.name) == ("affinity", "shared-prefill")


def test_no_collection_runs_while_a_run_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """One pause of the collector over the run, its metrics and the report
    (app/bench/runner.py): a collection between them scanned every object of the run, all
    still in use (0.3 s of a 3-s simulated hour)."""
    runs: list[weakref.ref[Any]] = []
    real = simulation.Simulation

    def tracked(programs: Any, cost: Any, config: SimConfig) -> Any:
        run = real(programs, cost, config)
        runs.append(weakref.ref(run))
        return run

    monkeypatch.setattr(runner, "Simulation", tracked)
    during_run: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and any(run() is not None for run in runs):
            during_run.append(info["generation"])

    gc.callbacks.append(record)
    try:
        report = run_one(BenchSetup(programs=40), "cp-cache", "keep")
    finally:
        gc.callbacks.remove(record)
    assert report["finished"] > 0
    assert runs
    assert during_run == []
    assert gc.isenabled()


# -- 3. bad --models texts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ("llama-3.1-8b:x0", "bad model option 'x0'"),
        ("llama-3.1-8b:tp0", "bad model option 'tp0'"),
        ("llama-3.1-8b,llama-3.1-8b", "llama-3.1-8b is named twice"),
        (",", "no model named in ','"),
        ("", "no model named in ''"),
    ],
)
def test_a_bad_models_text_is_a_usage_error(models: str, message: str, no_runs: None) -> None:
    _usage_error(_bench("--programs", "3", "--models", models), message)


@pytest.mark.parametrize("text", ["llama-3.1-8b:x0", "llama-3.1-8b:tp0", "a,a", ",", " "])
def test_parse_models_refuses_what_no_pool_can_run(text: str) -> None:
    with pytest.raises(ValueError, match=r"bad model option|named twice|no model named"):
        parse_models(text.replace("a", "llama-3.1-8b"))


# -- 4. conflicting flags, a whole trace --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", str(SMALL_TRACE), "--workload", "seed-mix"], "give one of them"),
        (["--models", TWO_MODELS, "--model", "llama-3.1-8b"], "drop --model"),
        (["--models", TWO_MODELS, "--tp", "2"], "--tp names one model; --models"),
        (["--models", TWO_MODELS, "--model", "llama-3.1-8b", "--tp", "2"], "drop --model, --tp"),
        (["--workload", "multi-model", "--tp", "2"], "the multi-model workload's pool"),
    ],
)
def test_flags_the_run_would_drop_are_refused(args: list[str], message: str, no_runs: None) -> None:
    _usage_error(_bench("--programs", "3", *args), message)


class _Recording:
    """A process pool that records the setup of the first run submitted, then stops."""

    setups: ClassVar[list[BenchSetup]] = []

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def __enter__(self) -> _Recording:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def submit(self, _fn: Any, setup: BenchSetup, *_: Any) -> Any:
        self.setups.append(setup)
        raise RuntimeError("recorded")


def test_a_trace_runs_whole_unless_programs_cuts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.jsonl"
    dump_trace(generate("seed-mix", n_programs=501, rate=0.05, seed=0), trace)  # > 500
    monkeypatch.setattr(command, "ProcessPoolExecutor", _Recording)
    _Recording.setups = []
    result = _bench("--trace", str(trace))
    assert str(result.exception) == "recorded", result.output
    assert _Recording.setups[0].programs == 501
    assert "programs in" not in result.stderr


def test_a_trace_cut_by_programs_says_so(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    result = _bench("--trace", str(SMALL_TRACE), "--programs", "3", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert f"--programs 3: running the first 3 of the 20 programs in {SMALL_TRACE}" in (
        result.stderr
    )
    assert json.loads(out.read_text())["policies"]["fcfs"]["programs"] == 3
    whole = _bench("--trace", str(SMALL_TRACE), "--programs", "20", "--json", str(out))
    assert whole.exit_code == 0, whole.output
    assert "running the first" not in whole.stderr


# -- 5. a ratio needs another policy ------------------------------------------------------------


def _column(table: Table, header: str) -> list[str]:
    """The cells of ``table``'s column whose header starts with ``header``."""
    column = next(c for c in table.columns if str(c.header).startswith(header))
    return [str(cell) for cell in column.cells]


def test_one_policy_has_no_ratio_to_itself() -> None:
    rates = {"cp-cache+all-large": {"max_rate": 1.0}, "cp-cache+fixed-roles": {"max_rate": 1.26}}
    assert _column(sweep_table(rates, command._ratio_reference(rates)), "ratio to") == ["-", "-"]
    compared = {**rates, "fcfs+all-large": {"max_rate": 0.5}}
    # no fcfs+fixed-roles ran: fixed-roles is compared with fcfs's first run
    assert _column(sweep_table(compared, "fcfs"), "ratio to") == ["2.00x", "2.52x", "1.00x"]


def _load_row(p95: float) -> dict[str, Any]:
    return {
        "throughput_programs_per_s": 1.0,
        "share_of_peak": 1.0,
        "e2e_p50_s": p95 / 2,
        "e2e_p95_s": p95,
        "recompute_tokens": 0,
        "oracle_share": 1.0,
    }


@pytest.mark.parametrize("policy", ["cp-cache", "fcfs"])
def test_one_policy_has_no_ratio_in_the_load_sweep(policy: str) -> None:
    rows = {f"{policy}+keep": _load_row(10.0), f"{policy}+offload": _load_row(20.0)}
    loads: dict[str, Any] = {"peak_programs_per_s": 1.0, "seeds": [0], "loads": {"1": rows}}
    table = loads_table(loads, command._ratio_reference(loads["loads"]))
    assert _column(table, "P95 /") == ["-", "-"]
    assert not any(str(c.header).startswith("P50 /") for c in table.columns)


# -- 6. the HTML page ---------------------------------------------------------------------------


def test_the_page_carries_the_load_sweep(tmp_path: Path) -> None:
    page = tmp_path / "b.html"
    result = _bench("--programs", "4", "--loads", "1", "--html", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert "load sweep: x the measured peak" in text
    assert "<th>hits / oracle</th>" in text

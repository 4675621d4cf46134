"""``agentconsole calibrate`` measures the live engine running what ``serve`` runs: its replay
is serve's own program glue, so a program's tool waits are decided by serve's default
tool-wait policy (not a replay's own keep rule) and its E2E is what an agent of ``serve``
would see."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

from agentconsole.calibrate import replay_as_serve_runs_it, sim_config_of
from agentconsole.kvtiers.toolwait import (
    DEFAULT_TOOL_WAIT_POLICY,
    KEEP_QUANTILE,
    Keep,
    get_tool_wait_policy,
)
from agentconsole.sample_traces.codec import loads_trace
from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.runtime import CacheAction
from agentconsole.server.runtime.sim.simulation import CostServiceModel
from tests.replay_fakes import COST, TOOL, TOOL_KIND, HintedRuntime, Letters, plan_tool_answer


async def _calibrate_replay() -> tuple[dict[str, float], list[tuple[str, CacheAction, float]]]:
    runtime = HintedRuntime()
    await runtime.start()
    try:
        e2e = await replay_as_serve_runs_it(
            runtime, loads_trace(json.dumps(plan_tool_answer("p", "calibrate"))), Letters()
        )
    finally:
        await runtime.stop()
    return e2e, runtime.hints


def test_calibrate_replays_tool_waits_as_serves_default_policy_decides_them() -> None:
    # what a first wait on a tool nobody has seen yet is priced with: the latency prior
    prior = ProgramController(EventLog(), CostServiceModel(COST)).tool_distribution(
        "", TOOL, TOOL_KIND
    )
    # serve's default keeps the KV for the 0.9 quantile of the latency (the expectation
    # below is that rule; a new default needs a new expectation)
    assert isinstance(get_tool_wait_policy(DEFAULT_TOOL_WAIT_POLICY), Keep)
    served_retention = prior.quantile(KEEP_QUANTILE)
    # a replay's own fixed keep rule (such as 1.5x the mean) would tell the engine otherwise
    assert abs(1.5 * prior.mean() / served_retention - 1) > 0.2

    e2e, hints = asyncio.run(_calibrate_replay())

    assert list(e2e) == ["p"]
    assert e2e["p"] >= 0.05  # the tool's latency at least: played in wall time
    assert len(hints) == 1
    program, action, retain_s = hints[0]
    assert (program, action) == ("p", CacheAction.KEEP)
    # decided when the tool had just started: what is left of its wait is nearly all of it
    assert abs(retain_s / served_retention - 1) < 0.02


def test_simulated_engine_has_the_real_engines_kv_pool() -> None:
    # SGLang's server arguments as the CPU engine runs them (``--max-total-tokens``)
    server_args = SimpleNamespace(
        max_total_tokens=32768,
        max_running_requests=None,
        chunked_prefill_size=None,
        enable_mixed_chunk=False,
    )

    engine = sim_config_of(server_args).engine

    # the door's budget and eviction are sized by this pool, not by the hardware preset
    assert engine.hbm_kv_tokens == 32768
    assert engine.host_kv_tokens == 0  # the CPU engine has no host tier either


def test_outputs_that_cannot_be_written_are_refused_before_the_engine_starts(
    tmp_path: Path,
) -> None:
    """A ``--json`` in a folder that could not be made ended a run of minutes in a traceback,
    its report lost; both outputs are checked first, as ``bench`` checks its own."""
    from click.testing import CliRunner

    from agentconsole.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    for option in ("--out", "--json"):
        argv = ["calibrate", "--quick", option, str(blocker / "x.json")]
        refused = CliRunner().invoke(main, argv)
        assert refused.exit_code == 2, refused.output
        assert f"{option}: {blocker} is not a folder" in refused.output
        assert "starting the engine" not in refused.output


def test_the_default_profile_file_is_named_after_the_model(tmp_path: Path) -> None:
    """``--out`` was always ``cpu-2core__tiny-llama__tp1.calibrated.json``: calibrating a
    second model overwrote the first's profile under the tiny model's name."""
    from agentconsole.calibrate import profile_path

    model = tmp_path / "qwen-0.5b"
    model.mkdir()
    assert profile_path(model) == Path("cpu-2core__qwen-0.5b__tp1.calibrated.json")
    assert profile_path(None) == Path("cpu-2core__tiny-llama__tp1.calibrated.json")

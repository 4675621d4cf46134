"""Several models in one simulation: the selector chooses each call's engine."""

from __future__ import annotations

import pytest

from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.events import EventKind
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.server.runtime.sim.models import ModelSetup, parse_models
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

LARGE, SMALL = "llama-3.1-70b", "llama-3.1-8b"
ROLES = (("tool-select", SMALL), ("schema-check", SMALL), ("verify", SMALL))


def _run(rule: str) -> tuple[Simulation, MetricsAggregator]:
    pools = parse_models(f"{LARGE}:tp4,{SMALL}")
    programs = generate("multi-model", 12, 0.05, seed=1)
    setup = ModelSetup(pools, rule=rule, roles=ROLES)
    sim = Simulation(programs, pools[0].cost(), SimConfig(models=setup))
    result = sim.run()
    return sim, MetricsAggregator().observe_all(result.events.events)


def test_parse_models_ranks_tiers_by_size() -> None:
    large, small = parse_models(f"{LARGE}:tp4,{SMALL}:x2")
    assert (large.tier, large.tp, large.replicas) == (2, 4, 1)
    assert (small.tier, small.tp, small.replicas) == (1, 1, 2)
    assert small.price_per_mtok < large.price_per_mtok
    with pytest.raises(ValueError, match="bad model option"):
        parse_models(f"{LARGE}:fast")
    with pytest.raises(KeyError, match="unknown model"):
        parse_models("gpt-9")


def test_all_large_runs_every_call_on_the_large_model() -> None:
    sim, metrics = _run("all-large")
    assert set(metrics.models()) == {LARGE, SMALL}
    assert metrics.models()[SMALL]["calls"] == 0
    assert metrics.models()[LARGE]["calls"] == metrics.counts["calls_finished"] > 0
    assert sim.engines[0].busy_s > 0
    assert sim.engines[1].busy_s == 0


def test_fixed_roles_follow_the_map_and_record_why() -> None:
    sim, metrics = _run("fixed-roles")
    finished = [e for e in sim.log.events if e.kind is EventKind.CALL_FINISHED]
    assert metrics.models()[SMALL]["calls"] > 0
    for program in sim.controller.programs.values():
        for node in program.nodes.values():
            if node.model_choice is None:
                continue
            assert set(node.model_choice.finish_s) <= {LARGE, SMALL}
    for e in finished:
        assert e.data["model"] in (LARGE, SMALL)
        assert str(e.data["model_reason"]).startswith("fixed-roles")
    # GPU-seconds count the tensor-parallel group: 4 GPUs per large engine (stats are
    # sampled every 5 s, so the last sample trails the engines' final busy time a little)
    report = metrics.report()
    assert report["gpu_s_per_success"] * report["finished"] == pytest.approx(
        4 * sim.engines[0].busy_s + sim.engines[1].busy_s, rel=0.02
    )


def test_finish_time_never_puts_a_large_only_role_on_the_small_model() -> None:
    sim, metrics = _run("finish-time")
    calls = metrics.models()
    assert calls[SMALL]["calls"] > 0
    for e in sim.log.events:
        if e.kind is EventKind.CALL_QUEUED and e.data.get("model") == SMALL:
            node = sim.controller.programs[e.program_id].nodes[e.node_id]
            assert node.model_choice is not None
            assert node.model_choice.chosen == SMALL
            assert LARGE in node.model_choice.finish_s

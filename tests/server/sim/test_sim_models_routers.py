"""``bench --models``: each model's replica router places by the configured ``--routing`` and
forgets a program when it ends (``ModelPlacer.forget``), as ``serve``'s fleet tells each model
that ran it; and a new program is credited at the door with what the least of its first call's
candidate models holds of its first prompt (``runtime/prefixcredit.py``), not the most any
engine holds.

The door test runs two warm-up programs of tenant ``t`` to their end: one on the small model
with a 3,000-token system prompt and a 1,000-token tool schema, one on the large model with the
system prompt alone. A new program of ``t`` then arrives with both and 100 tokens of its own,
nothing marked public (a recorded window replayed by ``bench --trace``), and the test reads
what the door was told the engines hold of its first prompt."""

from __future__ import annotations

from typing import Any

import pytest

from agentconsole.sample_traces.format import LLMNode, PrefixSegment, TraceProgram
from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.models import ModelRequest
from agentconsole.scheduler.runtime import PrefixProbe
from agentconsole.server.runtime.sim.models import ModelSetup, parse_models
from agentconsole.server.runtime.sim.programs import ProgramRun, build_contexts
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

LARGE, SMALL = "llama-3.1-70b", "llama-3.1-8b"
SYSTEM = PrefixSegment(id="system", tokens=3_000)  # tenant-scoped: nothing public
SCHEMA = PrefixSegment(id="schema", tokens=1_000)


def _simulation(models: str, routing: str = "affinity", programs: int = 12) -> Simulation:
    pools = parse_models(models)
    trace = generate("multi-model", programs, 0.05, seed=1)
    config = SimConfig(routing=routing, models=ModelSetup(pools, rule="finish-time"))
    return Simulation(trace, pools[0].cost(), config)


def test_every_models_router_forgets_the_programs_that_ended() -> None:
    sim = _simulation(f"{LARGE}:tp4:x2,{SMALL}:x2")
    sim.run()
    assert sim.placer is not None
    programs = list(sim.controller.programs)
    assert programs
    assert all(sim.controller.programs[p].state.terminal for p in programs)
    for router in sim.placer.routers:
        assert [p for p in programs if router.rule.rank_of(p) is not None] == []


@pytest.mark.parametrize("routing", ["affinity", "round-robin"])
def test_the_models_routers_place_by_the_configured_routing(routing: str) -> None:
    sim = _simulation(f"{LARGE}:tp4:x2,{SMALL}:x2", routing, programs=4)
    assert sim.placer is not None
    assert [router.rule.name for router in sim.placer.routers] == [routing, routing]
    sim.run()  # and it plays to its end by that rule


def _program(
    program_id: str, arrival_s: float, candidates: tuple[str, ...], *prefix: PrefixSegment
) -> TraceProgram:
    return TraceProgram(
        id=program_id,
        tenant="t",
        workload="w",
        shape=program_id,  # each its own kind: nothing learned of one sizes another
        arrival_s=arrival_s,
        prefix=prefix,
        nodes=(LLMNode(id="c0", prompt_tokens=100, output_tokens=8, candidates=candidates),),
    )


def _credited(candidates: tuple[str, ...]) -> int:
    """The tokens of the new program's first prompt the door is told the engines hold, after
    the small model ran the system prompt and the schema and the large model the system
    prompt alone; the new program's first call lists ``candidates``."""
    pools = parse_models(f"{LARGE}:tp4,{SMALL}")
    config = SimConfig(models=ModelSetup(pools, rule="finish-time"))
    warm = [
        _program("on-small", 0.0, (SMALL,), SYSTEM, SCHEMA),
        _program("on-large", 0.0, (LARGE,), SYSTEM),
    ]
    sim = Simulation(warm, pools[0].cost(), config)
    after = sim.run().sim_s + 1.0
    told: list[PrefixProbe | None] = []
    arrive = sim.driver.arrive

    def recorded(*args: Any, **kwargs: Any) -> bool:
        told.append(kwargs.get("held"))
        return arrive(*args, **kwargs)

    sim.driver.arrive = recorded  # type: ignore[method-assign]
    sim.arrive(_program("new", after, candidates, SYSTEM, SCHEMA), after)
    (held,) = told
    assert held is not None
    assert held.prompt_tokens == SYSTEM.tokens + SCHEMA.tokens + 100
    return held.hit_tokens


def test_a_new_program_is_credited_with_what_the_least_of_its_candidates_holds() -> None:
    # its first call may go to either model: only the system prompt is on both
    assert _credited((LARGE, SMALL)) == SYSTEM.tokens
    assert _credited(()) == SYSTEM.tokens  # no candidates listed: every served model


def test_a_new_program_with_one_candidate_is_credited_with_that_models_cache() -> None:
    assert _credited((SMALL,)) == SYSTEM.tokens + SCHEMA.tokens
    assert _credited((LARGE,)) == SYSTEM.tokens


LONG_WINDOW = "qwen2.5-7b-1m"


def test_a_call_runs_only_on_a_model_whose_window_holds_it() -> None:
    """As serve leaves out a candidate whose context cannot hold the call (``_prompts``), the
    simulator places a 200K-token call on the 1M-window model though the 128K one is listed
    first, and credits the door by the models that could run it."""
    pools = parse_models(f"{SMALL},{LONG_WINDOW}")
    config = SimConfig(models=ModelSetup(pools, rule="finish-time"))
    big = TraceProgram(
        id="big",
        tenant="t",
        workload="w",
        shape="big",
        arrival_s=0.0,
        nodes=(
            LLMNode(
                id="c0", prompt_tokens=200_000, output_tokens=8, candidates=(SMALL, LONG_WINDOW)
            ),
        ),
    )
    sim = Simulation([big], pools[0].cost(), config)
    assert sim.placer is not None
    assert sim.placer.holding((SMALL, LONG_WINDOW), 200_008) == [LONG_WINDOW]
    assert sim.placer.holding((SMALL, LONG_WINDOW), 1_000) == [SMALL, LONG_WINDOW]
    assert sim.placer.holding((), 200_008) == [LONG_WINDOW]  # none listed: every model
    sim.run()
    choice = sim.controller.programs["big"].nodes["c0"].model_choice
    assert choice is not None
    assert choice.chosen == LONG_WINDOW


@pytest.mark.parametrize("routing", ["affinity", "round-robin"])
def test_only_the_chosen_models_router_places_the_call(routing: str) -> None:
    """Each candidate is priced on the replica its router would pick, but only the model
    the selector chose records the placement (serve's other models never see the call): the
    others map no program and keep their turn."""
    sim = _simulation(f"{LARGE}:tp4:x2,{SMALL}:x2", routing, programs=1)
    placer = sim.placer
    assert placer is not None
    program = _program("p", 0.0, (LARGE, SMALL), SYSTEM)
    run = ProgramRun.of(program)
    build_contexts(run, sim.cost, sim.config.engine.chunked_prefill_size)
    blocks = run.first_context()
    before = [router.preview(run, blocks) for router in placer.routers]
    engine, _, choice = placer.place(run, blocks, (LARGE, SMALL), ModelRequest("p", None), 8.0)
    chosen = placer.index[choice.chosen]
    assert placer.first[chosen] <= engine < placer.first[chosen] + 2
    for k, router in enumerate(placer.routers):
        if k == chosen:
            continue
        assert router.rule.rank_of("p") is None
        assert router.preview(run, blocks)[0] == before[k][0]  # its turn did not move

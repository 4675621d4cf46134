"""``bench --replicas N`` places programs as ``serve --dp N`` does: the simulator's
``ReplicaRouter`` and SGLang's ``RankRouter``, given the same loads and the same news of lost
or released contexts, put every call of a random sequence of programs on the same rank."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import pytest

from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.results import Match
from agentconsole.kvtiers.router import (
    ROUTERS,
    AffinityRouter,
    RoundRobinRouter,
    WorkerState,
    get_router,
)
from agentconsole.kvtiers.tiers import ALL_TIERS, Tier, TierModel
from agentconsole.sample_traces.format import LLMNode, TraceProgram
from agentconsole.server.runtime.sglang.contexts import ProgramContexts
from agentconsole.server.runtime.sglang.ranks import InFlight, RankRouter
from agentconsole.server.runtime.sglang.status import Placement
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.programs import ProgramRun
from agentconsole.server.runtime.sim.routing import ReplicaRouter

SALT = "t:a"
TIERS = TierModel.build(kv_bytes_per_token=1.0, hbm_tokens=1000)


class _NoHits:
    """A prefix index holding nothing of any prompt (hits are scored alike by both routers:
    ``kvtiers.router.route_cost``; what differs is where they come from)."""

    def peek(self, tenant: str, blocks: list[Block]) -> Match:
        return Match([], [0] * len(ALL_TIERS), sum(b.tokens for b in blocks))


@dataclass
class _Replica:
    name: str
    prefill_load: float = 0.0
    decode_load: int = 0
    index: _NoHits = _NoHits()  # noqa: RUF009 (stateless)
    tiers: TierModel = TIERS


def _run(program_id: str) -> ProgramRun:
    trace = TraceProgram(
        id=program_id,
        tenant="t",
        workload="w",
        shape="s",
        arrival_s=0.0,
        nodes=(LLMNode(id="c0", prompt_tokens=32, output_tokens=1),),
    )
    return ProgramRun(trace, [], [], 0)


def _context(program_id: str) -> list[Node]:
    """A cached context of the program's own (its node is what a recompute decision or an
    eviction kills)."""
    return [Node(f"{program_id}/ctx", "slot", 10, Tier.HBM, None, "t", program_id, 0.0)]


@pytest.mark.parametrize(("size", "seed"), [(2, 0), (2, 1), (3, 2), (4, 3), (4, 4)])
def test_simulator_and_sglang_place_the_same_programs_on_the_same_ranks(
    size: int, seed: int
) -> None:
    rng = random.Random(seed)
    live, contexts = RankRouter(size), ProgramContexts()
    replicas = [_Replica(str(r)) for r in range(size)]
    sim = ReplicaRouter(replicas, preset("H200-141GB", "llama-3.1-8b", 1))
    runs: dict[str, ProgramRun] = {}
    lost: set[str] = set()
    sweep_at = time.time() + 3600  # every sweep is newer than every remembered context
    placed = ended = 0
    for step in range(400):
        program = f"p{rng.randrange(40)}"
        action = rng.random()
        # only a context that exists can be lost or given up (after a call finished)
        finished = program in runs and bool(runs[program].last_path)
        if finished and action < 0.1:  # eviction: the rank's sweep no longer finds it
            lost.add(program)
            for node in runs[program].last_path:
                node.dead = True
            continue
        if finished and action < 0.15:  # a tool wait decided for recompute
            lost.add(program)
            live.release(program)
            for node in runs[program].last_path:
                node.dead = True
            continue
        if finished and action < 0.2:  # the program ended; its context stays cached, and a
            live.release(program)  # later call under its id is placed again by the score
            sim.forget(program)  # (``Runtime.program_ended`` does this with ranks)
            ended += 1
            continue
        # loads drawn from few values: ties (broken by programs mapped) are common
        prefill = [rng.choice((0, 0, 64, 128)) for _ in range(size)]
        decode = [rng.choice((0, 0, 256)) for _ in range(size)]
        for r, replica in enumerate(replicas):
            replica.prefill_load, replica.decode_load = prefill[r], decode[r]
        calls = [InFlight(r, prefill[r], decode[r]) for r in range(size)]
        held = {p: (10, 10) for p in runs if p not in lost}
        placements: list[Placement | None] = [Placement(sweep_at, held) for _ in range(size)]
        expected = live.route(program, SALT, (), 32, calls, contexts, placements)
        run = runs.setdefault(program, _run(program))
        before = sim.rule.rank_of(program)
        got, _ = sim.route(run, [Block(f"{program}/prompt{step}", 32)])
        assert got == expected, f"step {step}: {program} to rank {got}, live {expected}"
        placed += before != got
        run.engine = got
        if run.last_path or rng.random() < 0.7:  # the call finished: its context is there
            run.last_path = _context(program)
            contexts.remember(program, SALT, [1, 2], [3])
            lost.discard(program)
    assert placed > 40  # the sequence did place programs again, not only stay
    assert ended > 5


def test_placement_rules_are_chosen_by_name() -> None:
    assert ROUTERS.names() == ["affinity", "round-robin"]
    assert isinstance(get_router("affinity", 2), AffinityRouter)
    robin = get_router("round-robin", 3)
    assert isinstance(robin, RoundRobinRouter)

    def workers(ranks: object) -> list[WorkerState]:
        raise AssertionError("round robin reads no load")

    def holds(program: str, rank: int) -> bool:
        return True

    robin.drain(1)
    assert [robin.route("p", 1, holds, workers) for _ in range(4)] == [0, 2, 0, 2]
    assert robin.rank_of("p") is None
    with pytest.raises(KeyError, match="unknown routing"):
        get_router("random", 2)

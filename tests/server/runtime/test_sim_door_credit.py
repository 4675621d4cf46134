"""``bench --replicas N`` credits a new program at the door with the cached prefix of its first
prompt by ``serve --dp N``'s rule (``runtime/prefixcredit.py``): only what the replicas the
router could place its first call on all hold counts, not the most any replica holds.

A real simulation on two replicas: program A of tenant ``t`` runs to its end, leaving its
4,000-token system prompt cached on replica 0 alone. Program C of another tenant is started
(under affinity its first call goes to replica 0: a tie between idle replicas goes to the
lowest; round robin sends it to replica 1), and then program B of tenant ``t`` arrives with
A's system prompt and 100 tokens of its own, nothing marked public (a recorded window
replayed by ``bench --trace``: the door sizes B by what the engines do not hold of its
prompt). The door's budget leaves room for 2,000 tokens beside C: B starts at once where it
is credited with the system prompt (it needs 100), and waits where it is not (4,100)."""

from __future__ import annotations

from dataclasses import replace

from agentconsole.kvtiers.node import Block
from agentconsole.kvtiers.tiers import Tier
from agentconsole.sample_traces.format import LLMNode, PrefixSegment, TraceProgram
from agentconsole.scheduler.growth import PeakEstimator
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

COST = preset("H200-141GB", "llama-3.1-8b", 1)
SYSTEM = PrefixSegment(id="system", tokens=4_000)  # tenant-scoped: nothing public
OWN = 100  # B's first prompt's own tokens
ROOM = 2_000  # the door's budget beside C's count: B fits with the credit, not without


def _program(
    program_id: str, tenant: str, arrival_s: float, prompt: int, *prefix: PrefixSegment
) -> TraceProgram:
    return TraceProgram(
        id=program_id,
        tenant=tenant,
        workload="w",
        shape=program_id,  # each its own kind
        arrival_s=arrival_s,
        prefix=prefix,
        nodes=(LLMNode(id="c0", prompt_tokens=prompt, output_tokens=8),),
    )


def _b_starts_at_once(routing: str, c_prompt: int, c_replica: int) -> bool:
    """Whether B passes the door when it arrives, after A ran and C (``c_prompt`` tokens,
    nothing cached) was started on ``c_replica``; the door's budget is C's count and
    ``ROOM`` (no slot filling: the budget alone decides)."""
    config = SimConfig(replicas=2, routing=routing, admission_fill=False)
    memory = sum(  # the engines' HBM + DRAM, which the door's budget is a share of
        e.index.capacity(Tier.HBM) + e.index.capacity(Tier.DRAM)
        for e in Simulation([], COST, config).engines
    )
    config = replace(config, admission_memory_share=(c_prompt + ROOM) / memory)
    sim = Simulation([_program("a", "t", 0.0, 200, SYSTEM)], COST, config)
    after = sim.run().sim_s + 1.0
    # A taught its tenant's largest kind a 4,200-token peak, which a kind of the tenant never
    # seen (B's) is sized by: forgotten, so B is sized by its first prompt (the rule here)
    sim.driver.growth = PeakEstimator()
    system = [Block(SYSTEM.id, SYSTEM.tokens)]
    assert sim.engines[0].index.peek("t", system).hit_tokens == SYSTEM.tokens
    assert sim.engines[1].index.peek("t", system).hit_tokens == 0
    door = sim.driver.door
    sim.arrive(_program("c", "other", after, c_prompt), after)
    assert door.is_started("c")
    assert door.used_tokens == c_prompt
    assert sim.engines[c_replica].prefill_load >= c_prompt  # C's call waits there
    sim.arrive(_program("b", "t", after, OWN, SYSTEM), after)
    assert door.is_started("b") != door.is_parked("b")
    return door.is_started("b")


def test_the_replica_the_router_would_pick_holds_the_prefix_so_it_is_credited() -> None:
    # C's short prompt on replica 0 weighs less than B's prefix there: B would go to 0
    assert _b_starts_at_once("affinity", c_prompt=1_000, c_replica=0)


def test_a_prefix_only_on_a_replica_the_router_would_not_pick_is_not_credited() -> None:
    # C's long prompt waiting on replica 0 outweighs B's prefix there: B would go to 1
    assert not _b_starts_at_once("affinity", c_prompt=30_000, c_replica=0)


def test_round_robin_credits_only_what_every_replica_holds() -> None:
    # any replica may get B's first call (``serve`` unpinned: SGLang's own round robin); A's
    # call went to replica 0, C's to replica 1
    assert not _b_starts_at_once("round-robin", c_prompt=1_000, c_replica=1)

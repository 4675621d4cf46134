"""The simulated engine steps every running call, whoever's tenant, as SGLang steps its whole
running batch: a tenant below its share goes first in the queue (what is admitted), never by
pausing the other tenants' decoding calls (which the plugin cannot do, so bench must not).
The simulator once did: beside four equal tenants it cost cp-cache 23% of its P50 on
seed-mix at 0.9x capacity (docs/BENCHMARKS.md 2k)."""

from __future__ import annotations

from agentconsole.kvtiers.node import Block
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sim.calls import Phase, SimCall
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.engine import SimEngine

COST = preset("H200-141GB", "llama-3.1-8b", 1)


def _call(pid: str, tenant: str) -> SimCall:
    ticket = CallTicket(f"{pid}/n/1", pid, "n", tenant, 0.0)
    return SimCall(ticket, [Block(f"{pid}/prompt", 500)], 200, f"{pid}/n/out")


def test_every_decoding_call_steps_while_a_tenant_is_below_its_share() -> None:
    engine = SimEngine(COST, get_policy("fcfs"), EventLog())
    heavy, light = _call("h", "heavy"), _call("l", "light")
    engine.submit(heavy, 0.0)
    engine.submit(light, 0.0)
    now = 0.0
    while not (heavy.phase is Phase.DECODE and light.phase is Phase.DECODE):
        wake = engine.plan(now)
        assert wake is not None
        now = wake
        engine.complete(now)
    # the heavy tenant has had far more service: the light one is below its share
    engine.guard.record_service("heavy", 1_000.0, now)
    assert engine.guard.underserved({"heavy", "light"}, now, remember=False) == {"light"}
    before = heavy.generated, light.generated
    wake = engine.plan(now)
    assert wake is not None
    engine.complete(wake)
    assert heavy.generated > before[0]  # the over-served tenant's call decodes on
    assert light.generated > before[1]

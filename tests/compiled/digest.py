"""Print one digest per simulator configuration: every event of the run and its metrics report.

Run by ``test_compiled_build.py`` twice, once on the interpreted package and once with the
compiled build first on ``PYTHONPATH``; the two outputs must be equal line for line.
"""

from __future__ import annotations

import hashlib
import json

from agentconsole.bench.runner import BASELINES, BenchSetup, engine_config
from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.policies import available
from agentconsole.server.runtime.sim import compiled
from agentconsole.server.runtime.sim.calls import EngineConfig
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

# (what varies, workload, programs, arrivals per second, configuration): every policy on the
# mixed workload, then the mechanisms apart (the door at overload, holds, no host tier, the
# fixed tool-wait policies, bench's stock-sglang, several replicas under both placements, long
# growing sessions, the opt-in rank-aware step composition with its stall-free runs)
_STOCK = BASELINES["stock-sglang"]
CONFIGS: list[tuple[str, str, int, float, SimConfig]] = [
    *[(p, "seed-mix", 60, 0.08, SimConfig(policy=p)) for p in available()],
    ("door", "seed-mix", 60, 0.3, SimConfig(policy="cp-cache")),
    (
        "holds",
        "seed-mix",
        60,
        0.3,
        SimConfig(policy="cp-cache", engine=EngineConfig(hold_queued_context=True)),
    ),
    (
        "no host tier",
        "two-tenants",
        60,
        0.08,
        SimConfig(policy="cp-cache", engine=EngineConfig(host_kv_tokens=0)),
    ),
    *[
        (k, "coding-agent", 40, 0.06, SimConfig(policy="plas", kv_policy=k))
        for k in ("keep", "offload", "recompute")
    ],
    (
        "stock-sglang",
        "wide-fanout",
        40,
        1.5,
        SimConfig(
            policy=_STOCK.policy,
            program_admission=_STOCK.admission,
            engine=engine_config(BenchSetup(), _STOCK),
        ),
    ),
    ("affinity", "seed-mix", 80, 0.5, SimConfig(policy="cp-cache", replicas=3)),
    (
        "round-robin",
        "seed-mix",
        80,
        0.5,
        SimConfig(policy="fcfs", replicas=3, routing="round-robin"),
    ),
    ("long sessions", "long-coding", 8, 0.01, SimConfig(policy="cp-cache")),
    (
        "rank-aware steps",
        "seed-mix",
        60,
        0.08,
        SimConfig(policy="cp-cache", engine=EngineConfig(rank_aware_steps=True)),
    ),
]


def digest(label: str, workload: str, n: int, rate: float, config: SimConfig) -> str:
    programs = generate(workload, n_programs=n, rate=rate, seed=3)
    result = Simulation(programs, preset(), config).run()
    report = MetricsAggregator().observe_all(result.events.events).report()
    report.pop("wall_s", None)
    sha = hashlib.sha256()
    for event in result.events.events:
        sha.update(json.dumps(event.to_json(), sort_keys=True).encode())
    sha.update(json.dumps(report, sort_keys=True, default=str).encode())
    return f"{label}: {workload} {n} {rate} {len(result.events)} {sha.hexdigest()}"


if __name__ == "__main__":
    print("build:", "compiled" if compiled() else "interpreted")
    for config in CONFIGS:
        print(digest(*config))

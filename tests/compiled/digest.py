"""Print one digest per simulator configuration: every event of the run and its metrics report.

Run by ``test_compiled_build.py`` twice, once on the interpreted package and once with the
compiled build first on ``PYTHONPATH``; the two outputs must be equal line for line.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.server.runtime.sim import compiled
from agentconsole.server.runtime.sim.calls import EngineConfig
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

# (workload, programs, arrivals per second, SimConfig fields with EngineConfig's under
# "engine"): every policy on the mixed workload, then the mechanisms apart (the door at
# overload, holds, no host tier, the fixed tool-wait policies, several replicas under both
# placements, long growing sessions)
CONFIGS: list[tuple[str, int, float, dict[str, Any]]] = [
    *[("seed-mix", 60, 0.08, {"policy": p}) for p in ("fcfs", "sjf", "plas", "atlas")],
    *[("seed-mix", 60, 0.08, {"policy": p}) for p in ("progress", "critical-path", "cp-cache")],
    ("seed-mix", 60, 0.3, {"policy": "cp-cache"}),
    ("seed-mix", 60, 0.3, {"policy": "cp-cache", "engine": {"hold_queued_context": True}}),
    ("two-tenants", 60, 0.08, {"policy": "cp-cache", "engine": {"host_kv_tokens": 0}}),
    *[("coding-agent", 40, 0.06, {"policy": "plas", "kv_policy": k}) for k in ("keep", "offload")],
    ("coding-agent", 40, 0.06, {"policy": "plas", "kv_policy": "recompute"}),
    (  # what bench calls stock-sglang
        "wide-fanout",
        40,
        1.5,
        {
            "policy": "fcfs",
            "program_admission": False,
            "engine": {"eviction": "lru", "host_kv_tokens": 0},
        },
    ),
    ("seed-mix", 80, 0.5, {"policy": "cp-cache", "replicas": 3}),
    ("seed-mix", 80, 0.5, {"policy": "fcfs", "replicas": 3, "routing": "round-robin"}),
    ("long-coding", 8, 0.01, {"policy": "cp-cache"}),
]


def digest(workload: str, n: int, rate: float, fields: dict[str, Any]) -> str:
    programs = generate(workload, n_programs=n, rate=rate, seed=3)
    engine_fields = fields.get("engine", {})
    config = SimConfig(**{**fields, "engine": EngineConfig(**engine_fields)})
    result = Simulation(programs, preset(), config).run()
    report = MetricsAggregator().observe_all(result.events.events).report()
    report.pop("wall_s", None)
    sha = hashlib.sha256()
    for event in result.events.events:
        sha.update(json.dumps(event.to_json(), sort_keys=True).encode())
    sha.update(json.dumps(report, sort_keys=True, default=str).encode())
    return f"{workload} {n} {rate} {sorted(fields.items())} {len(result.events)} {sha.hexdigest()}"


if __name__ == "__main__":
    print("build:", "compiled" if compiled() else "interpreted")
    for config in CONFIGS:
        print(digest(*config))

"""One bench run: a workload, a scheduling policy and a KV policy through the simulator.

Runs are described by a picklable :class:`BenchSetup` plus names, so a process pool can run
them in parallel; each worker regenerates the (deterministic) workload instead of receiving it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentconsole.kvtiers.tiers import WRITE_THROUGH
from agentconsole.sample_traces.codec import load_trace
from agentconsole.sample_traces.format import TraceProgram
from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.composition import DEFAULT_MAX_DECODE_PASSES
from agentconsole.scheduler.events import paused_gc
from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.server.runtime.sim.calls import EngineConfig
from agentconsole.server.runtime.sim.costmodel import CostModel, preset
from agentconsole.server.runtime.sim.crossmodel import get_cross_model
from agentconsole.server.runtime.sim.models import (
    ModelPool,
    ModelSetup,
    parse_models,
    preferred_roles,
)
from agentconsole.server.runtime.sim.prefixcache import get_prefix_cache
from agentconsole.server.runtime.sim.profile import load_profile
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation

#: programs/s of ``multi-model`` (see ``DEFAULT_RATES``)
MULTI_MODEL_RATE = 0.02
#: arrival rates (programs/s) that load a simulated H200 with Llama-3.1-8B to roughly half its
#: capacity, so a default run shows contention without overload
DEFAULT_RATES = {
    "seed-mix": 0.04,
    "coding-agent": 0.05,
    "two-tenants": 0.04,
    "wide-fanout": 0.01,
    # on its default models (llama-3.1-70b:tp4 and llama-3.1-8b, command.WORKLOAD_POOLS): the
    # rate at which all-large keeps the 70B engine about half busy (measured, see section 14
    # of docs/BENCHMARKS.md), the same rule as the one-model rates above
    "multi-model": MULTI_MODEL_RATE,
}


#: why a trace whose programs all arrive at one time cannot be run at another rate
ALL_AT_ONCE = "the trace's programs all arrive at once, so it has no arrival rate to scale"


@dataclass(frozen=True, slots=True)
class Baseline:
    """A configuration users run without agentconsole, named for it: a policy plus the engine
    and program-level features it has, whatever the bench's own flags say (``--prefix-cache``,
    ``--routing``, ``--cross-model-kv``, ``--holds``, ``--admission``, ``--host-tier`` and
    ``--defer-prefill-steps`` set agentconsole's features, not the stock engine's)."""

    policy: str
    eviction: str
    host_tier: bool
    admission: bool
    holds: bool
    #: engines as shipped cache prefixes only (no relative-position reuse)
    prefix_cache: str = "ordinary"
    #: engines as shipped run a pending prefill at once (no ``PrefillDeferral``)
    defer_prefill: bool = False
    #: how calls are placed over data-parallel replicas: SGLang's own router places them in
    #: turn (``round-robin``), not by where a program's KV is (``affinity``, agentconsole's)
    routing: str = "round-robin"
    #: engines as shipped keep each model's KV to itself (``none``): none prefills a call from
    #: what another model cached (``shared-prefill`` is DroidSpeak's, not a shipped engine's)
    cross_model_kv: str = "none"
    #: engines as shipped order by their policy alone: no aging bound and no tenant shares
    #: (``scheduler/fairness.py``'s guard is agentconsole's, on under every policy of ours)
    fairness: bool = False
    #: engines as shipped compose a step by admission order (``--rank-aware-steps``, the
    #: stall-free rank-ordered steps, is the simulator's older engine of ours, not SGLang's)
    rank_aware_steps: bool = False


#: ``stock-sglang``: SGLang as shipped: first come first served, plain LRU radix eviction, no
#: host-memory tier (HiCache is opt-in), no program door, no holds. ``fcfs`` is the same order
#: on agentconsole's engine features (retention-aware eviction, the host tier).
BASELINES = {
    "stock-sglang": Baseline("fcfs", "lru", host_tier=False, admission=False, holds=False),
}


@dataclass(frozen=True, slots=True)
class BenchSetup:
    workload: str | None = "seed-mix"
    trace: Path | None = None
    programs: int = 500
    rate: float | None = None
    seed: int = 0
    gpu: str = "H200-141GB"
    model: str = "llama-3.1-8b"
    tp: int = 1
    profile: str | None = None
    max_running: int | None = None
    replicas: int = 1
    #: how calls are placed over the replicas (``kvtiers.router.get_router``): ``affinity``,
    #: what ``serve --dp N`` does, or ``round-robin``, SGLang's own data-parallel default
    routing: str = "affinity"
    host_tier: bool = True
    #: when the host tier gets its copy (``EngineConfig.host_write_policy``, SGLang's
    #: ``--hicache-write-policy``; its default, ``write_through``, is what serve configures)
    host_write_policy: str = WRITE_THROUGH
    #: program-aware mechanisms (section 2b of docs/BENCHMARKS.md): queued-call holds (off by
    #: default) and the program admission gate (on)
    holds: bool = False
    admission: bool = True
    #: the door's line by response ratio of each kind's expected run (off: arrival order)
    shortest_first: bool = True
    #: compose engine steps by the policy's rank (``EngineConfig.rank_aware_steps``). False,
    #: the default, is what ``serve`` on SGLang delivers (the plugin orders SGLang's queue,
    #: not its batches), so bench measures what serve runs (docs/BENCHMARKS.md section 2d)
    rank_aware_steps: bool = False
    #: decode rides along with prefill chunks (``EngineConfig.mixed_chunk``, SGLang's
    #: ``--enable-mixed-chunk``). False, the default, is SGLang as shipped and as serve runs it
    mixed_chunk: bool = False
    #: decode-only steps in a row a pending prefill may wait for better-ranked decoders
    #: (``EngineConfig.defer_prefill_steps``, what the plugin does; 0: never)
    defer_prefill_steps: int = DEFAULT_MAX_DECODE_PASSES
    #: workload parameter overrides (``--set key=value``)
    params: tuple[tuple[str, Any], ...] = ()
    #: what the simulated prefix cache reuses after a mid-prompt insertion
    #: (``sim/prefixcache.py``: ``ordinary`` or ``relative``)
    prefix_cache: str = "ordinary"
    #: several models (``sim/models.py`` ``parse_models`` text such as
    #: ``llama-3.1-70b:tp4,llama-3.1-8b``), each on its own GPUs; None: the one ``model``
    models: str | None = None
    #: the selection rule giving each call a model when ``models`` is set
    #: (``scheduler/models``: ``all-large``, ``fixed-roles``, ``finish-time``)
    model_rule: str = "finish-time"
    #: cross-model KV (``sim/crossmodel.py``): ``none`` or ``shared-prefill``
    cross_model_kv: str = "none"
    #: (tenant, weight) pairs: the tenants' weights in the fairness guard's service shares and
    #: the door's start shares, as ``serve``'s ``limits.tenant_weights``; unnamed tenants 1
    tenant_weights: tuple[tuple[str, float], ...] = ()

    @property
    def label(self) -> str:
        return self.workload or (self.trace.name if self.trace else "trace")


def model_pools(setup: BenchSetup) -> tuple[ModelPool, ...]:
    """The setup's served models (empty for a one-model run); ``ValueError``/``KeyError``
    for a bad ``models`` text (an empty one too: it names no model)."""
    return parse_models(setup.models, setup.gpu) if setup.models is not None else ()


def cost_model(setup: BenchSetup) -> CostModel:
    """The one model's cost model; with several models, the top tier's (the controller's
    estimates and each program's ideal E2E are then those of the best model alone)."""
    pools = model_pools(setup)
    if pools:
        return max(pools, key=lambda p: p.tier).cost()
    if setup.profile:
        return CostModel.from_profile(load_profile(setup.profile))
    return preset(setup.gpu, setup.model, setup.tp)


def engine_config(setup: BenchSetup, baseline: Baseline | None = None) -> EngineConfig:
    holds = setup.holds if baseline is None else baseline.holds
    mode = setup.prefix_cache if baseline is None else baseline.prefix_cache
    base = EngineConfig(
        rank_aware_steps=setup.rank_aware_steps if baseline is None else baseline.rank_aware_steps,
        mixed_chunk=setup.mixed_chunk,
        defer_prefill_steps=(
            setup.defer_prefill_steps if baseline is None or baseline.defer_prefill else 0
        ),
        hold_queued_context=holds,
        host_write_policy=setup.host_write_policy,
        prefix_cache=get_prefix_cache(mode),
        cross_model=get_cross_model(
            setup.cross_model_kv if baseline is None else baseline.cross_model_kv
        ),
    )
    if baseline is not None:
        base = replace(base, eviction=baseline.eviction)
    if not (setup.host_tier if baseline is None else baseline.host_tier):
        base = replace(base, host_kv_tokens=0)
    if setup.max_running is None:
        return base
    return replace(base, max_running_requests=setup.max_running)


def fairness_config(setup: BenchSetup, baseline: Baseline | None = None) -> FairnessConfig:
    """The guard a run's engines and door share by: the setup's tenant weights on our
    policies, none at all for a baseline whose engine has no such guard."""
    if baseline is not None and not baseline.fairness:
        return FairnessConfig(enabled=False)
    return FairnessConfig(tenant_weights=dict(setup.tenant_weights))


def load_programs(setup: BenchSetup, rate: float | None = None) -> list[TraceProgram]:
    """The setup's programs, with arrivals at ``rate`` (or the setup's rate) per second."""
    rate = rate if rate is not None else setup.rate
    if setup.trace is not None:
        programs = trace_programs(setup)
        return rescale(programs, rate) if rate else programs
    assert setup.workload is not None
    if rate is None:
        rate = DEFAULT_RATES.get(setup.workload, 0.05)
    return generate(
        setup.workload, n_programs=setup.programs, rate=rate, seed=setup.seed, **dict(setup.params)
    )


def trace_programs(setup: BenchSetup) -> list[TraceProgram]:
    """The setup's trace as recorded: its first ``setup.programs`` programs, arrivals as the
    file has them."""
    assert setup.trace is not None
    return list(recorded_trace(setup.trace)[: setup.programs])


@lru_cache(maxsize=4)
def recorded_trace(path: Path) -> tuple[TraceProgram, ...]:
    """Every program of the trace file at ``path``, read once per process (cached)."""
    return tuple(load_trace(path))


def arrival_rate(programs: list[TraceProgram]) -> float:
    """Mean arrival rate of a trace (programs per second of its arrival span)."""
    span = max((p.arrival_s for p in programs), default=0.0) - min(
        (p.arrival_s for p in programs), default=0.0
    )
    return (len(programs) - 1) / span if span > 0 and len(programs) > 1 else math.inf


def rescale(
    programs: list[TraceProgram] | tuple[TraceProgram, ...], rate: float
) -> list[TraceProgram]:
    """The same programs with arrival times stretched to a mean ``rate`` per second;
    ``ValueError`` when they all arrive at once (no span to stretch: ``arrival_rate`` is
    infinite, and a zero arrival times an infinite factor is no time)."""
    recorded = arrival_rate(list(programs))
    if math.isinf(recorded):
        raise ValueError(ALL_AT_ONCE)
    factor = recorded / rate
    return [replace(p, arrival_s=p.arrival_s * factor) for p in programs]


def run_one(
    setup: BenchSetup, policy: str, kv_policy: str, rate: float | None = None
) -> dict[str, Any]:
    """Simulate one (policy, kv policy) pair; returns the metrics report plus run facts.
    ``policy`` may name a :data:`BASELINES` configuration.

    The cyclic collector is paused over the whole of it, the trace, the run, its metrics and
    the report: a run's ~900,000 objects are all young when a pause ends, so the first
    collection after it scans every one (0.3 s of a 3-s simulated hour, measured) although
    they are still in use; kept paused until the report is made, they are freed by their
    reference counts when ``_simulate`` returns, with no scan."""
    with paused_gc():
        return _simulate(setup, policy, kv_policy, rate)


def _simulate(setup: BenchSetup, policy: str, kv_policy: str, rate: float | None) -> dict[str, Any]:
    programs = load_programs(setup, rate)
    baseline = BASELINES.get(policy)
    config = SimConfig(
        policy=baseline.policy if baseline else policy,
        kv_policy=kv_policy,
        engine=engine_config(setup, baseline),
        replicas=setup.replicas,
        routing=baseline.routing if baseline else setup.routing,
        program_admission=baseline.admission if baseline else setup.admission,
        admission_shortest_first=setup.shortest_first,
        models=model_setup(setup, programs),
        fairness=fairness_config(setup, baseline),
    )
    result = Simulation(programs, cost_model(setup), config).run()
    metrics = MetricsAggregator().observe_all(result.events.events)
    report = metrics.report()
    report["tenants"] = {
        name: {
            "slowdown": t.slowdown,
            "starvation": t.starvation,
            "programs": t.programs,
            "finished": t.finished,
            "e2e_p95_s": t.e2e_p95_s,
            "max_queue_wait_s": t.max_queue_wait_s,
        }
        for name, t in metrics.tenants().items()
    }
    report["prediction_errors"] = result.controller.prediction_log.summary()
    report["wall_s"] = result.wall_s
    report["sim_s"] = result.sim_s
    report["events"] = len(result.events)
    report["rate_programs_per_s"] = arrival_rate(programs)
    report["ideal_e2e_p95_s"] = metrics.ideal_p95()
    report["models"] = metrics.models()
    return report


def model_setup(setup: BenchSetup, programs: list[TraceProgram]) -> ModelSetup | None:
    """The run's models and rule (None for one model); ``fixed-roles`` maps each role to the
    model the trace lists first for it (``preferred_roles``)."""
    pools = model_pools(setup)
    if not pools:
        return None
    return ModelSetup(pools, rule=setup.model_rule, roles=preferred_roles(programs, pools))

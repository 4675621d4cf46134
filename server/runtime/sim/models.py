"""Several models in one simulation: each a preset on its own GPU replicas, and the model
selector deciding which engine runs each call.

A :class:`ModelPool` is one served model (a ``hardware.py`` preset at a tensor-parallel
degree, its quality tier and price); :class:`ModelPlacer` asks the selector for a call's model
among the node's candidates, with each candidate's predicted queue and service seconds on the
replica its router would pick and the tokens of the program's context cached there. A
program's KV is per model (each engine has its own prefix index), so a call moved to another
model prefills there whatever that model has not cached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentconsole.kvtiers.node import Block
from agentconsole.kvtiers.results import Match
from agentconsole.sample_traces.format import LLMNode, TraceProgram
from agentconsole.scheduler.models import (
    CallSize,
    ModelChoice,
    ModelRequest,
    ModelSelector,
    Pins,
    RuleSetup,
    make_rule,
    model_option,
    output_tokens,
)
from agentconsole.server.runtime.prefixcredit import least_over_models, likely_models
from agentconsole.server.runtime.sim.costmodel import CostModel, preset
from agentconsole.server.runtime.sim.crossmodel import ForeignKv
from agentconsole.server.runtime.sim.engine import SimEngine
from agentconsole.server.runtime.sim.hardware import model as model_spec
from agentconsole.server.runtime.sim.hardware import shared_kv_layers
from agentconsole.server.runtime.sim.programs import ProgramRun
from agentconsole.server.runtime.sim.routing import ReplicaRouter

#: list prices per million tokens (Together AI serverless, Llama 3.1 Turbo, 2024: 8B $0.18,
#: 70B $0.88); a preset not listed costs nothing, so price never decides for it
PRICES_PER_MTOK = {"llama-3.1-8b": 0.18, "llama-3.1-70b": 0.88}


@dataclass(frozen=True, slots=True)
class ModelPool:
    """One served model: preset ``name`` (also the name traces list as a candidate) on
    ``replicas`` engines of ``tp`` GPUs each; higher ``tier`` is better quality."""

    name: str
    tier: int
    tp: int = 1
    replicas: int = 1
    gpu: str = "H200-141GB"
    price_per_mtok: float = 0.0

    def cost(self) -> CostModel:
        """The pool's cost model (its bundled profile; a fine-tune runs at its base's speed,
        the same architecture); ``KeyError`` for an unknown one."""
        return preset(self.gpu, model_spec(self.name).base or self.name, self.tp)


@dataclass(frozen=True, slots=True)
class ModelSetup:
    """The models of a run and how calls are given one: ``rule`` (a registered selection
    rule), the ``roles`` map ``fixed-roles`` uses, operator pins by role."""

    pools: tuple[ModelPool, ...]
    rule: str = "finish-time"
    roles: tuple[tuple[str, str], ...] = ()
    role_pins: tuple[tuple[str, str], ...] = ()
    program_pins: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        names = [p.name for p in self.pools]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"models must be at least one and distinct, got {names}")

    def selector(self) -> ModelSelector:
        """A selector for this setup (a rule that takes a role map is given ``roles``)."""
        pins = Pins(programs=dict(self.program_pins), roles=dict(self.role_pins))
        return ModelSelector(make_rule(self.rule, RuleSetup(dict(self.roles))), pins)


def parse_models(text: str, gpu: str = "H200-141GB") -> tuple[ModelPool, ...]:
    """Pools from ``"llama-3.1-70b:tp4,llama-3.1-8b"`` (``name[:tpN][:xR]``, R replicas);
    tiers rank the models by parameter count (the largest is the top tier), prices come from
    :data:`PRICES_PER_MTOK` (a fine-tune's is its base's). Raises ``ValueError`` (no model, a
    model named twice, a bad option, a zero tp or replica count) or ``KeyError`` (unknown
    preset)."""
    pools: list[ModelPool] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, *opts = item.split(":")
        tp, replicas = 1, 1
        for opt in opts:
            # isdigit() and not "0": a zero count would leave a pool with no engine to run on
            if opt.startswith("tp") and opt[2:].isdigit() and int(opt[2:]) > 0:
                tp = int(opt[2:])
            elif opt.startswith("x") and opt[1:].isdigit() and int(opt[1:]) > 0:
                replicas = int(opt[1:])
            else:
                raise ValueError(
                    f"bad model option {opt!r} in {item!r} (tpN or xR, N and R from 1)"
                )
        if any(p.name == name for p in pools):
            raise ValueError(f"{name} is named twice in {text!r}: give it once, as {name}:xR")
        spec = model_spec(name)  # an unknown preset fails here, naming the known ones
        price = PRICES_PER_MTOK.get(name, PRICES_PER_MTOK.get(spec.base or name, 0.0))
        pools.append(ModelPool(name, 0, tp, replicas, gpu, price))
    if not pools:
        raise ValueError(f"no model named in {text!r}")
    ranked = sorted({model_spec(p.name).params for p in pools})
    return tuple(
        ModelPool(p.name, ranked.index(model_spec(p.name).params) + 1, *_rest(p)) for p in pools
    )


def preferred_roles(
    programs: Sequence[TraceProgram], pools: Sequence[ModelPool]
) -> tuple[tuple[str, str], ...]:
    """The ``fixed-roles`` map a trace implies: each role to the served model its calls list
    first among their candidates (a workload lists its preference first), the most common
    one when calls disagree, then the name. Roles whose calls name no served model are left
    out (the rule gives them the top tier)."""
    served = {p.name for p in pools}
    votes: dict[str, Counter[str]] = {}
    for program in programs:
        for node in program.nodes:
            if not isinstance(node, LLMNode) or node.role is None:
                continue
            first = next((c for c in node.candidates if c in served), None)
            if first is not None:
                votes.setdefault(node.role, Counter())[first] += 1
    return tuple(
        (role, min(count, key=lambda name: (-count[name], name)))
        for role, count in sorted(votes.items())
    )


def _rest(p: ModelPool) -> tuple[int, int, str, float]:
    return p.tp, p.replicas, p.gpu, p.price_per_mtok


class ModelPlacer:
    """Places a call on a model's replica: the pools' engines in one list (``first[k]`` is the
    index of pool ``k``'s first engine), one router per pool placing by the rule named
    ``routing`` (``SimConfig.routing``, as the single-model path's router)."""

    def __init__(
        self,
        setup: ModelSetup,
        engines: Sequence[SimEngine],
        costs: Sequence[CostModel],
        routing: str = "affinity",
    ) -> None:
        self.setup = setup
        self.selector = setup.selector()
        self.first: list[int] = []
        self.routers: list[ReplicaRouter] = []
        at = 0
        for pool, cost in zip(setup.pools, costs, strict=True):
            self.first.append(at)
            self.routers.append(ReplicaRouter(engines[at : at + pool.replicas], cost, routing))
            at += pool.replicas
        self.engines = engines
        self.index = {p.name: k for k, p in enumerate(setup.pools)}
        specs = [model_spec(p.name) for p in setup.pools]
        #: ``shared[a][b]``: leading layers of pools ``a`` and ``b`` with identical KV
        self.shared = [[shared_kv_layers(a, b) for b in specs] for a in specs]
        self.specs = specs

    def place(
        self,
        run: ProgramRun,
        blocks: list[Block],
        candidates: Sequence[str],
        request: ModelRequest,
        expected_output: float,
        max_tokens: int = 0,
    ) -> tuple[int, Match, ModelChoice]:
        """The engine (index into ``engines``) for a call with prompt ``blocks``, its match
        there and the choice with its reasons. Candidates not served, or whose window cannot
        hold the prompt and ``max_tokens`` (:meth:`holding`), are left out; none given, or none
        served, means every served model. Each candidate is priced on the replica its router
        would pick (a preview), and only the chosen model's router places the call, as only
        the chosen model's runtime gets it in serve. Changes nothing in the engines."""
        served = self.holding(candidates, sum(b.tokens for b in blocks) + max_tokens)
        options = []
        output = output_tokens(expected_output)
        for name in served:
            k = self.index[name]
            local, found = self.routers[k].preview(run, blocks)
            e = self.first[k] + local
            call = CallSize(found.requested_tokens, found.hit_tokens, output)
            options.append(model_option(self.setup.pools[k], call, EngineCost(self.engines[e])))
        choice = self.selector.select(options, request)
        k = self.index[choice.chosen]
        local, found = self.routers[k].route(run, blocks)
        return self.first[k] + local, found, choice

    def held_where_placed(
        self,
        program_id: str,
        tenant: str,
        blocks: list[Block],
        candidates: Sequence[str],
        max_tokens: int = 0,
    ) -> int:
        """The tokens of a prompt ``blocks`` a program's next call would surely find cached
        (any tier): it may run on any of ``candidates`` (as :meth:`place` reads them), so the
        least over them of what each model's router credits where it may place the call
        (``runtime/prefixcredit.py``). Changes nothing."""
        routers, index = self.routers, self.index
        return least_over_models(
            self.holding(candidates, sum(b.tokens for b in blocks) + max_tokens),
            lambda name: routers[index[name]].held_where_placed(program_id, tenant, blocks),
        )

    def holding(self, candidates: Sequence[str], tokens: int) -> list[str]:
        """The models a call of ``tokens`` (prompt plus its ``max_tokens``) may run on: its
        candidates (:func:`likely_models`) whose context window holds it, as serve leaves out
        a candidate whose window cannot (``live/intake.py`` ``_prompts``); all of them where
        none can (``bench`` refuses such a run before it starts, ``bench/context_fit.py``)."""
        likely = likely_models(candidates, self.index)
        windows = [self.specs[self.index[name]].context_window for name in likely]
        fit = [n for n, w in zip(likely, windows, strict=True) if w is None or tokens <= w]
        return fit or likely

    def forget(self, program_id: str) -> None:
        """The program ended: no model's router counts it any longer (``ProgramEnded``; live,
        ``FleetRuntime.program_ended`` tells each model that ran it)."""
        for router in self.routers:
            router.forget(program_id)

    def foreign(self, tenant: str, blocks: list[Block], e: int) -> ForeignKv:
        """What the engines of models other than engine ``e``'s hold of ``blocks`` for
        ``tenant`` (any tier): the longest prefix, and the longest a KV-compatible model holds
        with its shared layers (ties: more shared layers). Changes nothing."""
        k = max(i for i, first in enumerate(self.first) if first <= e)
        spec = self.specs[k]
        cached = compatible = shared = 0
        for j, pool in enumerate(self.setup.pools):
            if j == k:
                continue
            layers = self.shared[k][j]
            for engine in self.engines[self.first[j] : self.first[j] + pool.replicas]:
                hit = engine.index.peek(tenant, blocks).hit_tokens
                cached = max(cached, hit)
                if layers and (hit, layers) > (compatible, shared):
                    compatible, shared = hit, layers
        # the recompute of the upper layers starts from the activations entering them
        # (DroidSpeak ships them with the KV): hidden values per token, in layers of KV
        kv_per_layer = 2 * spec.kv_heads * spec.head_dim
        activations = spec.hidden / kv_per_layer if 0 < shared < spec.layers else 0.0
        return ForeignKv(cached, compatible, shared, spec.layers, activations)


@dataclass(frozen=True, slots=True)
class EngineCost:
    """A candidate as its simulated engine stands: the prefill work queued before the call,
    then the call's own uncached prefill and its decode steps beside the running batch."""

    engine: SimEngine

    def queue_s(self) -> float:
        per_token = self.engine.cost.prefill_seconds(8192) / 8192
        # queued demand is a running float sum: clamp the drift below zero
        return max(self.engine.prefill_load, 0.0) * per_token

    def service_s(self, call: CallSize) -> float:
        cost, prompt, hit = self.engine.cost, call.prompt_tokens, call.cached_tokens
        miss = max(prompt - hit, 1)
        batch = self.engine.decode_load + 1
        decode = cost.decode_step_seconds(batch, batch * (prompt + int(call.output_tokens)))
        return cost.prefill_seconds(miss, hit) + call.output_tokens * decode

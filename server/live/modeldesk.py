"""Which served model runs a call: the request's choice, or the selector's.

One model served (the usual ``serve``): every call runs on it and nothing here acts; any
``model`` name is accepted, as before. Several (a runtime over several models,
``scheduler.models.ModelFleet``): a request's ``model`` names one of them, or ``auto``; the
``agentconsole`` object's ``model_candidates`` (or the ``X-Agentconsole-Model-Candidates``
header) lists the ones it may run on. An unknown name is 404 ``model_not_found``. With more
than one candidate the :class:`ModelSelector` decides by predicted finish on each engine
(``modelcost``: its queue from ``memory()`` plus the call's service there), price, this
program's cached tokens on that model (``probe``), cold start and the node's minimum tier,
under the operator's pins (program or role -> model). The choice and why are the node's.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentconsole.scheduler.models import (
    CallSize,
    ModelChoice,
    ModelFleet,
    ModelOption,
    ModelRequest,
    ModelSelector,
    Pins,
    RuleSetup,
    ServedModel,
    make_rule,
    model_option,
    output_tokens,
    role_map,
)
from agentconsole.scheduler.models.doorcredit import least_over_models, likely_models
from agentconsole.scheduler.runtime import Prompt, Runtime
from agentconsole.server.live.enginequeue import EngineQueues
from agentconsole.server.live.errors import InvalidRequest, NotFound
from agentconsole.server.live.modelcost import ModelCosts
from agentconsole.server.modelcompat.digest import tokenizer_digest

AUTO = "auto"


class ModelNotFound(NotFound):
    """A request names a model this server does not serve."""

    type = "model_not_found"


@dataclass(frozen=True, slots=True)
class SelectionConfig:
    """How ``auto`` calls are given a model: ``rule`` (a registered selection rule), the
    seconds one unit of price is worth to ``finish-time``, the least tier per role, and the
    role pins the operator starts with."""

    rule: str = "finish-time"
    seconds_per_price: float = 0.0
    role_tiers: Mapping[str, int] | None = None
    role_pins: Mapping[str, str] | None = None


class ModelDesk:
    """See the module docstring. ``runtime`` is the service's runtime; ``name`` what its one
    model is called when it serves only one."""

    def __init__(self, runtime: Runtime, name: str, config: SelectionConfig | None = None):
        config = config or SelectionConfig()
        self.fleet = runtime if isinstance(runtime, ModelFleet) else None
        if self.fleet is not None:
            self.served = tuple(self.fleet.served_models())
            runtimes = {m.name: self.fleet.member(m.name) for m in self.served}
        else:
            self.served = (ServedModel(name),)
            runtimes = {name: runtime}
        self.by_name = {m.name: m for m in self.served}
        self.runtimes = runtimes
        self._families: dict[str, tuple[str, str | None]] = {}
        self.costs = ModelCosts(runtimes)
        #: what the engines run while calls wait in a model's queue (the drain's batch)
        self.queues = EngineQueues(runtimes)
        self.role_tiers = dict(config.role_tiers or {})
        setup = RuleSetup(role_map(self.served), config.seconds_per_price)
        pins = Pins(roles=dict(config.role_pins or {}))
        self.selector = ModelSelector(make_rule(config.rule, setup), pins)
        for model in pins.roles.values():
            self._known(model, "selection.role_pins")

    def cached_elsewhere(self, program_id: str, tenant: str, chosen: str, prompt: Prompt) -> int:
        """The most of ``prompt`` (in ``chosen``'s tokens) another served model reading the
        same tokens (chat format and tokenizer) holds for the tenant: what running it on
        ``chosen`` may prefill again, lost cross-model reuse (0 with one model served)."""
        family = self._family(chosen)
        others = (m for m in self.by_name if m != chosen and self._family(m) == family)
        probes = (self.runtimes[m].probe(program_id, prompt, tenant) for m in others)
        return max((p.cached_tokens for p in probes), default=0)

    def held_for_new_program(
        self, program_id: str, tenant: str, prompts: Mapping[str, Prompt]
    ) -> int:
        """The tokens of a new program's first prompt the door credits as cached (any tier):
        its first call may run on any candidate (``prompts``: each with the prompt in its own
        tokens), so the least over them of what each model's runtime credits
        (``runtime/prefixcredit.py``, the rule ``bench --models`` credits it by; a model's
        own probe applies the replicas' rule). Changes nothing."""
        return least_over_models(
            likely_models(tuple(prompts), self.by_name),
            lambda name: self.runtimes[name].probe(program_id, prompts[name], tenant).hit_tokens,
        )

    def _family(self, name: str) -> tuple[str, str | None]:
        """(chat format, tokenizer digest) of a served model: models that agree read a prompt
        as the same tokens. A model without a tokenizer directory (a simulated preset) has
        none: its format's token counts are all there is."""
        found = self._families.get(name)
        if found is None:
            model = self.by_name[name]
            where = model.tokenizer or model.source
            directory = Path(where) if where else None
            digest = tokenizer_digest(directory) if directory and directory.is_dir() else None
            found = (self.runtimes[name].chat_format.name, digest)
            self._families[name] = found
        return found

    @property
    def multi(self) -> bool:
        """Several models served: calls are given one each."""
        return self.fleet is not None

    def runtime_of(self, model: str | None) -> Runtime:
        """The runtime that runs ``model``'s calls (None: the default model's): its chat
        format reads the call's prompt and answer."""
        return self.runtimes[model or self.served[0].name]

    def queued_behind(self, model: str | None, program_id: str | None = None) -> int:
        """What the engines run while calls wait in ``model``'s queue (None: the default
        model's; of the rank ``program_id`` runs on, when it has one), else 0: the batch that
        prices the drain on a call's ticket."""
        return self.queues.behind(model or self.served[0].name, program_id)

    def _known(self, name: str, field: str) -> str:
        if name not in self.by_name:
            served = ", ".join(self.by_name)
            raise ModelNotFound(f"model {name!r} is not served (served: {served})", field=field)
        return name

    def candidates(self, model: str | None, listed: Sequence[str] | None) -> tuple[str, ...]:
        """The models a call may run on: ``listed`` (the request's candidates), else every
        model for ``auto``, else the one ``model`` names; one model served: that one.
        ``ModelNotFound`` for a name not served, 422 for an empty or repeated list."""
        if not self.multi:
            return (self.served[0].name,)
        if listed is not None:
            if not listed or len(set(listed)) != len(listed):
                raise InvalidRequest(
                    "model_candidates must be distinct names", field="model_candidates"
                )
            return tuple(self._known(n, "model_candidates") for n in listed)
        if model is None or model == AUTO:
            return tuple(self.by_name)
        return (self._known(model, "model"),)

    # -- operator pins ---------------------------------------------------------------------------
    def pins(self) -> Pins:
        return self.selector.pins

    def pin(self, *, program_id: str | None, role: str | None, model: str | None) -> Pins:
        """Pin (``model`` a served name) or unpin (None) a program or a role; returns the pins
        now. ``ModelNotFound`` for a model not served."""
        if model is not None:
            self._known(model, "model")
        programs, roles = dict(self.selector.pins.programs), dict(self.selector.pins.roles)
        for table, key in ((programs, program_id), (roles, role)):
            if key is None:
                continue
            if model is None:
                table.pop(key, None)
            else:
                table[key] = model
        self.selector.pins = Pins(programs=programs, roles=roles)
        return self.selector.pins

    def restore_pins(
        self, pinned: Iterable[Mapping[str, object]], live_programs: Container[str]
    ) -> Pins:
        """Replay the operator's pins (each ``{program_id, role, model}``, oldest first) after
        a restart: role pins, and program pins of ``live_programs`` (an ended program's pin
        went with it). A pin to a model no longer served unpins (it replaced what came before
        it: skipped, the pin it replaced would come back). Returns the pins now."""
        for args in pinned:
            program_id, role, model = (_text(args.get(k)) for k in ("program_id", "role", "model"))
            if program_id is not None and program_id not in live_programs:
                program_id = None
            if program_id is None and role is None:
                continue
            if model is not None and model not in self.by_name:
                model = None
            self.pin(program_id=program_id, role=role, model=model)
        return self.selector.pins

    def forget(self, program_id: str) -> None:
        """An ended program's pin goes with it."""
        if program_id in self.selector.pins.programs:
            self.pin(program_id=program_id, role=None, model=None)

    # -- the choice ------------------------------------------------------------------------------
    def choose(
        self,
        program_id: str,
        tenant: str,
        prompts: Mapping[str, Prompt],
        *,
        role: str | None,
        min_tier: int | None,
        expected_output: float,
        max_output: Mapping[str, int] | None = None,
    ) -> ModelChoice:
        """The model for a call among ``prompts`` (the candidates, each with the prompt in
        its own format), with every candidate's figures; changes nothing. Each candidate is
        planned for ``expected_output`` tokens, at most what the call may generate there
        (``max_output``: its ``max_tokens``, shrunk to the room that model's window leaves):
        a verifier asking for one token is not a call of the estimate's length."""
        tier = min_tier if min_tier is not None else self.role_tiers.get(role or "", 0)
        request = ModelRequest(program_id, role, tier)
        output = output_tokens(expected_output)
        caps = max_output or {}
        options = [
            self._option(n, p, program_id, tenant, min(output, caps.get(n, output)))
            for n, p in prompts.items()
        ]
        if len(options) > 1:
            return self.selector.select(options, request)
        # one candidate (the request named it): the client's choice, a pin elsewhere noted
        (only,) = options
        pin = self.selector.pins.of(request)
        why = "requested by the client"
        if pin is not None and pin[0] != only.name:
            why += f" (pin {pin[0]} by {pin[1]} not a candidate)"
        return ModelChoice(
            only.name,
            why,
            finish_s={only.name: only.finish_s},
            price={only.name: only.price},
            cached_tokens={only.name: only.cached_tokens},
        )

    def _option(
        self, name: str, prompt: Prompt, program_id: str, tenant: str, output: float
    ) -> ModelOption:
        """The candidate as its engine stands: queue, this call's service, cached tokens."""
        runtime, model = self.runtimes[name], self.by_name[name]
        cached = runtime.probe(program_id, prompt, tenant).cached_tokens
        fleet = self.fleet
        return model_option(
            model,
            CallSize(prompt.tokens, cached, output),
            LearnedCost(self.costs, name, runtime),
            loaded=fleet.loaded(name) if fleet is not None else True,
            load_s=model.load_s,
        )

    def served_json(self) -> list[dict[str, object]]:
        """Each served model as ``/v1/models`` lists it (beyond OpenAI's fields)."""
        return [
            {
                "id": m.name,
                "tier": m.tier,
                "price_per_mtok": m.price_per_mtok,
                "roles": list(m.roles),
                "loaded": self.fleet.loaded(m.name) if self.fleet is not None else True,
                "default": i == 0,
            }
            for i, m in enumerate(self.served)
        ]


@dataclass(frozen=True, slots=True)
class LearnedCost:
    """A candidate as its live engine stands: the queue its ``memory()`` shows and the call's
    uncached prefill and decode, at the rates learned for model ``name`` (``modelcost``)."""

    costs: ModelCosts
    name: str
    runtime: Runtime

    def queue_s(self) -> float:
        return self.costs.queue_s(self.name, self.runtime.memory())

    def service_s(self, call: CallSize) -> float:
        uncached = max(call.prompt_tokens - call.cached_tokens, 0)
        return self.costs.service_s(self.name, uncached, call.output_tokens)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None

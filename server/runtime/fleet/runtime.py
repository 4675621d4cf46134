"""The ``Runtime`` protocol over several named model runtimes, each its own engine.

``submit`` runs a call on ``request.model`` (intake chose it: ``server/live/modeldesk.py``); the
fleet remembers which engine holds each call (abort, re-rank and preempt go there, or to
every engine for a call it no longer remembers, like SGLang's DP controller sends an abort to
every rank) and which models hold each program's context (a cache hint goes to those; the
program's context and probe are the sum over them and its latest model's). Policy, drain and
health apply to every engine; memory and snapshots are summed (``merge.py``). Nothing here
knows a model by name: names are keys. The engines start one after another (an in-process
SGLang engine sets process environment while it starts).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from agentconsole.scheduler.models.served import ServedModel
from agentconsole.scheduler.runtime import (
    CacheAction,
    ChatFormat,
    GenerationRequest,
    GenerationStream,
    MemoryView,
    PrefixProbe,
    ProgramContext,
    Prompt,
    Runtime,
    RuntimeSnapshot,
    ServicePrior,
)
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.fleet.merge import merged_memory, merged_snapshot

_CALLS_KEPT = 65_536  # calls whose engine is remembered (older ones: asked of every engine)
_PROGRAMS_KEPT = 16_384  # programs whose models are remembered


class FleetRuntime:
    """See the module docstring. ``members`` maps each served model's name to its runtime, in
    the order of ``models`` (the first is the default for a request naming none)."""

    def __init__(self, models: Sequence[ServedModel], members: Mapping[str, Runtime]) -> None:
        names = [m.name for m in models]
        if len(names) < 2 or len(set(names)) != len(names) or set(names) != set(members):
            raise ValueError(f"a fleet needs two or more distinct models with runtimes: {names}")
        self.models = tuple(models)
        self.members = {name: members[name] for name in names}
        self.default = names[0]
        kinds = {runtime.name for runtime in self.members.values()}
        self.name = kinds.pop() if len(kinds) == 1 else "fleet"
        self._loaded: set[str] = set()
        self._calls: OrderedDict[str, str] = OrderedDict()  # call id -> model
        self._programs: OrderedDict[str, list[str]] = (
            OrderedDict()
        )  # program -> models, latest last

    # -- what the server reads of several models (``scheduler.models.ModelFleet``) -------------
    def served_models(self) -> Sequence[ServedModel]:
        return self.models

    def member(self, name: str) -> Runtime:
        """The runtime of model ``name``; ``KeyError`` if it is not served."""
        return self.members[name]

    def loaded(self, name: str) -> bool:
        return name in self._loaded

    def models_of(self, program_id: str) -> list[str]:
        """The models that ran the program's calls, the latest last (empty: none known)."""
        return list(self._programs.get(program_id, ()))

    @property
    def chat_format(self) -> ChatFormat:
        """The default model's format (intake renders each call with its own model's)."""
        return self.members[self.default].chat_format

    @property
    def max_context_tokens(self) -> int | None:
        """The default model's context (intake checks each call against its own model's)."""
        return self.members[self.default].max_context_tokens

    @property
    def vocab_size(self) -> int | None:
        """The default model's (intake checks each call against its own model's)."""
        return self.members[self.default].vocab_size

    def service_prior(self) -> ServicePrior | None:
        """None: each model's service is learned from its own member's prior (``ModelDesk``
        asks the members); one prior for models that differ tenfold would fit none."""
        return None

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start every engine, one after another; on a failure stop those already started."""
        for name, runtime in self.members.items():
            try:
                await runtime.start()
            except BaseException:
                await self.stop()
                raise
            self._loaded.add(name)

    async def stop(self) -> None:
        """Stop every engine (pending calls end with ``abort``)."""
        await asyncio.gather(*(r.stop() for r in self.members.values()), return_exceptions=True)
        self._loaded.clear()

    async def healthy(self) -> bool:
        """Every engine answers."""
        answers = await asyncio.gather(*(r.healthy() for r in self.members.values()))
        return all(answers)

    # -- calls ------------------------------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> GenerationStream:
        """Queue the call on ``request.model``'s engine (the default when None); ``KeyError``
        for a model not served. Remembers the engine of the call and of the program."""
        model = request.model or self.default
        runtime = self.members[model]
        stream = runtime.submit(request)
        ticket = request.ticket
        self._calls[ticket.call_id] = model
        self._calls.move_to_end(ticket.call_id)
        if len(self._calls) > _CALLS_KEPT:
            self._calls.popitem(last=False)
        self._ran(ticket.program_id, model)
        return stream

    def _ran(self, program_id: str, model: str) -> None:
        models = self._programs.setdefault(program_id, [])
        if model in models:
            models.remove(model)
        models.append(model)
        self._programs.move_to_end(program_id)
        if len(self._programs) > _PROGRAMS_KEPT:
            self._programs.popitem(last=False)

    def _holders(self, call_id: str) -> list[Runtime]:
        """The engine holding the call, or every engine when it is not remembered."""
        model = self._calls.get(call_id)
        return [self.members[model]] if model is not None else list(self.members.values())

    async def abort(self, call_id: str) -> bool:
        for runtime in self._holders(call_id):
            if await runtime.abort(call_id):
                self._calls.pop(call_id, None)
                return True
        return False

    async def reprioritise(self, call_id: str, ticket: CallTicket) -> bool:
        for runtime in self._holders(call_id):
            if await runtime.reprioritise(call_id, ticket):
                return True
        return False

    async def preempt(self, call_id: str) -> bool:
        for runtime in self._holders(call_id):
            if await runtime.preempt(call_id):
                return True
        return False

    async def cache_hint(self, program_id: str, action: CacheAction, retain_s: float) -> None:
        """Apply the decision on every model holding the program's context (all when none is
        remembered: a cancel's drop must reach wherever its KV is)."""
        names = self._programs.get(program_id) or list(self.members)
        await asyncio.gather(
            *(self.members[n].cache_hint(program_id, action, retain_s) for n in names)
        )

    def program_ended(self, program_id: str) -> None:
        """Tell every model that ran the program (all when none is remembered)."""
        for name in self._programs.get(program_id) or list(self.members):
            self.members[name].program_ended(program_id)

    def set_policy(self, name: str) -> None:
        """Switch every engine's policy (``KeyError`` for an unknown name, before any)."""
        for runtime in self.members.values():
            runtime.set_policy(name)

    async def pause(self) -> None:
        await asyncio.gather(*(r.pause() for r in self.members.values()))

    async def resume(self) -> None:
        await asyncio.gather(*(r.resume() for r in self.members.values()))

    # -- observation ------------------------------------------------------------------------------
    def snapshot(self) -> RuntimeSnapshot:
        return merged_snapshot(self.name, {n: r.snapshot() for n, r in self.members.items()})

    def probe(self, program_id: str, prompt: Prompt, namespace: str) -> PrefixProbe:
        """The probe of the program's latest model (the default for a new program); intake
        probes the chosen model's runtime itself."""
        models = self._programs.get(program_id)
        model = models[-1] if models else self.default
        return self.members[model].probe(program_id, prompt, namespace)

    def memory(self, program_id: str | None = None) -> MemoryView:
        """Every engine's memory summed (None, or a program that ran on none yet: the door
        sizes a new program against all of it); a program's: its latest model's engine's
        view of it (that engine holds its context and runs its next call, as ``bench`` shows
        the driver the replica a program last ran on)."""
        models = self._programs.get(program_id) if program_id is not None else None
        if models:
            return self.members[models[-1]].memory(program_id)
        return merged_memory({n: r.memory() for n, r in self.members.items()})

    def context_of(self, program_id: str) -> ProgramContext | None:
        """The program's context summed over the models holding some of it."""
        private = shared = 0
        for name in self._programs.get(program_id, ()):
            context = self.members[name].context_of(program_id)
            if context is not None:
                private += context.private_tokens
                shared += context.shared_tokens
        return ProgramContext(private, shared) if private or shared else None

    def node_ranks(self, program_id: str) -> dict[str, int]:
        """Empty: the fleet shows no data-parallel ranks (its members' are not merged)."""
        return {}

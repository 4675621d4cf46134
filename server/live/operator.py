"""Operator actions (preempt, cancel, node cancel, boost, drain, policy switch), each audited.

Every action, whether it succeeds or is refused, is written to the audit table (durably,
before the HTTP answer) and emitted as an ``operator.action`` event for the consoles; so is
what an operator key does on a tenant's route (:meth:`OperatorDesk.run`: a cancel, a finish,
a node). A call refused before it could act (a missing, unknown or tenant key on an operator
route: :meth:`OperatorDesk.refused`) is queued for the audit table without waiting (a flood of
refused calls must not wait on the store's commits). Its event is the operator's (no tenant's:
charged to the target program's owner, anonymous calls naming a program filled that tenant's
stored bytes; charged to the caller, a tenant's console polling an operator view filled its
own), and refusals of callers without an operator key are audited up to a rate
(:class:`RefusalBudget`), the rest counted in the log, so a flood cannot fill the disk. A
cancel is answered once its events have committed too (``committed``), so a crash right after
the answer cannot bring the program back running. The writers are injected
(``Store.writer.put_durable``, ``put`` and ``flush`` in the server), so this module does not
depend on the store.

What survives a restart: the actions whose effect is a standing setting (model pins, the
drain, the scheduling and tool-wait policy switches: :data:`REMEMBERED_ACTIONS`) are durable in
the audit table already; at start the server reads them back, oldest first, folds them into an
:class:`OperatorMemory` and :meth:`OperatorDesk.restore` puts them in force before any call is
served. One mechanism for all of them: the audit row is the record, no second table to keep in
step. A remembered decision overrides the configured value (``selection.role_pins``,
``runtime.policy``, ``runtime.kv_policy``), as the pins always did: the operator acted after the
configuration was written, and a restart must not silently undo that; an operator returns to
the configured value by switching back, which is remembered too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agentconsole.kvtiers.toolwait import available_tool_wait_policies
from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.models import Pins
from agentconsole.scheduler.policies import available, get_policy
from agentconsole.scheduler.program import Program
from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.server.live.errors import (
    InvalidRequest,
    ProgramClosed,
    ServiceError,
)
from agentconsole.server.live.service import CancelReport, NodeCancelReport, ProgramService
from agentconsole.server.refusals import RefusalBudget, is_keyless, refused_target

log = logging.getLogger(__name__)

Audit = Callable[[float, str, str, str, Mapping[str, Any], str], Awaitable[None]]
#: the audit row of a refused call, queued without waiting (see the module docstring)
Note = Callable[[float, str, str, str, Mapping[str, Any], str], None]
#: waits until everything handed to the store so far has committed
Committed = Callable[[], Awaitable[None]]


async def _nothing_to_commit() -> None:
    """Without a store (tests of the desk alone) nothing waits to commit."""


#: the audited names of the actions whose effect stands until another changes it (a preempt, a
#: boost or a cancel acts on what is running and ends with it): replayed at start
PIN_MODEL, DRAIN, POLICY = "pin_model", "drain", "policy"
REMEMBERED_ACTIONS = (PIN_MODEL, DRAIN, POLICY)


@dataclass(slots=True)
class OperatorMemory:
    """What the operator's succeeded standing actions left in force, folded from the audit
    log (oldest first): every pin and unpin in order (pins are per program and per role, so
    each is replayed), and the last drain and the last name of each policy switched. None: no
    operator ever set it, the configured value stands."""

    pins: list[Mapping[str, object]] = field(default_factory=list)
    draining: bool | None = None
    policy: str | None = None
    kv_policy: str | None = None

    @classmethod
    def of(cls, actions: Iterable[tuple[str, Mapping[str, object]]]) -> OperatorMemory:
        """Fold ``(action, args)`` pairs of :data:`REMEMBERED_ACTIONS`, oldest first (other
        actions are ignored)."""
        memory = cls()
        for action, args in actions:
            if action == PIN_MODEL:
                memory.pins.append(args)
            elif action == DRAIN:
                enabled = args.get("enabled")
                if isinstance(enabled, bool):
                    memory.draining = enabled
            elif action == POLICY:
                # a switch names only what it changed: a None field left that policy as it was
                memory.policy = _name(args.get("policy")) or memory.policy
                memory.kv_policy = _name(args.get("kv_policy")) or memory.kv_policy
        return memory


def cancel_json(report: CancelReport) -> dict[str, Any]:
    """The answer to a program cancel, the tenant's and the operator's alike."""
    return {"program_id": report.program_id, "state": "cancelled", **_stopped_json(report)}


def node_cancel_json(report: NodeCancelReport, program: Program) -> dict[str, Any]:
    """The answer to a node cancel, in the program cancel's shape: the node and the nodes it
    took with it, the calls aborted, the tools interrupted, flagged and left running, and the
    ``program``'s state after it: the program runs on, unless what the aborted calls were
    charged took it over its token quota (then it is cancelled)."""
    return {
        "program_id": report.program_id,
        "node_id": report.node_id,
        "state": "cancelled",
        "program_state": program.state.value,
        "cancelled_nodes": report.cancelled_nodes,
        **_stopped_json(report),
    }


def _stopped_json(report: CancelReport | NodeCancelReport) -> dict[str, Any]:
    """What both cancels answer of the calls and tools they stopped or left running."""
    return {
        "aborted_calls": report.aborted_calls,
        "interrupted_tools": report.interrupted_tools,
        "flagged_tools": report.flagged_tools,
        "running_tools": report.running_tools,
    }


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class OperatorDesk:
    """The operator's actions on the live service."""

    def __init__(
        self,
        service: ProgramService,
        audit: Audit,
        note: Note | None = None,
        committed: Committed = _nothing_to_commit,
    ) -> None:
        self.service = service
        self._audit = audit
        self._note = note
        self._committed = committed
        self.refusals = RefusalBudget()
        # standing actions one at a time, each audited before the next starts: a restart
        # replays them in audit order, which must be the order they took effect (a drain's
        # pause can wait seconds for the engine while an undrain overtakes it)
        self._standing = asyncio.Lock()

    def _emit(self, now: float, actor: str, action: str, target: str, result: str) -> None:
        program = self.service.controller.programs.get(target)
        self.service.hub.emit(
            Event(
                now,
                EventKind.OPERATOR_ACTION,
                program.program_id if program else "",
                tenant=program.tenant if program else "",
                data={"actor": actor, "action": action, "target": target, "result": result},
            )
        )

    async def _record(
        self, actor: str, action: str, target: str, args: Mapping[str, Any], result: str
    ) -> None:
        now = time.time()
        self._emit(now, actor, action, target, result)
        await self._audit(now, actor, action, target, args, result)

    def refused(
        self, actor: str, action: str, target: str, reason: str, *, operator: bool = False
    ) -> None:
        """Audit a call refused before it could act (``result`` ``refused: <reason>``), as an
        event of no tenant's; one of a caller without an operator key (``operator`` False)
        only within :attr:`refusals`' rate, those without a valid key (``actor`` as
        ``KeyRing.actor_of`` names them) all within one caller's share of it."""
        now, result = time.time(), f"refused: {reason}"
        if not operator and not self.refusals.take(now, actor, keyless=is_keyless(actor)):
            return
        target = refused_target(target)
        data = {"actor": actor, "action": action, "target": target, "result": result}
        self.service.hub.emit(Event(now, EventKind.OPERATOR_ACTION, data=data))
        if self._note is not None:
            self._note(now, actor, action, target, {}, result)

    async def run(
        self,
        actor: str,
        action: str,
        target: str,
        args: Mapping[str, Any],
        work: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Do ``work`` as operator ``actor`` and audit it: ``ok``, or ``refused: <why>`` when
        it raises the service's refusal (which is re-raised). Standing actions
        (:data:`REMEMBERED_ACTIONS`) run one at a time."""
        one_at_a_time = action in REMEMBERED_ACTIONS
        async with self._standing if one_at_a_time else contextlib.nullcontext():
            try:
                outcome = await work()
            except ServiceError as error:  # as every refused row reads: its status, its why
                await self._record(actor, action, target, args, f"refused: {error.status} {error}")
                raise
            await self._record(actor, action, target, args, "ok")
            return outcome

    def _running(self, program_id: str) -> Program:
        """The live program an action on what it runs or will run names (preempt, boost, a
        pin): ``NotFound`` when it is not in memory, ``ProgramClosed`` (409
        ``program_not_running``, audited as refused) once it has ended, as the action would
        change nothing or outlive it."""
        program = self.service.owned(None, program_id)
        if program.state.terminal:
            raise ProgramClosed(program_id, program.state.value, field="program_id")
        return program

    async def preempt(self, actor: str, program_id: str) -> dict[str, Any]:
        """Take the program's running calls off the GPU; they are requeued (409 for a program
        that ended: nothing of it runs)."""

        async def work() -> dict[str, Any]:
            self._running(program_id)
            done = []
            for call in self.service.calls_of(program_id):
                if await self.service.runtime.preempt(call.call_id):
                    self.service.controller.requeue_node(program_id, call.node_id, time.time())
                    done.append(call.call_id)
            return {"program_id": program_id, "preempted_calls": done}

        return await self.run(actor, "preempt", program_id, {}, work)

    async def cancel(self, actor: str, program_id: str) -> dict[str, Any]:
        """As the tenant cancel, for any tenant's program (one that left memory included:
        ``cancel_program`` rebuilds it from the store)."""

        async def work() -> dict[str, Any]:
            report = await self.service.cancel_program(None, program_id, reason="operator")
            # the cancel's events (not only its audit row) durable before the answer
            await self._committed()
            return cancel_json(report)

        return await self.run(actor, "cancel", program_id, {}, work)

    async def cancel_node(self, actor: str, program_id: str, node_id: str) -> dict[str, Any]:
        """As the tenant node cancel, for any tenant's program; audited as ``cancel_node`` of
        the program, the node in its arguments."""

        async def work() -> dict[str, Any]:
            report = await self.service.cancel_node(None, program_id, node_id, by="operator")
            await self._committed()  # the cancel's events durable before the answer
            # read after the commit's wait: a quota stop the aborted calls' charge caused
            # runs in the background and has ended the program by then
            return node_cancel_json(report, await self.service.program_of(None, program_id))

        return await self.run(actor, "cancel_node", program_id, {"node_id": node_id}, work)

    async def boost(self, actor: str, program_id: str, amount: float) -> dict[str, Any]:
        """Lower every later policy key of the program by ``amount`` and re-rank its queued
        calls (409 for a program that ended: it has no later calls)."""

        async def work() -> dict[str, Any]:
            self._running(program_id)
            self.service.controller.boost(program_id, amount)
            reranked = []
            for call in self.service.calls_of(program_id):
                request: GenerationRequest = call.request
                ticket = replace(request.ticket, boost=request.ticket.boost + amount)
                if await self.service.runtime.reprioritise(call.call_id, ticket):
                    reranked.append(call.call_id)
            return {"program_id": program_id, "boost": amount, "reranked_calls": reranked}

        return await self.run(actor, "boost", program_id, {"amount": amount}, work)

    async def drain(self, actor: str, enabled: bool) -> dict[str, Any]:
        """Stop (or resume) admitting calls into the runtime; running calls continue."""

        async def work() -> dict[str, Any]:
            if enabled:
                # refusing first: a call let in while the pause is acknowledged would wait on
                # a paused runtime
                self.service.draining = True
                try:
                    await self.service.runtime.pause()
                except BaseException:
                    self.service.draining = False  # not drained: the answer says it failed
                    raise
            else:
                await self.service.runtime.resume()
                self.service.draining = False
            return {"draining": enabled}

        return await self.run(actor, DRAIN, "", {"enabled": enabled}, work)

    async def set_policy(
        self, actor: str, policy: str | None, kv_policy: str | None
    ) -> dict[str, Any]:
        """Switch the scheduling and/or tool-wait policy live (InvalidRequest if unknown)."""
        args = {"policy": policy, "kv_policy": kv_policy}

        async def work() -> dict[str, Any]:
            service = self.service
            field = "policy"
            try:
                if policy is not None:
                    get_policy(policy)  # refuse an unknown name before changing anything
                field = "kv_policy"
                if kv_policy is not None:
                    service.use_kv_policy(kv_policy)
                field = "policy"
                if policy is not None:
                    service.use_policy(policy)
            except KeyError as error:  # the field named is the one refused
                raise InvalidRequest(str(error.args[0]), field=field) from None
            data = {"policy": service.policy.name, "kv_policy": service.kv_policy}
            service.hub.emit(Event(time.time(), EventKind.POLICY_CHANGED, data=data))
            return data

        return await self.run(actor, POLICY, "", args, work)

    def policies(self) -> dict[str, Any]:
        """The policies in force and the names :meth:`set_policy` accepts: the registries it
        validates against, so a console offers choices instead of a typed name."""
        return {
            "policy": self.service.policy.name,
            "kv_policy": self.service.kv_policy,
            "policies": available(),
            "kv_policies": available_tool_wait_policies(),
        }

    async def pin_model(
        self, actor: str, program_id: str | None, role: str | None, model: str | None
    ) -> dict[str, Any]:
        """Pin a program or a role to a served model (``model`` None: unpin); later calls
        choosing among candidates that include it run there (``ModelNotFound`` if it is not
        served; ``NotFound`` for a program not live, ``ProgramClosed`` for one that ended: a pin
        of it would outlive it, as a restart would not keep it). An unpin always answers."""
        args = {"program_id": program_id, "role": role, "model": model}
        target = program_id or (f"role:{role}" if role else "")

        async def work() -> dict[str, Any]:
            if program_id and model:
                self._running(program_id)
            pins = self.service.models.pin(program_id=program_id, role=role, model=model)
            return pins_json(pins)

        return await self.run(actor, PIN_MODEL, target, args, work)

    async def restore(self, memory: OperatorMemory) -> None:
        """Put the operator's remembered decisions back in force at start, before any call is
        served; they override the configured values (see the module docstring). Pins: role
        pins, and program pins of programs the restart brought back. A policy no longer
        registered is skipped with a warning, as a pin to a model no longer served is dropped.
        Through the same service calls as the live actions, so a restored switch reaches the
        driver and the runtime as a live one does; not audited again (nobody acted now)."""
        service = self.service
        configured_pins = service.models.selector.pins
        pins = service.models.restore_pins(memory.pins, service.controller.programs)
        configured = (service.policy.name, service.kv_policy)
        restored: list[str] = [  # the pins that differ from the configured ones
            *(
                f"role {role} pinned to {model or 'no model'}"
                for role, model in _changed(configured_pins.roles, pins.roles)
            ),
            *(
                f"program {pid} pinned to {model or 'no model'}"
                for pid, model in _changed(configured_pins.programs, pins.programs)
            ),
        ]
        # tool-wait policy first, then the scheduling policy: the order of a live switch
        for name, use, current in (
            (memory.kv_policy, service.use_kv_policy, service.kv_policy),
            (memory.policy, service.use_policy, service.policy.name),
        ):
            if name is None or name == current:
                continue
            try:
                use(name)
            except KeyError:
                log.warning("the operator's policy %r is no longer registered: not restored", name)
                continue
            restored.append(name)
        if memory.draining:
            # before the runtime starts: each runtime holds the pause until its engine is up
            await service.runtime.pause()
            service.draining = True
            restored.append("drain")
        if restored:
            log.info(
                "operator state restored from the audit log: %s (configured policy %s, "
                "kv-policy %s); switch back through /v1/operator to change it",
                ", ".join(restored),
                *configured,
            )


def _changed(before: Mapping[str, str], after: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """Each key whose model differs between two pin maps, with its model after (None: gone)."""
    keys = sorted(set(before) | set(after))
    return [(k, after.get(k)) for k in keys if before.get(k) != after.get(k)]


def door_json(service: ProgramService) -> dict[str, Any]:
    """The program door: its memory budget and what its started programs are predicted to
    need and hold now, who waits, and what it learned (each tenant's kinds' runs from the
    door to the end, which order its line; each tenant's kinds' peak private context, which
    sizes a program: a kind is a name in its tenant's namespace). Changes nothing."""
    driver = service.driver
    door = driver.door
    # sized from the engines' memory as programs arrive: none before the first, nor on a
    # runtime that reports no KV memory (the door then admits every program)
    sized = driver.budget.sized
    return {
        "enabled": driver.door_open,
        "order": "shortest-first" if door.shortest_first else "arrival",
        "budget_tokens": door.budget_tokens if sized else None,
        "reserved_tokens": driver.reserved_tokens,
        "predicted_tokens": door.used_tokens,
        "held_tokens": door.held_tokens,
        "waiting": door.parked,
        "waited_total": door.parked_total,
        "boundary_parks": door.boundary_parks,
        "runs": [
            {"tenant": tenant, "kind": kind, "expected_run_s": mean}
            for tenant, kind, mean in driver.run_times.learned()
        ],
        "peaks": [
            {"tenant": tenant, "kind": kind, "peak_private_tokens": peak}
            for (tenant, kind), peak in driver.growth.items()
        ],
    }


def pins_json(pins: Pins) -> dict[str, Any]:
    """The operator's model pins: program -> model, role -> model."""
    return {"programs": dict(pins.programs), "roles": dict(pins.roles)}

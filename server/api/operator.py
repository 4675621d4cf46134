"""``/v1/operator/*``: preempt, cancel, boost, drain, policy, model pins, the door, audit
(operator key only).

Every action is written to the audit table before the answer (refusals too) and emitted as an
``operator.action`` event; see :mod:`agentconsole.server.live.operator`. A call refused before
it acts (no key, an unknown key, a tenant key, a body or parameter refused) is audited too
(``errors.audit_refusal``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Controller, get, post
from litestar.params import JSONBody, QueryParameter

from agentconsole.server.api.contract import contract
from agentconsole.server.api.deps import LiveDep, PrincipalDep
from agentconsole.server.api.queryguard import strict_query
from agentconsole.server.api.schemas import (
    BoostIn,
    DrainIn,
    ModelPinIn,
    NodeId,
    PolicyIn,
    ProgramId,
)
from agentconsole.server.live.errors import Unavailable
from agentconsole.server.live.operator import door_json, pins_json
from agentconsole.server.store import Store, StoredAction
from agentconsole.server.store.errors import StoreClosedError

JSON = dict[str, Any]


class OperatorController(Controller):
    path = "/v1/operator"
    tags = ("operator",)

    @post(
        "/programs/{program_id:str}/preempt",
        status_code=200,
        summary="Preempt a program",
        opt=contract(404, 409),
    )
    async def preempt(
        self, program_id: ProgramId, live: LiveDep, operator_principal: PrincipalDep
    ) -> JSON:
        """Take the program's running calls off the GPU; they are requeued. 404 for a
        program not live, 409 for one that ended."""
        return await live.desk.preempt(operator_principal.key_id, program_id)

    @post(
        "/programs/{program_id:str}/cancel",
        status_code=200,
        summary="Cancel a program",
        opt=contract(404, 409),
    )
    async def cancel(
        self, program_id: ProgramId, live: LiveDep, operator_principal: PrincipalDep
    ) -> JSON:
        """As the tenant cancel, for any tenant's program."""
        return await live.desk.cancel(operator_principal.key_id, program_id)

    @post(
        "/programs/{program_id:str}/nodes/{node_id:str}/cancel",
        status_code=200,
        summary="Cancel a node and its descendants",
        opt=contract(404, 409),
    )
    async def cancel_node(
        self,
        program_id: ProgramId,
        node_id: NodeId,
        live: LiveDep,
        operator_principal: PrincipalDep,
    ) -> JSON:
        """As the tenant node cancel, for any tenant's program."""
        return await live.desk.cancel_node(operator_principal.key_id, program_id, node_id)

    @post(
        "/programs/{program_id:str}/boost",
        status_code=200,
        summary="Boost a program",
        opt=contract(404, 409),
    )
    async def boost(
        self,
        program_id: ProgramId,
        live: LiveDep,
        operator_principal: PrincipalDep,
        data: JSONBody[BoostIn | None] = None,
    ) -> JSON:
        """Re-rank the program's queued calls first (its policy keys lowered by ``amount``).
        404 for a program not live, 409 for one that ended."""
        amount = data.amount if data is not None else BoostIn().amount
        return await live.desk.boost(operator_principal.key_id, program_id, amount)

    @post("/drain", status_code=200, summary="Stop or resume admitting calls")
    async def drain(
        self, data: JSONBody[DrainIn], live: LiveDep, operator_principal: PrincipalDep
    ) -> JSON:
        """``enabled: true`` stops admitting new calls into the runtime (they wait);
        running calls continue. Remembered across a restart (as is ``enabled: false``)."""
        return await live.desk.drain(operator_principal.key_id, data.enabled)

    @post("/policy", status_code=200, summary="Switch policies live")
    async def policy(
        self, data: JSONBody[PolicyIn], live: LiveDep, operator_principal: PrincipalDep
    ) -> JSON:
        """Switch the scheduling policy and/or the tool-wait KV policy by name. Remembered
        across a restart, over the configured policies."""
        return await live.desk.set_policy(operator_principal.key_id, data.policy, data.kv_policy)

    @get("/policy", summary="The policies in force and their choices")
    async def policies(self, live: LiveDep, operator_principal: PrincipalDep) -> JSON:
        """``{policy, kv_policy, policies, kv_policies}``: the scheduling and tool-wait KV
        policies in force, and every name ``POST /v1/operator/policy`` accepts for each."""
        del operator_principal
        return live.desk.policies()

    @post(
        "/models/pins",
        status_code=200,
        summary="Pin a program or role to a model",
        opt=contract(404, 409),
    )
    async def pin_model(
        self, data: JSONBody[ModelPinIn], live: LiveDep, operator_principal: PrincipalDep
    ) -> JSON:
        """Pin a program or a role to a served model (``model: null`` unpins): calls that
        choose among candidates including it run there. Answers every pin; 404 for a model
        not served or a program not live, 409 for a program that ended."""
        return await live.desk.pin_model(
            operator_principal.key_id, data.program_id, data.role, data.model
        )

    @get("/models/pins", summary="The model pins")
    async def model_pins(self, live: LiveDep, operator_principal: PrincipalDep) -> JSON:
        """Program -> model and role -> model pins in force."""
        del operator_principal
        return pins_json(live.service.models.pins())

    @get("/door", summary="The program door and what it learned")
    async def door(self, live: LiveDep, operator_principal: PrincipalDep) -> JSON:
        """The admission door's budget and counts, and each kind's learned run and peak (what
        orders its line and sizes a program; every tenant's, so operators only)."""
        del operator_principal
        return door_json(live.service)

    @get("/audit", summary="The audit log", guards=[strict_query])
    async def audit(
        self,
        live: LiveDep,
        operator_principal: PrincipalDep,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
        before_id: Annotated[
            int | None,
            QueryParameter(
                ge=1, description="next_before_id of the previous page: continue with older rows"
            ),
        ] = None,
        actor: Annotated[
            str | None,
            QueryParameter(
                min_length=1,
                max_length=128,
                description="only this actor's rows (an operator's: operator-<key hash prefix>)",
            ),
        ] = None,
        target: Annotated[
            str | None,
            QueryParameter(min_length=1, max_length=256, description="only rows on this target"),
        ] = None,
    ) -> JSON:
        """Operator actions and audited refusals, newest first. Page with ``before_id`` (the
        previous answer's ``next_before_id``, null on the last page); ``actor`` and
        ``target`` keep the rows of one actor or on one target (an operator's actions past
        any number of tenants' refused calls)."""
        del operator_principal
        filters = AuditFilter(before_id=before_id, actor=actor, target=target)
        return await audit_page(live.store, limit, filters)


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which audit rows a page reads: older than ``before_id``, of ``actor``, on ``target``
    (None: any)."""

    before_id: int | None = None
    actor: str | None = None
    target: str | None = None


async def audit_page(store: Store, limit: int, filters: AuditFilter) -> JSON:
    """Up to ``limit`` audit rows matching ``filters``, newest first, and ``next_before_id``:
    where the next page starts (a keyset on the row id, so rows written meanwhile neither
    shift nor repeat a page), or None when no older row matches."""
    # refusals are noted without waiting (``put``): read what was noted before this call
    try:
        await asyncio.wrap_future(store.writer.flush(events=False))
    except StoreClosedError as error:
        raise Unavailable(f"the audit log cannot be read: {error}") from error
    # one row past the page tells whether another page follows
    rows = await asyncio.to_thread(
        store.repo.audit_log,
        limit=limit + 1,
        before_id=filters.before_id,
        actor=filters.actor,
        target=filters.target,
    )
    page = rows[:limit]
    more = len(rows) > limit
    return {
        "actions": [_action_json(row) for row in page],
        "next_before_id": page[-1].action_id if more else None,
    }


def _action_json(row: StoredAction) -> JSON:
    action = row.action
    return {
        "id": row.action_id,
        "ts": action.ts,
        "actor": action.actor,
        "action": action.action,
        "target": action.target,
        "args": dict(action.args),
        "result": action.result,
    }

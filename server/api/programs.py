"""``/v1/programs``: create, list, get (with the DAG), cancel, finish; nodes: add, get, cancel.

A tenant key sees only its tenant's programs: another tenant's program answers 404, exactly
like an unknown one. Operators see every tenant (and may filter by ``tenant``); what an
operator key changes here (create, cancel, finish, a node, a node's cancel) is audited like an
operator action (``OperatorDesk.run``: ``ok`` or ``refused: <why>``). On a runtime with
data-parallel ranks (SGLang ``--dp N``) a program's nodes carry ``dp_rank``
(``ProgramQueries``).

A create, a cancel, a finish and a node's declaration are answered once their events have
committed (:func:`_committed`): a client told that a program exists or has ended must find it
so after a crash right after the answer. When that wait (or an operator's audit row) is
refused, the answer is 503 ``x-should-retry: true`` though the change took effect in memory,
so the retry must get the answer the first attempt would have had: a finish, a cancel and a
declaration (the same node declared the same way) are idempotent, and a create's retry (same
tenant, same body) is recognised by :mod:`refusedcreates` instead of being told 409 for the
program its own first attempt opened. A create that carries ``Idempotency-Key`` is answered
by its key on every retry, across restarts too (:mod:`createkeys`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal

from litestar import Controller, get, post
from litestar.params import JSONBody, QueryParameter

from agentconsole.scheduler.program import Branch, NodeKind, Program, Quotas, ToolSpec
from agentconsole.server.api.auth import Principal
from agentconsole.server.api.contract import contract
from agentconsole.server.api.createkeys import (
    IdempotencyKey,
    KeyedCreate,
    key_reused,
    request_sha256,
)
from agentconsole.server.api.deps import Live, LiveDep, PrincipalDep
from agentconsole.server.api.queryguard import PageCursor, strict_query
from agentconsole.server.api.refusedcreates import create_request
from agentconsole.server.api.schemas import (
    NodeCreate,
    NodeId,
    ProgramCreate,
    ProgramFinish,
    ProgramId,
)
from agentconsole.server.live.errors import NotFound
from agentconsole.server.live.operator import cancel_json, node_cancel_json
from agentconsole.server.live.views import node_json

JSON = dict[str, Any]
State = Literal["running", "finished", "failed", "cancelled"]


async def _committed(live: Live) -> None:
    """Wait until everything handed to the store so far has committed, the events of the
    state change just made among them: the event lane commits fire-and-forget events only
    every ~250 ms (its linger), and a kill -9 in that window would bring the program back
    running (or not at all) while its client was told otherwise."""
    await asyncio.wrap_future(live.store.writer.flush())


async def _acting(
    live: Live,
    principal: Principal,
    action: str,
    target: str,
    args: Mapping[str, Any],
    work: Callable[[], Awaitable[JSON]],
) -> JSON:
    """``work()``; audited when an operator key does it."""
    if not principal.operator:
        return await work()
    return await live.desk.run(principal.key_id, action, target, args, work)


class ProgramsController(Controller):
    path = "/v1/programs"
    tags = ("programs",)

    @post("/", status_code=201, summary="Open a program", opt=contract(409, 429))
    async def create(
        self,
        data: JSONBody[ProgramCreate],
        live: LiveDep,
        principal: PrincipalDep,
        idempotency_key: IdempotencyKey = None,
    ) -> JSON:
        """Create a program for the caller's tenant (409 if the id exists, unless this repeats
        a create of the same tenant and body that opened it and was refused: see
        :mod:`refusedcreates`). With ``Idempotency-Key``, a create the tenant sent before with
        that key is answered with the program it opened (:mod:`createkeys`)."""
        quotas = Quotas(**data.quotas.model_dump()) if data.quotas else None
        refused, request = live.refused_creates, create_request(data)
        keys, tenant = live.create_keys, principal.tenant
        opened: Program | None = None

        async def open_program() -> Program:
            programs = live.service.controller.programs
            existing = programs.get(data.program_id) if data.program_id is not None else None
            if existing is not None and refused.is_retry(existing, tenant, request):
                return existing
            if data.program_id is not None:
                await live.service.check_new_id(tenant, data.program_id, explicit=True)
            return live.service.open_program(
                tenant,
                data.program_id,
                deadline_s=data.deadline_s,
                quotas=quotas,
                labels=data.labels,
            )

        async def acknowledged(program_id: str) -> JSON:
            await _committed(live)
            return await live.queries.get_program(principal.scope, program_id)

        async def replay(first: KeyedCreate, key: str, digest: str) -> JSON | None:
            """The answer to a repeat of the keyed create that opened ``first``; None when its
            program never committed (a crash between the key's commit and the program's)."""
            nonlocal opened
            if first.request_sha256 != digest:
                raise key_reused(key)
            opened = live.service.controller.programs.get(first.program_id)
            await _committed(live)  # a first attempt answered 503 committed nothing yet
            try:
                # the key's tenant, also for an operator key (whose scope is every tenant)
                return await live.queries.get_program(tenant, first.program_id)
            except NotFound:
                return None

        async def work() -> JSON:
            nonlocal opened
            if idempotency_key is None:
                opened = await open_program()
                return await acknowledged(opened.program_id)
            digest = request_sha256(data)
            async with keys.claim(tenant, idempotency_key):
                first = await keys.find(live.store, tenant, idempotency_key)
                replayed = None if first is None else await replay(first, idempotency_key, digest)
                if replayed is not None:
                    return replayed
                opened = await open_program()
                # committed with the program's creation, by the flush the answer waits for
                row = keys.remember(tenant, idempotency_key, opened.program_id, digest)
                live.store.writer.put(row)
                return await acknowledged(opened.program_id)

        args = data.model_dump(exclude_none=True)
        if idempotency_key is not None:
            args["idempotency_key"] = idempotency_key
        try:
            answer = await _acting(live, principal, "create", data.program_id or "", args, work)
        except BaseException:
            # open in memory, yet its client was not told so (503 retryable, or gone): its
            # retry is to be answered as this would have been, not 409
            if opened is not None:
                refused.remember(opened, request)
            raise
        if opened is not None:
            refused.answered(opened.program_id)
        return answer

    @get("/", summary="List programs", guards=[strict_query])
    async def list_programs(
        self,
        live: LiveDep,
        principal: PrincipalDep,
        state_filter: Annotated[State | None, QueryParameter(name="state")] = None,
        label: Annotated[str | None, QueryParameter(pattern=r"^[^:]{1,128}:.{0,256}$")] = None,
        # not named ``tenant``: that name is the caller's tenant (a dependency)
        tenant_filter: Annotated[str | None, QueryParameter(name="tenant", max_length=128)] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
        offset: Annotated[
            int,
            QueryParameter(
                ge=0,
                le=10_000_000,
                description="Deprecated: rows shift when programs start or end between"
                " reads; page with cursor",
            ),
        ] = 0,
        cursor: PageCursor = None,
    ) -> JSON:
        """Newest first; ``label`` is ``key:value``; ``tenant`` is for operators (a tenant key
        always sees its own tenant only). Page with ``cursor`` (the previous answer's
        ``next_cursor``, null on the last page): stable while programs start and end, where
        the deprecated ``offset`` skips or repeats rows; the two together are refused (422)."""
        scope = principal.scope if principal.scope is not None else tenant_filter
        return await live.queries.list_programs(
            scope, state=state_filter, label=label, limit=limit, offset=offset, cursor=cursor
        )

    @get("/{program_id:str}", summary="A program with its DAG", opt=contract(404))
    async def get_program(
        self, program_id: ProgramId, live: LiveDep, principal: PrincipalDep
    ) -> JSON:
        """The program, its nodes, edges, critical path and KV placement."""
        return await live.queries.get_program(principal.scope, program_id)

    @post(
        "/{program_id:str}/cancel",
        status_code=200,
        summary="Cancel a program",
        opt=contract(404, 409),
    )
    async def cancel(self, program_id: ProgramId, live: LiveDep, principal: PrincipalDep) -> JSON:
        """Cancel pending nodes, abort running calls (confirmed before this returns),
        interrupt read-only tools and flag side-effecting ones. With an operator key it is
        the operator cancel (audited)."""
        if principal.operator:
            return await live.desk.cancel(principal.key_id, program_id)
        report = await live.service.cancel_program(principal.scope, program_id)
        await _committed(live)
        return cancel_json(report)

    @post(
        "/{program_id:str}/nodes/{node_id:str}/cancel",
        status_code=200,
        summary="Cancel a node and its descendants",
        opt=contract(404, 409),
    )
    async def cancel_node(
        self, program_id: ProgramId, node_id: NodeId, live: LiveDep, principal: PrincipalDep
    ) -> JSON:
        """Cancel the node and its descendants not yet ended (a speculative branch dropped):
        their calls aborted (confirmed before this returns), read-only tools interrupted,
        side effects flagged; the program runs on, and a node naming a cancelled one as
        parent is 409. With an operator key it is the operator's (audited)."""
        if principal.operator:
            return await live.desk.cancel_node(principal.key_id, program_id, node_id)
        report = await live.service.cancel_node(principal.scope, program_id, node_id)
        await _committed(live)
        return node_cancel_json(report, await live.service.program_of(None, program_id))

    @post(
        "/{program_id:str}/finish",
        status_code=200,
        summary="Finish a program",
        opt=contract(404, 409),
    )
    async def finish(
        self,
        program_id: ProgramId,
        live: LiveDep,
        principal: PrincipalDep,
        data: JSONBody[ProgramFinish | None] = None,
    ) -> JSON:
        """The agent says the program is done (``success: false`` marks it failed)."""
        success = data.success if data is not None else True

        async def work() -> JSON:
            # one that left memory (retention, a restart) is answered as it would be there
            await live.service.program_of(principal.scope, program_id)
            live.service.finish_program(principal.scope, program_id, success=success)
            await _committed(live)
            return await live.queries.get_program(principal.scope, program_id)

        return await _acting(live, principal, "finish", program_id, {"success": success}, work)

    @post(
        "/{program_id:str}/nodes",
        status_code=201,
        summary="Add a node",
        opt=contract(404, 409, 429),
    )
    async def add_node(
        self,
        program_id: ProgramId,
        data: JSONBody[NodeCreate],
        live: LiveDep,
        principal: PrincipalDep,
    ) -> JSON:
        """Declare a node (an LLM call or a tool call) and its parents; declaring it again
        exactly so answers the node (a retry), otherwise an existing id is 409. Committed
        before the answer."""

        async def work() -> JSON:
            # one that left memory is rebuilt: an ended one answers 409, as in memory
            program = await live.service.program_of(principal.scope, program_id)
            tool = ToolSpec(data.tool) if data.tool else None
            node = live.service.nodes.declare(
                program,
                data.node_id,
                NodeKind(data.kind),
                tuple(data.parents),
                time.time(),
                tool=tool,
                branch=Branch(data.branch),
            )
            await _committed(live)
            return node_json(node)

        args = data.model_dump(exclude_none=True)
        return await _acting(live, principal, "add_node", program_id, args, work)

    @get("/{program_id:str}/nodes/{node_id:str}", summary="A node", opt=contract(404))
    async def get_node(
        self, program_id: ProgramId, node_id: NodeId, live: LiveDep, principal: PrincipalDep
    ) -> JSON:
        """One node with its timings and timeline."""
        return await live.queries.get_node(principal.scope, program_id, node_id)

"""``/v1/programs``: create, list, get (with the DAG), cancel, finish; nodes: add, get.

A tenant key sees only its tenant's programs: another tenant's program answers 404, exactly
like an unknown one. Operators see every tenant (and may filter by ``tenant``).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from litestar import Controller, get, post
from litestar.params import JSONBody, PathParameter, QueryParameter

from agentconsole.scheduler.program import Branch, NodeKind, Quotas, ToolSpec
from agentconsole.server.api.deps import LiveDep, PrincipalDep
from agentconsole.server.api.schemas import ID_PATTERN, NodeCreate, ProgramCreate, ProgramFinish
from agentconsole.server.live.views import node_json

JSON = dict[str, Any]
ProgramId = Annotated[str, PathParameter(pattern=ID_PATTERN, description="Program id")]
NodeId = Annotated[str, PathParameter(pattern=ID_PATTERN, description="Node id")]
State = Literal["running", "finished", "failed", "cancelled"]


class ProgramsController(Controller):
    path = "/v1/programs"
    tags = ("programs",)

    @post("/", status_code=201, summary="Open a program")
    async def create(
        self, data: JSONBody[ProgramCreate], live: LiveDep, principal: PrincipalDep
    ) -> JSON:
        """Create a program for the caller's tenant (409 if the id exists)."""
        quotas = Quotas(**data.quotas.model_dump()) if data.quotas else None
        if data.program_id is not None:
            await live.service.check_new_id(principal.tenant, data.program_id, explicit=True)
        program = live.service.open_program(
            principal.tenant,
            data.program_id,
            deadline_s=data.deadline_s,
            quotas=quotas,
            labels=data.labels,
        )
        return await live.queries.get_program(principal.scope, program.program_id)

    @get("/", summary="List programs")
    async def list_programs(
        self,
        live: LiveDep,
        principal: PrincipalDep,
        state_filter: Annotated[State | None, QueryParameter(name="state")] = None,
        label: Annotated[str | None, QueryParameter(pattern=r"^[^:]{1,128}:.{0,256}$")] = None,
        # not named ``tenant``: that name is the caller's tenant (a dependency)
        tenant_filter: Annotated[str | None, QueryParameter(name="tenant", max_length=128)] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
        offset: Annotated[int, QueryParameter(ge=0, le=10_000_000)] = 0,
    ) -> JSON:
        """Newest first; ``label`` is ``key:value``; ``tenant`` is for operators (a tenant key
        always sees its own tenant only)."""
        scope = principal.scope if principal.scope is not None else tenant_filter
        return await live.queries.list_programs(
            scope, state=state_filter, label=label, limit=limit, offset=offset
        )

    @get("/{program_id:str}", summary="A program with its DAG")
    async def get_program(
        self, program_id: ProgramId, live: LiveDep, principal: PrincipalDep
    ) -> JSON:
        """The program, its nodes, edges, critical path and KV placement."""
        return await live.queries.get_program(principal.scope, program_id)

    @post("/{program_id:str}/cancel", status_code=200, summary="Cancel a program")
    async def cancel(self, program_id: ProgramId, live: LiveDep, principal: PrincipalDep) -> JSON:
        """Cancel pending nodes, abort running calls (confirmed before this returns),
        interrupt read-only tools and flag side-effecting ones."""
        report = await live.service.cancel_program(principal.scope, program_id)
        return {
            "program_id": program_id,
            "state": "cancelled",
            "aborted_calls": report.aborted_calls,
            "interrupted_tools": report.interrupted_tools,
            "flagged_tools": report.flagged_tools,
        }

    @post("/{program_id:str}/finish", status_code=200, summary="Finish a program")
    async def finish(
        self,
        program_id: ProgramId,
        live: LiveDep,
        principal: PrincipalDep,
        data: JSONBody[ProgramFinish | None],
    ) -> JSON:
        """The agent says the program is done (``success: false`` marks it failed)."""
        success = data.success if data is not None else True
        live.service.finish_program(principal.scope, program_id, success=success)
        return await live.queries.get_program(principal.scope, program_id)

    @post("/{program_id:str}/nodes", status_code=201, summary="Add a node")
    async def add_node(
        self,
        program_id: ProgramId,
        data: JSONBody[NodeCreate],
        live: LiveDep,
        principal: PrincipalDep,
    ) -> JSON:
        """Declare a node (an LLM call or a tool call) and its parents."""
        program = live.service.owned(principal.scope, program_id)
        tool = ToolSpec(data.tool) if data.tool else None
        node = live.service.nodes.add(
            program,
            data.node_id,
            NodeKind(data.kind),
            tuple(data.parents),
            time.time(),
            tool=tool,
            branch=Branch(data.branch),
        )
        return node_json(node)

    @get("/{program_id:str}/nodes/{node_id:str}", summary="A node")
    async def get_node(
        self, program_id: ProgramId, node_id: NodeId, live: LiveDep, principal: PrincipalDep
    ) -> JSON:
        """One node with its timings and timeline."""
        return await live.queries.get_node(principal.scope, program_id, node_id)

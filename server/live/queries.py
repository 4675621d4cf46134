"""Program reads for the API: live programs from memory, the rest from the store.

A listing is answered by the store (so it covers programs of earlier runs and programs the
sweeper dropped from memory), after :meth:`StoreProjector.sync_for_read` so it includes every
change made before the request; rows of programs still in memory are then shown with their
live values. With the store's writer dead the listing still answers, from the rows committed
before it died (a program created in the second before has no row yet, and is missing from
the listing, not from ``GET /v1/programs/{id}``). It pages by keyset (``pagecursor.py``):
stable while programs start and end. Store reads run in a worker thread so they never block
the event loop.

On a runtime with data-parallel ranks (SGLang ``--dp N``) a program's nodes carry ``dp_rank``:
the rank that ran their latest attempt (None for a node that ran on none, e.g. a tool), as
long as the runtime remembers the program's ranks (``Runtime.node_ranks``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from agentconsole.server.live.errors import InvalidRequest, NotFound
from agentconsole.server.live.pagecursor import ProgramCursor
from agentconsole.server.live.projector import StoreProjector
from agentconsole.server.live.service import ProgramService
from agentconsole.server.live.views import (
    key_of,
    node_json,
    program_json,
    stored_node,
    stored_program,
    stored_summary,
    summary_json,
)
from agentconsole.server.store.store import Store

JSON = dict[str, Any]


class ProgramQueries:
    """``GET /v1/programs``, ``/v1/programs/{id}`` and ``/v1/programs/{id}/nodes/{node}``."""

    def __init__(self, service: ProgramService, store: Store, projector: StoreProjector) -> None:
        self.service = service
        self.store = store
        self.projector = projector
        #: a program's critical path's idle seconds as the live metrics count them (the
        #: projector's source, so a listing and a stored row agree)
        self.idle_of = projector.idle_of

    def _key(self, program_id: str) -> float | None:
        program = self.service.controller.programs[program_id]
        tickets = [c.request.ticket for c in self.service.calls_of(program_id)]
        return key_of(program, self.service.policy, tickets, time.time())

    def _generating(self, program_id: str) -> dict[str, int]:
        """Output tokens each of the program's calls in flight has produced so far, by node
        (the program's ``tokens_used`` counts a call at its end)."""
        return {c.node_id: c.received for c in self.service.calls_of(program_id)}

    def _with_calls_in_flight(self, program_id: str, out: JSON) -> JSON:
        """``out`` (a summary or a ``Program``) with the tokens its calls in flight produced:
        in ``tokens_used``, and as the output tokens of each running node."""
        generating = self._generating(program_id)
        out["tokens_used"] += sum(generating.values())
        for node in out.get("nodes", ()):
            _running_output(node, generating)
        return out

    def _with_ranks(self, program_id: str, nodes: Iterable[JSON]) -> None:
        """Add ``dp_rank`` to ``nodes`` when the runtime knows ranks for the program (a
        runtime without ranks knows none, and its nodes carry no ``dp_rank`` at all)."""
        ranks = self.service.runtime.node_ranks(program_id)
        if ranks:
            for node in nodes:
                node["dp_rank"] = ranks.get(str(node.get("node_id")))

    def live_summary(self, program_id: str) -> JSON:
        program = self.service.controller.programs[program_id]
        summary = summary_json(program, self._key(program_id), self.idle_of(program_id))
        return self._with_calls_in_flight(program_id, summary)

    async def list_programs(
        self,
        tenant: str | None,
        *,
        state: str | None,
        label: str | None,
        limit: int,
        offset: int = 0,
        cursor: str | None = None,
    ) -> JSON:
        """``{"programs": [ProgramSummary], "total": n, "next_cursor": str | None}``, newest
        first. ``cursor`` (a ``next_cursor`` of an earlier page) continues strictly after
        that page's last row; :class:`InvalidRequest` when it is not one. ``next_cursor`` is
        None on the last page. ``offset`` is the deprecated way (it skips or repeats rows
        when programs start or end between reads; refused with a cursor)."""
        if cursor is not None and offset:
            # an offset counted from a keyset position is nothing a client could mean
            raise InvalidRequest("give cursor or offset, not both", field="offset")
        after = ProgramCursor.decode(cursor).key if cursor is not None else None
        await self.projector.sync_for_read()
        repo = self.store.repo
        # one row more than asked says whether a next page exists, so the last page carries
        # no cursor and a client never makes a read that can only come back empty
        records = await asyncio.to_thread(
            repo.list_programs,
            tenant=tenant,
            state=state,
            label=label,
            limit=limit + 1,
            offset=offset,
            after=after,
        )
        more = len(records) > limit
        records = records[:limit]
        total = await asyncio.to_thread(self._count, tenant, state, label)
        live = self.service.controller.programs
        rows = [
            self.live_summary(r.program_id) if r.program_id in live else stored_summary(r)
            for r in records
        ]
        # from the stored row, not the JSON: the summary may round ``created_at``, and the
        # keyset must compare equal to the DOUBLE the store holds
        last = records[-1] if records and more else None
        next_cursor = ProgramCursor(last.created_at, last.program_id).encode() if last else None
        return {"programs": rows, "total": total, "next_cursor": next_cursor}

    def _count(self, tenant: str | None, state: str | None, label: str | None) -> int:
        # The repository has no count query; this mirrors list_programs' filters.
        where, params = ["TRUE"], []
        for column, value in (("tenant", tenant), ("state", state)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if label is not None:
            where.append("list_contains(labels, ?)")
            params.append(label)
        with self.store.cursor() as cur:
            row = cur.execute(
                f"SELECT count(*) FROM programs WHERE {' AND '.join(where)}", params
            ).fetchone()
        return int(row[0]) if row else 0

    async def get_program(self, tenant: str | None, program_id: str) -> JSON:
        """``Program`` (live, else stored), its nodes with their ranks; NotFound when unknown
        or another tenant's."""
        out = await self._program(tenant, program_id)
        self._with_ranks(program_id, out.get("nodes") or ())
        return out

    async def _program(self, tenant: str | None, program_id: str) -> JSON:
        program = self.service.controller.programs.get(program_id)
        if program is not None:
            self.service.owned(tenant, program_id)
            placement = self.service.runtime.snapshot().placement.get(program_id, {})
            idle = self.idle_of(program_id)
            out = program_json(program, self._key(program_id), placement, idle)
            out = self._with_calls_in_flight(program_id, out)
            return self.service.insertions.annotate_program(program_id, out)
        view = await asyncio.to_thread(self.store.repo.get_program, program_id)
        if view is None or (tenant is not None and view.program.tenant != tenant):
            raise NotFound(f"program {program_id!r} not found", field="program_id")
        return stored_program(view)

    async def get_node(self, tenant: str | None, program_id: str, node_id: str) -> JSON:
        """``Node`` (live, else stored) with its rank; NotFound when unknown or another
        tenant's."""
        out = await self._node(tenant, program_id, node_id)
        self._with_ranks(program_id, [out])
        return out

    async def _node(self, tenant: str | None, program_id: str, node_id: str) -> JSON:
        program = self.service.controller.programs.get(program_id)
        if program is not None:
            self.service.owned(tenant, program_id)
            node = program.nodes.get(node_id)
            if node is None:
                raise NotFound(f"node {node_id!r} not found", field="node_id")
            out = _running_output(node_json(node), self._generating(program_id))
            return self.service.insertions.annotate_node(program_id, out)
        view = await asyncio.to_thread(self.store.repo.get_program, program_id)
        if view is None or (tenant is not None and view.program.tenant != tenant):
            raise NotFound(f"program {program_id!r} not found", field="program_id")
        for record in view.nodes:
            if record.node_id == node_id:
                return stored_node(record)
        raise NotFound(f"node {node_id!r} not found", field="node_id")


def _running_output(node: JSON, generating: dict[str, int]) -> JSON:
    """A running node's ``output_tokens``: what its call has produced so far."""
    if node["state"] == "running" and node["node_id"] in generating:
        node["output_tokens"] = generating[node["node_id"]]
    return node

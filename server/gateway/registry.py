"""The tool registry: definitions persisted in the store's ``tools`` table, served from a
cache of compiled validators (a schema is compiled once, at registration or load).

A tenant's tools are bounded in number and in bytes (:class:`.toolbounds.ToolBounds`, the
``limits.tools`` and ``limits.tool_bytes`` settings); deleting one of its tools gives its share
back. Platform tools (the operator's) are not bounded: they are the server's own configuration.

A deleted tool leaves the cache once its row's delete has committed: calls that already
resolved it (running, or on their way to the executor) keep their definition and finish as
they would have; every later call, report or listing sees the name as one nobody registered.

A stored tool whose schema the current rules refuse is not served (nor listed, nor counted in
its owner's bounds), but its owner can still delete it (``DELETE /v1/tools/{name}``), or
replace it by registering the name again: its row would otherwise stay in the store for good.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from jsonschema.protocols import Validator

from agentconsole.server.gateway.definition import ToolDefinition
from agentconsole.server.gateway.errors import InvalidTool, TenantLimitReached
from agentconsole.server.gateway.ports import StoredBytes, port_errors
from agentconsole.server.gateway.schema_rules import check_parameters_schema
from agentconsole.server.gateway.toolbounds import ToolBounds
from agentconsole.server.gateway.toolcursor import ToolCursor
from agentconsole.server.store import Store, ToolRecord
from agentconsole.server.store.sqlconn import SqlConnection

log = logging.getLogger(__name__)
#: a sort key of a listing: a name, or a ``(name, owner)``
K = TypeVar("K", str, tuple[str, str])

#: what one page of ``GET /v1/tools`` holds at most, whatever its ``limit`` (at least one
#: tool): 1,000 tools of 64 KiB would be a 64 MB answer
MAX_PAGE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CompiledTool:
    """A definition with its argument validator and what its row takes in the store."""

    definition: ToolDefinition
    validator: Validator
    stored_bytes: int


@dataclass(frozen=True, slots=True)
class ToolPage:
    """One page of a listing: its tools, and the cursor of the next page (None: the last)."""

    tools: list[ToolDefinition]
    next_cursor: ToolCursor | None


def stored_bytes(definition: ToolDefinition) -> int:
    """What ``definition``'s row takes in the store, counted as an event is
    (``live.tenants.event_bytes``): a fixed 48 bytes, its name and owner, and its schema and
    other fields as JSON text, in UTF-8."""
    record = definition.to_record()
    flags = json.dumps(record.flags, separators=(",", ":"))
    texts = (record.name, record.tenant, record.json_schema, flags)
    return 48 + sum(len(text.encode()) for text in texts)


class ToolRegistry:
    """Every registered tool, keyed by ``(owner tenant, name)``; ``""`` owns platform tools.

    Only the ``serve`` process writes the table, so the cache is the truth once
    :meth:`load` ran; a registration is in the cache only after it is durable, and a deleted
    tool leaves it only after its delete is. ``stored``: the tenants' stored-bytes budgets,
    charged with each tenant's tool definitions (none: not counted). ``bounds``: what one
    tenant's tools may take.
    """

    def __init__(
        self, store: Store, stored: StoredBytes | None = None, bounds: ToolBounds | None = None
    ) -> None:
        self._store = store
        self._stored = stored
        self.bounds = bounds or ToolBounds()
        self._tools: dict[tuple[str, str], CompiledTool] = {}
        #: owner -> its tools' names, sorted (a page starts by bisection)
        self._names: dict[str, list[str]] = {}
        #: every ``(name, owner)``, sorted: the operator's listing
        self._keys: list[tuple[str, str]] = []
        #: owner -> the stored bytes of its tools together
        self._bytes: dict[str, int] = {}
        #: stored tools :meth:`load` skipped (their schema refused), until deleted or replaced:
        #: found by their owner's delete only (no more than the store held at start-up)
        self._unservable: dict[tuple[str, str], ToolDefinition] = {}
        # a registration checks the owner's bounds, then waits for its durable write: two at
        # once could both pass the check, so they take turns (registrations and deletes are
        # rare; a delete takes its turn too, so a registration and a delete of one name
        # commit, and reach the cache, in the order they were taken)
        self._writing = asyncio.Lock()

    def load(self) -> int:
        """Read every stored tool into the cache (blocking; call once at start-up).

        A stored schema the current rules refuse is skipped with a warning rather than
        served unchecked (its owner may still delete it, :meth:`delete`). Tools stored
        before the per-tenant bounds existed are all loaded; the bounds then refuse new ones
        only. Returns how many tools were loaded (the skipped ones not counted).
        """
        names = ", ".join(ToolRecord.SPEC.names)
        with self._store.cursor() as cur:
            rows = cur.execute(f"SELECT {names} FROM tools").fetchall()
        for row in rows:
            definition = ToolDefinition.from_record(ToolRecord.from_row(row))
            try:
                validator = check_parameters_schema(definition.parameters)
            except InvalidTool as error:
                log.warning(
                    "stored tool %r of %r skipped (its owner may delete or replace it): %s",
                    definition.name,
                    definition.tenant,
                    error.message,
                )
                self._unservable[(definition.tenant, definition.name)] = definition
                continue
            self._put(CompiledTool(definition, validator, stored_bytes(definition)))
        return len(self._tools)

    def charge_loaded(self) -> None:
        """Charge each tenant's stored bytes with its loaded tools (on the event loop, once
        after :meth:`load`: the store's own count at start-up has no tools)."""
        if self._stored is None:
            return
        for owner, nbytes in self._bytes.items():
            self._stored.charge_bytes(owner, nbytes)

    async def register(self, definition: ToolDefinition, validator: Validator) -> ToolDefinition:
        """Persist ``definition`` (replacing one of the same owner and name, whose
        ``created_at`` is kept), then serve it. Calls already running keep the old one.

        Raises :class:`TenantLimitReached` past the owner's bounds (a replacement counts its
        new size in place of the old one), and the core's stored-bytes refusal when the
        owner's storage is full and the definition would take more of it."""
        key = (definition.tenant, definition.name)
        async with self._writing:
            old = self._tools.get(key)
            if old is not None:
                definition = replace(definition, created_at=old.definition.created_at)
            compiled = CompiledTool(definition, validator, stored_bytes(definition))
            growth = compiled.stored_bytes - (old.stored_bytes if old is not None else 0)
            if definition.tenant:
                self._check_bounds(definition.tenant, compiled, new=old is None)
                if growth > 0 and self._stored is not None:
                    async with port_errors():  # the core's 429 as the gateway answers it
                        self._stored.check_stored(definition.tenant)
            await asyncio.wrap_future(self._store.writer.put_durable(definition.to_record()))
            self._unservable.pop(key, None)  # its row, if load skipped one, is this one now
            self._put(compiled)
            if self._stored is not None:
                if growth > 0:
                    self._stored.charge_bytes(definition.tenant, growth)
                else:
                    self._stored.refund_bytes(definition.tenant, -growth)
        return definition

    async def delete(self, owner: str, name: str) -> ToolDefinition | None:
        """Delete ``owner``'s tool ``name`` (``""``: the platform's) durably, then stop serving
        it, and give its share of the owner's bounds and stored bytes back. A stored tool
        :meth:`load` skipped is deleted too (its row only: it was neither served nor
        counted). Returns the deleted definition; ``None`` when ``owner`` has no tool of that
        name (nothing is written). Calls that resolved the tool before keep it (see the
        module docstring)."""
        async with self._writing:
            key = (owner, name)
            compiled = self._tools.get(key)
            if compiled is None:
                unservable = self._unservable.get(key)
                if unservable is not None:
                    await self._delete_row(owner, name)
                    del self._unservable[key]
                return unservable
            await self._delete_row(owner, name)
            self._drop(owner, name)
            if owner and self._stored is not None:
                self._stored.refund_bytes(owner, compiled.stored_bytes)
        return compiled.definition

    async def _delete_row(self, owner: str, name: str) -> None:
        """Delete the stored row of ``owner``'s tool ``name``, returning once it is durable."""
        await asyncio.wrap_future(self._store.writer.call(partial(_delete_row, owner, name)))

    def _check_bounds(self, owner: str, compiled: CompiledTool, *, new: bool) -> None:
        count = len(self._names.get(owner, ()))
        max_tools, max_bytes = self.bounds.tools, self.bounds.tool_bytes
        if new and count >= max_tools:
            raise TenantLimitReached(
                f"tenant {owner!r} has {count} tools registered, its limit is "
                f"{max_tools} (limits.tools); replacing or deleting one of them still passes",
                field="limits.tools",
                limit=max_tools,
            )
        old = self._tools.get((owner, compiled.definition.name))
        held = self._bytes.get(owner, 0) - (old.stored_bytes if old is not None else 0)
        # a replacement that does not grow passes: tools stored before the bound was lowered
        # may hold more than it, and their owner must still be able to shrink them
        grows = old is None or compiled.stored_bytes > old.stored_bytes
        if grows and held + compiled.stored_bytes > max_bytes:
            raise TenantLimitReached(
                f"tenant {owner!r}'s tools take {held} bytes without this one, which takes "
                f"{compiled.stored_bytes}; the limit of its tools together is "
                f"{max_bytes} bytes (limits.tool_bytes)",
                field="limits.tool_bytes",
                limit=max_bytes,
            )

    def _put(self, compiled: CompiledTool) -> None:
        """Serve ``compiled``, in place of the tool of its owner and name if there is one."""
        owner, name = compiled.definition.tenant, compiled.definition.name
        old = self._tools.get((owner, name))
        self._tools[(owner, name)] = compiled
        held = self._bytes.get(owner, 0) - (old.stored_bytes if old is not None else 0)
        self._bytes[owner] = held + compiled.stored_bytes
        if old is None:
            bisect.insort(self._names.setdefault(owner, []), name)
            bisect.insort(self._keys, (name, owner))

    def _drop(self, owner: str, name: str) -> None:
        """Stop serving ``owner``'s tool ``name`` (which is served)."""
        compiled = self._tools.pop((owner, name))
        left = self._bytes.get(owner, 0) - compiled.stored_bytes
        names = self._names[owner]
        del names[bisect.bisect_left(names, name)]
        del self._keys[bisect.bisect_left(self._keys, (name, owner))]
        if names:
            self._bytes[owner] = left
        else:  # no empty entries: a tenant that registers and deletes leaves nothing behind
            del self._names[owner]
            self._bytes.pop(owner, None)

    def resolve(self, tenant: str, name: str) -> CompiledTool | None:
        """The tool ``name`` as ``tenant`` sees it: its own, else the platform's if open to
        ``tenant``; ``None`` otherwise. Another tenant's tool of that name and a platform tool
        not open to ``tenant`` are invisible alike: a call or report naming one is answered as
        for a name nobody registered, so the answer does not tell that it exists."""
        compiled = self._tools.get((tenant, name)) or self._tools.get(("", name))
        if compiled is None or not compiled.definition.allows(tenant):
            return None
        return compiled

    def visible(self, tenant: str, *, operator: bool) -> list[ToolDefinition]:
        """Tools ``tenant`` may call, by name (its own shadowing a platform tool of the same
        name, as :meth:`resolve` does); operators see every tool, by name then owner."""
        return [t.definition for t in self._listing(tenant, operator=operator, after=None)]

    def page(
        self, tenant: str, *, operator: bool, after: ToolCursor | None, limit: int
    ) -> ToolPage:
        """At most ``limit`` tools of :meth:`visible`'s listing strictly after ``after``, and
        at most :data:`MAX_PAGE_BYTES` of them (one tool at least); the next page's cursor
        when more follow."""
        listing = self._listing(tenant, operator=operator, after=after)
        tools: list[CompiledTool] = []
        nbytes = 0
        for compiled in listing:
            full = len(tools) >= limit or nbytes + compiled.stored_bytes > MAX_PAGE_BYTES
            if tools and full:  # one more exists: the page is not the last
                last = tools[-1].definition
                return ToolPage([t.definition for t in tools], ToolCursor(last.name, last.tenant))
            tools.append(compiled)
            nbytes += compiled.stored_bytes
        return ToolPage([t.definition for t in tools], None)

    def _listing(
        self, tenant: str, *, operator: bool, after: ToolCursor | None
    ) -> Iterator[CompiledTool]:
        """:meth:`visible`'s order from strictly after ``after``, lazily: a page reads what
        it returns (and one tool more), not the whole registry."""
        if operator:
            position = None if after is None else (after.name, after.owner)
            for name, owner in _after(self._keys, position):
                yield self._tools[(owner, name)]
            return
        # a tenant's listing is by name alone (one tool a name): after the cursor's name
        own, platform = self._names.get(tenant, []), self._names.get("", [])
        name_after = None if after is None else after.name
        previous = None
        for name in heapq.merge(_after(own, name_after), _after(platform, name_after)):
            if name == previous:  # its own tool and a platform tool of that name: one answer
                continue
            previous = name
            compiled = self.resolve(tenant, name)
            if compiled is not None:
                yield compiled


def _delete_row(owner: str, name: str, con: SqlConnection) -> None:
    """Delete the stored row of ``owner``'s tool ``name`` (in the writer's transaction)."""
    con.execute("DELETE FROM tools WHERE tenant = ? AND name = ?", [owner, name])


def _after(items: Sequence[K], position: K | None) -> Iterator[K]:
    """The items of sorted ``items`` greater than ``position`` (all for None), found by
    bisection and read in place (no copy of the list)."""
    start = 0 if position is None else bisect.bisect_right(items, position)
    for index in range(start, len(items)):
        yield items[index]

"""The tool registry: definitions persisted in the store's ``tools`` table, served from a
cache of compiled validators (a schema is compiled once, at registration or load)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

from jsonschema.protocols import Validator

from agentconsole.server.gateway.definition import ToolDefinition
from agentconsole.server.gateway.errors import InvalidTool
from agentconsole.server.gateway.schema_rules import check_parameters_schema
from agentconsole.server.store import Store, ToolRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompiledTool:
    """A definition with its argument validator."""

    definition: ToolDefinition
    validator: Validator


class ToolRegistry:
    """Every registered tool, keyed by ``(owner tenant, name)``; ``""`` owns platform tools.

    Only the ``serve`` process writes the table, so the cache is the truth once
    :meth:`load` ran; a registration is in the cache only after it is durable.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._tools: dict[tuple[str, str], CompiledTool] = {}

    def load(self) -> int:
        """Read every stored tool into the cache (blocking; call once at start-up).

        A stored schema the current rules refuse is skipped with a warning rather than
        served unchecked. Returns how many tools were loaded.
        """
        names = ", ".join(ToolRecord.SPEC.names)
        with self._store.cursor() as cur:
            rows = cur.execute(f"SELECT {names} FROM tools").fetchall()
        for row in rows:
            definition = ToolDefinition.from_record(ToolRecord.from_row(row))
            try:
                validator = check_parameters_schema(definition.parameters)
            except InvalidTool as error:
                log.warning("stored tool %r skipped: %s", definition.name, error.message)
                continue
            self._tools[(definition.tenant, definition.name)] = CompiledTool(definition, validator)
        return len(self._tools)

    async def register(self, definition: ToolDefinition, validator: Validator) -> ToolDefinition:
        """Persist ``definition`` (replacing one of the same owner and name, whose
        ``created_at`` is kept), then serve it. Calls already running keep the old one."""
        old = self._tools.get((definition.tenant, definition.name))
        if old is not None:
            definition = replace(definition, created_at=old.definition.created_at)
        await asyncio.wrap_future(self._store.writer.put_durable(definition.to_record()))
        self._tools[(definition.tenant, definition.name)] = CompiledTool(definition, validator)
        return definition

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
        if operator:
            every = [t.definition for t in self._tools.values()]
            return sorted(every, key=lambda d: (d.name, d.tenant))
        names = {name for owner, name in self._tools if owner in (tenant, "")}
        tools = [self.resolve(tenant, name) for name in names]
        return sorted((t.definition for t in tools if t is not None), key=lambda d: d.name)

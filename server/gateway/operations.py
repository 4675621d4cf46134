"""Operator views and decisions on tool calls: list intents (``needs_reconcile`` first of
all) and settle one by hand. Every decision is audited, and one that took effect is told to
:attr:`ToolOperations.reconciled` (a ``tool.reconciled`` event on the feed, so every
console's Tools view refreshes at once, not at its next poll)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agentconsole.server.gateway.audit import AuditActor, Auditor
from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.errors import Conflict, GatewayError, InvalidRequest, ToolNotFound
from agentconsole.server.gateway.outcome import encode_result
from agentconsole.server.gateway.request import parse_body
from agentconsole.server.store import CommitOutcome, IntentRecord, IntentState, Store
from agentconsole.server.store.jsonutil import JSONValue


def intent_json(record: IntentRecord) -> dict[str, JSONValue]:
    """The API shape of one tool intent."""
    return {
        "tool_call_id": record.tool_call_id,
        "program_id": record.program_id,
        "node_id": record.node_id,
        "tool": record.tool,
        "side_effect": record.side_effect,
        "idempotent": record.idempotent,
        "state": record.state.value,
        "epoch": record.epoch,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "error": record.error,
    }


class ToolOperations:
    """``GET /v1/operator/tool-calls`` and ``POST .../{tool_call_id}/reconcile``."""

    def __init__(self, store: Store, audit: Auditor, config: GatewayConfig) -> None:
        self._store = store
        self._audit = audit
        self._config = config
        #: told of every reconcile that took effect (the intent as it is now, the action), so
        #: the event feed says it at once (the extension wires the program service's)
        self.reconciled: Callable[[IntentRecord, str], None] | None = None

    async def list(
        self, state: str | None, program_id: str | None, limit: int
    ) -> list[dict[str, JSONValue]]:
        """Intents, most recently changed first; ``state`` must be an intent state."""
        try:
            wanted = None if state is None else IntentState(state)
        except ValueError as error:
            states = ", ".join(s.value for s in IntentState)
            raise InvalidRequest(f"state must be one of {states}", field="state") from error
        records = await asyncio.to_thread(
            self._store.repo.list_intents,
            state=wanted,
            program_id=program_id,
            limit=max(1, min(limit, 1000)),
        )
        return [intent_json(r) for r in records]

    async def reconcile(
        self, actor: AuditActor, tool_call_id: str, raw: bytes
    ) -> dict[str, JSONValue]:
        """Settle a ``needs_reconcile`` call: ``{"action": "commit", "result": ...}`` records
        what a human established happened (replayed from now on); ``{"action": "retry"}``
        allows exactly one new execution with the same key. Raises 404 for an unknown id and
        409 for a call in any other state; nothing changes then. Audited as ``actor`` (the
        operator's key id)."""
        try:
            body = parse_body(raw, self._config.max_body_bytes)
            action = body.get("action")
            if set(body) - {"action", "result"} or action not in ("commit", "retry"):
                raise InvalidRequest(
                    'body must be {"action": "commit", "result": ...} or {"action": "retry"}'
                )
            if action == "retry" and "result" in body:
                raise InvalidRequest("a retry takes no result", field="result")
            text = encode_result(body.get("result"), 0.0) if action == "commit" else None
            outcome = await asyncio.wrap_future(self._store.intents.reconcile(tool_call_id, text))
            if outcome is CommitOutcome.UNKNOWN_CALL:
                raise ToolNotFound(f"no tool call {tool_call_id[:80]!r}", field="tool_call_id")
            if outcome is not CommitOutcome.ACCEPTED:
                raise Conflict("only a needs_reconcile tool call can be reconciled")
        except GatewayError as error:
            self._audit.rejected(actor, "tool.reconcile", f"tool_call:{tool_call_id}", error, {})
            raise
        self._audit.record(
            actor, "tool.reconcile", f"tool_call:{tool_call_id}", "ok", {"action": str(action)}
        )
        record = await asyncio.to_thread(self._store.repo.get_intent, tool_call_id)
        if record is not None and self.reconciled is not None:
            self.reconciled(record, str(action))
        return intent_json(record) if record is not None else {"tool_call_id": tool_call_id}

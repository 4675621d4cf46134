"""Audit records of the gateway: every rejected call or registration, every registration and
every reconcile, written to the store's ``operator_actions`` table (``GET /v1/operator/audit``).

Records are queued without waiting (a flood of rejected calls must not wait on fsync); they
commit with the writer's next batch (within its 200 ms linger, ``StoreConfig.linger_s``), so a
crash can lose the last ~250 ms of them.
The arguments of a rejected call are never stored, only where they failed: a refusal's
message is stored as :meth:`GatewayError.audit_message` gives it (for a schema error, the
failed rule without the value it quotes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from agentconsole.server.gateway.errors import GatewayError
from agentconsole.server.store import OperatorAction, StoreWriter
from agentconsole.server.store.jsonutil import JSONValue

log = logging.getLogger(__name__)


class Auditor:
    """Writes audit rows; counts rejections by error type (for tests and metrics)."""

    def __init__(self, writer: StoreWriter) -> None:
        self._writer = writer
        self.rejections: dict[str, int] = {}

    def record(
        self, actor: str, action: str, target: str, result: str, args: Mapping[str, JSONValue]
    ) -> None:
        """Queue one audit row (never blocks, never raises)."""
        self._writer.put(
            OperatorAction(
                ts=time.time(), actor=actor, action=action, target=target, result=result, args=args
            )
        )

    def rejected(
        self, actor: str, action: str, target: str, error: GatewayError, context: Mapping[str, str]
    ) -> None:
        """Record that ``action`` by ``actor`` on ``target`` was refused with ``error``."""
        self.rejections[error.type] = self.rejections.get(error.type, 0) + 1
        message = error.audit_message()
        args: dict[str, JSONValue] = {"status": error.status, "message": message[:300]}
        if error.field is not None:
            args["field"] = error.field[:200]
        args["type"] = error.type
        args.update(context)
        # the result reads as the core's refusals do (``OperatorDesk.refused``); the error's
        # type, status and message stay in ``args``
        self.record(actor, action, target, f"refused: {error.status} {message[:200]}", args)
        log.info("%s rejected for %s on %s: %s", action, actor, target, error.type)

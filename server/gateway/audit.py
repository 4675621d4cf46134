"""Audit records of the gateway: every rejected call or registration, every registration and
every reconcile, written to the store's ``operator_actions`` table (``GET /v1/operator/audit``).

Records are queued without waiting (a flood of rejected calls must not wait on fsync); they
commit with the writer's next batch (within its 200 ms linger, ``StoreConfig.linger_s``), so a
crash can lose the last ~250 ms of them.
The arguments of a rejected call are never stored, only where they failed: a refusal's
message is stored as :meth:`GatewayError.audit_message` gives it (for a schema error, the
failed rule without the value it quotes).

A tenant can make the gateway refuse as often as it can send, so its refusals are audited as
the core API's are (:mod:`agentconsole.server.refusals`): within the server's one
:class:`RefusalBudget` (600 a minute, shared with the core's refusals; an operator key's
refusals are always audited), the target cut to ``MAX_REFUSED_TARGET_CHARS``.

Rows name their caller as an :class:`AuditActor`: by the key id the core's audit names that
key by (``operator-<hash>``, ``key-<hash>``: :attr:`Principal.key_id`), so
``GET /v1/operator/audit?actor=key-<hash>`` lists one key's gateway actions with the rest of
its actions, and its refusals, core and gateway together, count against one caller's share of
the budget. A tenant key's rows also name its tenant (``args["tenant"]``): the key id alone
does not tell the operator whose key it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from agentconsole.server.api.auth import Principal
from agentconsole.server.gateway.errors import GatewayError
from agentconsole.server.refusals import RefusalBudget, refused_target
from agentconsole.server.store import OperatorAction, StoreWriter
from agentconsole.server.store.jsonutil import JSONValue

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AuditActor:
    """Whom a gateway audit row names (``name``), whether the caller holds an operator key
    (its refusals are audited past the budget: an operator is no flood), and the tenant a
    tenant key acts for (``None`` for an operator key: every one acts as ``operator``),
    written to the row's ``args`` as ``tenant``."""

    name: str
    operator: bool = False
    tenant: str | None = None

    @classmethod
    def of(cls, principal: Principal) -> AuditActor:
        """A key by its key id (``operator-<hash>``, ``key-<hash>``), as the core's own audit
        names it: a tenant's keys are its callers (two keys of one tenant are two, as the core
        counts them), and an operator key's tenant ``operator`` would not tell operators
        apart."""
        tenant = None if principal.operator else principal.tenant
        return cls(principal.key_id, principal.operator, tenant)

    @classmethod
    def of_tenant(cls, tenant: str, operator: bool = False) -> AuditActor:
        """A caller known only by its tenant (the gateway called without a principal, as
        tests and embedders do): named by that tenant."""
        return cls(tenant, operator, None if operator else tenant)

    def with_tenant(self, args: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
        """``args`` with the tenant of a tenant key added (an operator key's rows have none)."""
        return dict(args) if self.tenant is None else {**args, "tenant": self.tenant}


class Auditor:
    """Writes audit rows; counts rejections by error type (for tests and metrics), the ones
    past ``refusals`` included.

    ``refusals`` is the server's budget for refused calls (the core API's, so that both
    together stay within it); a gateway on its own gets one of its own."""

    def __init__(self, writer: StoreWriter, refusals: RefusalBudget | None = None) -> None:
        self._writer = writer
        self.refusals = refusals if refusals is not None else RefusalBudget()
        self.rejections: dict[str, int] = {}

    def record(
        self,
        actor: AuditActor,
        action: str,
        target: str,
        result: str,
        args: Mapping[str, JSONValue],
    ) -> None:
        """Queue one audit row (never blocks, never raises)."""
        self._queue(time.time(), actor.name, action, target, result, actor.with_tenant(args))

    def rejected(
        self,
        actor: AuditActor,
        action: str,
        target: str,
        error: GatewayError,
        context: Mapping[str, str],
    ) -> None:
        """Record that ``action`` by ``actor`` on ``target`` was refused with ``error``: for a
        tenant key, only within :attr:`refusals`, and the target cut as the core cuts its own.
        Every caller here holds a valid key (the app resolved it before the gateway)."""
        self.rejections[error.type] = self.rejections.get(error.type, 0) + 1
        now = time.time()
        if not actor.operator and not self.refusals.take(now, actor.name):
            return
        target = refused_target(target)
        message = error.audit_message()
        args: dict[str, JSONValue] = {"status": error.status, "message": message[:300]}
        if error.field is not None:
            args["field"] = error.field[:200]
        args["type"] = error.type
        args.update(context)
        args = actor.with_tenant(args)
        # the result reads as the core's refusals do (``OperatorDesk.refused``); the error's
        # type, status and message stay in ``args``
        result = f"refused: {error.status} {message[:200]}"
        self._queue(now, actor.name, action, target, result, args)
        log.info("%s rejected for %s on %s: %s", action, actor.name, target, error.type)

    def _queue(
        self,
        ts: float,
        actor: str,
        action: str,
        target: str,
        result: str,
        args: Mapping[str, JSONValue],
    ) -> None:
        self._writer.put(
            OperatorAction(
                ts=ts, actor=actor, action=action, target=target, result=result, args=args
            )
        )

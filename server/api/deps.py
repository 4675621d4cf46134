"""The objects the handlers use, and their Litestar dependency providers.

The lifespan of :func:`agentconsole.server.app.create_app` builds one :class:`Live` and puts it
in ``app.state.live``; handlers receive it (``live``) and the caller's :class:`Principal`
(``principal``, or ``operator_principal`` which also requires the operator role) by injection.
The tool gateway's handlers get ``principal`` too (an operator key's actions audited under its
key id there as here).

Every route but ``/health`` and ``/ready`` resolves ``principal`` (``operator_principal``
depends on it), so its provider is also where a write is refused while the store
cannot record it (:func:`refuse_unrecordable_write`): one gate for the core routes, the tool
gateway's and any extension's, none of them copied per route.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from litestar import Request
from litestar.di import NamedDependency, Provide
from litestar.params import SkipValidation

from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.server.api.auth import KeyRing, Principal
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.api.createkeys import CreateKeys
from agentconsole.server.api.errors import OPERATOR_PATH, ApiError, audit_refusal
from agentconsole.server.api.refusedcreates import RefusedCreates
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.observe import Observer
from agentconsole.server.live.operator import OperatorDesk
from agentconsole.server.live.queries import ProgramQueries
from agentconsole.server.live.service import ProgramService
from agentconsole.server.prometheus import PrometheusMetrics
from agentconsole.server.store.store import Store
from agentconsole.server.whatif.desk import WhatIfDesk


@dataclass(slots=True)
class Live:
    """Everything the running server holds (one per app)."""

    config: ServerConfig
    keys: KeyRing
    store: Store
    hub: EventHub
    service: ProgramService
    metrics: MetricsAggregator
    prometheus: PrometheusMetrics
    observer: Observer
    queries: ProgramQueries
    desk: OperatorDesk
    whatif: WhatIfDesk
    started_at: float = field(default_factory=time.time)
    #: creates refused after opening their program, whose retry is answered as they would be
    refused_creates: RefusedCreates = field(default_factory=RefusedCreates)
    #: the ``Idempotency-Key`` of each keyed create, whose retries it answers
    create_keys: CreateKeys = field(default_factory=CreateKeys)


LiveDep = NamedDependency[SkipValidation[Live]]
PrincipalDep = NamedDependency[SkipValidation[Principal]]


def provide_live(request: Request[Any, Any, Any]) -> Live:
    live: Live = request.app.state.live
    return live


#: the methods that record nothing: a dead store still serves them (the store's reads work)
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def refuse_unrecordable_write(request: Request[Any, Any, Any], live: Live) -> None:
    """503 ``unavailable`` (retryable) for a request that records state (every method but a
    read's: program and node writes, tool reports and calls, operator actions, all audited or
    evented) while the store's writer is dead: answered 2xx, what it did would be lost."""
    if request.scope["method"] not in READ_METHODS:
        live.service.require_store("this request")


def provide_principal(request: Request[Any, Any, Any], live: LiveDep) -> Principal:
    # Depending on ``live`` (not just reading app state) chains the two providers: Litestar
    # resolves providers of one level concurrently in an anyio task group, which costs more
    # than the providers themselves.
    authorization = request.headers.get("authorization")
    try:
        principal = live.keys.resolve(authorization)
    except ApiError as error:
        if request.scope["path"].startswith(OPERATOR_PATH):
            audit_refusal(request, live.desk, live.keys.actor_of(authorization), error)
        raise
    # after the key: a stranger learns nothing of the store it could not read at /ready;
    # not audited on an operator route, the audit log being what the dead store lost. A
    # tenant key on an operator route is left to the role check: its answer is 403 whatever
    # the store, and a 503 would have it retried for nothing
    if principal.operator or not request.scope["path"].startswith(OPERATOR_PATH):
        refuse_unrecordable_write(request, live)
    return principal


def provide_operator(
    request: Request[Any, Any, Any], principal: PrincipalDep, live: LiveDep
) -> Principal:
    if not principal.operator:
        error = ApiError(403, "this action needs an operator key")
        audit_refusal(request, live.desk, principal.key_id, error)
        raise error
    return principal


DEPENDENCIES: dict[str, Provide] = {
    "live": Provide(provide_live, sync_to_thread=False),
    "principal": Provide(provide_principal, sync_to_thread=False),
    "operator_principal": Provide(provide_operator, sync_to_thread=False),
}

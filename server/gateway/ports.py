"""The port through which the tool gateway tells the program core about tool nodes.

The server core's ``ProgramService`` implements :class:`ProgramPort`; the gateway only calls
it, so the gateway never imports the core. The Litestar handlers of
:mod:`agentconsole.server.gateway.routes` receive it by dependency injection under the name
``program_port`` (see :func:`agentconsole.server.gateway.routes.gateway_dependencies`), as a
:class:`ReportPort`: the tool reports' routes also need to tell an unknown program from a new
one.

Error contract of every method: raise :class:`ProgramNotFound` for a program that belongs to
another tenant (the API answers 404, never 403, so existence does not leak), or for a node the
core does not know (``tool_started``/``tool_finished`` only); :class:`ProgramClosed` (the
core's own, a subclass of its 409 ``Conflict``) for a program that no longer runs (finished,
failed or cancelled: 409 ``program_not_running``); and
``agentconsole.scheduler.controller.QuotaExceeded`` when the program's ``tool_calls`` quota
would be exceeded (429). An error with an integer 4xx ``status`` and a string ``type``
attribute (the core's own ``ServiceError`` family) is answered with that status and type, so
the core may raise its own errors instead. Anything else is a bug and reaches the client as a
5xx.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal, Protocol

from agentconsole.scheduler.controller import QuotaExceeded
from agentconsole.scheduler.program import ToolSpec
from agentconsole.server.gateway.errors import (
    GatewayError,
    ProgramNotFoundError,
    ProgramNotRunning,
    QuotaExceededError,
)

# re-exported: the port's contract names the core's own errors
from agentconsole.server.live.errors import NodeWithdrawn as NodeWithdrawn
from agentconsole.server.live.errors import ProgramClosed as ProgramClosed

ToolOutcome = Literal["ok", "fail", "timeout"]


class ProgramNotFound(LookupError):
    """The program (or node) is unknown to the caller's tenant: another tenant's, or absent."""

    def __init__(self, program_id: str, node_id: str | None = None) -> None:
        what = f"program {program_id!r}" + (f" node {node_id!r}" if node_id else "")
        super().__init__(f"{what} not found")
        self.program_id = program_id
        self.node_id = node_id


class ProgramPort(Protocol):
    """What the gateway needs from the program core (implemented by ``ProgramService``)."""

    async def check_program(self, tenant: str, program_id: str) -> None:
        """Authorise ``tenant`` to act on ``program_id`` without changing anything.

        An unknown id passes (it will be created on first sight by :meth:`ensure_tool_node`).
        Raises :class:`ProgramNotFound` for another tenant's program and
        :class:`ProgramClosed` for one that no longer runs. Called before any argument is
        validated, so a rejected call leaves no node behind.
        """

    async def ensure_tool_node(
        self, tenant: str, program_id: str, node_id: str, tool: ToolSpec
    ) -> None:
        """Create the program (first sight) and the tool node ``node_id`` if they do not exist.

        ``tool`` carries the registered flags (``side_effect``, ``idempotent``, ``timeout_s``),
        so a cancel can tell read-only tools (interrupted) from side effects (flagged).

        Idempotent: a retry of the same call finds the node and changes nothing (and must not
        count against the ``tool_calls`` quota again). Raises as :meth:`check_program`, plus
        ``QuotaExceeded`` when a new tool node would exceed the program's ``tool_calls``
        quota; nothing is created then.
        """

    async def tool_started(
        self, program_id: str, node_id: str, *, repeat: bool = False
    ) -> str | None:
        """The tool of ``node_id`` starts executing now: the program waits on a tool.

        ``repeat``: this repeats a start report that took effect but whose answer was refused
        (503: its commit met a full disk), so a node already running is that start, not a
        second one. Raises :class:`ProgramClosed` if the program was cancelled meanwhile, and
        a 409 (the core's ``NodeWithdrawn``) if the node was; the gateway then does not
        execute the tool. Returns the id the core knows the node by (the model's tool call's
        node when ``node_id`` is the agent's id of that call; None: ``node_id`` itself), which
        a node cancel names (``Runner.cancel_nodes``).
        """

    async def tool_finished(
        self,
        program_id: str,
        node_id: str,
        outcome: ToolOutcome,
        latency_s: float | None,
        result_bytes: int = 0,
    ) -> None:
        """The tool of ``node_id`` ended with ``outcome`` after ``latency_s`` seconds (``None``:
        unknown to the gateway, the core measures from the attempt's start); the store keeps
        ``result_bytes`` of its result.

        Also called when a committed result is replayed: a node still running (rebuilt so
        after a crash, its execution gone) must then end with ``outcome``; a node that never
        started (a crash lost its start) of a running program starts and ends, one attempt of
        ``latency_s``; a node that ended must be left as it is. Must not raise for a program
        cancelled meanwhile (the result is committed anyway); the gateway logs and swallows any
        error from this method.
        """


class StoredBytes(Protocol):
    """The tenants' stored-bytes budgets (``live.tenants.TenantBudgets``), which count a
    tenant's tool definitions with its events and results: the store's scan at start-up reads
    events and results only, so the gateway charges the tools it loaded, then each change."""

    def check_stored(self, tenant: str) -> None:
        """Raise the core's 429 (``limits.stored_bytes``) when ``tenant`` may store no more."""

    def charge_bytes(self, tenant: str, nbytes: int) -> None:
        """The store keeps ``nbytes`` more for ``tenant``."""

    def refund_bytes(self, tenant: str, nbytes: int) -> None:
        """The store keeps ``nbytes`` less for ``tenant``."""


class ReportPort(ProgramPort, Protocol):
    """The port of the gateway's routes (``ProgramService``'s): a :class:`ProgramPort` that can
    also check a program an agent's tool report names in its path."""

    async def check_program(
        self, tenant: str, program_id: str, *, must_exist: bool = False
    ) -> None:
        """As :meth:`ProgramPort.check_program`; with ``must_exist`` (a tool report: it never
        creates a program) an unknown id raises :class:`ProgramNotFound` exactly as another
        tenant's program does, so the answer does not tell whether the id is taken."""


def _refusal(error: Exception) -> GatewayError | None:
    """A gateway error for a core error that carries its own 4xx ``status`` and ``type``
    (the core's ``ServiceError`` family), so the port need not know the gateway's errors."""
    status, kind = getattr(error, "status", None), getattr(error, "type", None)
    if not isinstance(status, int) or not 400 <= status < 500 or not isinstance(kind, str):
        return None
    refusal = GatewayError(str(error), field=getattr(error, "field", None))
    refusal.status, refusal.type = status, kind
    refusal.headers.update(getattr(error, "headers", None) or {})
    return refusal


@asynccontextmanager
async def port_errors() -> AsyncIterator[None]:
    """Translate the program port's errors into the gateway's 4xx errors: the ones named in
    the module docstring, and any error carrying a 4xx ``status`` and a ``type``."""
    try:
        yield
    except GatewayError:
        raise
    except ProgramNotFound as error:
        raise ProgramNotFoundError(str(error), field="program_id") from error
    except ProgramClosed as error:  # the core's 409, told apart from its other conflicts
        raise ProgramNotRunning(str(error), extra={"state": error.state}) from error
    except QuotaExceeded as error:
        raise QuotaExceededError(
            str(error), extra={"quota": error.quota, "limit": error.limit}
        ) from error
    except Exception as error:
        refusal = _refusal(error)
        if refusal is None:
            raise
        raise refusal from error


def program_ended(refusal: GatewayError) -> bool:
    """Whether ``check_program``'s refusal (through :func:`port_errors`) says the program no
    longer runs. The port refuses only an id the tenant may not see (404: nothing may be
    replayed to it) or a program that ended: :class:`ProgramClosed` (409
    ``program_not_running``), or the quota that stopped the program."""
    return refusal.status != ProgramNotFoundError.status


def not_running(refusal: GatewayError) -> GatewayError:
    """The answer to a call on a program that ended (``refusal``: the port's, translated):
    409 ``program_not_running`` whatever the port's 409 says; another refusal (the quota that
    stopped the program) as it is, since it tells why."""
    if isinstance(refusal, ProgramNotRunning) or refusal.status != ProgramNotRunning.status:
        return refusal
    return ProgramNotRunning(refusal.message, field=refusal.field, extra=refusal.extra)


def ended_refusal(refusal: GatewayError) -> GatewayError:
    """The answer to ``refusal``, raised by a port method (through :func:`port_errors`) after
    ``check_program`` passed: a cancel that landed since is the port's :class:`ProgramClosed`,
    answered 409 ``program_not_running`` as a call on the cancelled program, whichever step
    of the call the cancel lands in; any other refusal (the port's 409 ``conflict`` for a node
    "already running" or cancelled, a quota, a 404) as it is. Told by the error's class, not
    by asking the port again."""
    return not_running(refusal) if isinstance(refusal.__cause__, ProgramClosed) else refusal

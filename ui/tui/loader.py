"""What each view needs from the API, fetched on a worker thread and returned as messages.

The app calls :func:`load` from a thread worker with the names of the visible view (and the
open program, if any) and posts what comes back. Failures become :class:`LoadFailed`
messages, never exceptions, so one broken endpoint does not stop the others from updating.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.message import Message

from agentconsole.httpclient import (
    ApiError,
    AuthenticationError,
    NotFoundError,
    PermissionDeniedError,
)
from agentconsole.ui.client.http import ConsoleApi
from agentconsole.ui.tui.messages import (
    AuditLoaded,
    DoorLoaded,
    KVLoaded,
    LoadFailed,
    OverviewLoaded,
    ProgramLoaded,
    ProgramsLoaded,
    ReadRefused,
    TenantsLoaded,
)

VIEWS = ("overview", "programs", "tenants", "kv", "audit", "events", "tools")
#: the door's read: no view of its own, the tenants view asks for it too (see ``DataSync``)
DOOR = "door"


AUDIT = "audit"
#: the tool calls that need an operator: read by their own worker (``DataSync``), on the
#: tools view, on a tool's feed event and on a slow timer (the top bar counts them)
TOOLS = "tools"
#: the reads only an operator key may make: refused to a tenant key (or an unknown one) once,
#: then not asked again
OPERATOR_READS = (DOOR, AUDIT, TOOLS)
#: the reads each view shows, whose failure marks it stale (the events view shows the feed,
#: whose state the top bar already says)
VIEW_READS: dict[str, tuple[str, ...]] = {
    "overview": ("overview",),
    "programs": ("programs",),
    "tenants": ("tenants", DOOR),
    "kv": ("kv",),
    "audit": (AUDIT,),
    "events": (),
    "tools": (TOOLS,),
}


def program_read(program_id: str) -> str:
    """The name of the read of ``program_id``'s detail (as its failures are named)."""
    return f"program {program_id}"


def operator_read(what: str, read: Callable[[], Message]) -> Message:
    """``read()``, or :class:`ReadRefused` for a key that may not make it (403), a key the
    server does not know (401: the dashboard's key is fixed for its life, so asking again
    cannot succeed) or a server without it (404, an older version): an answer to remember,
    not a failure to report on every poll (and a refused operator call the server audits
    each time)."""
    try:
        return read()
    except (AuthenticationError, PermissionDeniedError, NotFoundError) as error:
        return ReadRefused(what, error.message, error.status)


def _reader(api: ConsoleApi, what: str, all_states: bool) -> Callable[[], Message] | None:
    readers: dict[str, Callable[[], Message]] = {
        "overview": lambda: OverviewLoaded(api.overview()),
        "programs": lambda: ProgramsLoaded(api.programs(None if all_states else "running")),
        "tenants": lambda: TenantsLoaded(api.tenants()),
        "kv": lambda: KVLoaded(api.kv()),
        AUDIT: lambda: operator_read(AUDIT, lambda: AuditLoaded(api.audit())),
        DOOR: lambda: operator_read(DOOR, lambda: DoorLoaded(api.door())),
    }
    return readers.get(what)


def load(
    api: ConsoleApi,
    wanted: tuple[str, ...],
    *,
    program_id: str | None = None,
    all_states: bool = False,
) -> list[Message]:
    """Fetch ``wanted`` reads (view names) and the detail of ``program_id``.

    Unknown names are ignored (``events`` needs no read: the feed brings them; ``tools`` is
    read by its own worker, ``DataSync.read_tool_calls``). ``door`` is
    the admission door's read; ``door`` and ``audit`` answer :class:`ReadRefused` when the key
    may not make them.
    """
    out: list[Message] = []
    for what in wanted:
        reader = _reader(api, what, all_states)
        if reader is None:
            continue
        try:
            out.append(reader())
        except ApiError as error:
            out.append(LoadFailed(what, str(error)))
    if program_id is not None:
        try:
            out.append(ProgramLoaded(api.program(program_id)))
        except ApiError as error:
            out.append(LoadFailed(program_read(program_id), str(error)))
    return out

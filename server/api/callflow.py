"""What the two generation endpoints (``/v1/chat/completions``, ``/v1/completions``) share:
a call's place in its program from the request, the limit on ``max_tokens``, the identity a
response carries, the SSE response, and waiting for a call while watching the client.

Disconnects: the call runs in the live service, not in the handler, so a client that goes
away must be noticed. Streaming: Litestar 2.25 cancels the response's task group on
``http.disconnect``; the body generator's ``finally`` then starts the abort (synchronously:
inside a cancelled anyio scope every ``await`` is cancelled again), and the response's
background task does the same in case the cancellation hit while the generator was suspended.
Non-streaming: the handler races the call against ``http.disconnect`` on the ASGI receive
channel and aborts the call if the client leaves first.

What a route reads of its request is a :class:`Client` (headers, the receive channel), and a
non-streaming answer is a :class:`Reply` (JSON bytes): Litestar's ``Request`` and ``Response``
for the controllers, the raw ASGI scope and messages for the express lane (``express.py``),
which answers the plain calls with the same functions.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from litestar import Response
from litestar.background_tasks import BackgroundTask
from litestar.enums import MediaType
from litestar.response import Stream
from litestar.types import Receive

from agentconsole.scheduler.runtime import CONTEXT_LENGTH_EXCEEDED
from agentconsole.server.api.contract import SSE, contract
from agentconsole.server.api.deps import Live
from agentconsole.server.api.errors import ApiError
from agentconsole.server.api.schemas import ID_PATTERN, MAX_PARENT_IDS, AgentExtras
from agentconsole.server.live.calls import CallOutcome, LiveCall
from agentconsole.server.live.door import ClientGone, first_done
from agentconsole.server.live.errors import Conflict, ContextTooLong, ServiceError, Unavailable

_ID = re.compile(ID_PATTERN)
QUICK_S = 0.05
#: what a generation call may answer (``contract.py``): JSON or an SSE stream; 403 wall-time
#: quota, 404 another tenant's program, 409 ended program or running node, 429 quotas
GENERATION_CONTRACT = contract(403, 404, 409, 429, media=("application/json", SSE))


class HeaderLookup(Protocol):
    def get(self, key: str, /) -> str | None:
        """The value of header ``key`` (lower-case name; the first of repeated ones)."""
        ...


class Client(Protocol):
    """What the generation routes read of a request: headers and the ASGI receive channel
    (after the body, it only says ``http.disconnect``). Litestar's ``Request`` is one."""

    @property
    def headers(self) -> HeaderLookup: ...

    @property
    def receive(self) -> Receive: ...


@dataclass(frozen=True, slots=True)
class Reply:
    """A non-streaming answer: JSON bytes, the call's headers, the status."""

    body: bytes
    headers: Mapping[str, str]
    status: int = 200

    def response(self) -> Response[bytes]:
        """The same answer as a Litestar ``Response`` (what the controllers return)."""
        return Response(
            self.body, status_code=self.status, headers=self.headers, media_type=MediaType.JSON
        )


def _header_id(request: Client, name: str) -> str | None:
    value = request.headers.get(name)
    if value is None:
        return None
    value = value.strip()
    if not _ID.fullmatch(value):
        raise ApiError(422, f"{name} must match {ID_PATTERN}", field=name)
    return value


def _header_parents(raw: str) -> tuple[str, ...]:
    """The ids of an ``X-Parent-Ids`` header, bounded as the body's ``parent_ids``: a node's
    parents are kept with it and answered with its program, so an unbounded list lets one call
    grow the server's memory and every later answer about the program. The count is checked
    before any id is (a refused header costs no more than its split)."""
    parents = tuple(p.strip() for p in raw.split(",") if p.strip())
    if len(parents) > MAX_PARENT_IDS:
        raise ApiError(
            422,
            f"X-Parent-Ids lists {len(parents)} ids, at most {MAX_PARENT_IDS} are accepted",
            field="X-Parent-Ids",
        )
    if any(not _ID.fullmatch(p) for p in parents):
        # the header's name, not its value: the value is the client's (up to the header limit)
        raise ApiError(422, f"X-Parent-Ids must be ids matching {ID_PATTERN}", field="X-Parent-Ids")
    return parents


def stop_strings(stop: str | list[str] | None) -> tuple[str, ...]:
    """The request's ``stop`` as strings to stop at. An empty one is left out: it would match
    at once (SGLang looks for each stop string in the output's tail, and "" is in every
    tail), ending the answer after its first token."""
    return tuple(s for s in ((stop,) if isinstance(stop, str) else stop or ()) if s)


def program_identity(extras: AgentExtras | None, request: Client) -> dict[str, Any]:
    """A call's place in its program (``ChatCall`` fields) from the body's ``agentconsole``
    object, else the ``X-Program-Id`` / ``X-Node-Id`` / ``X-Parent-Ids`` headers."""
    program_id = extras.program_id if extras and extras.program_id else None
    program_id = program_id or _header_id(request, "x-program-id")
    node_id = extras.node_id if extras and extras.node_id else _header_id(request, "x-node-id")
    parents: tuple[str, ...] | None = None
    if extras is not None and extras.parent_ids is not None:
        parents, named_by = tuple(extras.parent_ids), "agentconsole.parent_ids"
    elif (raw := request.headers.get("x-parent-ids")) is not None:
        parents, named_by = _header_parents(raw), "X-Parent-Ids"
    if parents and program_id is None:
        # a call without a program id continues the program its prompt chain infers, parents
        # and all: parents it names could be checked against no program, so they would be
        # dropped unread (with an explicit program, an unknown parent is a 404)
        raise ApiError(
            422,
            f"{named_by} names nodes of a program: give its id too (agentconsole.program_id"
            " or X-Program-Id)",
            field=named_by,
        )
    return {
        "program_id": program_id,
        "node_id": node_id,
        "parent_ids": parents,
        "deadline_s": extras.deadline_s if extras else None,
        "labels": dict(extras.labels or {}) if extras else {},
    }


#: the header an unmodified client lists candidate models in (comma-separated)
CANDIDATES_HEADER = "x-agentconsole-model-candidates"
_MAX_CANDIDATES = 16


def model_request(model: str, extras: AgentExtras | None, request: Client) -> dict[str, Any]:
    """Which model a call asks for (``ChatCall`` fields): the body's ``model`` (a served name
    or ``auto``), the candidates of the ``agentconsole`` object or else of the
    ``X-Agentconsole-Model-Candidates`` header, the role and minimum tier."""
    listed: tuple[str, ...] | None = None
    if extras is not None and extras.model_candidates is not None:
        listed = tuple(extras.model_candidates)
    elif (raw := request.headers.get(CANDIDATES_HEADER)) is not None:
        listed = tuple(name.strip() for name in raw.split(",") if name.strip())
        if not listed or len(listed) > _MAX_CANDIDATES:
            raise ApiError(
                422,
                f"{CANDIDATES_HEADER} lists 1 to {_MAX_CANDIDATES} model names",
                field="X-Agentconsole-Model-Candidates",
            )
    return {
        "model": model,
        "model_candidates": listed,
        "role": extras.role if extras is not None else None,
        "min_tier": extras.min_tier if extras is not None else None,
    }


def checked_max_tokens(
    value: int | None, default: int, live: Live, field: str = "max_tokens"
) -> int:
    """``value`` unless it is over the server's limit (refused as invalid, naming ``field``,
    the request's name of it); without one ``default``, capped at the limit."""
    limit = live.config.max_tokens_limit
    if value is None:
        return min(default, limit)
    if value > limit:
        raise ApiError(422, f"{field} must be at most {limit}", field=field)
    return value


def served_name(call: LiveCall, live: Live) -> str:
    """The model that ran ``call`` (a response's ``model``)."""
    return call.request.model or live.config.model_name


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """What a response says about its call: the request id (the client's ``rid`` /
    ``request_id``, else the call id), the ``agentconsole`` identity object and the headers."""

    request_id: str
    body: dict[str, str]
    headers: dict[str, str]

    @classmethod
    def of(cls, call: LiveCall, rid: str | None) -> CallIdentity:
        request_id = rid or call.call_id.replace("/", "-")
        body = {"program_id": call.program_id, "node_id": call.node_id, "call_id": call.call_id}
        headers = {
            "X-Program-Id": call.program_id,
            "X-Node-Id": call.node_id,
            "X-Request-Id": request_id,
        }
        return cls(request_id, body, headers)


def event_stream(body: AsyncIterator[bytes], call: LiveCall, headers: dict[str, str]) -> Stream:
    """The SSE response of a streaming call (the call is abandoned if the client leaves)."""
    return Stream(
        body,
        media_type="text/event-stream",
        headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        background=BackgroundTask(call.abandon, "disconnect"),
    )


async def finished(request: Client, call: LiveCall, headers: dict[str, str]) -> CallOutcome | Reply:
    """The call's outcome once it completed; 499 if the client left first (the call is
    aborted); the refusal raised when it did not complete."""
    if not await wait_for_client_or_call(request, call):
        call.abandon("disconnect")
        return Reply(b"{}", headers, 499)
    outcome = await call.outcome()
    refused = refusal(call, outcome)
    if refused is not None:
        raise refused
    return outcome


def refusal(call: LiveCall, outcome: CallOutcome) -> Exception | None:
    """Why a call that did not complete is answered with an error (None: it completed)."""
    if outcome.error is not None:
        return outcome.error
    if outcome.finish_reason in ("abort", "error"):
        if not call.abort_reason:  # not aborted here: the engine failed or ended it
            return engine_ended(outcome, call.context_tokens, call.prompt_field)
        return Conflict(f"the call was aborted ({call.abort_reason})")
    return None


def engine_ended(
    outcome: CallOutcome, context_tokens: int | None, prompt_field: str
) -> ServiceError:
    """The refusal of a call the engine ended itself: 400 with the engine's message when it
    says the request is at fault (a retry would end alike), else 503 to retry (memory
    pressure, a failure of the engine). A prompt over the engine's context is
    ``context_length_exceeded`` naming ``prompt_field`` (the request's ``messages`` or
    ``prompt``), its message opened as the intake's own refusal is, with the model's context
    of ``context_tokens`` (None: unknown), which frameworks match (LiteLLM)."""
    result = outcome.result
    if result is not None and 400 <= (result.engine_abort_status or 0) < 500:
        message = f"the engine refused the call: {result.engine_abort_message or 'bad request'}"
        if result.engine_abort_code == CONTEXT_LENGTH_EXCEEDED:
            return ContextTooLong.of_context(context_tokens, message, field=prompt_field)
        return ServiceError(message)
    return Unavailable("the engine ended the call before it finished; retry it")


async def _ends_within(call: LiveCall, seconds: float) -> bool:
    """True if the call ends within ``seconds`` (a timer handle that cancels the wait: a fifth
    of what ``asyncio.timeout`` costs, and every non-streaming call pays it)."""
    ended = call.ending()
    timer = asyncio.get_running_loop().call_later(seconds, ended.cancel)
    try:
        await ended
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # cancelled from outside: pass it on
            raise
        return False  # the timer's cancel
    finally:
        timer.cancel()
    return True


def client_gone(request: Client) -> ClientGone:
    """What resolves when ``request``'s client disconnects (reads its ASGI messages: only one
    reader at a time, so one watch per wait)."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    return disconnected


async def wait_for_client_or_call(request: Client, call: LiveCall) -> bool:
    """True once the call has ended; False if the client disconnected first. Calls that end
    within ``QUICK_S`` are not raced against the client (a task watching the client costs
    more than such a call)."""
    if await _ends_within(call, QUICK_S):
        return True

    await first_done(call.ending(), client_gone(request)())
    return call.finished

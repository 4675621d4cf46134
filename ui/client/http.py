"""The consoles' HTTP client: observation reads and operator actions over ``docs/API.md``.

:class:`ConsoleApi` is what the terminal dashboard depends on; :class:`HttpConsoleClient` is
its httpx implementation (tests inject an in-memory one). Calls are synchronous and are made
from worker threads, never from the UI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from agentconsole.ui.client import jsonread as j
from agentconsole.ui.client.feed import FeedItem, read_feed
from agentconsole.ui.client.models import AuditEntry, KVState, Overview, TenantRow
from agentconsole.ui.client.programs import ProgramDetail, ProgramPage, ProgramSummary

PAGE_SIZE = 500


class ApiError(Exception):
    """A non-2xx answer, or no answer at all (``status`` 0)."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(f"{status} {kind}: {message}" if status else message)
        self.status = status
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class ActionResult:
    """The answer to an operator action."""

    action: str
    program_id: str
    body: Mapping[str, Any]


class ConsoleApi(Protocol):
    """What a console needs from the server. Every method may raise :class:`ApiError`."""

    def overview(self) -> Overview:
        """``GET /v1/overview``."""

    def programs(self, state: str | None = None, limit: int = 2000) -> ProgramPage:
        """Up to ``limit`` programs (all states when ``state`` is None), paging as needed."""

    def program(self, program_id: str) -> ProgramDetail:
        """``GET /v1/programs/{id}`` with nodes, edges and critical path."""

    def tenants(self) -> list[TenantRow]:
        """``GET /v1/tenants``."""

    def kv(self) -> KVState:
        """``GET /v1/kv``."""

    def audit(self, limit: int = 100) -> list[AuditEntry]:
        """``GET /v1/operator/audit``, newest first."""

    def act(self, action: str, program_id: str, amount: float | None = None) -> ActionResult:
        """``POST /v1/operator/programs/{id}/{action}`` for preempt, cancel or boost."""

    def drain(self, enabled: bool) -> Mapping[str, Any]:
        """``POST /v1/operator/drain``: stop (or resume) admitting new calls."""

    def feed(self, stop: threading.Event) -> Iterator[FeedItem]:
        """The live feed until ``stop`` is set (see :func:`read_feed`)."""


class HttpConsoleClient:
    """:class:`ConsoleApi` over HTTP with an operator (or tenant) bearer key."""

    def __init__(self, url: str, key: str, *, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        self._timeout = timeout_s
        self._http = self._new_client()

    def _new_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self._headers, timeout=self._timeout)

    def close(self) -> None:
        """Close the connection pool; later calls raise."""
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ApiError(0, "unreachable", f"{self.url}: {type(error).__name__}") from error
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code >= 400:
            err = j.obj(j.obj(body).get("error"))
            raise ApiError(
                response.status_code,
                j.text(err, "type", "http_error"),
                j.text(err, "message", response.reason_phrase),
            )
        return body

    def overview(self) -> Overview:
        return Overview.parse(self._call("GET", "/v1/overview"))

    def programs(self, state: str | None = None, limit: int = 2000) -> ProgramPage:
        out: list[ProgramSummary] = []
        total = 0
        while len(out) < limit:
            params: dict[str, str | int] = {
                "limit": min(PAGE_SIZE, limit - len(out)),
                "offset": len(out),
            }
            if state:
                params["state"] = state
            body = j.obj(self._call("GET", "/v1/programs", params=params))
            page = [ProgramSummary.parse(p) for p in j.objects(body.get("programs"))]
            total = j.integer(body, "total", len(out) + len(page))
            out.extend(page)
            if not page or len(out) >= total:
                break
        return ProgramPage(tuple(out), max(total, len(out)))

    def program(self, program_id: str) -> ProgramDetail:
        return ProgramDetail.parse(self._call("GET", f"/v1/programs/{program_id}"))

    def tenants(self) -> list[TenantRow]:
        body = j.obj(self._call("GET", "/v1/tenants"))
        return [TenantRow.parse(t) for t in j.objects(body.get("tenants"))]

    def kv(self) -> KVState:
        return KVState.parse(self._call("GET", "/v1/kv"))

    def audit(self, limit: int = 100) -> list[AuditEntry]:
        body = j.obj(self._call("GET", "/v1/operator/audit", params={"limit": limit}))
        return [AuditEntry.parse(a) for a in j.objects(body.get("actions"))]

    def act(self, action: str, program_id: str, amount: float | None = None) -> ActionResult:
        if action not in ("preempt", "cancel", "boost"):
            raise ValueError(f"unknown operator action {action!r}")
        payload: dict[str, float] = {} if amount is None else {"amount": amount}
        body = self._call("POST", f"/v1/operator/programs/{program_id}/{action}", json=payload)
        return ActionResult(action, program_id, j.obj(body))

    def drain(self, enabled: bool) -> Mapping[str, Any]:
        """``POST /v1/operator/drain``: stop (or resume) admitting new calls."""
        return j.obj(self._call("POST", "/v1/operator/drain", json={"enabled": enabled}))

    def feed(self, stop: threading.Event) -> Iterator[FeedItem]:
        # A client of its own: the feed holds one connection open for as long as it runs.
        with self._new_client() as http:
            yield from read_feed(http, stop)

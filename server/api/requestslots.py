"""The server's request slots, shared per tenant: a request is attributed from its head (the
key arrives in the headers, before the body), and each class of caller may hold only its own
part of the slots.

uvicorn's ``limit_concurrency`` counted connections, idle and unauthenticated ones among them,
before any key was read: one tenant's event feeds, or anyone's connections trickling a body,
took every slot and every tenant got 503. Here a slot is a request in flight, from its complete
head to the end of its answer, counted by class:

* a valid key: its tenant (all operator keys together, as ``operator``) may hold at most
  ``per_tenant``, all keys together ``keyed``. Past its tenant's share a request is refused at
  once with 429 ``tenant_limit`` (``Retry-After: 1``, ``x-should-retry: true``), past the total
  with 503 ``unavailable`` (``Retry-After: 1``): it never waits and takes no one's slot;
* no key, or one no one holds, on a route that needs one: a pool of ``unauthenticated`` slots
  of its own, where the app answers its 401 as it always did (audited on the operator routes);
  past the pool the same 401 is answered at once, the body left unread, the connection closed;
* the public routes (no key needed; with or without one): two pools of ``public`` slots each,
  the probes (``/health``, ``/ready``, ``/metrics``) and the files (the console's page and
  assets, the OpenAPI schema, and every ``OPTIONS``, which Litestar answers from its routes),
  so slow readers of the large console assets cannot take the probes' slots; past a pool 503
  ``unavailable``.

A connection with no request in flight (its head still coming, or kept alive between requests)
holds no slot: the head timeout and the keep-alive close those (``connections.py``).
"""

from __future__ import annotations

import enum
import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from uvicorn._types import (
    ASGI3Application,
    ASGIReceiveCallable,
    ASGISendCallable,
    HTTPScope,
    Scope,
)

from agentconsole.server.api.auth import KeyRing
from agentconsole.server.api.errors import SHOULD_RETRY, ApiError, error_body

#: the paths of the probes a load balancer or a scraper reads without a key (``system.py``)
PROBE_PATHS = frozenset({"/health", "/ready", "/metrics"})
#: the console's page and the OpenAPI schema (``ui/web/routes.py``, ``/schema``), no key needed
FILE_PATHS = frozenset({"/", "/schema"})
FILE_PREFIXES = ("/static/", "/schema/")

#: gives a slot back (called once, when the request's answer has ended)
Release = Callable[[], None]


class Pool(enum.Enum):
    """The slot pools of requests without a tenant to charge."""

    UNAUTHENTICATED = "unauthenticated"
    PROBES = "probes"
    FILES = "files"


def public_pool(method: str, path: str) -> Pool | None:
    """The pool of a request to a public route; None for a route that needs a key."""
    trimmed = path.rstrip("/") or "/"  # Litestar serves ``/health/`` as ``/health``
    if trimmed in PROBE_PATHS:
        return Pool.PROBES
    if method == "OPTIONS" or trimmed in FILE_PATHS or path.startswith(FILE_PREFIXES):
        return Pool.FILES
    return None


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer sent instead of running the app: an ASGI app of its own, which asks the
    server to close the connection (the request's body is never read)."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...]

    @classmethod
    def of(
        cls,
        status: int,
        kind: str,
        message: str,
        headers: Iterable[tuple[str, str]] = (),
        *,
        field: str | None = None,
    ) -> Refusal:
        body = json.dumps(error_body(kind, message, field)).encode()
        fixed = (
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        )
        extra = tuple((name.lower().encode(), value.encode()) for name, value in headers)
        return cls(status, body, fixed + extra)

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        start = {"type": "http.response.start", "status": self.status, "headers": self.headers}
        await send(start)  # type: ignore[arg-type]
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


UNAVAILABLE = Refusal.of(
    503,
    "unavailable",
    "the server is at its limit of requests in flight; retry",
    [("Retry-After", "1")],
)


def _over_share(share: int) -> Refusal:
    message = (
        f"this tenant already has {share} requests in flight, its share of the server's"
        " request slots; retry once one has ended"
    )
    headers = [("Retry-After", "1"), (SHOULD_RETRY, "true")]
    return Refusal.of(429, "tenant_limit", message, headers, field="server.per_tenant_concurrency")


def _unauthorized(error: ApiError) -> Refusal:
    return Refusal.of(401, error.type, str(error), error.headers.items())


def holding(app: ASGI3Application, release: Release) -> ASGI3Application:
    """``app``, giving its request's slot back once it has answered (or failed, or been
    cancelled)."""

    async def run(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        try:
            await app(scope, receive, send)
        finally:
            release()

    return run


def authorization(scope: HTTPScope) -> str | None:
    """The first ``Authorization`` header's value, the one Litestar's ``headers.get`` (and so
    the key check) reads."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")
    return None


class RequestSlots:
    """The slots of one server (module docstring). Used on the event loop's thread only (the
    protocol's callbacks), so it needs no lock. Limits of None: unlimited."""

    def __init__(
        self,
        keys: KeyRing | None,
        *,
        keyed: int | None,
        per_tenant: int | None,
        unauthenticated: int,
        public: int,
    ) -> None:
        #: None: no key ring (a bare server, a benchmark): every request counts as one
        #: tenant's, against ``keyed`` alone
        self._keys = keys
        self._keyed_limit = keyed
        self._share = per_tenant
        self._pool_limits = {
            Pool.UNAUTHENTICATED: unauthenticated,
            Pool.PROBES: public,
            Pool.FILES: public,
        }
        self._over_share = _over_share(per_tenant or 0)  # sent only where there is a share
        self.keyed = 0
        self.by_tenant: Counter[str] = Counter()
        self.pools: Counter[Pool] = Counter()

    def admit(self, scope: HTTPScope) -> Release | Refusal:
        """A slot for the request of ``scope`` (its release), or the answer refusing it."""
        pool = public_pool(scope["method"], scope["path"])
        if pool is not None:
            return self._take_pool(pool) or UNAVAILABLE
        if self._keys is None:
            return self._take_keyed("", share=None)
        try:
            principal = self._keys.resolve(authorization(scope))
        except ApiError as error:
            return self._take_pool(Pool.UNAUTHENTICATED) or _unauthorized(error)
        return self._take_keyed(principal.tenant, share=self._share)

    def _take_keyed(self, tenant: str, *, share: int | None) -> Release | Refusal:
        # the share first: a tenant over its own share is told so (429: its doing), whatever
        # the others hold; a tenant within it meets a full server (503) only when the others
        # together hold the rest
        if share is not None and self.by_tenant[tenant] >= share:
            return self._over_share
        if self._keyed_limit is not None and self.keyed >= self._keyed_limit:
            return UNAVAILABLE
        self.keyed += 1
        self.by_tenant[tenant] += 1
        return partial(self._release_keyed, tenant)

    def _release_keyed(self, tenant: str) -> None:
        self.keyed -= 1
        self.by_tenant[tenant] -= 1
        if not self.by_tenant[tenant]:
            del self.by_tenant[tenant]  # a tenant gone quiet leaves no entry behind

    def _take_pool(self, pool: Pool) -> Release | None:
        if self.pools[pool] >= self._pool_limits[pool]:
            return None
        self.pools[pool] += 1
        return partial(self._release_pool, pool)

    def _release_pool(self, pool: Pool) -> None:
        self.pools[pool] -= 1

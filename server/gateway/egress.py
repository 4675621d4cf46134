"""The egress policy of ``http`` executors whose registration did not allow private addresses
(a tenant's tools, unless ``GatewayConfig.allow_private_executor_urls``).

Registration checks only the URL's text (:func:`~.semantic.check_url`): a public-looking name
may resolve to ``127.0.0.1``, ``169.254.169.254`` or ``10.x``, or be re-pointed there after
registration. So every connection the guarded client opens

* resolves the host once and refuses (:class:`DestinationRefused`) when *any* address it
  resolves to is not public (:func:`~.addresses.is_public`): one private answer among public
  ones is enough to refuse, as a resolver may hand them out in any order;
* connects to the addresses it checked, never to the name, so no second lookup can answer
  differently between the check and the connection (DNS rebinding). TLS still verifies the
  certificate for the name (SNI) and the ``Host`` header is the URL's, as httpcore takes both
  from the request, not from the address connected to;
* is made without the environment's proxies (a proxy would resolve the name itself) and
  follows no redirect (a ``3xx`` is the tool's answer, so no unchecked URL is fetched).

httpx takes no network backend of its own; its connection pool (httpcore) does, which is where
this policy sits, so it applies to every connection, kept-alive ones included.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from ipaddress import ip_address
from typing import Any

import httpcore
import httpx

from agentconsole.server.gateway.addresses import IPAddress, is_public

#: httpx's own pool defaults, which the guarded pool keeps.
HTTP_CONNECTIONS, _MAX_KEEPALIVE, _KEEPALIVE_EXPIRY_S = 100, 20, 5.0
#: the most of a pool's connections one tenant's http tools hold at once (the gateway's
#: ``FairSlots``): a quarter, so one tenant's downstream that never answers leaves the rest
HTTP_CONNECTIONS_PER_TENANT = HTTP_CONNECTIONS // 4


class DestinationRefused(Exception):
    """The egress policy refused to connect: the host resolves to a non-public address."""


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to for a TCP connection to ``port``, in the resolver's
    order without repeats. Raises ``httpcore.ConnectError`` when it resolves to none."""
    try:
        # the socket module's resolver in a thread, as asyncio's default loop does: a loop of
        # its own (uvloop, which SGLang installs) would resolve elsewhere, unseen by tests
        infos = await asyncio.to_thread(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    except OSError as error:  # nothing was sent: an unreachable tool, not a refusal
        raise httpcore.ConnectError(f"cannot resolve {host!r}: {error}") from error
    found: list[IPAddress] = []
    for info in infos:
        # a link-local IPv6 answer carries its zone (``fe80::1%eth0``): dropped, as the
        # address alone decides (and such an address is refused anyway)
        addr = ip_address(str(info[4][0]).split("%", 1)[0])
        if addr not in found:
            found.append(addr)
    if not found:
        raise httpcore.ConnectError(f"{host!r} resolves to no address")
    return found


async def public_addresses(host: str, port: int) -> list[IPAddress]:
    """:func:`resolve` ``host``, refusing it unless every address is public. Raises
    :class:`DestinationRefused` (naming the first non-public address) or
    ``httpcore.ConnectError``."""
    addresses = await resolve(host, port)
    for addr in addresses:
        if not is_public(addr):
            raise DestinationRefused(
                f"egress refused: the tool's host {host} resolves to {addr}, which is not a"
                " public address"
            )
    return addresses


class PublicOnlyBackend(httpcore.AsyncNetworkBackend):
    """A network backend that checks, then connects to the checked addresses (see the module
    docstring); ``inner`` makes the connections."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to the first of ``host``'s checked addresses that answers. Raises
        :class:`DestinationRefused` before any connection if one address is not public."""
        try:
            async with asyncio.timeout(timeout):
                addresses = await public_addresses(host, port)
        except TimeoutError as error:
            raise httpcore.ConnectTimeout(f"resolving {host!r} timed out") from error
        last: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for addr in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(addr),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                last = error
        assert last is not None  # ``public_addresses`` returns at least one address
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Refused: a tool's URL never names a unix socket."""
        raise DestinationRefused("egress refused: unix sockets are not reachable")

    async def sleep(self, seconds: float) -> None:
        """The pool's retry back-off."""
        await self._inner.sleep(seconds)


class EgressTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with its pool on :class:`PublicOnlyBackend`."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        super().__init__(trust_env=False)
        # httpx builds its pool without a way to name the backend; the pool it built is
        # replaced by the same one (httpx's defaults) on the guarded backend.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=HTTP_CONNECTIONS,
            max_keepalive_connections=_MAX_KEEPALIVE,
            keepalive_expiry=_KEEPALIVE_EXPIRY_S,
            network_backend=PublicOnlyBackend(inner),
        )


def guarded_client(timeout_s: float) -> httpx.AsyncClient:
    """An HTTP client under the egress policy: public destinations only, checked at connect
    time, no environment proxy, no redirect followed."""
    return httpx.AsyncClient(
        transport=EgressTransport(),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        trust_env=False,
    )

"""The egress policy of a tenant's ``http`` tools: a name that resolves to a non-public
address is refused at call time (nothing reaches it), and the connection goes to the address
that was checked, never to a second lookup."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import httpcore
import pytest

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.addresses import is_public
from agentconsole.server.gateway.egress import (
    DestinationRefused,
    PublicOnlyBackend,
    guarded_client,
)
from agentconsole.server.gateway.errors import EgressRefused
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, opened_gateway, register, tool_body
from tests.server.gateway.local_http import downstream

pytestmark = pytest.mark.anyio
EVIL = "evil.example"
PUBLIC = "93.184.216.34"
_real_getaddrinfo = socket.getaddrinfo


def _answers(monkeypatch: pytest.MonkeyPatch, *answers: list[str]) -> list[str]:
    """Make :data:`EVIL` resolve to each of ``answers`` in turn (the last one repeats); the
    returned list records every lookup of it. Other names resolve as usual."""
    lookups: list[str] = []

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if (host.decode() if isinstance(host, bytes) else host) != EVIL:  # anyio sends bytes
            return _real_getaddrinfo(host, port, *args, **kwargs)
        addresses = answers[min(len(lookups), len(answers) - 1)]
        lookups.append(host)
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return lookups


@pytest.fixture
async def private_gateway(tmp_path: Path) -> Any:
    """A gateway with the production default: tenants' tools may not reach private hosts."""
    async with opened_gateway(tmp_path / "s.duckdb", GatewayConfig()) as gateway:
        yield gateway


async def test_a_tenant_tool_whose_name_resolves_to_loopback_is_refused_unreached(
    private_gateway: ToolGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, port = private_gateway, FakePort()
    _answers(monkeypatch, ["127.0.0.1"])
    async with downstream() as server:
        url = f"http://{EVIL}:{server.port}/"
        await register(gateway, tool_body("fetch", {"type": "http", "url": url}))
        with pytest.raises(EgressRefused) as info:
            await call(gateway, port, "fetch", {"text": "x"})
        assert server.requests == 0
        # the same name from a platform tool (an operator's: private allowed) does connect,
        # so the refusal above is the policy's, not an unreachable server's
        await register(gateway, tool_body("internal", {"type": "http", "url": url}), operator=True)
        assert (await call(gateway, port, "internal", {"text": "x"}, node="n2")).result == {
            "ok": True
        }
        assert server.requests == 1
    assert info.value.status == 424
    assert "127.0.0.1" in info.value.message
    assert info.value.extra["retryable"] is False
    await asyncio.wrap_future(gateway.store.writer.flush())
    rows = gateway.store.repo.audit_log(limit=100)
    refused = [r.action for r in rows if r.action.action == "tool.call" and r.action.result != "ok"]
    assert [a.args["type"] for a in refused] == ["egress_refused"]


async def test_one_private_answer_among_public_ones_is_enough_to_refuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _answers(monkeypatch, [PUBLIC, "10.1.2.3"])
    with pytest.raises(DestinationRefused, match=r"10\.1\.2\.3"):
        await PublicOnlyBackend().connect_tcp(EVIL, 80)


class _Recorder(httpcore.AsyncNetworkBackend):
    """An inner backend that records where it was asked to connect and connects nowhere."""

    def __init__(self) -> None:
        self.hosts: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.hosts.append(host)
        return httpcore.AsyncMockStream([])


async def test_the_connection_goes_to_the_checked_address_not_to_a_second_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lookups = _answers(monkeypatch, [PUBLIC], ["127.0.0.1"])  # a rebinding resolver
    inner = _Recorder()
    await PublicOnlyBackend(inner).connect_tcp(EVIL, 443)
    assert lookups == [EVIL]
    assert inner.hosts == [PUBLIC]


def test_the_guarded_client_follows_no_redirect_and_no_environment_proxy() -> None:
    client = guarded_client(5.0)
    assert client.follow_redirects is False
    assert client.trust_env is False


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fec0::1",  # site-local
        "ff02::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::127.0.0.1",  # IPv4-compatible
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b:1::7f00:1",  # NAT64 local-use prefix
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
    ],
)
def test_non_public_addresses_in_every_form(address: str) -> None:
    assert not is_public(ip_address(address))


@pytest.mark.parametrize(
    "address", ["8.8.8.8", PUBLIC, "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses(address: str) -> None:
    assert is_public(ip_address(address))

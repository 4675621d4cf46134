"""``http`` tools against a real local downstream: the answer is read up to the result cap and
no further, and a downstream's error body is stored only under redaction ``full``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.errors import ToolFailed
from agentconsole.server.store import make_tool_call_id
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import call, opened_gateway, register, tool_body
from tests.server.gateway.local_http import downstream

pytestmark = pytest.mark.anyio
CAP = 64 * 1024
SECRET = "card 4111-1111-1111-1111"
# what no timestamp, digest or id can contain (a bare "4111" once matched a float timestamp)
SECRET_MARK = "4111-1111"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[ToolGateway]:
    """A gateway with a small result cap; tenant ``t2``'s tool data is redacted (hash)."""
    config = GatewayConfig(max_result_bytes=CAP, tenant_redaction={"t2": "hash"})
    async with opened_gateway(tmp_path / "s.duckdb", config) as gateway:
        yield gateway


async def _platform_tool(gateway: ToolGateway, port: int, timeout_s: float = 5.0) -> None:
    """``fetch``: a platform tool (an operator's, so loopback is allowed) at ``port``."""
    url = f"http://127.0.0.1:{port}/"
    body = tool_body("fetch", {"type": "http", "url": url}, timeout_s=timeout_s)
    await register(gateway, body, operator=True)


async def test_an_endless_answer_is_cut_off_at_the_cap(gateway: ToolGateway) -> None:
    # throttled, so that reading it whole (the bug) buffers tens of MB, not the host's memory
    async with downstream("endless", pause_s=0.001) as server:
        await _platform_tool(gateway, server.port, timeout_s=3.0)
        started = time.monotonic()
        with pytest.raises(ToolFailed) as info:
            await call(gateway, FakePort(), "fetch", {"text": "x"})
        elapsed = time.monotonic() - started
    assert info.value.type == "tool_failed"  # not tool_timeout: it stopped reading
    assert info.value.message == "the tool's result is too large"
    assert elapsed < 1.5
    assert server.streamed < 100 * CAP


async def test_a_small_answer_within_the_cap_is_the_result(gateway: ToolGateway) -> None:
    async with downstream("json", body=b'{"n": 1}') as server:
        await _platform_tool(gateway, server.port)
        done = await call(gateway, FakePort(), "fetch", {"text": "x"})
    assert done.result == {"n": 1}


async def test_a_downstream_error_body_is_stored_only_under_full_redaction(
    gateway: ToolGateway,
) -> None:
    port = FakePort()
    body = f'{{"error": "{SECRET}"}}'.encode()
    async with downstream("error", status=500, body=body) as server:
        await _platform_tool(gateway, server.port)
        for tenant, program in (("t1", "p-full"), ("t2", "p-hash")):
            with pytest.raises(ToolFailed) as info:
                await call(gateway, port, "fetch", {"text": "x"}, tenant=tenant, program=program)
            assert SECRET in info.value.message  # the caller gets the downstream's words
    full = gateway.store.repo.get_intent(make_tool_call_id("p-full", "n1", 1))
    hashed = gateway.store.repo.get_intent(make_tool_call_id("p-hash", "n1", 1))
    assert full is not None
    assert hashed is not None
    assert SECRET in str(full.error)
    assert "HTTP 500" in str(hashed.error)
    assert SECRET_MARK not in str(hashed.error)
    listing = await gateway.operations.list(None, "p-hash", 10)
    assert SECRET_MARK not in str(listing)

"""Fixtures for the gateway tests: a real store file, a gateway with a ledger, a fake port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.store import Store
from tests.server.gateway.fakes import FakePort


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    # asyncio's own loop whatever policy an earlier import set (SGLang installs uvloop, whose
    # resolver the egress tests' stand-in DNS cannot reach)
    return "asyncio", {"loop_factory": asyncio.SelectorEventLoop}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "store.duckdb")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl"


@pytest.fixture
async def gateway(store: Store, ledger: Path) -> AsyncIterator[ToolGateway]:
    config = GatewayConfig(ledger_path=ledger, tenant_builtins=None)
    opened = ToolGateway(store, config)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def port() -> FakePort:
    return FakePort()

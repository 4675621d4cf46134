"""One real SGLang engine (CPU, tiny model, plugin on) shared by the whole test session.

The engine runs with ``max_running_requests=1`` (contention is the point: the order calls
are admitted in is the order they finish) and a 4096-token KV pool (small enough for the
retention tests to force eviction). Everything runs on one event loop, because the runtime's
streams and SGLang's tokenizer-manager task are bound to the loop that started them; tests
call ``run(coro)``. The engine's events (``call.scheduled``, ``kv.*``, ``engine.stats``) are
kept in the ``events`` log. The placeholder ``sgl_kernel`` logs any call to the file named by
``AGENTCONSOLE_SGL_KERNEL_CALL_LOG``, set here before the engine's processes are spawned.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sglang.helpers import started_runtime

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ENGINE_MAX_TOTAL_TOKENS = 4096


@pytest.fixture(scope="session")
def sgl_kernel_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sgl-kernel") / "calls.log"
    os.environ["AGENTCONSOLE_SGL_KERNEL_CALL_LOG"] = str(path)
    return path


@pytest.fixture(scope="session")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def run(loop: asyncio.AbstractEventLoop) -> Callable[[Awaitable[Any]], Any]:
    def runner(coro: Awaitable[Any]) -> Any:
        return loop.run_until_complete(coro)

    return runner


@pytest.fixture(scope="session")
def events() -> Any:
    """The session engine's event sink (an ``EventLog``; tests read what they add)."""
    from agentconsole.scheduler.events import EventLog

    return EventLog()


@pytest.fixture(scope="session")
def engine(
    run: Callable[[Awaitable[Any]], Any], sgl_kernel_log: Path, events: Any
) -> Iterator[Any]:
    """The session's started ``SGLangRuntime`` (policy ``cp-cache``)."""
    yield from started_runtime(
        run,
        max_total_tokens=ENGINE_MAX_TOTAL_TOKENS,
        max_running_requests=1,
        extra={"event_sink": events},
    )


@pytest.fixture
def rt(engine: Any, run: Callable[[Awaitable[Any]], Any]) -> Iterator[Any]:
    """The session engine, returned to policy ``cp-cache`` and undrained after each test."""
    yield engine
    engine.set_policy("cp-cache")
    run(engine.resume())

"""A flooding tenant does not make another tenant's call wait behind its backlog, on ``serve``
with the real SGLang engine (CPU, tiny model), over real HTTP with the official client.

The engine runs one request at a time (``max_running_requests=1``) under ``fcfs``, so the
order calls finish in is the order the plugin admitted them in, and the policy itself orders
by arrival alone: what moves a call is the fairness guard (``scheduler/fairness.py``). A
blocker holds the engine while seven more of tenant a's calls queue, starving (the guard's
aging bound is set to 50 ms, as every call of a flood starves at load); then one more call
arrives. Sent by tenant a, it is one more of a's calls and finishes last. Sent by
tenant b, which received no service while a did, b is below its share: its call goes before
a's starving backlog (``BENCHMARKS.md`` section 15 measures the same rule at load, on the
simulator).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from agentconsole.scheduler.fairness import TIER_STARVING
from tests.server.api.harness import LiveServer, make_config

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

BACKLOG = 7  # tenant a's calls queued behind its blocker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("sglang-flood")
    config = make_config(
        root / "api.duckdb",
        runtime="sglang",
        model=str(make_tiny_model(root / "tiny")),
        policy="fcfs",
        runtime_extra={
            "enable_metrics": False,  # SGLang's metrics register once a process
            "engine_args": {"max_running_requests": 1},
            # a call starves after waiting 50 ms (beta x the service floor)
            "fairness": {"beta": 0.5, "service_floor_s": 0.1},
        },
    )
    with LiveServer(config) as live:
        live.wait_ready(timeout=300)
        yield live


def _chat(server: LiveServer, key: str, program: str, max_tokens: int) -> None:
    """One call of ``program`` as the tenant of ``key``, run to its ``max_tokens``."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=300)
    reply = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": f"the next step of {program}, please"}],
        max_tokens=max_tokens,
        extra_body={"ignore_eos": True},
        extra_headers={"X-Program-Id": program},
    )
    assert reply.usage is not None
    assert reply.usage.completion_tokens == max_tokens


def _wait_for(server: LiveServer, blocker: str, programs: set[str], tier: int | None) -> None:
    """Wait until one status of the plugin shows ``blocker`` running and every one of
    ``programs`` queued (at ``tier`` where given): the order under test is decided while
    the blocker holds the engine, or the test's set-up failed (a host too slow for it)."""
    runtime = server.live.service.runtime
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = runtime.read_status()  # type: ignore[attr-defined]
        if status is not None:
            queued = {e.program_id for e in status.queued if tier is None or e.tier == tier}
            if programs <= queued and blocker in {e.program_id for e in status.running}:
                return
        time.sleep(0.01)
    raise TimeoutError(f"{sorted(programs)} never shown queued at tier {tier} behind {blocker}")


def _finishing_order(server: LiveServer, arm: str, late_key: str) -> list[str]:
    """Tenant a's blocker and backlog, then one late call with ``late_key``: the programs
    other than the blocker in the order the server finished their calls."""
    blocker = f"{arm}-blocker"
    backlog = [f"{arm}-a{n}" for n in range(BACKLOG)]
    late = f"{arm}-late"
    with ThreadPoolExecutor(max_workers=BACKLOG + 2) as pool:
        # ~1,500 tokens: seconds of decoding on the tiny model, the set-up's milliseconds
        # many times over even on a loaded host
        calls = [pool.submit(_chat, server, "sk-a", blocker, 1500)]
        _wait_for(server, blocker, set(), None)
        calls += [pool.submit(_chat, server, "sk-a", program, 20) for program in backlog]
        _wait_for(server, blocker, set(backlog), TIER_STARVING)
        calls.append(pool.submit(_chat, server, late_key, late, 20))
        for call in calls:
            call.result()
    finished: dict[str, float] = {}
    with server.client(late_key) as late_tenant, server.client("sk-a") as tenant_a:
        for program in [*backlog, late]:
            client = late_tenant if program == late else tenant_a
            (node,) = client.get(f"/v1/programs/{program}").json()["nodes"]
            finished[program] = node["finished_at"]
    return sorted(finished, key=finished.__getitem__)


def test_a_call_of_the_flooding_tenant_waits_behind_its_own_backlog(server: LiveServer) -> None:
    order = _finishing_order(server, "same", "sk-a")
    assert order[-1] == "same-late", order  # fcfs: one more of a's calls, after all of them


def test_another_tenants_call_goes_before_the_flooding_tenants_backlog(
    server: LiveServer,
) -> None:
    order = _finishing_order(server, "other", "sk-b")
    # b's call goes before every starving call of a's backlog (whether it waited for the
    # blocker or displaced it), where arrival order alone puts it last
    assert order.index("other-late") < min(order.index(f"other-a{n}") for n in range(BACKLOG))

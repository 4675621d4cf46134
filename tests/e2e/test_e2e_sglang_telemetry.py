"""``agentconsole serve --runtime sglang`` over real HTTP (the real engine on CPU, tiny model,
a 2048-token KV pool): the engine's telemetry reaches every view. The server is the e2e
package's shared ``sglang_serve`` (``tests/e2e/conftest.py``): counters are read as deltas,
since other modules' calls may have moved them.

* Repeated prompts of one program: ``agentconsole_prefix_cache_hit_tokens_total`` equals the
  sum of the calls' ``usage.prompt_tokens_details.cached_tokens``; ``GET /v1/programs/{id}``
  shows each node's cached tokens and the program's resident KV.
* Unrelated programs overflow the pool: ``kv_moves_total{kind="evicted"}`` grows, ``GET /v1/kv``
  no longer places the first program on the device, and its next call recomputes its context:
  ``recomputes`` in ``/v1/kv``, ``agentconsole_kv_recompute_tokens_total``, and a KV restore
  time on its node (critical-path KV idle).
* SGLang's own ``sglang:*`` series are in ``/metrics`` too.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import SGLANG_POOL_TOKENS, ServeProcess, random_words

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
TENANT = {"Authorization": "Bearer sk-dev"}
OPERATOR = {"Authorization": "Bearer sk-operator"}


def _chat(http: httpx.Client, program: str, content: str) -> dict[str, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 8}
    response = http.post("/v1/chat/completions", json=body, headers={"X-Program-Id": program})
    response.raise_for_status()
    out: dict[str, Any] = response.json()
    return out


def _cached(answer: dict[str, Any]) -> int:
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


def _metric(http: httpx.Client, series: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not in /metrics")


def _until(what: str, probe: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_engine_telemetry_reaches_metrics_programs_and_kv(sglang_serve: ServeProcess) -> None:
    http = httpx.Client(base_url=sglang_serve.url, headers=TENANT, timeout=120)
    base = random_words(70, seed=1)  # about 450 tokens
    hits_before = _metric(http, "agentconsole_prefix_cache_hit_tokens_total")
    recomputed_before = _metric(http, "agentconsole_kv_recompute_tokens_total")
    recomputes_before = int(http.get("/v1/kv", headers=OPERATOR).json()["recomputes"])
    answers = [_chat(http, "http-a", f"{base} step {i}") for i in range(3)]
    cached = [_cached(a) for a in answers]
    assert sum(cached) > 2 * 400  # the second and third calls reuse the first one's prompt
    hits = _metric(http, "agentconsole_prefix_cache_hit_tokens_total") - hits_before
    assert hits == sum(cached)
    assert _metric(http, "agentconsole_kv_recompute_tokens_total") == recomputed_before

    def program() -> dict[str, Any]:
        body: dict[str, Any] = http.get("/v1/programs/http-a", headers=OPERATOR).json()
        return body

    placed = _until("http-a placed", lambda: program()["kv"]["hbm_tokens"] > 400 and program())
    assert [n["cached_tokens"] for n in placed["nodes"]] == cached
    assert {n["kv_tier"] for n in placed["nodes"]} == {"hbm"}

    evicted_before = _metric(http, 'agentconsole_kv_moves_total{kind="evicted"}')
    for seed in range(5):  # about 2900 tokens through a 2048-token pool
        _chat(http, f"http-fill-{seed}", random_words(90, seed=10 + seed))
    # evictions reach the metrics when the adapter next polls the plugin's status file
    _until(
        "evictions counted",
        lambda: _metric(http, 'agentconsole_kv_moves_total{kind="evicted"}') > evicted_before,
    )

    def kv() -> dict[str, Any]:
        body: dict[str, Any] = http.get("/v1/kv", headers=OPERATOR).json()
        return body

    def resident() -> int:
        return int(kv()["placement"].get("http-a", {}).get("hbm", 0))

    # all but the chat template's header, which every program of the tenant shares
    _until("http-a evicted", lambda: resident() < 20)
    gone = kv()
    assert gone["tiers"]["hbm"]["capacity_tokens"] == SGLANG_POOL_TOKENS
    assert gone["recomputes"] == recomputes_before

    again = _chat(http, "http-a", f"{base} step 9")
    assert _cached(again) < 10
    assert _metric(http, "agentconsole_kv_recompute_tokens_total") - recomputed_before > 400
    # its report is cached
    _until("a recompute in /v1/kv", lambda: kv()["recomputes"] == recomputes_before + 1)
    last = program()["nodes"][-1]
    assert last["cached_tokens"] == _cached(again)
    assert last["kv_restore_s"] > 0  # recompute time: critical-path KV idle is no longer 0
    engine = [x for x in http.get("/metrics").text.splitlines() if x.startswith("sglang:")]
    assert any(x.startswith("sglang:evicted_tokens_total") for x in engine)  # SGLang's own

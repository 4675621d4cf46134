"""``agentconsole serve --runtime sglang`` over real HTTP (the real engine on CPU, tiny model,
a 2048-token KV pool): the engine's telemetry reaches every view.

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

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServeProcess, start_serve

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
POOL_TOKENS = 2048
TENANT = {"Authorization": "Bearer sk-dev"}
OPERATOR = {"Authorization": "Bearer sk-operator"}


def start_sglang_serve(tmp: Path, pool_tokens: int, timeout_s: float = 300) -> ServeProcess:
    """``serve --runtime sglang`` with a ``pool_tokens`` KV pool, on a free port; returns once
    ``/ready`` answers (the engine started and answers its probe)."""
    config = tmp / "serve.toml"
    config.write_text(
        '[runtime]\nname = "sglang"\n'
        f"[runtime.extra]\nengine_args = {{ max_total_tokens = {pool_tokens} }}\n"
    )
    args = ["--runtime", "sglang", "--db", str(tmp / "db.duckdb"), "--config", str(config)]
    env = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}
    return start_serve(args, env, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def sglang_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    served = start_sglang_serve(tmp_path_factory.mktemp("sglang-serve"), POOL_TOKENS)
    try:
        yield served
    finally:
        served.stop(timeout=60)


def _text(words: int, seed: int) -> str:
    """Random words: about 6.4 tokens each for the tiny model's tokenizer."""
    rnd = random.Random(seed)
    return " ".join("".join(rnd.choice("abcdefghijklmnop") for _ in range(6)) for _ in range(words))


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
    base = _text(70, seed=1)  # about 450 tokens
    answers = [_chat(http, "http-a", f"{base} step {i}") for i in range(3)]
    cached = [_cached(a) for a in answers]
    assert sum(cached) > 2 * 400  # the second and third calls reuse the first one's prompt
    assert _metric(http, "agentconsole_prefix_cache_hit_tokens_total") == sum(cached)
    assert _metric(http, "agentconsole_kv_recompute_tokens_total") == 0

    def program() -> dict[str, Any]:
        body: dict[str, Any] = http.get("/v1/programs/http-a", headers=OPERATOR).json()
        return body

    placed = _until("http-a placed", lambda: program()["kv"]["hbm_tokens"] > 400 and program())
    assert [n["cached_tokens"] for n in placed["nodes"]] == cached
    assert {n["kv_tier"] for n in placed["nodes"]} == {"hbm"}

    evicted_before = _metric(http, 'agentconsole_kv_moves_total{kind="evicted"}')
    for seed in range(5):  # about 2900 tokens through a 2048-token pool
        _chat(http, f"http-fill-{seed}", _text(90, seed=10 + seed))
    assert _metric(http, 'agentconsole_kv_moves_total{kind="evicted"}') > evicted_before

    def kv() -> dict[str, Any]:
        body: dict[str, Any] = http.get("/v1/kv", headers=OPERATOR).json()
        return body

    def resident() -> int:
        return int(kv()["placement"].get("http-a", {}).get("hbm", 0))

    # all but the chat template's header, which every program of the tenant shares
    _until("http-a evicted", lambda: resident() < 20)
    gone = kv()
    assert gone["tiers"]["hbm"]["capacity_tokens"] == POOL_TOKENS
    assert gone["recomputes"] == 0

    again = _chat(http, "http-a", f"{base} step 9")
    assert _cached(again) < 10
    assert _metric(http, "agentconsole_kv_recompute_tokens_total") > 400
    _until("a recompute in /v1/kv", lambda: kv()["recomputes"] == 1)  # its report is cached
    last = program()["nodes"][-1]
    assert last["cached_tokens"] == _cached(again)
    assert last["kv_restore_s"] > 0  # recompute time: critical-path KV idle is no longer 0
    engine = [x for x in http.get("/metrics").text.splitlines() if x.startswith("sglang:")]
    assert any(x.startswith("sglang:evicted_tokens_total") for x in engine)  # SGLang's own

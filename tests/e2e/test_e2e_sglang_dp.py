"""``agentconsole serve --runtime sglang --dp 2`` over real HTTP: two SGLang data-parallel ranks
on the CPU engine (tiny model), one server for the whole module.

* Two programs in flight together are placed on different ranks (the KV-aware router score:
  the first one's prefill is load on its rank); every later call of a program stays on its
  rank, so its second call hits the cache; ``GET /v1/programs/{id}`` shows each node's
  ``dp_rank``, and ``/v1/kv`` each rank's KV (``hbm.rank0``, ``hbm.rank1``).
* Cancel aborts the program's call on its rank (SGLang sends the abort to every rank; only the
  one holding the rid acts): the answer stops, while a call of a program on the other rank
  runs to its end.
* A rank killed (last: the module's server is done with then) fails its calls at once and
  takes the runtime down (``/ready``), and serve still stops.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e import early
from tests.e2e.conftest import ServeProcess, start_serve
from tests.e2e.streams import StreamedChat

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
TENANT = {"Authorization": "Bearer sk-dev"}


def start_dp_serve(tmp: Path, base_env: Mapping[str, str]) -> ServeProcess:
    """``serve --runtime sglang --dp 2``, its store in ``tmp``."""
    args = ["--runtime", "sglang", "--dp", "2", "--db", str(tmp / "db.duckdb")]
    env = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}
    # started early, beside the rest of the suite
    return start_serve(args, env, timeout_s=900, base_env=base_env)


early.register("dp_serve", start_dp_serve)


@pytest.fixture(scope="module")
def dp_serve(early_starts: early.EarlyStarts) -> Iterator[ServeProcess]:
    yield from early_starts.lend("dp_serve", ServeProcess)


@pytest.fixture
def http(dp_serve: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=dp_serve.url, headers=TENANT, timeout=120) as client:
        yield client


def _text(words: int, seed: int) -> str:
    rnd = random.Random(seed)
    return " ".join("".join(rnd.choice("abcdefghijklmnop") for _ in range(6)) for _ in range(words))


def _body(messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "max_tokens": max_tokens, **extra}


def _chat(http: httpx.Client, program: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    response = http.post(
        "/v1/chat/completions", json=_body(messages, 8), headers={"X-Program-Id": program}
    )
    response.raise_for_status()
    out: dict[str, Any] = response.json()
    return out


def stream_chat(
    url: str, program: str, messages: list[dict[str, str]], tokens: int
) -> StreamedChat:
    """``program``'s chat call of ``tokens`` tokens (no early end), streamed in a thread
    (the router's e2e test streams alike)."""
    body = _body(messages, tokens, stream=True, ignore_eos=True)
    return StreamedChat(url, body, {**TENANT, "X-Program-Id": program})


def _node_ranks(http: httpx.Client, program: str) -> dict[str, int | None]:
    nodes = http.get(f"/v1/programs/{program}").json()["nodes"]
    return {n["node_id"]: n.get("dp_rank") for n in nodes if n["kind"] == "llm"}


def _cached(answer: dict[str, Any]) -> int:
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_programs_spread_over_ranks_and_stay_on_theirs(
    dp_serve: ServeProcess, http: httpx.Client
) -> None:
    first = {p: [{"role": "user", "content": _text(60, seed)}] for seed, p in enumerate("ab")}
    # a's first call is in flight (load on its rank) when b's first call is placed
    a1 = stream_chat(dp_serve.url, "dp-a", first["a"], tokens=256)
    assert a1.started.wait(60)
    b1 = _chat(http, "dp-b", first["b"])
    assert a1.done.wait(120)
    assert (a1.error, a1.failure) == (None, None)
    answers = {"a": a1.text, "b": b1["choices"][0]["message"]["content"]}
    for p in "ab":
        history = [
            *first[p],
            {"role": "assistant", "content": answers[p]},
            {"role": "user", "content": _text(10, 7)},
        ]
        second = _chat(http, f"dp-{p}", history)
        assert _cached(second) > 0, second["usage"]  # its context, on its rank
        third = _chat(http, f"dp-{p}", [*history, *history[-2:]])
        assert _cached(third) > 0, third["usage"]
    ranks = {p: _node_ranks(http, f"dp-{p}") for p in "ab"}
    assert len(ranks["a"]) == 3
    assert len(ranks["b"]) == 3
    rank_a, rank_b = set(ranks["a"].values()), set(ranks["b"].values())
    assert len(rank_a) == 1  # every call of a program on one rank
    assert len(rank_b) == 1
    assert rank_a | rank_b == {0, 1}  # the two programs on different ranks
    tiers = http.get("/v1/kv").json()["tiers"]
    assert tiers["hbm.rank0"]["used_tokens"] > 0
    assert tiers["hbm.rank1"]["used_tokens"] > 0
    total = tiers["hbm.rank0"]["used_tokens"] + tiers["hbm.rank1"]["used_tokens"]
    assert tiers["hbm"]["used_tokens"] == total


def test_cancel_aborts_the_call_on_its_programs_rank(
    dp_serve: ServeProcess, http: httpx.Client
) -> None:
    prompt = {p: [{"role": "user", "content": _text(30, 10 + i)}] for i, p in enumerate("cd")}
    # c's first call is in flight (load on its rank) when d's is placed, as in the test
    # above: whatever the ranks cached before (alone, only one holds the chat template, and
    # a bare template match would place both on it)
    first_c = stream_chat(dp_serve.url, "dp-c", prompt["c"], tokens=256)
    assert first_c.started.wait(60)
    _chat(http, "dp-d", prompt["d"])
    assert first_c.done.wait(120)
    assert (first_c.error, first_c.failure) == (None, None)
    (rank_c,) = set(_node_ranks(http, "dp-c").values())
    (rank_d,) = set(_node_ranks(http, "dp-d").values())
    assert rank_c is not None
    assert rank_d is not None
    assert rank_c != rank_d
    other = stream_chat(dp_serve.url, "dp-d", [*prompt["d"], *prompt["d"]], tokens=300)
    doomed = stream_chat(dp_serve.url, "dp-c", [*prompt["c"], *prompt["c"]], tokens=1400)
    assert doomed.started.wait(60)
    assert other.started.wait(60)
    started = time.monotonic()
    ack = http.post("/v1/programs/dp-c/cancel")
    assert ack.status_code == 200, ack.text
    assert ack.json()["aborted_calls"] == ["dp-c/llm-2/0001"]
    assert doomed.done.wait(10)
    assert time.monotonic() - started < 10
    assert doomed.finish != "length"  # stopped long before its 1400 tokens
    assert _node_ranks(http, "dp-c")["llm-2"] == rank_c
    running = http.get("/v1/runtime").json()["running"]
    assert not [c for c in running if c["program_id"] == "dp-c"]
    # the call on the other rank was not touched: it runs to its end
    assert other.done.wait(120)
    assert (other.error, other.failure) == (None, None)
    assert other.finish == "length"
    assert _node_ranks(http, "dp-d")["llm-2"] == rank_d


def _kill_rank(serve: ServeProcess, rank: int) -> int:
    """SIGKILL rank ``rank``'s scheduler process (SGLang titles it ``sglang::scheduler_DP<r>``)
    among ``serve``'s descendants; its pid."""
    title = f"sglang::scheduler_DP{rank}"
    for proc in psutil.Process(serve.proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if " ".join(proc.cmdline()).split(" ")[0] == title:
                proc.kill()
                return int(proc.pid)
    raise AssertionError(f"no {title} under serve")


def test_a_rank_killed_fails_its_calls_at_once_and_serve_still_stops(
    dp_serve: ServeProcess, http: httpx.Client
) -> None:
    """Last in the module: it kills one of the shared server's ranks. SGLang notices nothing in
    a process that hosts it, so the killed rank's call streamed on forever without a token, its
    program's cancel never answered, new calls then hung, and serve ignored SIGINT: now the
    call's stream ends with an error frame, the cancel answers, a new call is 503 at once,
    ``/ready`` says the runtime is down and serve stops."""
    prompt = [{"role": "user", "content": _text(30, 40)}]
    doomed = stream_chat(dp_serve.url, "dp-e", prompt, tokens=1400)
    assert doomed.started.wait(60)
    (rank,) = set(_node_ranks(http, "dp-e").values())
    assert rank is not None
    _kill_rank(dp_serve, rank)
    assert doomed.done.wait(20)
    assert doomed.failure is None
    assert doomed.error is not None  # the 503 frame, not a silent end
    assert doomed.finish != "length"
    cancel = http.post("/v1/programs/dp-e/cancel", timeout=20)
    assert cancel.status_code == 200, cancel.text
    late = http.post("/v1/chat/completions", json=_body(prompt, 4), timeout=20)
    assert late.status_code == 503, late.text
    ready = http.get("/ready", timeout=20)
    assert ready.status_code == 503
    assert ready.json()["runtime"] is False
    assert http.get("/v1/runtime").json()["running"] == []
    assert dp_serve.stop(timeout=60) is not None
    assert any("the engine is down" in line for line in dp_serve.output)

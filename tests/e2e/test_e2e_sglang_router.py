"""``agentconsole serve --runtime sglang-router``: two SGLang CPU servers (tiny model, plugin
and its endpoint on) behind sglang-router (``--policy manual``, ``--dp-aware``), all on
loopback, started in parallel once for the module; the same checks as the ``--dp 2`` test
(``test_e2e_sglang_dp``), a worker standing for a rank:

* two programs land on different workers (the router's ``min_load`` assignment of a new
  routing key: the second program's first call is placed while the first one's is in
  flight), every later call of a program stays on its worker, and its second call hits the
  cache there; ``GET /v1/programs/{id}`` shows each node's worker as ``dp_rank`` (the
  header each worker's response carries), ``/v1/kv`` each worker's KV;
* cancel aborts the program's call on its worker (the abort goes to every worker; only the one
  holding the rid acts), while a call on the other worker runs to its end;
* an operator setting (the policy) reaches both workers' plugins over HTTP.

Every process runs in its own process group and is ended with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from agentconsole.server.runtime.sglang.status import SchedulerStatus
from tests.e2e import early
from tests.e2e.conftest import ServeProcess, start_serve
from tests.e2e.test_e2e_sglang_dp import TENANT, _cached, _chat, _node_ranks, _text, stream_chat

pytestmark = [pytest.mark.e2e, pytest.mark.sglang, pytest.mark.slow]
HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """End each process group: SIGTERM, then SIGKILL whatever is left after 20 s."""
    for proc in procs:
        with_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(deadline - time.monotonic(), 0.1))
        with_group(proc, signal.SIGKILL)
        proc.wait(10)


def with_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # started with start_new_session: its group id is its pid


@dataclass
class RouterSetup:
    """Two workers, the router in front of them and ``serve --runtime sglang-router``."""

    workers: list[str]
    router: str
    procs: list[subprocess.Popen[bytes]]
    serve: ServeProcess | None = None

    def stop(self, timeout: float = 60) -> None:
        try:
            if self.serve is not None:
                self.serve.stop(timeout=timeout)
        finally:
            _stop(self.procs)


def start_router_setup(tmp: Path, base_env: Mapping[str, str]) -> RouterSetup:
    """Two workers and the router, started together, then ``serve`` in front of the router,
    once every one answers (logs in ``tmp``). The ports are picked free and bound later, so
    another process (the suite's servers, SGLang's own internal ports) can take one in
    between: then the whole setup starts once more on new ports."""
    try:
        return _start_router_setup(tmp / "first", base_env)
    except PortTaken:
        return _start_router_setup(tmp / "again", base_env)


class PortTaken(AssertionError):
    """A process of the setup died because its port was taken meanwhile."""


def _start_router_setup(tmp: Path, base_env: Mapping[str, str]) -> RouterSetup:
    from agentconsole.server.runtime.sglang.cluster.launch import (
        router_command,
        worker_command,
        worker_env,
    )
    from agentconsole.server.runtime.sglang.engine_config import EngineSettings
    from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

    tmp.mkdir()
    model = make_tiny_model(Path.home() / ".cache" / "agentconsole" / "tiny-llama")
    settings = EngineSettings(
        model_path=model, max_total_tokens=8192, enable_metrics=False, cpu_threads=1
    )
    ports = [_free_port() for _ in range(3)]
    setup = RouterSetup([f"http://{HOST}:{p}" for p in ports[1:]], f"http://{HOST}:{ports[0]}", [])
    try:
        for i, port in enumerate(ports[1:]):
            env = {**worker_env(settings, tmp / f"state{i}"), "HF_HUB_OFFLINE": "1"}
            (tmp / f"state{i}").mkdir()
            log = (tmp / f"worker{i}.log").open("wb")
            cmd = worker_command(settings, host=HOST, port=port)
            setup.procs.append(
                subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
            )
        cmd = router_command(host=HOST, port=ports[0], workers=setup.workers, tokenizer=model)
        cmd += ["--worker-startup-timeout-secs", "900"]
        log = (tmp / "router.log").open("wb")
        setup.procs.append(
            subprocess.Popen(
                cmd, env=dict(base_env), stdout=log, stderr=log, start_new_session=True
            )
        )
        deadline = time.monotonic() + 900  # started early, beside the rest of the suite
        for url in [*setup.workers, setup.router]:
            while not _answers(url + "/health"):
                if any(p.poll() is not None for p in setup.procs):
                    logs = " ".join(f.read_text(errors="replace") for f in tmp.glob("*.log"))
                    if "address already in use" in logs:
                        raise PortTaken(f"a port was taken; logs in {tmp}")
                    raise AssertionError(f"a process died; logs in {tmp}")
                assert time.monotonic() < deadline, f"not up in time; logs in {tmp}"
                time.sleep(0.5)
        args = ["--runtime", "sglang-router", "--workers", ",".join(setup.workers)]
        args += ["--router", setup.router, "--db", str(tmp / "db.duckdb")]
        setup.serve = start_serve(args, {"HF_HUB_OFFLINE": "1"}, timeout_s=300, base_env=base_env)
    except BaseException:
        setup.stop()
        raise
    return setup


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


early.register("router_setup", start_router_setup)


@pytest.fixture(scope="module")
def router_setup(early_starts: early.EarlyStarts) -> Iterator[RouterSetup]:
    yield from early_starts.lend("router_setup", RouterSetup)


@pytest.fixture(scope="module")
def cluster(router_setup: RouterSetup) -> tuple[list[str], str]:
    """The workers' URLs and the router's."""
    return router_setup.workers, router_setup.router


@pytest.fixture(scope="module")
def router_serve(router_setup: RouterSetup) -> ServeProcess:
    assert router_setup.serve is not None
    return router_setup.serve


@pytest.fixture
def http(router_serve: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=router_serve.url, headers=TENANT, timeout=120) as client:
        yield client


def _first_calls(
    url: str,
    http: httpx.Client,
    one: str,
    two: str,
    one_messages: list[dict[str, str]],
    two_messages: list[dict[str, str]],
) -> dict[str, str]:
    """The two programs' first calls, the second placed while the first is in flight (the
    router's ``min_load`` assignment then sends it to the other worker); their answers."""
    streamed = stream_chat(url, one, one_messages, tokens=256)
    assert streamed.started.wait(60)
    answer = _chat(http, two, two_messages)["choices"][0]["message"]["content"]
    assert streamed.done.wait(120)
    assert (streamed.error, streamed.failure) == (None, None)
    return {one[-1]: streamed.text, two[-1]: answer}


def test_programs_land_on_different_workers_and_stay_on_theirs(
    router_serve: ServeProcess, http: httpx.Client
) -> None:
    first = {p: [{"role": "user", "content": _text(60, seed)}] for seed, p in enumerate("ab")}
    answers = _first_calls(router_serve.url, http, "rt-a", "rt-b", first["a"], first["b"])
    for p in "ab":
        history = [
            *first[p],
            {"role": "assistant", "content": answers[p]},
            {"role": "user", "content": _text(10, 7)},
        ]
        second = _chat(http, f"rt-{p}", history)
        assert _cached(second) > 0, second["usage"]  # its context, on its worker
        third = _chat(http, f"rt-{p}", [*history, *history[-2:]])
        assert _cached(third) > 0, third["usage"]
    ranks = {p: _node_ranks(http, f"rt-{p}") for p in "ab"}
    assert len(ranks["a"]) == 3
    assert len(ranks["b"]) == 3
    worker_a, worker_b = set(ranks["a"].values()), set(ranks["b"].values())
    assert len(worker_a) == 1  # every call of a program on one worker
    assert len(worker_b) == 1
    assert worker_a | worker_b == {0, 1}  # the two programs on different workers
    tiers = http.get("/v1/kv").json()["tiers"]
    assert tiers["hbm.rank0"]["used_tokens"] > 0
    assert tiers["hbm.rank1"]["used_tokens"] > 0


def test_cancel_aborts_the_call_on_its_programs_worker(
    router_serve: ServeProcess, http: httpx.Client, cluster: tuple[list[str], str]
) -> None:
    prompt = {p: [{"role": "user", "content": _text(30, 10 + i)}] for i, p in enumerate("cd")}
    _first_calls(router_serve.url, http, "rt-c", "rt-d", prompt["c"], prompt["d"])
    (worker_c,) = set(_node_ranks(http, "rt-c").values())
    (worker_d,) = set(_node_ranks(http, "rt-d").values())
    assert worker_c is not None
    assert worker_d is not None
    assert worker_c != worker_d
    doomed = stream_chat(router_serve.url, "rt-c", [*prompt["c"], *prompt["c"]], tokens=1400)
    assert doomed.started.wait(60)
    workers, _ = cluster
    # the plugin's report (its status is written every few loop passes, not per token), read
    # while the call runs: waited for after the other call's start too, on a loaded host the
    # call had decoded its 1,400 tokens before a report was read
    assert _running_on(workers[worker_c], until=["rt-c/llm-2/0001"]) == ["rt-c/llm-2/0001"]
    other = stream_chat(router_serve.url, "rt-d", [*prompt["d"], *prompt["d"]], tokens=300)
    assert other.started.wait(60)
    started = time.monotonic()
    ack = http.post("/v1/programs/rt-c/cancel")
    assert ack.status_code == 200, ack.text
    assert ack.json()["aborted_calls"] == ["rt-c/llm-2/0001"]
    assert doomed.done.wait(10)
    assert time.monotonic() - started < 10
    assert doomed.finish != "length"  # stopped long before its 1400 tokens
    assert _node_ranks(http, "rt-c")["llm-2"] == worker_c
    # its worker runs nothing else: the first report after the abort that says so (the
    # plugin writes its status every few passes; on a loaded host 1 s did not always see one)
    assert "rt-c/llm-2/0001" not in _running_on(workers[worker_c], until=[])
    # the call on the other worker was not touched: it runs to its end
    assert other.done.wait(120)
    assert (other.error, other.failure) == (None, None)
    assert other.finish == "length"
    assert _node_ranks(http, "rt-d")["llm-2"] == worker_d


def test_policy_switch_reaches_every_workers_plugin(
    http: httpx.Client, cluster: tuple[list[str], str]
) -> None:
    operator = {"Authorization": "Bearer sk-operator"}
    response = http.post("/v1/operator/policy", json={"policy": "fcfs"}, headers=operator)
    assert response.status_code == 200, response.text
    workers, _ = cluster
    deadline = time.monotonic() + 10
    while {_policy_of(url) for url in workers} != {"fcfs"}:
        assert time.monotonic() < deadline, [_policy_of(url) for url in workers]
        _chat(http, "rt-e", [{"role": "user", "content": "hi"}])  # a pass applies it
        time.sleep(0.2)


def _statuses(url: str) -> list[SchedulerStatus]:
    """The worker's plugin reports (one per rank), read from its endpoint."""
    report = httpx.get(url + "/agentconsole/status", timeout=10).json()
    return [SchedulerStatus.from_json(s) for s in report["statuses"] if s]


def _running_on(url: str, until: list[str] | None = None) -> list[str]:
    """The rids the worker's plugin reports running; with ``until``, the first report that
    equals it (or the last one, after 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        running = [r.rid for s in _statuses(url) for r in s.running]
        if until is None or running == until or time.monotonic() > deadline:
            return running
        time.sleep(0.05)


def _policy_of(url: str) -> str:
    return _statuses(url)[0].policy

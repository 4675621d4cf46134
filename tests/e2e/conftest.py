"""``agentconsole serve`` as a real subprocess on a loopback port (parsed from its output)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.e2e import early
from tests.readiness import up

CLI = str(Path(sys.executable).with_name("agentconsole"))


@dataclass
class ServeProcess:
    """A running ``agentconsole serve``; ``output`` collects its stderr lines, ``db`` is its
    store file where the starter knows it."""

    proc: subprocess.Popen[str]
    url: str = ""
    output: list[str] = field(default_factory=list)
    db: Path | None = None

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)


def start_serve(
    args: list[str],
    env: Mapping[str, str] | None = None,
    *,
    timeout_s: float = 60,
    base_env: Mapping[str, str] | None = None,
) -> ServeProcess:
    """Start ``agentconsole serve ARGS --port 0`` and wait until it listens and ``/ready``
    answers (within ``timeout_s`` in all; an SGLang engine takes a minute on 2 cores). Its
    environment: ``base_env`` (default ``os.environ``) with ``env`` over it."""
    proc = subprocess.Popen(
        [CLI, "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**(os.environ if base_env is None else base_env), **(env or {})},
    )
    served = ServeProcess(proc)
    found = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            served.output.append(line)
            if "agentconsole serving on " in line:
                served.url = line.rsplit(" ", 1)[-1].strip()
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    try:
        while not found.wait(0.5):  # a process that died (or was killed) is noticed at once
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("serve did not start:\n" + "".join(served.output[-40:]))
        # up: 200, or 503 for a drain alone (one remembered in the store starts drained)
        while not up(httpx.get(served.url + "/ready", timeout=10)):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("serve never became ready:\n" + "".join(served.output[-40:]))
            time.sleep(0.05)
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
        raise
    return served


#: What ``serve --runtime sglang`` must keep off the terminal (it goes to the engine log).
SGLANG_NOISE = ("server_args", "UserWarning", "Ignore import error", "loading shards")
#: The KV pool of the shared SGLang server, in tokens: small enough that a few unrelated
#: programs overflow it (``test_e2e_sglang_telemetry`` forces evictions).
SGLANG_POOL_TOKENS = 2048


def random_words(count: int, seed: int) -> str:
    """Random words no other prompt shares: about 6.4 tokens each for the tiny model's
    tokenizer."""
    rnd = random.Random(seed)
    return " ".join("".join(rnd.choice("abcdefghijklmnop") for _ in range(6)) for _ in range(count))


#: Environment of a served SGLang engine: the CPU engine, nothing fetched from a hub.
SGLANG_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}


def start_sglang_serve(
    tmp: Path,
    pool_tokens: int,
    timeout_s: float = 300,
    base_env: Mapping[str, str] | None = None,
) -> ServeProcess:
    """``serve --runtime sglang`` (the tiny CPU model) with a ``pool_tokens`` KV pool, on a free
    port, its store and engine log in ``tmp``; returns once ``/ready`` answers (the engine
    started and answers its probe)."""
    config = tmp / "serve.toml"
    config.write_text(
        '[runtime]\nname = "sglang"\n'
        f"[runtime.extra]\nengine_args = {{ max_total_tokens = {pool_tokens} }}\n"
    )
    db = tmp / "db.duckdb"
    args = ["--runtime", "sglang", "--db", str(db), "--config", str(config)]
    served = start_serve(args, SGLANG_ENV, timeout_s=timeout_s, base_env=base_env)
    served.db = db
    return served


def start_shared_sglang_serve(tmp: Path, env: Mapping[str, str]) -> ServeProcess:
    """The shared ``sglang_serve``: started early, beside the rest of the suite."""
    return start_sglang_serve(tmp, SGLANG_POOL_TOKENS, timeout_s=900, base_env=env)


early.register("sglang_serve", start_shared_sglang_serve)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of early-started servers run last (in their order), when they are up."""
    late = [item for item in items if _early_fixtures(item)]
    if late:
        items[:] = [item for item in items if not _early_fixtures(item)] + late


def _early_fixtures(item: pytest.Item) -> list[str]:
    return [name for name in getattr(item, "fixturenames", ()) if name in early.STARTERS]


@pytest.fixture(scope="session", autouse=True)
def early_starts(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[early.EarlyStarts]:
    """Starts, when the e2e tests begin, the servers (``early.STARTERS``) that a test of this
    session uses, in the order their tests run; they start on the core the suite leaves
    idle while the tests before theirs run."""
    wanted: list[str] = []
    for item in request.session.items:
        for name in _early_fixtures(item):
            if name not in wanted:
                wanted.append(name)
    starts = early.EarlyStarts(
        (name, tmp_path_factory.mktemp(name), early.STARTERS[name]) for name in wanted
    )
    try:
        yield starts
    finally:
        starts.close()


@pytest.fixture(scope="session")
def sglang_serve(early_starts: early.EarlyStarts) -> Iterator[ServeProcess]:
    """One ``agentconsole serve --runtime sglang`` (tiny CPU model, a ``SGLANG_POOL_TOKENS``
    pool) shared by the e2e modules that only talk to it over HTTP: the quiet start-up
    (``test_e2e_serve_quiet``) and the engine's telemetry (``test_e2e_sglang_telemetry``).

    Shared because the engine takes 40-100 s to start on 2 busy cores, nearly all of it
    importing SGLang and torch in the server and in the engine's processes (started early, by
    ``early_starts``). The tests do not depend on each other: each uses its own program ids
    and reads counters as deltas, so they pass in any order, alone or together. When the
    session ends it is stopped and its terminal checked once more: the shutdown adds none of
    SGLang's noise either (a failure there is an error in the teardown of the session's last
    test)."""
    for served in early_starts.lend("sglang_serve", ServeProcess):
        yield served
    terminal = "".join(served.output)
    for noise in SGLANG_NOISE:
        assert noise not in terminal, f"{noise!r} on the terminal by the end of serve"


@pytest.fixture(scope="module")
def sim_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    db = Path(tmp_path_factory.mktemp("serve")) / "serve.duckdb"
    served = start_serve(["--runtime", "sim", "--db", str(db), "--time-scale", "0.05"])
    try:
        yield served
    finally:
        served.stop()

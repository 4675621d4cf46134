"""``agentconsole serve`` as a real subprocess on a loopback port (parsed from its output)."""

from __future__ import annotations

import os
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
    args: list[str], env: Mapping[str, str] | None = None, *, timeout_s: float = 60
) -> ServeProcess:
    """Start ``agentconsole serve ARGS --port 0`` and wait until it listens and ``/ready``
    answers (within ``timeout_s`` in all; an SGLang engine takes a minute on 2 cores)."""
    proc = subprocess.Popen(
        [CLI, "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
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
        if not found.wait(timeout_s):
            raise RuntimeError("serve did not start:\n" + "".join(served.output[-40:]))
        while httpx.get(served.url + "/ready", timeout=10).status_code != 200:
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
#: Environment of a served SGLang engine: the CPU engine, nothing fetched from a hub.
SGLANG_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}


def start_sglang_serve(tmp: Path, pool_tokens: int, timeout_s: float = 300) -> ServeProcess:
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
    served = start_serve(args, SGLANG_ENV, timeout_s=timeout_s)
    served.db = db
    return served


class EarlyStart:
    """``start_sglang_serve`` run in a background thread: :meth:`result` waits for it."""

    def __init__(self, tmp: Path) -> None:
        self.served: ServeProcess | None = None
        self.error: BaseException | None = None
        self.claimed = False
        self.thread = threading.Thread(target=self._start, args=(tmp,), daemon=True)
        self.thread.start()

    def _start(self, tmp: Path) -> None:
        try:
            self.served = start_sglang_serve(tmp, SGLANG_POOL_TOKENS)
        except BaseException as error:  # re-raised by result(), in the test that needs it
            self.error = error

    def result(self) -> ServeProcess:
        self.claimed = True
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.served is not None
        return self.served


@pytest.fixture(scope="package", autouse=True)
def sglang_serve_early(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EarlyStart | None]:
    """Starts the shared ``sglang_serve`` in the background when the e2e package begins, if a
    test of this session will use it (None otherwise): the e2e tests before it (crash trials,
    sim servers) keep about one of the two cores busy, and the engine's start is a minute of
    CPU, so it is mostly done on the idle core by the time its first test runs."""
    items = request.session.items
    if not any("sglang_serve" in getattr(item, "fixturenames", ()) for item in items):
        yield None
        return
    early = EarlyStart(tmp_path_factory.mktemp("sglang-serve"))
    try:
        yield early
    finally:
        if not early.claimed:  # its tests were not run (an interrupted session)
            early.thread.join()
            if early.served is not None:
                early.served.stop(timeout=60)


@pytest.fixture(scope="package")
def sglang_serve(sglang_serve_early: EarlyStart | None) -> Iterator[ServeProcess]:
    """One ``agentconsole serve --runtime sglang`` (tiny CPU model, a ``SGLANG_POOL_TOKENS``
    pool) shared by the e2e modules that only talk to it over HTTP: the quiet start-up
    (``test_e2e_serve_quiet``) and the engine's telemetry (``test_e2e_sglang_telemetry``).

    Shared because the engine takes 40-100 s to start on 2 busy cores, nearly all of it
    importing SGLang and torch in the server and in the engine's processes (started early, by
    ``sglang_serve_early``). The tests do not depend on each other: each uses its own program
    ids and reads counters as deltas, so they pass in any order, alone or together. Stopping
    it is the last check of the quiet test: the shutdown adds none of SGLang's noise to the
    terminal either."""
    assert sglang_serve_early is not None
    served = sglang_serve_early.result()
    try:
        yield served
    finally:
        served.stop(timeout=60)
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

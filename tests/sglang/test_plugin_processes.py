"""Engine process handling and engine configuration, with stand-in processes (no SGLang)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import multiprocessing
import multiprocessing.synchronize
import os
import time
from functools import partial
from pathlib import Path

import psutil
import pytest

from agentconsole.server.runtime.sglang import engine_config, processes
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from tests.ui.waiting import wait_until


def _sleep() -> None:  # a stand-in for an engine process (module level: spawn pickles it)
    time.sleep(60)


def test_launching_captures_exit_hooks_and_new_children() -> None:
    ctx = multiprocessing.get_context("spawn")
    bystander = ctx.Process(target=_sleep, daemon=True)
    bystander.start()
    calls: list[str] = []

    def engine_shutdown() -> None:  # what SGLang's Engine registers: must never run
        calls.append("shutdown")

    registered = atexit._ncallbacks()  # CPython's count of exit hooks
    try:
        with processes.launching() as launch:
            atexit.register(engine_shutdown)
            child = ctx.Process(target=_sleep, daemon=True)
            child.start()
        assert launch.exit_hooks == [engine_shutdown]
        assert [p.pid for p in launch.children] == [child.pid]
        assert atexit._ncallbacks() == registered  # SGLang's hook was never registered
        engine = processes.EngineProcesses(launch.children)
        assert engine.alive()
        engine.stop(grace_s=5.0)
        assert not child.is_alive()
        assert bystander.is_alive()  # only the engine's processes are stopped
        engine.stop()  # idempotent
        assert calls == []
    finally:
        bystander.kill()
        bystander.join()


def _titled(title: str) -> None:  # a process SGLang titled (setproctitle), then waiting
    import setproctitle

    setproctitle.setproctitle(title)
    time.sleep(60)


def _controller(started: multiprocessing.synchronize.Event) -> None:
    """A stand-in for SGLang's data-parallel controller: a rank's scheduler, titled as SGLang
    titles it, and a helper process that is not SGLang's."""
    ctx = multiprocessing.get_context("spawn")
    ctx.Process(target=_titled, args=("sglang::scheduler_DP1",)).start()
    ctx.Process(target=_sleep).start()
    started.set()
    time.sleep(60)


def _is_zombie(proc: psutil.Process) -> bool:
    return bool(proc.status() == psutil.STATUS_ZOMBIE)


def _titles(pid: int) -> list[str]:
    titles = []
    for proc in psutil.Process(pid).children():
        with contextlib.suppress(psutil.Error):
            titles.append((proc.cmdline() or [""])[0])
    return titles


def _child_titled(engine: processes.EngineProcesses, title: str) -> psutil.Process:
    (root,) = engine.children
    for proc in psutil.Process(root.pid).children():
        if proc.cmdline()[:1] == [title]:
            return proc
    raise AssertionError(f"no {title}")


def test_a_rank_killed_is_lost_and_the_watch_says_so() -> None:
    """A data-parallel rank's scheduler is the controller's child, not ours: killed, the
    engine is down (its calls would wait forever); a helper that is not SGLang's may end."""
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    controller = ctx.Process(target=_controller, args=(started,))  # (a daemon has no children)
    controller.start()
    engine = None
    try:
        assert started.wait(60)
        pid = controller.pid
        assert pid is not None
        wait_until(lambda: _titles(pid).count("sglang::scheduler_DP1") == 1)
        engine = watched_engine = processes.EngineProcesses([controller])
        assert (engine.lost(), engine.alive()) == (None, True)
        for helper in psutil.Process(pid).children():
            if helper.cmdline()[:1] != ["sglang::scheduler_DP1"]:
                helper.kill()
                wait_until(partial(_is_zombie, helper))  # (its parent never reaps it)
        assert engine.lost() is None  # not SGLang's: no loss
        rank = _child_titled(engine, "sglang::scheduler_DP1")
        downs: list[str] = []

        async def watched() -> None:
            watching = asyncio.create_task(
                processes.watch(watched_engine, time.time(), downs.append, every_s=0.05)
            )
            await asyncio.sleep(0.2)
            assert not downs  # every process runs
            rank.kill()
            await asyncio.wait_for(watching, 10)

        asyncio.run(watched())
        assert downs == [
            f"SGLang's sglang::scheduler_DP1 (pid {rank.pid}) is gone: the engine is"
            " down (restart serve)"
        ]
        assert not engine.alive()
    finally:
        if engine is not None:
            engine.stop(grace_s=5.0)
        controller.kill()
        controller.join()


def test_sigquit_is_recorded_not_fatal() -> None:
    before = time.time()
    processes.on_sigquit()
    assert processes.sigquit_seen(before)
    assert not processes.sigquit_seen(time.time() + 1.0)


def _settings(tmp_path: Path, **kw: object) -> EngineSettings:
    return EngineSettings(model_path=tmp_path, **kw)  # type: ignore[arg-type]


def test_cpu_engine_arguments(tmp_path: Path) -> None:
    (tmp_path / ".agentconsole-tiny-model.json").write_text("{}")
    kw = engine_config.engine_kwargs(_settings(tmp_path, max_running_requests=2))
    assert kw["device"] == "cpu"
    assert kw["attention_backend"] == "torch_native"
    assert kw["disable_cuda_graph"]
    assert kw["disable_overlap_schedule"]
    assert kw["max_total_tokens"] == engine_config.CPU_DEFAULT_MAX_TOTAL_TOKENS
    assert kw["dtype"] == "float32"
    assert kw["enable_priority_scheduling"]
    assert kw["default_priority_value"] == 0
    assert kw["radix_eviction_policy"] == "agentconsole"
    assert kw["max_running_requests"] == 2
    assert kw["custom_sigquit_handler"] is processes.on_sigquit


def test_stock_and_gpu_engine_arguments(tmp_path: Path) -> None:
    stock = engine_config.engine_kwargs(
        _settings(tmp_path, plugin=False, schedule_policy="lpm", max_total_tokens=999)
    )
    assert stock["schedule_policy"] == "lpm"
    assert "enable_priority_scheduling" not in stock
    assert "radix_eviction_policy" not in stock
    assert stock["max_total_tokens"] == 999
    assert "dtype" not in stock  # not the tiny model
    gpu = engine_config.engine_kwargs(_settings(tmp_path, device="cuda", overrides={"x": 1}))
    assert "device" not in gpu
    assert "max_total_tokens" not in gpu
    assert gpu["x"] == 1
    # tensor parallelism with the plugin: every rank decides alike (lockstep)
    assert engine_config.engine_kwargs(_settings(tmp_path, device="cuda", tp=2))["tp_size"] == 2


def test_engine_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = engine_config.engine_env(_settings(tmp_path), tmp_path)
    assert env["AGENTCONSOLE_SGLANG_STATE_DIR"] == str(tmp_path)
    assert env["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] == "python"
    stock = engine_config.engine_env(_settings(tmp_path, plugin=False), tmp_path)
    assert stock["SGLANG_PLUGINS"] == engine_config.NO_PLUGINS
    monkeypatch.setenv("SGLANG_PLUGINS", "mine")
    monkeypatch.delenv("AGENTCONSOLE_SGLANG_STATE_DIR", raising=False)
    undo = engine_config.apply_env(env)
    assert os.environ["AGENTCONSOLE_SGLANG_STATE_DIR"] == str(tmp_path)
    assert "SGLANG_PLUGINS" not in os.environ
    engine_config.apply_env(undo)
    assert "AGENTCONSOLE_SGLANG_STATE_DIR" not in os.environ
    assert os.environ["SGLANG_PLUGINS"] == "mine"

"""Engine process handling and engine configuration, with stand-in processes (no SGLang)."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from agentconsole.server.runtime.sglang import engine_config, processes
from agentconsole.server.runtime.sglang.engine_config import EngineSettings


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

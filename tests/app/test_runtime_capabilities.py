"""The wiring asks a runtime's registry entry what it is, never its name: a runtime registered
under a new name with a capability gets the behaviour that goes with it (serve's banner, engine
log and model check, the fleet's per-engine options, the what-if's hardware)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from agentconsole.cli import main
from agentconsole.sample_traces.codec import dump_trace
from agentconsole.sample_traces.generator import generate
from agentconsole.scheduler.models.served import ServedModel
from agentconsole.serve import banner, engine_log_path, missing_model, refuse_to_start
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.app import bench_hardware
from agentconsole.server.runtime import registry
from agentconsole.server.runtime.fleet.build import member_options
from agentconsole.server.runtime.registry import RuntimeOptions, RuntimeSpec, runtime_spec
from agentconsole.server.whatif.window import BenchHardware, bench_command
from agentconsole.settings import Settings, load_settings

NO_MODEL = "this engine needs a model: give one with serve --model"


def needs_a_model(extra: Mapping[str, Any]) -> str | None:
    """A runtime's model check for the tests: a model is missing unless ``extra`` says local."""
    return None if extra.get("local") else NO_MODEL


def _register(monkeypatch: pytest.MonkeyPatch, name: str, spec: RuntimeSpec) -> None:
    monkeypatch.setitem(registry._RUNTIMES, name, spec)


#: the router runtime's two settings it cannot start without
ROUTED: dict[str, Any] = {"router": "http://127.0.0.1:30000", "workers": ["http://127.0.0.1:30001"]}


def _settings(name: str, **runtime: object) -> Settings:
    return load_settings(overrides={"runtime": {"name": name, **runtime}})


def test_a_simulated_runtime_under_another_name_is_banner_and_benched_as_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _register(monkeypatch, "sim-copy", runtime_spec("sim"))
    text = banner(_settings("sim-copy", model="llama-3.1-70b", gpu="H100-80GB", tp=2))
    assert "model:   llama-3.1-70b simulated on H100-80GB x2" in text
    config = ServerConfig(runtime="sim-copy", model="m", gpu="H100-80GB", tp=2, profile="p")
    assert bench_hardware(config) == BenchHardware(gpu="H100-80GB", model="m", tp=2, profile="p")


def test_several_simulated_models_are_benched_as_that_fleet(tmp_path: Path) -> None:
    """``serve --runtime sim --demo`` serves a 70B (tp 4) and an 8B: its what-if benches
    both, chosen by its rule (before: one 8B on one GPU, another deployment)."""
    config = ServerConfig(
        runtime="sim",
        models=(
            ServedModel("big", source="llama-3.1-70b", tier=2, tp=4),
            ServedModel("small", source=None),
        ),
    )
    hardware = bench_hardware(config)
    assert hardware.models == ("llama-3.1-70b:tp4", "llama-3.1-8b")
    assert hardware.model_rule == config.selection.rule
    trace = tmp_path / "window.jsonl"
    dump_trace(generate("seed-mix", n_programs=3, rate=1.0, seed=0), trace)
    argv = bench_command(trace, 3, hardware)
    assert argv[argv.index("--models") + 1] == "llama-3.1-70b:tp4,llama-3.1-8b"
    result = CliRunner().invoke(main, [*argv[1:6], "--policies", "fcfs", *argv[8:]])
    assert result.exit_code == 0, result.output


def test_a_real_engine_is_benched_on_bench_defaults() -> None:
    config = ServerConfig(runtime="sglang-router", model="m", gpu="H100-80GB", tp=2)
    assert bench_hardware(config) == BenchHardware()


def test_an_in_process_engine_under_another_name_gets_its_log_and_engine_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _register(monkeypatch, "sglang-next", dataclasses.replace(runtime_spec("sglang")))
    settings = load_settings(
        overrides={"runtime": {"name": "sglang-next"}, "store": {"db": str(tmp_path / "s.duckdb")}}
    )
    assert engine_log_path(settings) == tmp_path / "s.sglang.log"
    base = RuntimeOptions(extra={"engine_log": "/x/serve.log", "state_dir": "/s"})
    member = member_options("sglang-next", base, ServedModel("big", "/m/big", devices=(1,)))
    assert member.extra["engine_args"] == {"base_gpu_id": 1}
    assert member.extra["engine_log"] == "/x/serve.big.log"
    assert member.extra["state_dir"] == "/s/big"


def test_a_runtime_without_an_in_process_engine_has_neither(tmp_path: Path) -> None:
    settings = load_settings(
        overrides={
            "runtime": {"name": "sglang-router", **ROUTED},
            "store": {"db": str(tmp_path / "s.duckdb")},
        }
    )
    assert engine_log_path(settings) is None
    base = RuntimeOptions(extra={"engine_log": "/x/serve.log", "state_dir": "/s"})
    member = member_options("sglang-router", base, ServedModel("big", "/m/big", devices=(1,)))
    assert "engine_args" not in member.extra
    assert member.extra["engine_log"] == "/x/serve.log"  # the shared options, untouched


def test_the_banner_names_the_default_model_its_runtime_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = RuntimeSpec(runtime_spec("sglang-router").factory, default_model="the service's own")
    _register(monkeypatch, "remote", spec)
    assert "model:   the service's own  (served as" in banner(_settings("remote"))
    given = banner(_settings("remote", model="/models/llama"))
    assert "model:   /models/llama  (served as" in given


def test_a_runtime_under_another_name_is_refused_by_its_own_model_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check = f"{__name__}:needs_a_model"
    _register(monkeypatch, "gpu-engine", RuntimeSpec("example:create_runtime", model_check=check))
    assert missing_model(_settings("gpu-engine")) == NO_MODEL
    assert missing_model(_settings("gpu-engine", extra={"local": True})) is None
    assert missing_model(_settings("gpu-engine", model="/models/llama")) is None
    with pytest.raises(click.UsageError, match="needs a model"):
        refuse_to_start(_settings("gpu-engine"))


def test_a_runtime_without_a_model_check_never_misses_a_model() -> None:
    assert missing_model(_settings("sim")) is None
    assert missing_model(_settings("sglang-router", extra={"device": "cuda"}, **ROUTED)) is None


def test_the_router_runtime_without_its_router_or_workers_is_refused_naming_the_flags() -> None:
    """It failed at start-up in a 60-line traceback that named no flag."""
    for given in ({}, {"router": "http://127.0.0.1:30000"}, {"workers": ["http://w:1"]}):
        with pytest.raises(ValidationError, match="needs the router's URL \\(--router\\)"):
            _settings("sglang-router", **given)
    assert _settings("sglang-router", **ROUTED).runtime.router == ROUTED["router"]


def test_an_ipv6_host_is_bracketed_in_every_url() -> None:
    """``serve --host ::1`` printed ``http://::1:8000/v1`` (no URL: ``--demo``'s agents and
    ``--tui`` failed on it)."""
    import httpx

    from agentconsole.serve import http_url

    assert http_url("::1", 8000) == "http://[::1]:8000"
    assert httpx.URL(http_url("::1", 8000)).port == 8000
    assert http_url("127.0.0.1", 80) == "http://127.0.0.1:80"


def test_a_time_scale_on_a_real_engine_is_refused() -> None:
    """``serve --runtime sglang --time-scale 2`` ran without a word (sim only)."""
    with pytest.raises(ValidationError, match="time_scale: runtime sglang runs in real time"):
        _settings("sglang", time_scale=2.0)
    assert _settings("sim", time_scale=2.0).runtime.time_scale == 2.0

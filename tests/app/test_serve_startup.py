"""What a first ``agentconsole serve`` meets before anything starts: bad settings, ``--tui``
without an operator key, SGLang on a GPU without a model and a store another process holds are
each refused with exit 2 and a message naming what to change (no banner, no traceback); the
banner says where the console and the OpenAI API are, whether the admission door is on, what
the simulator simulates and that no tenant key is live when none is configured."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import agentconsole.cli
import agentconsole.serve
from agentconsole.cli import main
from agentconsole.scheduler.door import DOOR_ON_BY_DEFAULT
from agentconsole.serve import StartRefused, banner, check_store, missing_model
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.app import door_settings
from agentconsole.server.live.service import DoorSettings
from agentconsole.server.runtime import registry
from agentconsole.server.runtime.registry import RuntimeOptions, available_runtimes
from agentconsole.server.runtime.sglang.factory import ModelRequired, settings_from_options
from agentconsole.settings import InvalidSettings, load_settings, load_settings_or_explain

BANNER_START = "runtime: "


def _serve(
    args: list[str], tmp_path: Path, env: Mapping[str, str] | None = None
) -> click.testing.Result:
    """``serve ARGS`` in-process on any free port with a store of the test's own."""
    db = tmp_path / "startup.duckdb"
    return CliRunner().invoke(
        main, ["serve", "--port", "0", "--db", str(db), *args], env=dict(env or {})
    )


@pytest.mark.parametrize(
    ("args", "env", "setting", "choices"),
    [
        (["--runtime", "sim", "--policy", "bogus"], {}, "runtime.policy (--policy", "fcfs"),
        (["--runtime", "sim", "--kv-policy", "bogus"], {}, "runtime.kv_policy", "adaptive"),
        ([], {"AGENTCONSOLE_RUNTIME__NAME": "bogus"}, "runtime.name (--runtime", "sim"),
        (
            ["--runtime", "sim"],
            {"AGENTCONSOLE_SELECTION__RULE": "bogus"},
            "selection.rule (AGENTCONSOLE_SELECTION__RULE)",
            "finish-time",
        ),
        (["--runtime", "sim"], {"AGENTCONSOLE_MODELS": "notjson"}, "AGENTCONSOLE_MODELS", "JSON"),
        (["--runtime", "sim", "--dp", "2"], {}, "dp: runtime sim runs no", "--replicas"),
        (
            ["--runtime", "sim", "--router", "http://127.0.0.1:1"],
            {},
            "serves no workers behind a router",
            "sglang-router does",
        ),
    ],
    ids=[
        "policy",
        "kv-policy",
        "runtime-env",
        "selection-rule-env",
        "models-not-json",
        "dp-on-sim",
        "router-on-sim",
    ],
)
def test_a_bad_setting_is_a_usage_error_naming_it_before_the_banner(
    tmp_path: Path, args: list[str], env: dict[str, str], setting: str, choices: str
) -> None:
    result = _serve(args, tmp_path, env)
    assert result.exit_code == 2, result.output
    assert setting in result.output
    assert choices in result.output  # the valid names (or the format) are listed
    assert "_Loaded" not in result.output
    assert BANNER_START not in result.output
    assert not (tmp_path / "startup.duckdb").exists()  # nothing started


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (
            '[[models]]\nname = "a"\npath = "llama-3.1-8b"\n'
            '[[models]]\nname = "a"\npath = "llama-3.1-70b"\ntp = 4\n',
            "each served model needs a name of its own: ['a']",
        ),
        ('[[models]]\nname = "auto"\npath = "llama-3.1-8b"\n', "'auto' asks the selector"),
        ('[selection.role_pins]\ncoder = "nope"\n', "pins choose among several served models"),
        (
            '[[models]]\nname = "a"\n[[models]]\nname = "b"\n'
            '[selection.role_pins]\ncoder = "nope"\n',
            "'coder' is pinned to 'nope', which is not served",
        ),
    ],
    ids=["twice", "auto", "pin-one-model", "pin-unknown"],
)
def test_models_and_pins_that_cannot_be_served_are_refused_before_the_banner(
    tmp_path: Path, config: str, said: str
) -> None:
    """Each of these failed with a traceback from the lifespan, after the banner."""
    path = tmp_path / "serve.toml"
    path.write_text(config)
    result = _serve(["--runtime", "sim", "--config", str(path)], tmp_path)
    assert result.exit_code == 2, result.output
    assert said in result.output
    assert BANNER_START not in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"AGENTCONSOLE_RUNTIME__MODEL": "bogus"}, "no bundled profile 'H200-141GB__bogus__tp1'"),
        ({"AGENTCONSOLE_RUNTIME__GPU": "nope"}, "no bundled profile 'nope__llama-3.1-8b__tp1'"),
        ({"AGENTCONSOLE_RUNTIME__PROFILE": "nope"}, "no bundled profile 'nope'"),
    ],
    ids=["model", "gpu", "profile"],
)
def test_a_simulated_model_no_preset_has_is_refused_before_the_banner(
    tmp_path: Path, env: dict[str, str], said: str
) -> None:
    result = _serve(["--runtime", "sim"], tmp_path, env)
    assert result.exit_code == 2, result.output
    assert "the simulated runtime cannot serve these settings" in result.output
    assert said in result.output
    assert BANNER_START not in result.output
    assert not (tmp_path / "startup.duckdb").exists()


def test_a_model_bundled_over_several_gpus_is_refused_saying_how_to_ask_for_them(
    tmp_path: Path,
) -> None:
    """``serve`` has no ``--tp``: the refusal named only the missing tp-1 profile."""
    result = _serve(["--runtime", "sim", "--model", "llama-3.1-70b"], tmp_path, {})
    assert result.exit_code == 2, result.output
    assert "llama-3.1-70b is bundled at tp 4, 8: runtime.tp in --config" in result.output


def test_a_config_file_that_is_not_toml_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[runtime\npolicy = 1\n")
    result = _serve(["--runtime", "sim", "--config", str(config)], tmp_path)
    assert result.exit_code == 2, result.output
    assert f"the config file {config} is not valid TOML" in result.output
    assert BANNER_START not in result.output


def test_stock_sglang_is_explained_as_a_bench_baseline(tmp_path: Path) -> None:
    with pytest.raises(InvalidSettings, match="is a bench baseline") as refused:
        load_settings_or_explain(overrides={"runtime": {"policy": "stock-sglang"}})
    assert "cp-cache" in str(refused.value)
    help_text = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "stock-sglang is a bench baseline" in " ".join(help_text.split())


def test_a_value_from_the_config_file_is_named_with_its_table(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('[runtime]\npolicy = "nope"\n')
    with pytest.raises(InvalidSettings) as refused:
        load_settings_or_explain(config, flags={"runtime.policy": "--policy"})
    said = str(refused.value)
    where = f"(--policy, AGENTCONSOLE_RUNTIME__POLICY, [runtime] policy in {config})"
    assert f"runtime.policy {where}" in said
    assert "unknown policy 'nope'" in said


def test_tui_without_an_operator_key_is_refused_before_starting(tmp_path: Path) -> None:
    env = {"AGENTCONSOLE_AUTH__TENANT_KEYS": '{"k-secret": "acme"}'}
    result = _serve(["--runtime", "sim", "--tui"], tmp_path, env)
    assert result.exit_code == 2, result.output
    assert "--tui needs an operator key" in result.output
    assert "AGENTCONSOLE_AUTH__OPERATOR_KEYS" in result.output
    assert BANNER_START not in result.output


def test_sglang_on_a_gpu_without_a_model_names_the_flag() -> None:
    with pytest.raises(ModelRequired, match="--model"):
        settings_from_options(RuntimeOptions(extra={"device": "cuda"}))
    on_gpu = {"runtime": {"extra": {"device": "cuda"}}}
    assert "serve --model PATH" in str(missing_model(load_settings(overrides=on_gpu)))
    given = {"runtime": {"model": "/models/llama", "extra": {"device": "cuda"}}}
    assert missing_model(load_settings(overrides=given)) is None
    every_entry_has_one = {**on_gpu, "models": [{"name": "a", "path": "/models/a"}]}
    assert missing_model(load_settings(overrides=every_entry_has_one)) is None
    one_entry_lacks_it = {**on_gpu, "models": [{"name": "a", "path": "/m/a"}, {"name": "b"}]}
    assert missing_model(load_settings(overrides=one_entry_lacks_it)) is not None
    on_cpu = {"runtime": {"extra": {"device": "cpu"}}}
    assert missing_model(load_settings(overrides=on_cpu)) is None  # the tiny CPU model


def test_serve_on_a_gpu_without_a_model_stops_before_the_banner(tmp_path: Path) -> None:
    result = _serve([], tmp_path, {"AGENTCONSOLE_RUNTIME__EXTRA": '{"device": "cuda"}'})
    assert result.exit_code == 2, result.output
    assert "serve --model PATH" in result.output
    assert BANNER_START not in result.output


@pytest.fixture
def held_store(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A store opened by another process (a first ``serve``): its path and that PID."""
    db = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from agentconsole.server.store import Store\n"
            "store = Store.open(sys.argv[1])\n"
            "print('open', flush=True)\n"
            "time.sleep(120)\n",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        yield db, holder.pid
    finally:
        holder.kill()
        holder.wait(30)


def test_a_store_another_process_holds_is_one_line_and_exit_2(
    tmp_path: Path, held_store: tuple[Path, int]
) -> None:
    db, pid = held_store
    with pytest.raises(StartRefused) as refused:
        check_store(load_settings(overrides={"store": {"db": str(db)}}))
    assert refused.value.exit_code == 2
    result = CliRunner().invoke(main, ["serve", "--runtime", "sim", "--port", "0", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: cannot open store {db}: it is locked by another")
    assert f"(PID {pid}" in result.output
    assert "Traceback" not in result.output
    assert BANNER_START not in result.output


def test_the_banner_says_where_to_go_and_what_runs() -> None:
    text = banner(load_settings())
    assert "console: http://127.0.0.1:8000/" in text
    assert "OpenAI base_url: http://127.0.0.1:8000/v1" in text
    assert "admission door: on" in text
    assert "at most 120 s" in text
    any_port = banner(load_settings(overrides={"server": {"port": 0}}))
    assert "printed once it listens" in any_port
    off = banner(load_settings(overrides={"limits": {"program_admission": False}}))
    assert "admission door: off" in off
    request_level = banner(load_settings(overrides={"runtime": {"policy": "fcfs"}}))
    assert "admission door: off under fcfs" in request_level


def test_the_banner_describes_the_door_the_service_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The banner reads the door the service runs (``door_settings``), not its own copy of
    the door's rules: a door with another memory share or wait is described as it is."""

    def other_door(config: ServerConfig) -> DoorSettings:
        return dataclasses.replace(door_settings(config), memory_share=0.5, wait_s=7.0)

    monkeypatch.setattr(agentconsole.serve, "door_settings", other_door)
    text = banner(load_settings())
    assert "fill 50% of the KV memory, at most 7 s, then 503" in text


def test_a_server_config_built_directly_runs_the_door_serve_runs() -> None:
    settings_door = load_settings().server_config().program_admission
    assert ServerConfig().program_admission is settings_door is DOOR_ON_BY_DEFAULT is True


def test_the_banner_names_the_simulated_preset_and_gpu() -> None:
    sim = banner(load_settings(overrides={"runtime": {"name": "sim"}}))
    assert "model:   llama-3.1-8b simulated on H200-141GB" in sim
    chosen = {"runtime": {"name": "sim", "model": "llama-3.1-70b", "gpu": "H100-80GB", "tp": 4}}
    assert "llama-3.1-70b simulated on H100-80GB x4" in banner(load_settings(overrides=chosen))
    demo = banner(load_settings(overrides={"runtime": {"name": "sim"}, "demo": True}))
    assert "models:  llama-3.1-70b (llama-3.1-70b simulated on H200-141GB x4)" in demo
    assert "llama-3.1-8b (llama-3.1-8b simulated on H200-141GB)  (default: llama-3.1-70b)" in demo
    assert "model: " not in demo  # one line for the several, not the one the demo replaced


def test_the_banner_says_no_tenant_key_is_live_with_only_operator_keys() -> None:
    settings = load_settings(overrides={"auth": {"operator_keys": ["op-secret"]}})
    assert settings.keys() == ({}, ["op-secret"])
    text = banner(settings)
    assert "tenant keys:   none configured: none is live" in text
    assert "0 configured" not in text
    assert "op-secret" not in text


def test_serve_offers_the_registered_runtimes(monkeypatch: pytest.MonkeyPatch) -> None:
    def choices() -> list[str]:
        runtime = next(p for p in agentconsole.cli.serve.params if p.name == "runtime")
        assert isinstance(runtime.type, click.Choice)
        return [str(choice) for choice in runtime.type.choices]

    assert choices() == available_runtimes()
    plug_in = registry.RuntimeSpec("example.runtime:create_runtime")
    monkeypatch.setitem(registry._RUNTIMES, "plug-in", plug_in)
    try:
        importlib.reload(agentconsole.cli)
        assert "plug-in" in choices()  # a runtime registered is one serve can be told to run
    finally:
        monkeypatch.undo()
        importlib.reload(agentconsole.cli)

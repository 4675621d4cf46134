"""The ``models`` and ``selection`` settings: a TOML list, the environment's JSON, the demo's
two presets, and the single ``runtime.model`` as a one-entry list."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentconsole.scheduler.models import ServedModel
from agentconsole.settings import load_settings

TOML = """
[runtime]
name = "sglang"

[[models]]
name = "large"
path = "/m/large"
tier = 2
roles = ["planner"]
price_per_mtok = 0.5
memory_share = 0.4
devices = [1, 2]
tokenizer = "/m/tok"

[[models]]
name = "small"
path = "/m/small"

[selection]
rule = "fixed-roles"
role_tiers = { planner = 2 }
role_pins = { verifier = "small" }
"""


def test_models_from_a_config_file(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(TOML, encoding="utf-8")
    config = load_settings(path).server_config()
    large, small = config.models
    assert large == ServedModel(
        "large",
        source="/m/large",
        tier=2,
        roles=("planner",),
        price_per_mtok=0.5,
        tokenizer="/m/tok",
        memory_share=0.4,
        devices=(1, 2),
    )
    assert small.source == "/m/small"
    assert small.tier == 1
    assert config.model_name == "large"  # the default: the first
    assert config.served_models() == config.models
    assert config.selection.rule == "fixed-roles"
    assert config.selection.role_tiers == {"planner": 2}
    assert config.selection.role_pins == {"verifier": "small"}


def test_models_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AGENTCONSOLE_MODELS", '[{"name": "a", "path": "llama-3.1-8b"}, {"name": "b", "tier": 3}]'
    )
    config = load_settings().server_config()
    assert [(m.name, m.source, m.tier) for m in config.models] == [
        ("a", "llama-3.1-8b", 1),
        ("b", None, 3),
    ]


def test_one_model_and_the_demo() -> None:
    one = load_settings(overrides={"runtime": {"name": "sim", "model": "llama-3.1-8b"}})
    assert one.server_config().served_models() == (
        ServedModel("llama-3.1-8b", source="llama-3.1-8b"),
    )
    demo = load_settings(overrides={"demo": True, "runtime": {"name": "sim"}}).server_config()
    assert [(m.name, m.tier, m.tp) for m in demo.models] == [
        ("llama-3.1-70b", 2, 4),
        ("llama-3.1-8b", 1, None),
    ]
    chosen = {"demo": True, "runtime": {"name": "sim", "model": "llama-3.1-8b"}}
    assert load_settings(overrides=chosen).server_config().models == ()


def test_refusals() -> None:
    with pytest.raises(ValidationError):
        load_settings(overrides={"models": [{"name": "a", "memory_share": 2.0}]})
    with pytest.raises(ValidationError):
        load_settings(overrides={"models": [{"name": "a", "colour": "red"}]})
    with pytest.raises(ValidationError, match="unknown model selection rule 'coin-flip'"):
        load_settings(overrides={"selection": {"rule": "coin-flip"}})
    with pytest.raises(ValueError, match="auto"):
        load_settings(overrides={"models": [{"name": "auto"}]}).server_config()

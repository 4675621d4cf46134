"""Contract with the pinned SGLang: every symbol the project uses resolves (one list,
``symbols.SYMBOLS``, also what the code loads), and the version is the pinned one."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from agentconsole.server.runtime.sglang import symbols

pytestmark = pytest.mark.sglang


def test_pinned_version_is_installed() -> None:
    assert importlib.metadata.version("sglang") == symbols.SGLANG_VERSION


def test_every_symbol_the_project_uses_resolves() -> None:
    assert symbols.missing() == []


def test_the_symbol_list_is_the_one_the_code_uses() -> None:
    names = {v for k, v in vars(symbols).items() if k.isupper() and isinstance(v, str)}
    listed = {s for s in names if ":" in s}
    assert listed == set(symbols.SYMBOLS)
    assert set(symbols.SYMBOLS) >= symbols.PRIVATE


def test_a_missing_symbol_is_reported() -> None:
    with pytest.raises(AttributeError):
        symbols.load("sglang.srt.managers.schedule_policy:NoSuchPolicy")


def test_engine_arguments_are_server_args_fields(tmp_path: Path) -> None:
    from agentconsole.server.runtime.sglang.engine_config import EngineSettings, engine_kwargs

    fields = set(symbols.load("sglang.srt.server_args:ServerArgs").__struct_fields__)
    for plugin in (True, False):
        kwargs = engine_kwargs(EngineSettings(model_path=tmp_path, plugin=plugin))
        assert set(kwargs) <= fields, set(kwargs) - fields
    gpu = engine_kwargs(EngineSettings(model_path=tmp_path, device="cuda", hicache_size_gb=64))
    assert set(gpu) <= fields, set(gpu) - fields
    assert (gpu["enable_hierarchical_cache"], gpu["hicache_size"]) == (True, 64)
    # the host tier bench models by default (kvtiers.tiers.WRITE_THROUGH), named explicitly
    assert gpu["hicache_write_policy"] == "write_through"
    with pytest.raises(ValueError, match="HiCache needs a CUDA GPU"):
        engine_kwargs(EngineSettings(model_path=tmp_path, hicache_size_gb=8))

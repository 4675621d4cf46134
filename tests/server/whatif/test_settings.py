"""The ``[whatif]`` settings reach the server's what-if desk (through ``ServerConfig``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentconsole.server.app import _whatif
from agentconsole.server.store import Store
from agentconsole.settings import load_settings


def test_the_default_directory_is_beside_the_store() -> None:
    config = load_settings(overrides={"store": {"db": "/srv/ac/main.duckdb"}}).server_config()
    assert config.whatif_directory == Path("/srv/ac/whatif")


async def _nothing() -> None:
    return None


def test_whatif_settings_reach_the_desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCONSOLE_WHATIF__DIR", str(tmp_path / "traces"))
    monkeypatch.setenv("AGENTCONSOLE_WHATIF__KEEP", "3")
    monkeypatch.setenv("AGENTCONSOLE_WHATIF__RUN_TIMEOUT_S", "42")
    monkeypatch.setenv("AGENTCONSOLE_WHATIF__RUN_JOBS", "2")
    overrides = {"runtime": {"name": "sim", "gpu": "H100-80GB", "tp": 2}}
    config = load_settings(overrides=overrides).server_config()
    store = Store.open(tmp_path / "store.duckdb")
    try:
        desk = _whatif(config, store, _nothing)
    finally:
        store.close()
    assert desk.settings.directory == tmp_path / "traces"
    assert (desk.settings.keep, desk.runner.timeout_s, desk.runner.jobs) == (3, 42.0, 2)
    assert (desk.hardware.gpu, desk.hardware.tp) == ("H100-80GB", 2)


@pytest.mark.parametrize(("name", "value"), [("keep", 0), ("run_timeout_s", 0), ("run_jobs", 0)])
def test_unusable_whatif_settings_are_refused(name: str, value: object) -> None:
    with pytest.raises(ValidationError):
        load_settings(overrides={"whatif": {name: value}})

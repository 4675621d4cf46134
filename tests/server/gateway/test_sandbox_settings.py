"""The ``sandbox`` settings (interpreter, identity, parallelism) reach the gateway's sandbox
executor through ``serve``'s wiring: settings -> ``GatewayConfig.sandbox`` -> ``Sandbox``."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentconsole.serve import extensions
from agentconsole.server.gateway import GatewayExtension, ToolGateway
from agentconsole.server.gateway.sandbox import build_argv
from agentconsole.server.gateway.sandbox_spec import SandboxConfig, SandboxLimits
from agentconsole.server.store import Store
from agentconsole.settings import load_settings


def test_the_defaults_are_the_executors_own() -> None:
    assert load_settings().sandbox.config() == SandboxConfig()


def test_sandbox_settings_reach_the_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCONSOLE_SANDBOX__MAX_PARALLEL", "7")
    monkeypatch.setenv("AGENTCONSOLE_SANDBOX__PYTHON", "/usr/bin/python3.11")
    monkeypatch.setenv("AGENTCONSOLE_SANDBOX__RUN_AS_UID", "4242")
    monkeypatch.setenv("AGENTCONSOLE_SANDBOX__RUN_AS_GID", "4343")
    mounted = [e for e in extensions(load_settings()) if isinstance(e, GatewayExtension)]
    store = Store.open(tmp_path / "store.duckdb")
    try:
        gateway = ToolGateway(store, mounted[0].config)
        config = gateway.sandbox.config
        argv = build_argv(config, "/usr/bin/bwrap", "python", SandboxLimits(), (5, 6))
    finally:
        store.close()
    assert (config.max_parallel, config.run_as_uid, config.run_as_gid) == (7, 4242, 4343)
    assert argv[-4:] == ["/usr/bin/python3.11", "-I", "-B", "/sandbox/main.py"]


@pytest.mark.parametrize(
    ("name", "value"),
    [("run_as_uid", 0), ("max_parallel", 0), ("python", "python3")],
)
def test_unsafe_or_unusable_sandbox_settings_are_refused(name: str, value: object) -> None:
    with pytest.raises(ValidationError):
        load_settings(overrides={"sandbox": {name: value}})

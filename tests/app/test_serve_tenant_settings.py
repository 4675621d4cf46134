"""``serve``'s tenant settings reach what they govern, through serve's own wiring
(``Settings.server_config``, ``serve.extensions``) and a real server over loopback HTTP:

* ``limits.tools`` and ``limits.tool_bytes`` (from the environment too) bound each tenant's tool
  registry;
* ``limits.tenant_weights`` weigh the tenants' shares at the admission door as in the engines'
  fairness guard (``bench`` gives both one config), named in ``runtime.extra.fairness`` or not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.serve import extensions
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from agentconsole.settings import Settings, load_settings
from tests.server.api.harness import LiveServer
from tests.server.gateway.helpers import tool_body

KEYS = {"sk-a": "tenant-a", "sk-b": "tenant-b"}
ECHO = {"type": "builtin", "name": "echo"}


def _settings(db: Path, **limits: Any) -> Settings:
    return load_settings(
        overrides={
            "store": {"db": str(db)},
            "runtime": {"name": "sim", "time_scale": 0.05},
            "auth": {"tenant_keys": KEYS},
            "limits": limits,
        }
    )


@contextmanager
def _serving(settings: Settings) -> Iterator[LiveServer]:
    with LiveServer(settings.server_config(), extensions=extensions(settings)) as live:
        live.wait_ready()
        yield live


def _register(c: httpx.Client, name: str, description: str = "") -> httpx.Response:
    return c.post("/v1/tools", json=tool_body(name, ECHO, description=description or name))


def test_a_lower_tool_count_setting_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCONSOLE_LIMITS__TOOLS", "2")
    settings = _settings(tmp_path / "count.duckdb")
    assert settings.limits.tools == 2
    with _serving(settings) as live, live.client("sk-a") as a, live.client("sk-b") as b:
        assert _register(a, "t1").status_code == 201
        assert _register(a, "t2").status_code == 201
        refused = _register(a, "t3")
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert (error["type"], error["field"], error["limit"]) == (
            "tenant_limit",
            "limits.tools",
            2,
        )
        assert _register(b, "t3").status_code == 201  # per tenant


def test_a_lower_tool_bytes_setting_is_honoured(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "bytes.duckdb", tool_bytes=4_096)
    with _serving(settings) as live, live.client("sk-a") as a:
        assert _register(a, "small").status_code == 201
        refused = _register(a, "large", "x" * 4_000)
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert (error["field"], error["limit"]) == ("limits.tool_bytes", 4_096)


def test_the_tool_settings_default_to_256_tools_in_4_mib() -> None:
    bounds = Settings().limits.tool_bounds()
    assert (bounds.tools, bounds.tool_bytes) == (256, 4 * 1024 * 1024)


def test_serve_s_door_shares_by_the_guard_s_tenant_weights(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "weights.duckdb", tenant_weights={"tenant-a": 3.0})
    with _serving(settings) as live:
        service = live.live.service
        door = service.driver.door._line.fairness
        assert isinstance(service.runtime, SimLiveRuntime)
        guard = service.runtime.engine.guard.config
        assert door.weight("tenant-a") == guard.weight("tenant-a") == 3.0
        assert door.weight("tenant-b") == guard.weight("tenant-b") == 1.0


def test_weights_named_for_the_runtime_reach_the_door_too(tmp_path: Path) -> None:
    settings = load_settings(
        overrides={
            "store": {"db": str(tmp_path / "extra.duckdb")},
            "runtime": {
                "name": "sim",
                "extra": {"fairness": {"share_slack": 0.1, "tenant_weights": {"tenant-b": 2}}},
            },
            "auth": {"tenant_keys": KEYS},
            "limits": {"tenant_weights": {"tenant-a": 4}},
        }
    )
    fairness = settings.server_config().runtime_extra["fairness"]
    assert fairness["tenant_weights"] == {"tenant-a": 4.0, "tenant-b": 2}
    with _serving(settings) as live:
        door = live.live.service.driver.door._line.fairness
        assert (door.weight("tenant-a"), door.weight("tenant-b")) == (4.0, 2)
        assert door.share_slack == 0.1


def test_a_tenant_weight_must_be_positive() -> None:
    weights = Settings(limits={"tenant_weights": {"a": 0.5}}).limits.tenant_weights  # type: ignore[arg-type]
    assert weights == {"a": 0.5}
    with pytest.raises(ValueError, match="greater than 0"):
        Settings(limits={"tenant_weights": {"a": 0}})  # type: ignore[arg-type]


@pytest.mark.parametrize("weight", [0, -1, "heavy", float("inf")])
def test_a_weight_named_for_the_runtime_must_be_usable_too(weight: object) -> None:
    """``runtime.extra.fairness`` reaches the door and the engines' guard as it is written:
    a weight they cannot share by (0 divided every share by zero mid-serving) is refused at
    load, naming the tenant, as ``limits.tenant_weights`` is."""
    extra = {"fairness": {"tenant_weights": {"tenant-b": weight}}}
    with pytest.raises(ValueError, match=r"tenant_weights\['tenant-b'\] must be a number > 0"):
        Settings(runtime={"name": "sim", "extra": extra})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a table"):
        Settings(runtime={"name": "sim", "extra": {"fairness": 3}})  # type: ignore[arg-type]

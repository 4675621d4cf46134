"""``serve``'s stop as a mounted extension sees it: every extension, whatever its type, is told
``shut_down()`` when the server begins to stop, before the app's lifespan ends with its
``stop()`` (the tool gateway answers its calls in flight there; the others may have nothing).
The test server is serve's own (``LiveServer`` builds it with ``serve.make_server``), so this is
serve's wiring of its extensions, not a harness's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from litestar.di import Provide
from litestar.types import ControllerRouterHandler

from agentconsole.server.api.deps import Live
from tests.server.api.harness import LiveServer, make_config


class RecordingExtension:
    """An extension the server knows nothing about: it records what it is told, in order."""

    route_handlers: Sequence[ControllerRouterHandler] = ()

    def __init__(self) -> None:
        self.told: list[str] = []

    def dependencies(self) -> Mapping[str, Provide]:
        return {}

    async def start(self, live: Live) -> None:
        self.told.append("start")

    def shut_down(self) -> None:
        self.told.append("shut_down")

    async def stop(self) -> None:
        self.told.append("stop")


def test_every_mounted_extension_is_shut_down_before_it_stops(tmp_path: Path) -> None:
    first, second = RecordingExtension(), RecordingExtension()
    with LiveServer(make_config(tmp_path / "s.duckdb"), extensions=[first, second]) as live:
        live.wait_ready()
        assert first.told == second.told == ["start"]
    assert first.told == ["start", "shut_down", "stop"]
    assert second.told == ["start", "shut_down", "stop"]

"""What the browser tests drive: the real server when it serves the console, else the stub.

The real ``serve --runtime sim --demo`` is preferred. Until ``server/app.py`` mounts
``agentconsole.ui.web.routes.console_routes()``, ``/`` is not there and the tests fall back to
the stub server (which mounts the same routes) with a warning saying so.
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.ui.real_server import serve_real
from tests.ui.stub_server import serve_stub

MOUNT_MISSING = (
    "server/app.py does not mount agentconsole.ui.web.routes.console_routes() yet: "
    "the browser tests ran against the stub server"
)


@dataclass(slots=True)
class ConsoleTarget:
    """A server with the console page, and how to make and read programs on it."""

    url: str
    key: str
    kind: str
    new_running_program: Callable[[], str]

    def get(self, path: str) -> dict[str, object]:
        """GET ``path`` with the operator key."""
        response = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.key}"})
        response.raise_for_status()
        body: dict[str, object] = response.json()
        return body


def _serves_console(url: str) -> bool:
    response = httpx.get(url + "/")
    return response.status_code == 200 and "agentconsole" in response.text


@contextlib.contextmanager
def console_target(tmp: Path) -> Iterator[ConsoleTarget]:
    """The real server if it serves the page, else the live stub."""
    with serve_real(tmp) as real:
        if _serves_console(real.url):

            def opened() -> str:
                program_id = f"ui-web-{uuid.uuid4().hex[:8]}"
                real.open_program(program_id)
                return program_id

            yield ConsoleTarget(real.url, real.key, "real", opened)
            return
    warnings.warn(MOUNT_MISSING, stacklevel=2)
    with serve_stub(live=True, tick_steps=2) as stub:

        def running() -> str:
            body = httpx.get(
                stub.url + "/v1/programs?state=running&limit=500",
                headers={"Authorization": f"Bearer {stub.key}"},
            ).json()
            for row in body["programs"]:
                if row["program_id"] not in stub.world.pinned:
                    stub.world.pinned.add(row["program_id"])
                    return str(row["program_id"])
            raise AssertionError("no running program left in the stub")

        yield ConsoleTarget(stub.url, stub.key, "stub", running)

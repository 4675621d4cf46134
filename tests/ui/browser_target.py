"""What the browser tests drive: the real ``agentconsole serve --runtime sim --demo``.

The page must be served by the real server (``app/serve.py`` mounts
``agentconsole.ui.web.routes.console_routes()``); the stub server is kept only for the tests
where canned data is the better unit test (a DAG of hundreds of nodes, a steady event stream).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser

from tests.ui.browser_session import Session, open_session
from tests.ui.real_server import serve_real


@dataclass(slots=True)
class ConsoleTarget:
    """A server with the console page, and how to make and read programs on it."""

    url: str
    key: str
    kind: str
    new_running_program: Callable[[], str]
    #: runs a program labelled with the given workload to its finish; returns its id
    new_finished_program: Callable[[str], str]

    def get(self, path: str) -> dict[str, object]:
        """GET ``path`` with the operator key."""
        response = httpx.get(self.url + path, headers={"Authorization": f"Bearer {self.key}"})
        response.raise_for_status()
        body: dict[str, object] = response.json()
        return body


@contextlib.contextmanager
def console_target(tmp: Path) -> Iterator[ConsoleTarget]:
    """The real server, checked to serve the console page at ``/``."""
    with serve_real(tmp) as real:
        page = httpx.get(real.url + "/")
        assert page.status_code == 200, "serve does not mount the console at / (console_routes)"
        assert "agentconsole" in page.text

        def opened() -> str:
            program_id = f"ui-web-{uuid.uuid4().hex[:8]}"
            real.open_program(program_id)
            return program_id

        def finished(workload: str) -> str:
            program_id = f"ui-web-{uuid.uuid4().hex[:8]}"
            real.finish_program(program_id, workload)
            return program_id

        yield ConsoleTarget(real.url, real.key, "real", opened, finished)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleTarget]:
    """The real server with the console page, for the browser tests of one module."""
    with console_target(tmp_path_factory.mktemp("web")) as server:
        yield server


@pytest.fixture
def session(browser: Browser, target: ConsoleTarget) -> Iterator[Session]:
    """A page of its own (a fresh browser context) on :func:`target`, recording its requests."""
    yield from open_session(browser, target.url)

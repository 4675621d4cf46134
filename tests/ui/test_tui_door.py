"""The admission door on the terminal dashboard's tenants view, from injected data: its counts
and what it learned, "not sized" before the door has a budget, and a tenant key's refusal
(asked once, the section hidden, no error shown). The real server's door is driven in
``test_tui_pilot.py``."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from agentconsole.httpclient import ApiError, NotFoundError, PermissionDeniedError
from agentconsole.ui.client.door import Door
from agentconsole.ui.client.models import AuditEntry, TenantRow
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.door import DoorPanel
from tests.ui.canned import CannedClient
from tests.ui.stub_world import StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


class DoorClient(CannedClient):
    """The stub world with the door's answer changed by ``changes`` (or refused, 403), and
    how many times it was asked."""

    def __init__(self, *, refuse: ApiError | None = None, **changes: Any) -> None:
        super().__init__(StubWorld())
        self.refuse = refuse
        self.changes = changes
        self.door_reads = 0
        self.tenant_reads = 0

    def tenants(self) -> list[TenantRow]:
        self.tenant_reads += 1
        return super().tenants()

    def door(self) -> Door:
        self.door_reads += 1
        if self.refuse is not None:
            raise self.refuse
        return Door.parse(self.world.door_json() | self.changes)


def _text(app: DashboardApp, selector: str) -> str:
    """The plain text of a Static that shows a rich renderable (the counts' grid)."""
    console = Console(width=78, record=True, color_system=None, file=io.StringIO())
    console.print(app.query_one(selector, Static).content)
    return console.export_text()


def _rows(app: DashboardApp) -> list[list[str]]:
    table = app.query_one("#door-table", DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def _app(client: DoorClient) -> DashboardApp:
    # no feed and no timer: the polls come from the view switch and ``r`` only
    return DashboardApp(client, feed=False, poll_s=3600)


async def _poll_again(pilot: Pilot[None], app: DashboardApp, client: DoorClient) -> None:
    """Press ``r`` and wait until that poll of the tenants view is done."""
    reads = client.tenant_reads
    await pilot.press("r")
    await until(pilot, lambda: client.tenant_reads > reads and not app.sync.busy)


async def test_the_tenants_view_shows_the_door_and_what_it_learned() -> None:
    client = DoorClient()
    app = _app(client)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
        assert client.door_reads == 0  # the overview does not ask for it
        await pilot.press("3")
        await until(pilot, lambda: bool(_rows(app)))
        assert app.query_one(DoorPanel).display
        counts = _text(app, "#door-counts")
        for shown in ("on, shortest-first", "950K / 1.2M 79%", "880K", "waited total"):
            assert shown in counts
        assert [line.split() for line in counts.splitlines()] == [
            ["door", "on,", "shortest-first", "waiting", "3"],
            ["predicted", "950K", "/", "1.2M", "79%", "waited", "total", "17"],
            ["held", "now", "880K", "boundary", "parks", "2"],
            ["shared", "room", "150K"],
        ]
        rows = _rows(app)
        assert len(rows) == 6
        assert rows[:2] == [
            ["tenant-a", "chat", "12.5s", "3.2K"],
            ["tenant-a", "coding", "4m00s", "61.5K"],
        ]
        assert rows[-1] == ["tenant-c", "coding", "5m36s", "184K"]  # its own peak, not a's
    assert client.door_reads >= 1


async def test_an_unsized_door_says_so_and_a_peak_without_a_run_is_listed() -> None:
    peaks = [{"tenant": "tenant-b", "kind": "batch", "peak_private_tokens": 9_000}]
    client = DoorClient(budget_tokens=None, enabled=False, runs=[], peaks=peaks)
    app = _app(client)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: bool(_rows(app)))
        counts = _text(app, "#door-counts")
        assert "predicted not sized" in " ".join(counts.split())
        assert "door off" in " ".join(counts.split())
        assert _rows(app) == [["tenant-b", "batch", "-", "9K"]]


@pytest.mark.parametrize(
    "refusal",
    [
        PermissionDeniedError(403, "forbidden", "this action needs an operator key"),
        NotFoundError(404, "not_found", "no route"),  # a server older than the door
    ],
    ids=["tenant-key", "older-server"],
)
async def test_a_tenant_key_is_asked_once_and_sees_no_door(refusal: ApiError) -> None:
    client = DoorClient(refuse=refusal)
    app = _app(client)
    shown: list[str] = []
    app.notify = lambda message, **kw: shown.append(str(message))  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: "door" in app.sync.refused and bool(app.state.tenants))
        for _ in range(3):  # three more polls of the view: none asks for the door again
            await _poll_again(pilot, app, client)
        assert client.door_reads == 1
        assert not app.query_one(DoorPanel).display
        assert app.state.door is None
        assert app.query_one("#tenants-table", DataTable).row_count == 3
    assert shown == []  # a refusal is not an error to report


class AuditRefusingClient(CannedClient):
    """The stub world whose audit log is refused to this key (403), counting the reads."""

    def __init__(self) -> None:
        super().__init__(StubWorld())
        self.audit_reads = 0

    def audit(self, limit: int = 100) -> list[AuditEntry]:
        self.audit_reads += 1
        raise PermissionDeniedError(403, "forbidden", "this action needs an operator key")


async def test_a_tenant_key_is_refused_the_audit_log_once() -> None:
    """Each refused operator read is a row in the server's audit: the audit view asks once,
    says why it stays empty, and asks no more."""
    client = AuditRefusingClient()
    app = DashboardApp(client, feed=False, poll_s=3600)
    shown: list[str] = []
    app.notify = lambda message, **kw: shown.append(str(message))  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        await until(pilot, lambda: "audit" in app.sync.refused and not app.sync.busy)
        for _ in range(3):
            await pilot.press("r")
            await pilot.pause(0.05)
            await until(pilot, lambda: not app.sync.busy)
        assert client.audit_reads == 1
        assert app.state.audit == []
    assert len(shown) == 1
    assert "operator" in shown[0]

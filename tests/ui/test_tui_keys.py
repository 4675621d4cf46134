"""What the terminal dashboard offers for the key it has, from injected data: a key the server
does not know (401) is refused the operator reads once, as a tenant's (403) is; a tenant's key
loses the operator's controls once the server refused it one (each would be refused and
audited), and cancels its own programs; an operator switches the policies by name from the
palette, with the server's answer (or its refusal, which lists its names) as a notification."""

from __future__ import annotations

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, Select

from agentconsole.httpclient import AuthenticationError, PermissionDeniedError
from agentconsole.ui.client.door import Door
from agentconsole.ui.client.http import ActionResult
from agentconsole.ui.client.models import AuditEntry, Identity
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.policy import PolicyScreen, choice
from agentconsole.ui.tui.views.programs import ProgramsView
from tests.ui.canned import CannedClient
from tests.ui.on_screen import confirming
from tests.ui.recording import recorded_notes
from tests.ui.stub_world import KV_POLICIES, POLICIES, StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]

OPERATOR_ONLY = "this action needs an operator key"


class RefusingClient(CannedClient):
    """The stub world whose operator routes refuse this key with ``status`` (401: unknown,
    403: a tenant's); a cancel (the program's own route) is allowed. Counts the operator
    reads."""

    def __init__(self, status: int) -> None:
        super().__init__(StubWorld())
        self.status = status
        self.operator_reads = 0
        self.identity = None  # a server without ``/v1/whoami``: the key's role shows by a 403

    def _refuse(self) -> None:
        if self.status == 401:
            raise AuthenticationError(401, "unauthorized", "missing or unknown API key")
        raise PermissionDeniedError(403, "forbidden", OPERATOR_ONLY)

    def door(self) -> Door:
        self.operator_reads += 1
        self._refuse()
        raise AssertionError("unreachable")

    def audit(self, limit: int = 100) -> list[AuditEntry]:
        self.operator_reads += 1
        self._refuse()
        raise AssertionError("unreachable")

    def act(self, action: str, program_id: str, amount: float | None = None) -> ActionResult:
        if action != "cancel":
            self.calls.append(f"refused {action} {program_id}")
            self._refuse()
        return super().act(action, program_id, amount)


async def _poll_again(pilot: Pilot[None], app: DashboardApp, times: int) -> None:
    for _ in range(times):
        await pilot.press("r")
        await pilot.pause(0.05)
        await until(pilot, lambda: not app.sync.busy)


async def _palette(pilot: Pilot[None], command: str) -> None:
    await pilot.press("colon", *command)
    await pilot.pause(0.3)  # the palette searches on a worker
    await pilot.press("enter")
    await pilot.pause()


async def _open_policy_dialog(pilot: Pilot[None], app: DashboardApp) -> None:
    """Open the policy dialog from the palette, as an operator does."""
    await _palette(pilot, "switch policy")
    await until(pilot, lambda: isinstance(app.screen, PolicyScreen))


async def test_an_unknown_key_is_refused_each_operator_read_once() -> None:
    """Each refused operator read is an audit row on the server: a key it does not know
    (401) asks once for the audit log and the door, as a tenant's key does, not every poll."""
    client = RefusingClient(401)
    app = DashboardApp(client, feed=False, poll_s=3600)
    notes = recorded_notes(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("5")
        await until(pilot, lambda: "audit" in app.sync.refused and not app.sync.busy)
        await _poll_again(pilot, app, 3)
        await pilot.press("3")
        await until(pilot, lambda: "door" in app.sync.refused and not app.sync.busy)
        await _poll_again(pilot, app, 3)
        assert client.operator_reads == 2
        assert not app.sync.tenant_key  # refused as unknown, not as a tenant's
    assert [text for _, text in notes if "refused this key" in text]


async def test_a_tenant_key_loses_the_operator_controls_and_cancels_its_own_program() -> None:
    client = RefusingClient(403)
    app = DashboardApp(client, feed=False, poll_s=3600)
    async with app.run_test(size=(100, 30)) as pilot:
        assert {"p", "b"} <= set(app.screen.active_bindings)  # not known yet: offered
        await pilot.press("3")  # the door is refused: the key is a tenant's
        await until(pilot, lambda: app.sync.tenant_key)
        await until(pilot, lambda: "tenant key" in str(app.query_one("#topbar").render()))
        await pilot.press("2")
        view = app.query_one(ProgramsView)
        await until(pilot, lambda: view.selected() is not None)
        target = view.selected()
        assert not {"p", "b"} & set(app.screen.active_bindings)  # gone from the footer
        assert "c" in app.screen.active_bindings
        await pilot.press("p", "b")
        await pilot.pause(0.2)
        assert client.calls == []  # no request the server would refuse and audit

        await pilot.press("c")
        assert confirming(app)
        await pilot.press("y")
        await until(pilot, lambda: client.world.programs[str(target)].state == "cancelled")
        assert client.calls == [f"cancel {target}"]

        hits = [c.title for c in app.get_system_commands(app.screen)]
        for operator_only in ("drain on", "switch policy", "replay this window"):
            assert operator_only not in hits
        assert "cancel selected program" in hits
        assert "preempt selected program" not in hits


async def test_an_action_refused_as_a_tenant_s_hides_the_operator_controls() -> None:
    """The first 403 may come from an action (the key read no operator view yet)."""
    client = RefusingClient(403)
    app = DashboardApp(client, feed=False, poll_s=3600)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        view = app.query_one(ProgramsView)
        await until(pilot, lambda: view.selected() is not None)
        await pilot.press("b")
        await until(pilot, lambda: app.sync.tenant_key)
        await until(pilot, lambda: "b" not in app.screen.active_bindings)
        await pilot.press("b")
        await pilot.pause(0.2)
    assert len(client.calls) == 1  # the one that found out


def test_only_the_names_changed_are_sent() -> None:
    assert choice("fcfs", "adaptive", "cp-cache", "adaptive").kv_policy is None
    assert choice(" fcfs ", "", "cp-cache", "adaptive").policy == "fcfs"
    assert choice("cp-cache", "keep", "cp-cache", "adaptive").policy is None


async def test_the_policy_dialog_offers_the_server_s_names_with_those_in_force() -> None:
    world = StubWorld()
    client = CannedClient(world)
    app = DashboardApp(client, feed=False, poll_s=3600)
    notes = recorded_notes(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
        await _open_policy_dialog(pilot, app)
        policy = app.screen.query_one("#policy-name", Select)
        kv_policy = app.screen.query_one("#kv-policy-name", Select)
        assert [name for name, _ in policy._options] == list(POLICIES)
        assert [name for name, _ in kv_policy._options] == list(KV_POLICIES)
        assert (policy.value, kv_policy.value) == ("cp-cache", "adaptive")  # in force
        policy.value = "sjf"
        await pilot.click("#policy-switch")
        await until(pilot, lambda: any(title == "policy" for title, _ in notes))
    assert client.calls == ["policy sjf None"]  # only what changed
    assert (world.policy, world.kv_policy) == ("sjf", "adaptive")


async def test_whoami_hides_the_operator_controls_of_a_tenant_key_before_any_403() -> None:
    client = CannedClient(StubWorld())
    client.identity = Identity("tenant-a", False, "key-tenant-a")
    app = DashboardApp(client, feed=False, poll_s=3600)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.sync.tenant_key)
        await until(pilot, lambda: not {"p", "b"} & set(app.screen.active_bindings))
        hits = [c.title for c in app.get_system_commands(app.screen)]
        assert "switch policy" not in hits
    assert client.reads["door"] == 0  # nothing was refused
    assert client.reads["audit"] == 0


async def test_the_palette_switches_the_policy_and_says_the_server_s_answer() -> None:
    """A server that publishes no policy names (older): they are typed."""
    world = StubWorld()
    client = CannedClient(world)
    client.publishes_policies = False
    app = DashboardApp(client, feed=False, poll_s=3600)
    notes = recorded_notes(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
        await _open_policy_dialog(pilot, app)
        name = app.screen.query_one("#policy-name", Input)
        assert (name.value, app.screen.query_one("#kv-policy-name", Input).value) == (
            "cp-cache",
            "adaptive",
        )
        name.value = "fcfs"
        await pilot.press("enter")
        await until(pilot, lambda: any(title == "policy" for title, _ in notes))
        assert client.calls == ["policy fcfs None"]  # the KV policy was left as it is
        assert (world.policy, world.kv_policy) == ("fcfs", "adaptive")
        assert notes[-1] == ("policy", "policy fcfs · kv policy adaptive")

        await _open_policy_dialog(pilot, app)
        app.screen.query_one("#kv-policy-name", Input).value = "nope"
        await pilot.press("enter")
        await until(pilot, lambda: len([t for t, _ in notes if t == "policy"]) == 2)
        refusal = notes[-1][1]
        assert refusal == "unknown tool-wait policy 'nope'; choose from adaptive, keep, offload"
        assert world.kv_policy == "adaptive"

        await _open_policy_dialog(pilot, app)
        await pilot.press("escape")  # kept: nothing sent
        await pilot.pause(0.2)
        assert len(client.calls) == 2

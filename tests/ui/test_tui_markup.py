"""Strings the server's clients choose (program ids, tenants, workload kinds, tool names, audit
targets and roles, model names, paths, error messages) are shown by the terminal dashboard as
they were sent, in every view: Textual and Rich read a plain ``str`` as markup, so a kind
named ``[/]`` raised ``MarkupError`` and ended the dashboard (for good: the door remembers the
kind), ``[blink reverse red]X`` restyled it and ``[@click=app.quit]`` bound a click.

What is checked is what is painted (each widget's rendered lines), from injected data."""

from __future__ import annotations

from typing import Any

import pytest
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widgets import DataTable, Static
from textual.widgets._toast import Toast

from agentconsole.httpclient import ApiError
from agentconsole.ui.client.door import Door
from agentconsole.ui.client.http import ActionResult
from agentconsole.ui.client.modelcompat import ModelCompat
from agentconsole.ui.client.models import AuditEntry, KVState, TenantRow
from agentconsole.ui.client.whatif import WindowReplay
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.detail import ProgramScreen
from agentconsole.ui.tui.views.programs import ProgramsView
from tests.ui.canned import COMPAT, CannedClient
from tests.ui.on_screen import confirming, painted
from tests.ui.stub_world import StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]

#: an unbalanced closing tag (MarkupError), a style, an unknown style, a click action
CLOSING, STYLED, UNKNOWN, CLICK = (
    "[/]",
    "[blink reverse red]X",
    "[notastyle]zzz",
    "[@click=app.quit]q",
)
HOSTILE = (CLOSING, STYLED, UNKNOWN, CLICK)


def hostile_world() -> StubWorld:
    """A small world whose first programs are named, owned and run with hostile strings."""
    world = StubWorld(programs=8, big_nodes=12)
    renamed = {}
    for index, program in enumerate(world.programs.values()):
        if index < len(HOSTILE):
            program.program_id = HOSTILE[index]
            program.tenant = HOSTILE[(index + 1) % len(HOSTILE)]
            program.workload = HOSTILE[(index + 2) % len(HOSTILE)]
            program.state = "running"
            for node in program.nodes:
                node.tool = CLOSING if node.kind == "tool" else node.tool
        renamed[program.program_id] = program
    world.programs = renamed
    for actor, target, role in zip(HOSTILE, HOSTILE[1:], HOSTILE[2:], strict=False):
        world.audit.append(
            {
                "ts": world.now,
                "actor": actor,
                "action": "pin_model",
                "target": target,
                "args": {"role": role},
                "result": f"no {role}",
            }
        )
    return world


class HostileClient(CannedClient):
    """The hostile world, with hostile tenants, door kinds, retained programs, model names,
    trace path and action refusals."""

    def __init__(self) -> None:
        super().__init__(hostile_world())

    def tenants(self) -> list[TenantRow]:
        rows = super().tenants()
        body = self.world.tenants_json()["tenants"]
        for row, name in zip(body, HOSTILE, strict=False):
            row["tenant"] = name
        return [TenantRow.parse(row) for row in body][: len(rows)]

    def door(self) -> Door:
        body = self.world.door_json()
        body["runs"] = body["runs"][: len(HOSTILE)]  # each (tenant, kind) once
        for index, run in enumerate(body["runs"]):
            run["tenant"] = HOSTILE[index % len(HOSTILE)]
            run["kind"] = HOSTILE[(index + 1) % len(HOSTILE)]
        body["peaks"] = []
        return Door.parse(body)

    def kv(self) -> KVState:
        body = self.world.kv_json()
        body["retained"] = [
            {"program_id": name, "tenant": name, "tokens": 10, "tier": "hbm", "until": 1.0}
            for name in HOSTILE
        ]
        body["placement"] = {name: {"hbm": 100 + i} for i, name in enumerate(HOSTILE)}
        return KVState.parse(body)

    def audit(self, limit: int = 100) -> list[AuditEntry]:
        return [AuditEntry.parse(a) for a in self.world.audit_json(limit)["actions"]]

    def act(self, action: str, program_id: str, amount: float | None = None) -> ActionResult:
        raise ApiError(409, "conflict", f"program {program_id} is {STYLED}")

    def replay_window(self, since: float, tenant: str | None = None) -> WindowReplay:
        path = f"/tmp/{CLOSING}{STYLED}.jsonl"
        command = f"agentconsole bench --trace '{path}'"
        return WindowReplay(since, since + 1, 2, path, command, "written", None)

    def model_compatibility(self) -> ModelCompat:
        body: dict[str, Any] = {**COMPAT, "note": f"analysis {UNKNOWN}"}
        body["models"] = [
            {**m, "name": name} for m, name in zip(COMPAT["models"], HOSTILE, strict=False)
        ]
        body["pairs"] = [
            {**pair, "a": CLOSING, "b": STYLED, "reasons": [f"{UNKNOWN} differs"]}
            for pair in COMPAT["pairs"]
        ]
        return ModelCompat.parse(body)


async def _settle(pilot: Pilot[None], app: DashboardApp) -> None:
    """Let the polls land and the screen paint (a render error would end the app)."""
    await until(pilot, lambda: not app.sync.busy)
    await pilot.pause(0.1)
    await pilot.pause()
    assert app.is_running


def _app() -> DashboardApp:
    return DashboardApp(HostileClient(), feed=False, poll_s=3600)


@pytest.mark.parametrize(
    ("key", "table", "shown"),
    [
        ("3", "#tenants-table", HOSTILE[:3]),  # the stub's three tenants
        ("3", "#door-table", HOSTILE),
        ("4", "#kv-retained", HOSTILE),
        ("4", "#kv-placement", HOSTILE),
        ("5", "#audit-table", (CLOSING, STYLED, UNKNOWN, f"role={UNKNOWN}", f"no {CLICK}")),
    ],
    ids=["tenants", "door", "kv-retained", "kv-placement", "audit"],
)
async def test_a_view_shows_client_chosen_strings_verbatim(
    key: str, table: str, shown: tuple[str, ...]
) -> None:
    app = _app()
    async with app.run_test(size=(180, 40)) as pilot:
        await pilot.press(key)
        await until(pilot, lambda: app.query_one(table, DataTable).row_count > 0)
        await _settle(pilot, app)
        text = painted(app.query_one(table, DataTable))
        for value in shown:
            assert value in text, f"{value!r} not shown in {table}:\n{text}"


async def test_the_program_list_and_detail_show_ids_and_tools_verbatim() -> None:
    app = _app()
    async with app.run_test(size=(180, 40)) as pilot:
        await pilot.press("2")
        view = app.query_one(ProgramsView)
        await until(pilot, lambda: view.table.row_count >= len(HOSTILE))
        await _settle(pilot, app)
        listed = painted(view.table)
        for value in HOSTILE:
            assert value in listed
        app.open_program(CLOSING)
        await until(
            pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail is not None
        )
        await _settle(pilot, app)
        screen = app.screen
        assert painted(screen.query_one("#detail-summary", Static)).startswith(CLOSING)
        await pilot.press("t")  # the timeline: one row per node, with its tool
        await _settle(pilot, app)
        assert f"{CLOSING} " in painted(screen.query_one("#nodes-table", DataTable))


async def test_the_cancel_question_and_an_action_s_refusal_quote_the_id_verbatim() -> None:
    app = _app()
    async with app.run_test(size=(180, 40), notifications=True) as pilot:
        await pilot.press("2")
        view = app.query_one(ProgramsView)
        await until(pilot, lambda: view.selected() is not None)
        view.table.move_cursor(row=view.table.get_row_index(STYLED))
        await until(pilot, lambda: view.selected() == STYLED)
        await pilot.press("c")
        assert confirming(app)
        await _settle(pilot, app)
        question = painted(app.screen.query_one("#confirm-question", Static))
        assert f"Cancel program {STYLED}?" in question
        await pilot.press("y")
        await until(pilot, lambda: bool(app.screen.query(Toast)))
        await _settle(pilot, app)
        toast = painted(app.screen.query_one(Toast))
        assert f"program {STYLED} is {STYLED}" in toast.replace("\n", "")


async def test_the_palette_lists_program_ids_verbatim() -> None:
    app = _app()
    async with app.run_test(size=(180, 40)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: len(app.state.programs) >= len(HOSTILE))
        for query in ("", "program"):  # discovered, then searched
            await pilot.press("colon", *query)
            await until(pilot, lambda: isinstance(app.screen, CommandPalette))
            commands = app.screen.query_one(CommandList)
            await until(pilot, lambda: app.screen.query_one(CommandList).option_count > 4)
            await _settle(pilot, app)
            prompts = [
                str(commands.get_option_at_index(i).prompt) for i in range(commands.option_count)
            ]
            for value in HOSTILE:
                assert any(f"program {value}" in prompt for prompt in prompts), prompts
            await pilot.press("escape")
            await pilot.pause()


async def test_model_compatibility_and_the_replay_path_are_shown_verbatim() -> None:
    app = _app()
    async with app.run_test(size=(180, 40)) as pilot:
        await pilot.press("m")
        await until(pilot, lambda: app.screen.query("#compat-pairs"))
        pairs = app.screen.query_one("#compat-pairs", DataTable)
        await until(pilot, lambda: pairs.row_count > 0)
        await _settle(pilot, app)
        models = painted(app.screen.query_one("#compat-models", Static))
        for value in HOSTILE[:3]:
            assert value in models
        assert f"analysis {UNKNOWN}" in painted(app.screen.query_one("#compat-sharing", Static))
        assert CLOSING in painted(pairs)
        assert STYLED in painted(pairs)
        assert f"{UNKNOWN} differs" in painted(app.screen.query_one("#compat-reasons", Static))
        await pilot.press("escape")
        await pilot.press("w")
        await until(pilot, lambda: app.screen.query("#replay-summary"))
        await _settle(pilot, app)
        assert f"{CLOSING}{STYLED}.jsonl" in painted(
            app.screen.query_one("#replay-summary", Static)
        )

"""What a dashboard tells its user, recorded for the TUI tests to read."""

from __future__ import annotations

from typing import Any

from agentconsole.ui.tui.app import DashboardApp


def recorded_notes(app: DashboardApp) -> list[tuple[str, str]]:
    """Every (title, text) ``app`` notifies from now on (kept: a toast expires)."""
    notes: list[tuple[str, str]] = []
    notify = app.notify

    def recorded(message: str, *, title: str = "", **rest: Any) -> None:
        notes.append((title, message))
        notify(message, title=title, **rest)

    app.notify = recorded  # type: ignore[method-assign]
    return notes

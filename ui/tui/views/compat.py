"""The served models' KV compatibility (``GET /v1/models/compatibility``) in a modal panel:
each pair with its verdict (``compatible: 2 of 4 layers`` or ``incompatible``), the reasons of
the pair under the cursor, and that no engine shares KV across models (sharing is off).

The matrix is read on a thread worker when the panel opens (the first answer may read the
models' weights on the server), so the screen never blocks.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from agentconsole.httpclient import ApiError
from agentconsole.ui.client.http import ConsoleApi
from agentconsole.ui.client.modelcompat import ModelCompat
from agentconsole.ui.tui.literal import literal
from agentconsole.ui.tui.views.tables import Table


def sharing_line(matrix: ModelCompat) -> str:
    """Whether engines share KV across models, and the server's note."""
    state = "on" if matrix.enabled else "off"
    return f"cross-model KV sharing: {state} ({matrix.note})"


def model_line(matrix: ModelCompat) -> str:
    """The served models with their layers, or why one could not be read."""
    parts = [
        f"{m.name}: {m.error}" if m.error else f"{m.name} ({m.layers} layers)"
        for m in matrix.models
    ]
    return "models: " + ("; ".join(parts) or "none")


class CompatScreen(ModalScreen[None]):
    """The compatibility matrix of the served models."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "close", "Close")]
    # its own style, beside the code, as the panel is opened from the palette only
    DEFAULT_CSS = """
    CompatScreen { align: center middle; }
    #compat-box {
        width: 110; max-width: 100%; height: auto; max-height: 90%;
        border: round $success; background: $surface; padding: 0 1;
    }
    #compat-pairs { height: auto; max-height: 12; margin: 1 0; }
    #compat-sharing, #compat-keys { color: $text-muted; }
    """

    def __init__(self, api: ConsoleApi) -> None:
        super().__init__()
        self.api = api
        self.matrix: ModelCompat | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="compat-box"):
            yield Static("reading the served models…", id="compat-models")
            yield Table(id="compat-pairs", cursor_type="row", zebra_stripes=True)
            yield Static("", id="compat-reasons")
            yield Static("", id="compat-sharing")
            yield Static("escape closes", id="compat-keys")

    def on_mount(self) -> None:
        self.query_one("#compat-box").border_title = "Model compatibility (KV)"
        self.query_one(DataTable).add_columns("model", "model", "verdict")
        self.run_worker(self._load, thread=True, group="compat", exit_on_error=False)

    def _load(self) -> None:
        try:
            matrix = self.api.model_compatibility()
        except ApiError as error:
            self.app.call_from_thread(self._failed, error.message)
            return
        self.app.call_from_thread(self._show, matrix)

    def _failed(self, message: str) -> None:
        self.query_one("#compat-models", Static).update(
            literal(f"could not read the matrix: {message}")
        )

    def _show(self, matrix: ModelCompat) -> None:
        """Fill the panel with ``matrix``."""
        self.matrix = matrix
        self.query_one("#compat-models", Static).update(literal(model_line(matrix)))
        self.query_one("#compat-sharing", Static).update(literal(sharing_line(matrix)))
        table = self.query_one(DataTable)
        for pair in matrix.pairs:
            table.add_row(pair.a, pair.b, pair.verdict)
        if not matrix.pairs:
            self.query_one("#compat-reasons", Static).update("one model served: no pair")
        table.focus()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.matrix is not None and 0 <= event.cursor_row < len(self.matrix.pairs):
            pair = self.matrix.pairs[event.cursor_row]
            text = "\n".join(f"· {reason}" for reason in pair.reasons)
            reasons = literal(f"{pair.a} / {pair.b}:\n{text}")
            self.query_one("#compat-reasons", Static).update(reasons)

    def action_close(self) -> None:
        self.dismiss(None)

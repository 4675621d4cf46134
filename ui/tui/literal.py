"""Text from the server shown as it was sent, never read as markup.

Textual and Rich read a plain ``str`` handed to a widget (a DataTable cell, a Static, a
notification, a command palette entry) as markup. The strings the server sends are chosen by
its clients (program ids, labels such as a workload kind, tool names, tenants, audit targets,
pinned roles, error messages that quote them), so a kind named ``[/]`` raised ``MarkupError``
and ended the dashboard, ``[blink reverse red]X`` restyled it, and ``[@click=app.quit]`` would
bind an action to a click. Every such string reaches a widget as :class:`~rich.text.Text` or
:class:`~textual.content.Content` made here, whose text is literal.
"""

from __future__ import annotations

from rich.text import Text
from textual.content import Content


def literal(value: str | Text) -> Text:
    """``value`` as text to show verbatim (a :class:`Text` is already styled on purpose)."""
    return value if isinstance(value, Text) else Text(value)


def literal_content(value: str) -> Content:
    """``value`` as Textual content shown verbatim: the command palette reads a ``str``
    prompt as markup, a :class:`Content` as it is."""
    return Content(value)

"""Compact number, time and bar formatting for a terminal that may be only 80 columns wide.

Times of day are shown in UTC so that two operators (and the snapshot tests) see the same text.
"""

from __future__ import annotations

import time

from rich.text import Text

STATE_STYLES = {
    "running": "bold yellow",
    "ready": "cyan",
    "pending": "dim",
    "done": "green",
    "finished": "green",
    "failed": "bold red",
    "cancelled": "magenta",
}
STATE_GLYPHS = {
    "running": "◐",
    "ready": "◌",
    "pending": "○",
    "done": "●",
    "finished": "●",
    "failed": "✕",
    "cancelled": "⊘",
}
TIER_STYLES = {"hbm": "bold green", "dram": "yellow", "disk": "blue"}


def secs(value: float | None) -> str:
    """``0.42s``, ``12.3s``, ``4m05s``, ``2h07m``; ``-`` for None; negative keeps its sign."""
    if value is None:
        return "-"
    sign = "-" if value < 0 else ""
    v = abs(value)
    if v < 10:
        return f"{sign}{v:.2f}s"
    if v < 60:
        return f"{sign}{v:.1f}s"
    if v < 3600:
        return f"{sign}{int(v // 60)}m{int(v % 60):02d}s"
    return f"{sign}{int(v // 3600)}h{int(v % 3600 // 60):02d}m"


def count(value: float) -> str:
    """``950``, ``12.3K``, ``4.56M``, ``7.8G``."""
    v = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if v >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.0f}"


def nbytes(value: float) -> str:
    """Bytes with binary units: ``512B``, ``1.5KiB``, ``37.2GiB``."""
    v = float(value)
    for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or suffix == "TiB":
            return f"{v:.0f}{suffix}" if suffix == "B" else f"{v:.1f}{suffix}"
        v /= 1024
    return f"{v:.1f}TiB"  # pragma: no cover - the loop always returns


def rate(value: float) -> str:
    """A per-second rate with three significant digits."""
    return f"{value:.3g}/s"


def clock(t: float) -> str:
    """``HH:MM:SS.mmm`` (UTC) of an epoch time."""
    whole = int(t)
    return time.strftime("%H:%M:%S", time.gmtime(whole)) + f".{int((t - whole) * 1000):03d}"


def bar(fraction: float, width: int, style: str = "green") -> Text:
    """A horizontal meter of ``width`` cells filled to ``fraction`` (clamped to [0, 1])."""
    width = max(1, width)
    filled = round(max(0.0, min(1.0, fraction)) * width)
    text = Text()
    text.append("█" * filled, style=style)
    text.append("░" * (width - filled), style="dim")
    return text


def fill(fraction: float) -> Text:
    """A tier's fill as reported, `` 42%``; above 100% it is shown as is, in red, since the
    runtime reported more in use than its capacity (a meter cannot show that)."""
    return Text(f"{fraction:4.0%}", style="bold red" if fraction > 1 else "")


def state(value: str) -> Text:
    """A program or node state with its glyph and colour."""
    return Text(f"{STATE_GLYPHS.get(value, '?')} {value}", style=STATE_STYLES.get(value, ""))


def tier(value: str | None) -> Text:
    """A KV tier name in its colour (``-`` when the node holds no KV)."""
    if not value:
        return Text("-", style="dim")
    return Text(value, style=TIER_STYLES.get(value, ""))


def short(value: str, width: int) -> str:
    """``value`` cut to ``width`` cells with an ellipsis."""
    return value if len(value) <= width else value[: max(0, width - 1)] + "…"


def middle(value: str, width: int) -> str:
    """``value`` cut to ``width`` cells in the middle, keeping the distinguishing ends of ids
    such as ``demo-13cf10-0-seed-mix-s0-00013`` (``demo-13…00013``)."""
    if len(value) <= width:
        return value
    if width < 5:
        return short(value, width)
    tail = (width - 1) // 2
    head = width - 1 - tail
    return value[:head] + "…" + value[len(value) - tail :]

"""Compact number, time and bar formatting for a terminal that may be only 80 columns wide.

Times of day are shown in UTC so that two operators (and the snapshot tests) see the same text.

KV tier meters keep to one line each: a server of several models reports each tier summed over
them (``hbm``) and each model's own (``hbm.llama-3.1-8b``, ``server/runtime/fleet/merge.py``);
data-parallel ranks show the same way (``hbm.rank0``). The sum alone hides a saturated model
(43% over two models, one of them full), so the views show the parts too, each under its tier,
with labels as wide as the longest one shown, shortened (the models' shared prefix, then the
middle) so that a meter never wraps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text

from agentconsole.ui.client.models import TIER_ORDER, TierUse
from agentconsole.ui.client.programs import Node

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
#: a node cancelled by a node cancel (``withdrawn``), told apart from one its program's end
#: cancelled: the DAG's glyph, and the state the timeline shows (as wide as "cancelled")
WITHDRAWN_GLYPH = "⊖"
WITHDRAWN = "withdrawn"
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


_UNITS = ((1e9, "G"), (1e6, "M"), (1e3, "K"))


def count(value: float) -> str:
    """``950``, ``12.3K``, ``4.56M``, ``7.8G``: three significant digits, never in
    e-notation (999,600 is ``1M``, not ``1e+03K``)."""
    v = abs(value)
    for i, (limit, suffix) in enumerate(_UNITS):
        if v >= limit:
            text = f"{value / limit:.3g}"
            if "e" in text:  # it rounds up to a thousand of its unit: the next unit's 1
                text = f"{value / _UNITS[i - 1][0]:.3g}" if i else f"{value / limit:.0f}"
                suffix = _UNITS[i - 1][1] if i else suffix
            return text + suffix
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
    """A per-second rate with three significant digits (whole numbers from 100 up)."""
    return f"{value:.3g}/s" if abs(value) < 99.95 else f"{value:.0f}/s"


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


def node_glyph(node: Node) -> str:
    """A node's state glyph; a withdrawn node's is its own."""
    if node.withdrawn and node.state == "cancelled":
        return WITHDRAWN_GLYPH
    return STATE_GLYPHS.get(node.state, "?")


def node_state(node: Node) -> Text:
    """A node's state with its glyph and colour; a withdrawn node reads ``withdrawn``."""
    if node.withdrawn and node.state == "cancelled":
        return Text(f"{WITHDRAWN_GLYPH} {WITHDRAWN}", style=STATE_STYLES["cancelled"])
    return state(node.state)


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


#: the narrowest meter a label makes room for before it is shortened
METER_MIN = 8
#: where a shared prefix of model names may end (``llama-3.1-`` of ``llama-3.1-8b``)
MODEL_SEPARATORS = "-_./:"


def tier_base(name: str) -> str:
    """The tier a reported name belongs to: ``hbm`` of ``hbm.llama-3.1-8b``."""
    return name.split(".", 1)[0]


def ordered_tiers(tiers: Sequence[TierUse]) -> list[TierUse]:
    """Each whole tier followed by its parts (models, ranks): ``hbm``, ``hbm.llama-3.1-70b``,
    ``hbm.llama-3.1-8b``, ``dram``, ... (the client sorts the parts apart from their tier)."""
    position = {tier.tier: index for index, tier in enumerate(tiers)}

    def key(tier: TierUse) -> tuple[int, str, bool, int]:
        name = tier_base(tier.tier)
        rank = TIER_ORDER.index(name) if name in TIER_ORDER else len(TIER_ORDER)
        return rank, name, tier.tier != name, position[tier.tier]

    return sorted(tiers, key=key)


def _shared_prefix(parts: Sequence[str]) -> str:
    """The start all ``parts`` share, up to a separator, if each keeps something after it."""
    if len(parts) < 2:
        return ""
    prefix = parts[0]
    for part in parts[1:]:  # character by character: model names are no paths
        while not part.startswith(prefix):
            prefix = prefix[:-1]
    cut = max(prefix.rfind(sep) for sep in MODEL_SEPARATORS) + 1
    prefix = prefix[:cut]
    return prefix if all(len(part) > len(prefix) for part in parts) else ""


def tier_labels(names: Sequence[str], room: int) -> dict[str, str]:
    """A label per tier name, at most ``room`` cells: the names as they are when the longest
    fits; else the parts without the models' shared prefix (``hbm.70b``, ``hbm.8b``); else
    with the middle of each part cut out (its tier and its distinguishing tail kept)."""
    if max((len(name) for name in names), default=0) <= room:
        return {name: name for name in names}
    parts = sorted({name.split(".", 1)[1] for name in names if "." in name})
    prefix = _shared_prefix(parts)
    out = {}
    for name in names:
        tier, _, part = name.partition(".")
        if not part:
            out[name] = middle(name, room)
            continue
        part = part.removeprefix(prefix)
        out[name] = f"{tier}.{middle(part, max(1, room - len(tier) - 1))}"
        if len(out[name]) > room:  # not even the tier fits: cut the whole
            out[name] = middle(name, room)
    return out


def tier_meters(
    tiers: Sequence[TierUse], width: int, numbers: Sequence[str], number_style: str = ""
) -> Text:
    """One line per tier of ``tiers`` (in the order given) fitting ``width`` cells: its label,
    a meter, its fill and ``numbers[i]``, each column as wide as its widest value so that the
    numbers line up and are never cut (the meter gives way, down to :data:`METER_MIN`)."""
    number_width = max((len(n) for n in numbers), default=0)
    fixed = 1 + 1 + 4 + (1 + number_width if number_width else 0)  # the gaps, the fill, numbers
    names = tier_labels([t.tier for t in tiers], max(4, width - fixed - METER_MIN))
    label_width = max((len(label) for label in names.values()), default=0)
    meter = max(1, width - label_width - fixed)
    text = Text(no_wrap=True, overflow="ellipsis")
    for index, (tier, number) in enumerate(zip(tiers, numbers, strict=True)):
        if index:
            text.append("\n")
        style = TIER_STYLES.get(tier_base(tier.tier), "green")
        text.append(names[tier.tier].ljust(label_width), style=style)
        text.append(" ")
        text.append_text(bar(tier.fraction, meter, style))
        text.append(" ")
        text.append_text(fill(tier.fraction))
        if number_width:
            text.append(" ")
            text.append(number.ljust(number_width), style=number_style)
    return text

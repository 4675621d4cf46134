"""Text renderings of a program: its DAG by layers and a per-node timeline bar.

The DAG is drawn as layers (a node's layer is the longest path from a root), one line per
layer, which stays readable for chains of hundreds of agent steps where an indented tree would
not. A node whose parents are not exactly the previous layer names them (``⇠ n3 n7``). Nodes on
the critical path carry ``◆``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

from agentconsole.ui.client.programs import Node, ProgramDetail
from agentconsole.ui.tui import fmt

PHASES = {
    "queue": ("░", "yellow"),
    "kv": ("▚", "bold red"),
    "prefill": ("▓", "blue"),
    "decode": ("█", "green"),
    "tool": ("▒", "magenta"),
}


def layers(nodes: Sequence[Node]) -> list[list[Node]]:
    """Nodes grouped by longest-path depth, each layer in the input (creation) order.

    Unknown parents are ignored; nodes caught in a cycle (a server bug) go to the last layer.
    """
    by_id = {n.node_id: n for n in nodes}
    depth: dict[str, int] = {}
    remaining = {n.node_id: [p for p in n.parents if p in by_id] for n in nodes}
    progress = True
    while remaining and progress:
        progress = False
        for node_id, parents in list(remaining.items()):
            if all(p in depth for p in parents):
                depth[node_id] = 1 + max((depth[p] for p in parents), default=-1)
                del remaining[node_id]
                progress = True
    bottom = 1 + max(depth.values(), default=-1)
    for node_id in remaining:
        depth[node_id] = bottom
    out: list[list[Node]] = [[] for _ in range(1 + max(depth.values(), default=-1))]
    for node in nodes:
        out[depth[node.node_id]].append(node)
    return out


def _chip(node: Node, on_path: bool) -> Text:
    style = fmt.STATE_STYLES.get(node.state, "")
    chip = Text()
    chip.append("◆" if on_path else " ", style="bold red")
    chip.append(fmt.node_glyph(node), style=style)
    chip.append(f" {node.node_id}", style="bold" if on_path else "")
    chip.append(f" {node.tool or node.kind}", style="dim")
    if node.model is not None:  # several models served: the one that ran it
        chip.append(f" @{node.model}", style="cyan")
    return chip


def render_dag(detail: ProgramDetail, width: int) -> Text:
    """The layered DAG of ``detail`` wrapped to ``width`` cells."""
    path = set(detail.critical_path)
    text = Text()
    groups = layers(detail.nodes)
    label_width = len(str(max(0, len(groups) - 1)))
    previous: set[str] = set()
    for index, group in enumerate(groups):
        prefix = f"{index:>{label_width}} │"
        line = Text()
        line.append(prefix, style="dim")
        used = len(prefix)
        for node in group:
            chip = _chip(node, node.node_id in path)
            if set(node.parents) != previous and node.parents:
                chip.append(" ⇠ " + " ".join(node.parents), style="cyan")
            if used + chip.cell_len + 1 > width and used > len(prefix):
                text.append_text(line)
                text.append("\n")
                line = Text()
                line.append(" " * label_width + " │", style="dim")
                used = len(prefix)
            line.append(" ")
            line.append_text(chip)
            used += chip.cell_len + 1
        text.append_text(line)
        text.append("\n")
        previous = {n.node_id for n in group}
    return text


def legend(*, withdrawn: bool = False) -> Text:
    """The key to the glyphs of the DAG and the timeline; ``withdrawn``: the program has
    nodes cancelled by a node cancel, which carry a glyph of their own."""
    text = Text()
    for state in ("done", "running", "ready", "pending", "failed", "cancelled"):
        text.append(fmt.STATE_GLYPHS[state], style=fmt.STATE_STYLES[state])
        text.append(f" {state}  ")
    if withdrawn:
        text.append(fmt.WITHDRAWN_GLYPH, style=fmt.STATE_STYLES["cancelled"])
        text.append(" withdrawn (node cancel)  ")
    text.append("◆ critical path   ", style="bold red")
    for phase, (char, style) in PHASES.items():
        text.append(char * 2, style=style)
        text.append(f" {phase}  ")
    return text


def drawn_now(detail: ProgramDetail, clock: float) -> float:
    """The moment open spans are drawn to: the client's ``clock``, but never before the
    latest time the server already reported (a client clock behind the server's would
    otherwise cut a running span short of what is known)."""
    return max(clock, detail.latest_time() or clock)


def span(detail: ProgramDetail, now: float) -> tuple[float, float]:
    """The time range covered by the program's timelines, open spans running to ``now``
    (a 1 s range when there is none)."""
    starts = [p.start for n in detail.nodes for p in n.timeline]
    ends = [p.end_by(now) for n in detail.nodes for p in n.timeline]
    if not starts:
        return 0.0, 1.0
    t0, t1 = min(starts), max(ends)
    return t0, max(t1, t0 + 1e-3)


def timeline_bar(node: Node, t0: float, t1: float, width: int, now: float) -> Text:
    """``node``'s phases painted over ``width`` cells spanning ``[t0, t1]``; a span still
    open (a running tool, a call still decoding) runs to ``now``.

    Every span gets at least one cell, so short phases (a 20 ms KV reload) stay visible; a
    later span overwrites an earlier one where they share a cell; spans outside the window are
    left out and spans across its edges are cut.
    """
    width = max(1, width)
    step = (t1 - t0) / width
    cells: list[str | None] = [None] * width
    for phase in node.timeline:
        end = phase.end_by(now)
        if end < t0 or phase.start > t1:
            continue  # outside the window: drawn by nothing rather than piled on an edge
        first = int((phase.start - t0) / step) if step > 0 else 0
        last = math.ceil((end - t0) / step) - 1 if step > 0 else 0
        first = min(max(first, 0), width - 1)
        last = min(max(last, first), width - 1)
        for cell in range(first, last + 1):
            cells[cell] = phase.phase
    text = Text()
    start = 0
    for index in range(1, width + 1):
        if index < width and cells[index] == cells[start]:
            continue
        run = index - start
        name = cells[start]
        char, style = ("·", "dim") if name is None else PHASES.get(name, ("?", ""))
        text.append(char * run, style=style)
        start = index
    return text

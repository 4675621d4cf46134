"""A self-contained HTML report of a bench run: plotly.js inlined from the installed package.

No CDN and no network: the page works offline and from a file:// URL.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from rich.table import Table

from agentconsole.bench.table import ROWS, fmt


def _bar(
    title: str, names: list[str], series: dict[str, list[float]], unit: str, stacked: bool = False
) -> go.Figure:
    fig = go.Figure()
    for label, values in series.items():
        fig.add_bar(name=label, x=names, y=[None if math.isnan(v) else v for v in values])
    fig.update_layout(
        title=title,
        yaxis_title=unit,
        barmode="stack" if stacked else "group",
        template="plotly_white",
        height=380,
        margin={"t": 50, "b": 40},
    )
    return fig


def figures(result: dict[str, Any]) -> list[go.Figure]:
    runs: dict[str, dict[str, Any]] = result["policies"]
    names = list(runs)

    def col(key: str) -> list[float]:
        values = (runs[n].get(key) for n in names)
        return [float(v) if isinstance(v, int | float) else math.nan for v in values]

    figs = [
        _bar(
            "Program E2E",
            names,
            {"P50": col("e2e_p50_s"), "P95": col("e2e_p95_s"), "P99": col("e2e_p99_s")},
            "seconds",
        ),
        _bar(
            "Program success goodput",
            names,
            {"goodput": col("goodput_programs_per_s")},
            "programs / s",
        ),
        _bar(
            "Critical-path idle per program",
            names,
            {
                "queue": col("cp_idle_queue_mean_s"),
                "KV reload/recompute": col("cp_idle_kv_mean_s"),
                "tool": col("cp_idle_tool_mean_s"),
            },
            "seconds",
            stacked=True,
        ),
    ]
    tenants = sorted({t for r in runs.values() for t in r.get("tenants", {})})
    figs.append(
        _bar(
            "Per-tenant slowdown",
            names,
            {
                t: [
                    float(runs[n].get("tenants", {}).get(t, {}).get("slowdown") or math.nan)
                    for n in names
                ]
                for t in tenants
            },
            "E2E / E2E alone",
        )
    )
    if "sweep" in result:
        sweep = result["sweep"]
        figs.append(
            _bar(
                _sweep_title(result),
                list(sweep),
                {"max rate": [float(v["max_rate"]) for v in sweep.values()]},
                "programs / s",
            )
        )
    return figs


def _sweep_title(result: dict[str, Any]) -> str:
    """The sweep chart's title, with the throughput bound when the run has one (a run over
    several models has none: the bound is of one model's replicas)."""
    title = f"Highest rate with P95 E2E <= {result['slo_p95_s']:.1f} s"
    bound = result.get("throughput_bound")
    if bound is None:
        return title
    return f"{title} (no schedule can exceed {bound['programs_per_s']:.3f})"


def _table_html(result: dict[str, Any]) -> str:
    runs = result["policies"]
    head = "".join(f"<th>{html.escape(n)}</th>" for n in runs)
    rows = "".join(
        f"<tr><td>{html.escape(label)}</td>"
        + "".join(f"<td>{html.escape(fmt(r.get(key), spec))}</td>" for r in runs.values())
        + "</tr>"
        for key, label, spec in ROWS
    )
    return f"<table><thead><tr><th>metric</th>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _rich_table_html(table: Table) -> str:
    """A table the terminal printed (``table.py``'s: the sweep, the load sweep, the model
    rules, the prefix cache modes) as an HTML table with its title, its cells as printed."""
    head = "".join(f"<th>{html.escape(str(c.header))}</th>" for c in table.columns)
    cells = [[str(cell) for cell in c.cells] for c in table.columns]
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(row)}</td>" for row in line) + "</tr>"
        for line in zip(*cells, strict=True)
    )
    caption = f"<caption>{html.escape(str(table.title))}</caption>" if table.title else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def render(title: str, result: dict[str, Any], tables: Sequence[Table] = ()) -> str:
    """The page: the metrics table, then ``tables`` (what the terminal printed after it),
    then the charts."""
    extra = "\n".join(_rich_table_html(table) for table in tables)
    divs = "\n".join(
        fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig{i}")
        for i, fig in enumerate(figures(result))
    )
    setup = html.escape(json.dumps(result.get("setup", {})))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<script>{get_plotlyjs()}</script>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}
table{{margin-bottom:1.5em}}caption{{font-weight:bold;text-align:left;padding:4px 0}}
</style></head><body>
<h1>{html.escape(title)}</h1><p><code>{setup}</code></p>
{_table_html(result)}
{extra}
{divs}
</body></html>
"""


def write_html(
    path: Path, title: str, result: dict[str, Any], tables: Sequence[Table] = ()
) -> None:
    """Write the page (:func:`render`), creating ``path``'s folder if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(title, result, tables), encoding="utf-8")

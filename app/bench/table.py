"""The bench's side-by-side table: one row per metric, one column per run."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from rich.table import Table

#: (json key, printed name, format) in the order section 19 of the overview lists them
ROWS: tuple[tuple[str, str, str], ...] = (
    ("rate_programs_per_s", "arrival rate (programs/s)", "{:.3f}"),
    ("finished", "programs finished", "{:d}"),
    # the E2E, TTFP and tails below are the finished programs': what they leave out, beside
    ("failed", "programs failed", "{:d}"),
    ("cancelled", "programs cancelled", "{:d}"),
    ("goodput_programs_per_s", "program success goodput (programs/s)", "{:.3f}"),
    ("throughput_programs_per_s", "programs finished per second", "{:.3f}"),
    ("e2e_mean_s", "E2E mean (s)", "{:.1f}"),
    ("e2e_p50_s", "E2E P50 (s)", "{:.1f}"),
    ("e2e_p95_s", "E2E P95 (s)", "{:.1f}"),
    ("e2e_p99_s", "E2E P99 (s)", "{:.1f}"),
    ("ttfp_p50_s", "time to first progress P50 (s)", "{:.2f}"),
    ("ttft_p50_s", "TTFT P50 (s)", "{:.3f}"),
    ("ttft_p95_s", "TTFT P95 (s)", "{:.3f}"),
    ("tbt_p50_s", "TBT P50 (s)", "{:.4f}"),
    ("tool_wait_mean_s", "tool wait per program (s)", "{:.2f}"),
    ("cp_idle_queue_mean_s", "critical-path idle: queue (s)", "{:.2f}"),
    ("cp_idle_kv_mean_s", "critical-path idle: KV reload/recompute (s)", "{:.3f}"),
    ("cp_idle_tool_mean_s", "critical-path idle: tool (s)", "{:.2f}"),
    ("gpu_s_per_success", "GPU seconds per success", "{:.2f}"),
    ("tokens_per_success", "tokens per success", "{:,.0f}"),
    ("discarded_branch_tokens", "discarded branch tokens", "{:,d}"),
    ("kv_hbm_mean_bytes", "KV HBM bytes (mean)", "bytes"),
    ("kv_dram_mean_bytes", "KV DRAM bytes (mean)", "bytes"),
    ("prefix_hit_tokens", "prefix hit tokens", "{:,d}"),
    ("migrations", "KV migrations (offload+reload)", "{:,d}"),
    ("recomputes", "KV recomputes", "{:,d}"),
    ("recompute_tokens", "recomputed tokens", "{:,d}"),
    ("max_tenant_slowdown", "max per-tenant slowdown", "{:.2f}"),
    ("max_tenant_starvation", "max per-tenant starvation (wait/service)", "{:.1f}"),
    ("wall_s", "wall time of the run (s)", "{:.2f}"),
)


#: rows added when a run saw mid-prompt insertions (``sim/prefixcache.py``)
INSERTION_ROWS: tuple[tuple[str, str, str], ...] = (
    ("insertions", "mid-prompt insertions", "{:,d}"),
    ("lost_reuse_tokens", "lost reuse tokens (prefilled again after an insertion)", "{:,d}"),
    ("suffix_reused_tokens", "suffix tokens reused at shifted positions", "{:,d}"),
    ("correction_tokens", "correction tokens prefilled for them", "{:,d}"),
)
#: what ``bench --prefix-cache ordinary,relative`` compares, per policy
PREFIX_CACHE_ROWS: tuple[tuple[str, str, str], ...] = (
    *INSERTION_ROWS[1:],
    ("e2e_p50_s", "E2E P50 (s)", "{:.1f}"),
    ("e2e_p95_s", "E2E P95 (s)", "{:.1f}"),
    ("throughput_programs_per_s", "programs finished per second", "{:.4f}"),
    ("gpu_s_per_success", "GPU seconds per success", "{:.2f}"),
)


def fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if spec == "bytes":
        return _bytes(float(value))
    if spec.endswith("d}") and isinstance(value, float):
        value = int(value)
    return spec.format(value)


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def stacked(label: str) -> str:
    """A run's label as a column header, one part a line (``cp-cache`` over ``+fixed-roles``
    over ``+shared-prefill``): on one line a terminal cut long labels to the same prefix,
    and the columns of a variant could not be told apart."""
    return label.replace("+", "\n+")


def metrics_table(title: str, runs: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title=title, header_style="bold", show_lines=False)
    table.add_column("metric")
    for name in runs:
        table.add_column(stacked(name), justify="right")
    inserted = any(r.get("insertions") for r in runs.values())
    for key, label, spec in (*ROWS, *(INSERTION_ROWS if inserted else ())):
        table.add_row(label, *(fmt(r.get(key), spec) for r in runs.values()))
    tenants = sorted({t for r in runs.values() for t in r.get("tenants", {})})
    for tenant in tenants:
        table.add_row(
            f"  slowdown of {tenant}",
            *(
                fmt(r.get("tenants", {}).get(tenant, {}).get("slowdown"), "{:.2f}")
                for r in runs.values()
            ),
        )
    return table


def policy_of(label: str) -> str:
    """The policy a run's label names: its part before any ``+kv-policy`` or ``+variant``."""
    return label.partition("+")[0]


def counterpart(rows: Mapping[str, Any], label: str, reference: str) -> str | None:
    """The label of policy ``reference``'s run to compare ``label``'s with: the one that
    differs from it only in the policy (``fcfs+offload`` for ``cp-cache+offload``), else the
    first run of that policy, else None (it did not run)."""
    _, plus, rest = label.partition("+")
    same = f"{reference}{plus}{rest}"
    if same in rows:
        return same
    return next((name for name in rows if policy_of(name) == reference), None)


def _base(rows: Mapping[str, Mapping[str, Any]], label: str, reference: str, key: str) -> float:
    """``key`` of ``label``'s reference run (see :func:`counterpart`); NaN when none ran, or
    when every row is of one policy (:func:`compares_policies`)."""
    other = counterpart(rows, label, reference) if compares_policies(rows) else None
    return math.nan if other is None else float(rows[other].get(key, math.nan))


def _found(rows: Mapping[str, Mapping[str, Any]], label: str, reference: str) -> bool:
    """Whether ``label``'s reference run found its max rate (``sweep.max_rate``'s
    ``found``); True when none ran."""
    other = counterpart(rows, label, reference) if compares_policies(rows) else None
    return other is None or bool(rows[other].get("found", True))


def compares_policies(rows: Mapping[str, Any]) -> bool:
    """Whether ``rows`` (by run label) hold runs of more than one policy. A ratio to a policy
    needs another one to compare with: with one policy every row is its own counterpart, and
    a column of 1.00x would read as "no better than the reference" when no reference ran.
    The rows of one policy may differ in a variant (a model rule, a prefix cache mode): the
    tables of that dimension compare those, to their own first column, under their own title."""
    return len({policy_of(label) for label in rows}) > 1


def sweep_table(
    sweep: Mapping[str, Mapping[str, Any]], reference: str, bound_rate: float = math.nan
) -> Table:
    """Each policy's highest rate meeting the SLO, its ratio to policy ``reference``'s (the
    run of it that differs only in the policy; - when no other policy ran:
    :func:`compares_policies`) and its share of ``bound_rate`` (the most any schedule could
    finish, see ``throughput_bound``)."""
    table = Table(title="max arrival rate meeting the SLO", header_style="bold")
    for col in (
        "policy",
        "max rate (programs/s)",
        f"ratio to {reference}",
        "share of bound",
        "E2E P95 at max (s)",
        "max tenant slowdown at max",
    ):
        table.add_column(col, justify="right" if col != "policy" else "left")
    for name, row in sweep.items():
        base = _base(sweep, name, reference, "max_rate")
        # a rate no probe missed the SLO at is a floor: no ratio or share to draw from it
        found = bool(row.get("found", True))
        both = found and _found(sweep, name, reference)
        ratio = row["max_rate"] / base if base > 0 and both else math.nan
        share = row["max_rate"] / bound_rate if bound_rate > 0 and found else math.nan
        rate = fmt(row["max_rate"], "{:.3f}")
        table.add_row(
            name,
            rate if found else f">= {rate}",
            fmt(ratio, "{:.2f}x"),
            fmt(share, "{:.0%}"),
            fmt(row.get("e2e_p95_s"), "{:.1f}"),
            fmt(row.get("max_tenant_slowdown"), "{:.2f}"),
        )
    return table


def loads_table(loads: Mapping[str, Any], reference: str) -> Table:
    """``bench --loads``: each policy at each multiple of the measured peak: finished
    programs/s and their share of the peak, P50/P95 E2E and the P95's ratio to policy
    ``reference``'s, recomputed tokens, and hit tokens as a share of an infinite cache's (the
    oracle). When fcfs ran beside another policy, each P50/P95 is also paired with fcfs's same
    draw; if fcfs is the reference too, those paired columns replace the plain ratio (one would
    repeat the other). One policy alone has no ratio (-: :func:`compares_policies`)."""
    peak = loads["peak_programs_per_s"]
    table = Table(
        title=f"load sweep: x the measured peak of {peak:.4f} programs/s", header_style="bold"
    )
    paired = PAIRED_REFERENCE
    draws = len(loads.get("seeds", [0]))
    # fcfs alone has no other policy to pair with its draws (compares_policies)
    with_paired = any(
        compares_policies(rows) and any(policy_of(n) == paired for n in rows)
        for rows in loads["loads"].values()
    )
    with_ratio = not (with_paired and reference == paired)
    columns = [
        "load",
        "offered",
        "policy",
        "finished/s",
        "share of peak",
        "E2E P50 (s)",
        "E2E P95 (s)",
    ]
    if with_ratio:
        columns.append(f"P95 / {reference}")
    if with_paired:
        worst = " (worst)" if draws > 1 else ""
        columns += [f"P50 / {paired}{worst}", f"P95 / {paired}{worst}"]
    columns += ["recomputed tokens", "hits / oracle"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("load", "policy") else "right")
    for load, rows in loads["loads"].items():
        for name, row in rows.items():
            cells = [
                f"{load}x",
                fmt(row.get("offered_share"), "{:.2f}x"),  # (none before it was kept: -)
                name,
                fmt(row["throughput_programs_per_s"], "{:.4f}"),
                fmt(row["share_of_peak"], "{:.0%}"),
                fmt(row["e2e_p50_s"], "{:.1f}"),
                fmt(row["e2e_p95_s"], "{:.1f}"),
            ]
            if with_ratio:
                base = _base(rows, name, reference, "e2e_p95_s")
                cells.append(fmt(_ratio(row["e2e_p95_s"], base), "{:.2f}x"))
            if with_paired:
                other = counterpart(rows, name, paired)
                against = rows[other] if other is not None else None
                cells += [_paired(row, against, key) for key in ("e2e_p50_s", "e2e_p95_s")]
            cells += [
                fmt(row["recompute_tokens"], "{:,d}"),
                fmt(row["oracle_share"], "{:.0%}"),
            ]
            table.add_row(*cells)
        table.add_section()
    return table


def tenant_slowdown_table(loads: Mapping[str, Any]) -> Table | None:
    """``bench --loads`` on a workload of several tenants: each tenant's slowdown (its
    programs' E2E over their run alone) per load and policy, what ``--tenant-weight`` moves;
    None when the rows carry none (one tenant)."""
    rows = [(load, name, row) for load, by in loads["loads"].items() for name, row in by.items()]
    tenants = sorted({t for _, _, row in rows for t in row.get("tenant_slowdown", {})})
    if not tenants:
        return None
    table = Table(title="slowdown by tenant", header_style="bold")
    for col in ("load", "policy", *tenants):
        table.add_column(col, justify="left" if col in ("load", "policy") else "right")
    for load, name, row in rows:
        slowdowns = row.get("tenant_slowdown", {})
        table.add_row(f"{load}x", name, *(fmt(slowdowns.get(t), "{:.1f}") for t in tenants))
    return table


#: the below-saturation goal's reference (issue 12: within 1% of fcfs): each draw of a cell is
#: compared with fcfs's same draw, so the seed's own variation cancels
PAIRED_REFERENCE = "fcfs"


def _paired(row: Mapping[str, Any], against: Mapping[str, Any] | None, key: str) -> str:
    """The mean over draws of ``row``'s ``key`` over ``against``'s same draw, and the worst
    draw's in brackets when there are several; blank without ``against``, - when a draw has
    no ratio (a value missing or NaN: no program finished), as every other column prints."""
    if against is None:
        return ""
    mine, theirs = row.get("draws", [row]), against.get("draws", [against])
    ratios = [_ratio(m[key], t[key]) for m, t in zip(mine, theirs, strict=True)]
    if not ratios or any(math.isnan(r) for r in ratios):
        return "-"
    mean = f"{sum(ratios) / len(ratios):.3f}"
    return f"{mean} ({max(ratios):.3f})" if len(ratios) > 1 else mean


#: one row of a :func:`ratio_table`: printed name, format, and how to read it from a run
RatioRow = tuple[str, str, Callable[[Mapping[str, Any]], Any]]


def key_rows(rows: Sequence[tuple[str, str, str]]) -> list[RatioRow]:
    """``(json key, name, format)`` rows as ratio-table rows reading that key."""
    return [(label, spec, _reader(key)) for key, label, spec in rows]


def _reader(key: str) -> Callable[[Mapping[str, Any]], Any]:
    """Reads ``key`` from a run report (None when absent)."""
    return lambda run: run.get(key)


def ratio_table(
    title: str,
    groups: Mapping[str, Mapping[str, Mapping[str, Any]]],
    columns: Sequence[str],
    rows: Callable[[Mapping[str, Mapping[str, Any]]], Sequence[RatioRow]],
    first_column: str = "policy",
) -> Table:
    """Runs side by side: per group (a policy), one line per row of ``rows(group)`` with each
    column's value and every column's ratio to the first (a column a group lacks is -)."""
    first = columns[0]
    table = Table(title=title, header_style="bold")
    for col in (first_column, "metric", *columns, *(f"{c} / {first}" for c in columns[1:])):
        justify: Literal["left", "right"] = "left" if col in (first_column, "metric") else "right"
        table.add_column(stacked(col), justify=justify)
    for name, by_column in groups.items():
        for label, spec, read in rows(by_column):
            values = [read(by_column[c]) if c in by_column else None for c in columns]
            table.add_row(
                name,
                label,
                *(fmt(v, spec) for v in values),
                *(fmt(_ratio(v, values[0]), "{:.2f}x") for v in values[1:]),
            )
        table.add_section()
    return table


def prefix_cache_table(
    groups: Mapping[str, Mapping[str, Mapping[str, Any]]], modes: Sequence[str]
) -> Table:
    """``bench --prefix-cache a,b``: per policy, what each prefix cache mode lost or reused
    after mid-prompt insertions and what it bought, with each mode's ratio to the first."""
    rows = key_rows(PREFIX_CACHE_ROWS)
    return ratio_table("prefix cache after mid-prompt insertions", groups, modes, lambda _: rows)


def _ratio(value: Any, base: Any) -> float:
    """``value / base``, NaN when either is missing or NaN or ``base`` is not positive."""
    ok = isinstance(value, int | float) and isinstance(base, int | float) and base > 0
    return float(value) / float(base) if ok and value == value else math.nan

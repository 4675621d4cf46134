"""What ``bench``'s tables show: a ``--loads`` cell averages its draws (a tenant's slowdown over
the draws where it finished programs: a draw where it finished none reports NaN, which blanked
its mean), and the metrics table says what its finished-only figures leave out."""

from __future__ import annotations

import math
from typing import Any

from agentconsole.bench.loads import KEPT, _row


def _draw(slowdowns: dict[str, float]) -> dict[str, Any]:
    report: dict[str, Any] = dict.fromkeys(KEPT, 1)
    report["tenants"] = {t: {"slowdown": s} for t, s in slowdowns.items()}
    return report


def test_a_tenant_slowdown_is_the_mean_over_the_draws_where_it_finished_programs() -> None:
    row = _row([_draw({"a": 2.0, "b": 3.0}), _draw({"a": math.nan, "b": 5.0})], [0, 0], 1.0)
    assert row["tenant_slowdown"] == {"a": 2.0, "b": 4.0}


def test_the_table_says_what_its_e2e_figures_leave_out() -> None:
    """E2E, TTFP and the tails are the finished programs': the failed and cancelled ones
    stand beside them (the table showed nothing of what was excluded)."""
    from rich.console import Console

    from agentconsole.bench.table import metrics_table

    report = {"finished": 8, "failed": 1, "cancelled": 3}
    console = Console(width=200, record=True)
    console.print(metrics_table("t", {"cp-cache": report}))
    text = console.export_text()
    assert "programs failed" in text
    assert "programs cancelled" in text


def test_variant_columns_keep_every_part_of_their_label_on_a_narrow_terminal() -> None:
    """Labels of one policy's variants (``cp-cache+fixed-roles+none`` beside
    ``...+shared-prefill``) were cut to the same prefix on a 120-column terminal: the columns
    could not be told apart. Each part of a label is a line of its header."""
    from rich.console import Console

    from agentconsole.bench.table import metrics_table

    rules, kvs = ("all-large", "fixed-roles"), ("none", "shared-prefill")
    labels = [f"cp-cache+{rule}+{kv}" for rule in rules for kv in kvs]
    runs = {label: {"finished": 1} for label in labels}
    console = Console(width=120, record=True)
    console.print(metrics_table("t", runs))
    text = console.export_text()
    for part in ("+all-large", "+fixed-roles", "+none", "+shared-prefill"):
        assert part in text
    assert "…" not in text

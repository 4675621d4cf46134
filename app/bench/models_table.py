"""``bench --models``: the model selection rules side by side, each as a ratio to ``all-large``.

Per policy: GPU-seconds per success, E2E P50/P95, throughput, the calls and GPU-seconds of
each model, the cross-model KV figures, and, after ``--sweep``, each rule's highest arrival
rate within the SLO with its GPU-seconds per success there (the comparison at the same P95).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.table import Table

from agentconsole.bench.table import RatioRow, key_rows, ratio_table

#: the rule the others are compared with (what a one-model deployment does)
ALL_LARGE = "all-large"

RULE_ROWS = key_rows(
    (
        ("gpu_s_per_success", "GPU seconds per success", "{:.2f}"),
        ("e2e_p50_s", "E2E P50 (s)", "{:.1f}"),
        ("e2e_p95_s", "E2E P95 (s)", "{:.1f}"),
        ("throughput_programs_per_s", "programs finished per second", "{:.4f}"),
        ("cross_model_lost_tokens", "lost cross-model reuse tokens", "{:,d}"),
        ("cross_model_reused_tokens", "tokens reused from another model", "{:,d}"),
        ("cross_model_recompute_tokens", "  prefilled for their unshared layers", "{:,d}"),
    )
)
SWEEP_ROWS = key_rows(
    (
        ("max_rate", "max arrival rate within the SLO (programs/s)", "{:.4f}"),
        ("gpu_s_per_success", "  GPU seconds per success there", "{:.2f}"),
        ("e2e_p95_s", "  E2E P95 there (s)", "{:.1f}"),
    )
)


def models_table(
    groups: Mapping[str, Mapping[str, Mapping[str, Any]]],
    sweeps: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> list[Table]:
    """The rules table, and the at-the-SLO table after a sweep: one block per policy
    (``groups``: policy -> rule column -> run report; ``sweeps`` the same for ``--sweep``
    results, empty without), columns in the groups' order (all-large first when it ran),
    ratios to the first column."""
    columns = list(dict.fromkeys(c for by in groups.values() for c in by))

    def rows(by_column: Mapping[str, Mapping[str, Any]]) -> list[RatioRow]:
        models = sorted({m for run in by_column.values() for m in run.get("models", {})})
        per_model: list[RatioRow] = []
        for m in models:
            per_model.append((f"calls on {m}", "{:,d}", _model_reader(m, "calls")))
            per_model.append((f"GPU s on {m}", "{:,.0f}", _model_reader(m, "gpu_s")))
        return [*RULE_ROWS, *per_model]

    first = columns[0] if columns else ALL_LARGE
    tables = [ratio_table(f"model selection rules, ratios to {first}", groups, columns, rows)]
    if any(sweeps.values()):
        title = f"at the SLO (--sweep): highest rate within it, ratios to {first}"
        tables.append(ratio_table(title, sweeps, columns, lambda _: SWEEP_ROWS))
    return tables


def _model_reader(model: str, key: str) -> Callable[[Mapping[str, Any]], Any]:
    """Reads one model's figure from a run report (None when the run has no such model)."""
    return lambda run: run.get("models", {}).get(model, {}).get(key)

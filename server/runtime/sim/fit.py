"""Fit a cost model's efficiency knobs to measured engine steps (``agentconsole calibrate``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.profile import Efficiency, MeasuredStep


def fit_efficiency(cost: CostModel, points: Sequence[MeasuredStep]) -> Efficiency:
    """Fit ``mfu``, ``attention_mfu``, ``bw_eff``, ``step_overhead_s`` and the three prefill
    overheads to measured step times.

    Minimises the relative squared error of ``max(G/mfu + A/attention_mfu, M/bw_eff) +
    overhead + rest`` (plus ``prefill_overhead_s + prefill_context_token_s * cached +
    prefill_context_sq_s * cached_sq`` for prefill steps) with the other knobs held at
    ``cost.efficiency``. Alternates between assigning each point to its bound and a linear
    least-squares solve, from several starts, and keeps the best. A knob that no point
    constrains (say, no compute-bound point) keeps its prior value. Results are clipped to
    valid ranges. Requires a point with positive seconds.
    """
    rows = [
        (*cost.roofline_terms(p), *cost.prefill_terms(p), p.seconds)
        for p in points
        if p.seconds > 0
    ]
    if not rows:
        raise ValueError("fit_efficiency needs at least one point with seconds > 0")
    prior = cost.efficiency
    inv_attn = 1 / (prior.attention_mfu or prior.mfu)
    tail = (
        prior.step_overhead_s,
        prior.prefill_overhead_s,
        prior.prefill_context_token_s,
        prior.prefill_context_sq_s,
    )
    starts = [(1 / prior.mfu, inv_attn, 1 / prior.bw_eff, *tail)]
    starts += [(1 / m, 1 / m, 1 / b, *tail) for m in (0.2, 0.5, 0.9) for b in (0.3, 0.9)]
    best: tuple[float, Theta] | None = None
    for start in starts:
        theta = _alternate(rows, start)
        err = sum((_predict(theta, row) / row[-1] - 1) ** 2 for row in rows)
        if best is None or err < best[0]:
            best = (err, theta)
    assert best is not None
    inv_mfu, inv_attn, inv_bw, overhead, prefill_fixed, prefill_ctx, prefill_ctx_sq = best[1]
    mfu = min(1.0, 1 / max(inv_mfu, 1.0))
    attention_mfu = min(1.0, 1 / max(inv_attn, 1.0))
    return replace(
        prior,
        mfu=mfu,
        attention_mfu=None if math.isclose(attention_mfu, mfu) else attention_mfu,
        bw_eff=min(1.0, 1 / max(inv_bw, 1.0)),
        step_overhead_s=max(0.0, overhead),
        prefill_overhead_s=max(0.0, prefill_fixed),
        prefill_context_token_s=max(0.0, prefill_ctx),
        prefill_context_sq_s=max(0.0, prefill_ctx_sq),
    )


Theta = tuple[float, float, float, float, float, float, float]
#: gemm, attention, memory, rest, prefill step, cached context tokens, their per-request
#: squares, seconds
Row = tuple[float, float, float, float, float, float, float, float]


def _predict(theta: Theta, row: Row) -> float:
    g, a, m, r, pf, ctx, ctx_sq, _ = row
    roof = max(theta[0] * g + theta[1] * a, theta[2] * m)
    return roof + theta[3] + r + theta[4] * pf + theta[5] * ctx + theta[6] * ctx_sq


def _alternate(rows: Sequence[Row], theta: Theta) -> Theta:
    """Regime assignment / weighted least squares until the assignment stops changing."""
    seen: set[tuple[bool, ...]] = set()
    for _ in range(50):
        compute_bound = tuple(
            theta[0] * row[0] + theta[1] * row[1] >= theta[2] * row[2] for row in rows
        )
        if compute_bound in seen:
            break
        seen.add(compute_bound)
        # Features per point (weighted by 1/seconds): GEMM and attention compute (when
        # compute-bound), memory (when memory-bound), 1, prefill step, cached context tokens
        # of a prefill step and their per-request squares; target: seconds minus the rest.
        x = [
            (
                (g if cb else 0.0) / s,
                (a if cb else 0.0) / s,
                (0.0 if cb else m) / s,
                1.0 / s,
                pf / s,
                ctx / s,
                ctx_sq / s,
                (s - r) / s,
            )
            for (g, a, m, r, pf, ctx, ctx_sq, s), cb in zip(rows, compute_bound, strict=True)
        ]
        free = [k for k in range(7) if any(row[k] for row in x)]
        solved = _least_squares([[row[k] for k in free] for row in x], [row[7] for row in x])
        if solved is None:
            break
        new = list(theta)
        for k, value in zip(free, solved, strict=True):
            new[k] = value
        theta = (new[0], new[1], new[2], new[3], new[4], new[5], new[6])
    return theta


def _least_squares(a: Sequence[Sequence[float]], y: Sequence[float]) -> list[float] | None:
    """Solve min |a x - y|^2 by the normal equations on columns scaled to a largest entry of
    1 (the features span ~10 orders of magnitude: squared contexts beside constants); None
    when they are singular."""
    n = len(a[0]) if a else 0
    if n == 0:
        return None
    scale = [max((abs(r[j]) for r in a), default=0.0) or 1.0 for j in range(n)]
    a = [[v / scale[j] for j, v in enumerate(r)] for r in a]
    solved = _normal_equations(a, y, n)
    return None if solved is None else [x / scale[j] for j, x in enumerate(solved)]


def _normal_equations(
    a: Sequence[Sequence[float]], y: Sequence[float], n: int
) -> list[float] | None:
    """Solve ``a^T a x = a^T y`` by Gauss-Jordan elimination with partial pivoting."""
    m = [
        [sum(r[i] * r[j] for r in a) for j in range(n)]
        + [sum(r[i] * v for r, v in zip(a, y, strict=True))]
        for i in range(n)
    ]
    for col in range(n):
        pivot = max(range(col, n), key=lambda i: abs(m[i][col]))
        if abs(m[pivot][col]) < 1e-300:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for i in range(n):
            if i != col:
                f = m[i][col] / m[col][col]
                m[i] = [vi - f * vc for vi, vc in zip(m[i], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]

"""Roofline cost of one SGLang-like engine step, its calibration profile and the profile fit.

Owns ``CostModel`` (seconds for a mixed chunked-prefill + decode iteration, closed-form runs of
decode steps, KV capacity per tier, host/disk transfer times), ``Efficiency`` (the calibration
knobs), ``Profile`` with its JSON format and the bundled ``profiles/*.json``, ``preset`` lookup
and ``fit_efficiency`` (least squares of measured step times).

The model, per GPU of a tensor-parallel group: ``time = max(FLOPs / (peak * mfu),
bytes / (hbm_bw * bw_eff)) + all-reduces + fixed overheads``. FLOPs are 2 x layer parameters per
token (plus the LM head per decode token) and 4 x layers x heads x head_dim per attended
(query, key) pair; bytes are the weights once per step plus every KV token read or written.
Prefill attention takes the exact count of causal pairs, which for a batch of uncached prompts
is Vidur's single equivalent prefill of length sqrt(sum p_i^2), squared and halved.
Activation traffic, norms, rotary embeddings and the LM head of prefill's last tokens are left
out: each is a few percent at most and ends up in the calibrated ``mfu``/``bw_eff``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from agentconsole.server.runtime.sim.hardware import GpuSpec, ModelSpec, gpu, model

PROFILE_FORMAT = 1
_PROFILES_PACKAGE = "agentconsole.server.runtime.sim.profiles"


class Link(StrEnum):
    """Where offloaded KV travels: host DRAM over PCIe, or the disk tier."""

    PCIE = "pcie"
    DISK = "disk"


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Calibration knobs of a ``CostModel``; defaults are leads for an H100/H200 under SGLang.

    - ``mfu`` 0.6: fraction of datasheet dense bf16 FLOP/s reached. A large bf16 GEMM measured
      788 TFLOP/s (0.80) on this workplace's H200 (device KINDS.md); attention kernels, norms
      and smaller GEMMs lose more, so 0.6 is an estimate until calibrated.
    - ``bw_eff`` 0.8: fraction of datasheet HBM bandwidth; a device copy measured 4.3 of
      4.8 TB/s (0.90, KINDS.md), and weight-streaming GEMVs reach less.
    - ``step_overhead_s`` 0.5 ms: scheduler and launch time per iteration not hidden by CUDA
      graphs and SGLang's overlap scheduler (estimate).
    - ``allreduce_latency_s`` 10 µs: small-message all-reduce over NVLink (estimate).
    - ``allreduce_bw_eff`` 0.5: ring bus bandwidth ≈ one direction of the 900 GB/s NVLink.
    - ``per_seq_overhead_s`` 0: CPU time per decode request; hidden on a GPU by the overlap
      scheduler, dominant on the CPU engine.
    """

    mfu: float = 0.6
    bw_eff: float = 0.8
    step_overhead_s: float = 5e-4
    allreduce_latency_s: float = 1e-5
    allreduce_bw_eff: float = 0.5
    per_seq_overhead_s: float = 0.0
    #: efficiency of the attention FLOPs when it differs from the GEMMs' (None: ``mfu``); CPU
    #: attention kernels run far from their matrix multiplies' rate
    attention_mfu: float | None = None
    #: extra fixed time of a step that prefills (CPU backends: ~3 ms against ~1 ms for decode)
    prefill_overhead_s: float = 0.0
    #: time per cached context token a prefill step reads (attention over the prefix outside
    #: the roofline's reach, e.g. the CPU's torch-native attention)
    prefill_context_token_s: float = 0.0

    def __post_init__(self) -> None:
        if self.attention_mfu is not None and not 0.0 < self.attention_mfu <= 1.0:
            raise ValueError(f"attention_mfu must be in (0, 1], got {self.attention_mfu}")
        for name in ("mfu", "bw_eff", "allreduce_bw_eff"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        for name in (
            "step_overhead_s",
            "allreduce_latency_s",
            "per_seq_overhead_s",
            "prefill_overhead_s",
            "prefill_context_token_s",
        ):
            if getattr(self, name) < 0.0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class MeasuredStep:
    """One measured engine iteration: the ``step_seconds`` arguments and the time it took."""

    seconds: float
    prefill_tokens: int = 0
    prefill_attn_pairs: int = 0
    decode_batch: int = 0
    decode_context: int = 0
    prefill_context_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Profile:
    """A calibration profile: which preset it is for, its efficiency, sources and measurements."""

    gpu: str
    model: str
    tp: int
    efficiency: Efficiency = field(default_factory=Efficiency)
    sources: Mapping[str, str] = field(default_factory=dict)
    points: tuple[MeasuredStep, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-ready dict that ``profile_from_json`` reads back."""
        return {
            "format": PROFILE_FORMAT,
            "gpu": self.gpu,
            "model": self.model,
            "tp": self.tp,
            "efficiency": asdict(self.efficiency),
            "sources": dict(self.sources),
            "points": [asdict(p) for p in self.points],
        }


def profile_from_json(data: Mapping[str, Any]) -> Profile:
    """Build a ``Profile`` from its JSON dict; raises ``ValueError`` on another format version.

    Missing efficiency fields and point fields take their defaults; unknown keys raise
    ``TypeError`` so that a typo in a hand-edited profile is not silently ignored.
    """
    if data.get("format") != PROFILE_FORMAT:
        raise ValueError(f"profile format {data.get('format')!r}, expected {PROFILE_FORMAT}")
    return Profile(
        gpu=str(data["gpu"]),
        model=str(data["model"]),
        tp=int(data["tp"]),
        efficiency=Efficiency(**data.get("efficiency", {})),
        sources={str(k): str(v) for k, v in data.get("sources", {}).items()},
        points=tuple(MeasuredStep(**p) for p in data.get("points", [])),
    )


def profile_name(gpu_name: str, model_name: str, tp: int) -> str:
    """Name of the bundled profile for a preset, e.g. ``H200-141GB__llama-3.1-8b__tp1``."""
    return f"{gpu_name}__{model_name}__tp{tp}"


def profile_names() -> list[str]:
    """Names of the bundled profiles (file stems under ``profiles/``), sorted."""
    files = resources.files(_PROFILES_PACKAGE).iterdir()
    return sorted(f.name.removesuffix(".json") for f in files if f.name.endswith(".json"))


def load_profile(path_or_name: str | Path) -> Profile:
    """Load a profile from a JSON file path, or else by bundled name (see ``profile_names``).

    A ``Path``, or a string ending in ``.json``, is read as a file; raises ``FileNotFoundError``
    when it is missing and ``KeyError`` for an unknown bundled name.
    """
    if isinstance(path_or_name, Path) or path_or_name.endswith(".json"):
        text = Path(path_or_name).read_text(encoding="utf-8")
    else:
        resource = resources.files(_PROFILES_PACKAGE) / f"{path_or_name}.json"
        if not resource.is_file():
            raise KeyError(f"no bundled profile {path_or_name!r}; known: {profile_names()}")
        text = resource.read_text(encoding="utf-8")
    return profile_from_json(json.loads(text))


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write ``profile`` as indented JSON to ``path`` (overwriting it)."""
    text = json.dumps(profile.to_json(), indent=2) + "\n"
    Path(path).write_text(text, encoding="utf-8")


def attention_pairs(new_tokens: int, cached_tokens: int = 0) -> int:
    """Causal (query, key) pairs of prefilling ``new_tokens`` after ``cached_tokens`` of prefix.

    Sum these over the requests of a batch for ``step_seconds(prefill_attn_pairs=...)``.
    """
    return new_tokens * cached_tokens + new_tokens * (new_tokens + 1) // 2


class CostModel:
    """Seconds per engine step for one model on a tensor-parallel group of identical GPUs.

    Immutable after construction; every per-step constant is folded in ``__init__`` so that a
    step costs a handful of multiplications. Raises ``ValueError`` when ``tp`` does not split
    the heads (SGLang's own requirement) or when ``tp > 1`` on a GPU without interconnect.
    """

    __slots__ = (
        "_c_lm",
        "_c_pair",
        "_c_tok",
        "_fixed",
        "_m_kv",
        "_m_weights",
        "_per_seq",
        "_per_tok",
        "_pf_ctx",
        "_pf_fixed",
        "_raw",
        "efficiency",
        "gpu",
        "kv_bytes_per_token",
        "kv_bytes_per_token_per_gpu",
        "model",
        "tp",
        "weight_bytes_per_gpu",
    )

    def __init__(
        self, gpu: GpuSpec, model: ModelSpec, tp: int = 1, efficiency: Efficiency | None = None
    ) -> None:
        eff = efficiency if efficiency is not None else Efficiency()
        if tp < 1 or model.heads % tp:
            raise ValueError(f"tp={tp} must be >= 1 and divide heads={model.heads}")
        if model.kv_heads % tp and tp % model.kv_heads:
            raise ValueError(f"tp={tp} must divide kv_heads={model.kv_heads} or be a multiple")
        if tp > 1 and gpu.nvlink_bw <= 0:
            raise ValueError(f"{gpu.name} has no interconnect for tp={tp}")
        self.gpu, self.model, self.tp, self.efficiency = gpu, model, tp, eff
        # KV heads are sharded while there are enough of them, then replicated one per GPU.
        kv_heads_per_gpu = max(1, model.kv_heads // tp)
        per_head = 2 * model.layers * model.head_dim * model.dtype_bytes
        self.kv_bytes_per_token = per_head * model.kv_heads
        self.kv_bytes_per_token_per_gpu = per_head * kv_heads_per_gpu
        self.weight_bytes_per_gpu = model.params * model.dtype_bytes / tp
        flops, bw = gpu.peak_flops, gpu.hbm_bw
        # Unscaled roofline terms (mfu = bw_eff = 1), kept for fit_efficiency.
        self._raw = (
            2 * model.layer_params / tp / flops,
            2 * model.lm_head_params / tp / flops,
            4 * model.layers * (model.heads // tp) * model.head_dim / flops,
            (model.layer_params + model.lm_head_params) * model.dtype_bytes / tp / bw,
            self.kv_bytes_per_token_per_gpu / bw,
        )
        c_tok, c_lm, c_pair, m_weights, m_kv = self._raw
        self._c_tok, self._c_lm = c_tok / eff.mfu, c_lm / eff.mfu
        self._c_pair = c_pair / (eff.attention_mfu or eff.mfu)
        self._m_weights, self._m_kv = m_weights / eff.bw_eff, m_kv / eff.bw_eff
        self._fixed = eff.step_overhead_s
        self._per_tok = 0.0
        if tp > 1:
            # Two all-reduces per layer (after attention and after the MLP), ring algorithm.
            n = 2 * model.layers
            ring = 2 * (tp - 1) / tp * model.hidden * model.dtype_bytes
            self._fixed += n * eff.allreduce_latency_s
            self._per_tok = n * ring / (gpu.nvlink_bw * eff.allreduce_bw_eff)
        self._per_seq = eff.per_seq_overhead_s
        self._pf_fixed, self._pf_ctx = eff.prefill_overhead_s, eff.prefill_context_token_s

    @classmethod
    def from_profile(cls, profile: Profile | str | Path) -> CostModel:
        """Build the model a profile (object, file path or bundled name) describes."""
        p = profile if isinstance(profile, Profile) else load_profile(profile)
        return cls(gpu(p.gpu), model(p.model), p.tp, p.efficiency)

    def hbm_kv_capacity_tokens(self, mem_fraction: float = 0.9) -> int:
        """KV tokens that fit in HBM, SGLang-style (``--mem-fraction-static``).

        Weights and the KV pool share ``mem_fraction`` of HBM; the rest is the activation and
        CUDA-graph reserve. Returns 0 when the weights alone do not fit; requires
        ``0 < mem_fraction <= 1``.
        """
        if not 0.0 < mem_fraction <= 1.0:
            raise ValueError(f"mem_fraction must be in (0, 1], got {mem_fraction}")
        free = self.gpu.hbm_bytes * mem_fraction - self.weight_bytes_per_gpu
        return max(0, int(free // self.kv_bytes_per_token_per_gpu))

    def dram_kv_capacity_tokens(self) -> int:
        """KV tokens that fit in the host DRAM set aside for offload (0 without a host tier)."""
        return self.gpu.host_dram_bytes // self.kv_bytes_per_token_per_gpu

    def step_seconds(
        self,
        prefill_tokens: int = 0,
        prefill_attn_pairs: int = 0,
        decode_batch: int = 0,
        decode_context: int = 0,
        prefill_context_tokens: int = 0,
    ) -> float:
        """Seconds of one iteration running ``prefill_tokens`` of (chunked) prefill and one token
        for each of ``decode_batch`` requests, in one forward pass as SGLang mixes them.

        ``prefill_attn_pairs``: causal pairs of the prefill chunks (sum of ``attention_pairs``).
        ``decode_context``: KV tokens the decode batch attends to, summed over its requests.
        ``prefill_context_tokens``: cached prefix tokens whose KV the prefill chunks read.
        An empty step (no tokens) costs 0. Pure; callable in a hot loop.
        """
        tokens = prefill_tokens + decode_batch
        if tokens <= 0:
            return 0.0
        compute = (
            self._c_tok * tokens
            + self._c_lm * decode_batch
            + self._c_pair * (prefill_attn_pairs + decode_context)
        )
        memory = self._m_weights + self._m_kv * (decode_context + prefill_context_tokens + tokens)
        roof = compute if compute > memory else memory
        step = roof + self._fixed + self._per_tok * tokens + self._per_seq * decode_batch
        if prefill_tokens:
            step += self._pf_fixed + self._pf_ctx * prefill_context_tokens
        return step

    def decode_step_seconds(self, batch: int, total_context: int) -> float:
        """Seconds of one pure decode step; ``total_context`` is summed over the batch."""
        return self.step_seconds(0, 0, batch, total_context)

    def prefill_seconds(
        self, new_tokens: int, cached_tokens: int = 0, chunk_tokens: int = 0
    ) -> float:
        """Seconds to prefill one request of ``new_tokens`` after ``cached_tokens`` of prefix.

        With ``chunk_tokens > 0`` the prompt runs in chunks of that size (SGLang's
        ``--chunked-prefill-size``), one step each, alone in the batch. 0 tokens cost 0.
        """
        step = chunk_tokens if chunk_tokens > 0 else max(new_tokens, 1)
        total, done = 0.0, 0
        while done < new_tokens:
            n = min(step, new_tokens - done)
            ctx = cached_tokens + done
            total += self.step_seconds(n, attention_pairs(n, ctx), 0, 0, ctx)
            done += n
        return total

    def decode_steps_seconds(self, batch: int, total_context: int, steps: int) -> float:
        """Seconds of ``steps`` consecutive decode steps of a fixed batch, each request's context
        growing by one token per step (step j attends ``total_context + j * batch``).

        Closed form, equal to the loop of ``decode_step_seconds`` within float error: both
        roofline sides are linear in j, so the bound switches at most once, at the crossover.
        """
        if steps <= 0 or batch <= 0:
            return 0.0
        c0 = (self._c_tok + self._c_lm) * batch + self._c_pair * total_context
        c1 = self._c_pair * batch
        m0 = self._m_weights + self._m_kv * (total_context + batch)
        m1 = self._m_kv * batch
        fixed = self._fixed + self._per_tok * batch + self._per_seq * batch
        return _run_seconds(c0, c1, m0, m1, fixed, steps)

    def mixed_steps_seconds(
        self, chunk: int, prefill_done: int, batch: int, decode_context: int, steps: int
    ) -> float:
        """Seconds of ``steps`` consecutive mixed steps: each prefills ``chunk`` more tokens of
        one prompt (``prefill_done`` already computed before the first) beside one decode
        token for each of ``batch`` requests attending ``decode_context`` tokens (growing by
        ``batch`` per step). Closed form, equal to the loop of ``step_seconds``."""
        if steps <= 0 or chunk + batch <= 0:
            return 0.0
        pairs0 = attention_pairs(chunk, prefill_done)
        c0 = (
            self._c_tok * (chunk + batch)
            + self._c_lm * batch
            + self._c_pair * (pairs0 + decode_context)
        )
        c1 = self._c_pair * (chunk * chunk + batch)
        tokens = chunk + batch
        m0 = self._m_weights + self._m_kv * (decode_context + prefill_done + tokens)
        m1 = self._m_kv * (batch + chunk)
        fixed = self._fixed + self._per_tok * tokens + self._per_seq * batch
        fixed += self._pf_fixed + self._pf_ctx * prefill_done
        return _run_seconds(c0, c1, m0, m1, fixed, steps) + _linear_sum(
            0.0, self._pf_ctx * chunk, 0, steps
        )

    def transfer_seconds(self, tokens: int, link: Link | str = Link.PCIE) -> float:
        """Seconds to move ``tokens`` of KV between HBM and host DRAM (``pcie``) or disk.

        Every GPU moves its own shard over its own link, in parallel. Raises ``ValueError``
        when the GPU has no disk tier.
        """
        if Link(link) is Link.PCIE:
            rate = self.gpu.host_link_bw
        elif self.gpu.disk_bw is None:
            raise ValueError(f"{self.gpu.name} has no disk tier")
        else:
            rate = self.gpu.disk_bw
        return tokens * self.kv_bytes_per_token_per_gpu / rate

    def roofline_terms(self, point: MeasuredStep) -> tuple[float, float, float, float]:
        """(GEMM compute s at mfu 1, attention compute s at mfu 1, memory s at bw_eff 1, the
        rest) of a step under this model."""
        c_tok, c_lm, c_pair, m_weights, m_kv = self._raw
        tokens = point.prefill_tokens + point.decode_batch
        gemm = c_tok * tokens + c_lm * point.decode_batch
        attention = c_pair * (point.prefill_attn_pairs + point.decode_context)
        kv = point.decode_context + point.prefill_context_tokens + tokens
        rest = self._fixed - self.efficiency.step_overhead_s
        rest += self._per_tok * tokens + self._per_seq * point.decode_batch
        return gemm, attention, m_weights + m_kv * kv, rest

    def prefill_terms(self, point: MeasuredStep) -> tuple[float, float]:
        """(1, cached context tokens) for a step that prefills, else (0, 0): the features of
        the prefill overheads in :func:`fit_efficiency`."""
        if not point.prefill_tokens:
            return 0.0, 0.0
        return 1.0, float(point.prefill_context_tokens)


def _run_seconds(c0: float, c1: float, m0: float, m1: float, fixed: float, steps: int) -> float:
    """Sum over j in [0, steps) of ``max(c0 + c1 j, m0 + m1 j) + fixed``: both roofline sides
    are linear in the step index, so the larger one switches at most once."""
    first, second = ((c0, c1), (m0, m1)) if c0 >= m0 else ((m0, m1), (c0, c1))
    split = steps
    if second[1] > first[1]:
        split = min(steps, max(0, math.ceil((first[0] - second[0]) / (second[1] - first[1]))))
    return _linear_sum(*first, 0, split) + _linear_sum(*second, split, steps) + fixed * steps


def _linear_sum(a: float, b: float, start: int, stop: int) -> float:
    """Sum of ``a + b * j`` for j in [start, stop)."""
    n = stop - start
    return 0.0 if n <= 0 else n * a + b * (start + stop - 1) * n / 2


@lru_cache(maxsize=64)
def preset(gpu: str = "H200-141GB", model: str = "llama-3.1-8b", tp: int = 1) -> CostModel:
    """The ``CostModel`` of a bundled profile; raises ``KeyError`` listing the known presets."""
    return CostModel.from_profile(profile_name(gpu, model, tp))


def fit_efficiency(cost: CostModel, points: Sequence[MeasuredStep]) -> Efficiency:
    """Fit ``mfu``, ``attention_mfu``, ``bw_eff``, ``step_overhead_s`` and the two prefill
    overheads to measured step times.

    Minimises the relative squared error of ``max(G/mfu + A/attention_mfu, M/bw_eff) +
    overhead + rest`` (plus ``prefill_overhead_s + prefill_context_token_s * cached`` for
    prefill steps) with the other knobs held at ``cost.efficiency``. Alternates between
    assigning each point to its bound and a linear least-squares solve, from several starts,
    and keeps the best. A knob that no point constrains (say, no compute-bound point) keeps its
    prior value. Results are clipped to valid ranges. Requires a point with positive seconds.
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
    tail = (prior.step_overhead_s, prior.prefill_overhead_s, prior.prefill_context_token_s)
    starts = [(1 / prior.mfu, inv_attn, 1 / prior.bw_eff, *tail)]
    starts += [(1 / m, 1 / m, 1 / b, *tail) for m in (0.2, 0.5, 0.9) for b in (0.3, 0.9)]
    best: tuple[float, Theta] | None = None
    for start in starts:
        theta = _alternate(rows, start)
        err = sum((_predict(theta, row) / row[-1] - 1) ** 2 for row in rows)
        if best is None or err < best[0]:
            best = (err, theta)
    assert best is not None
    inv_mfu, inv_attn, inv_bw, overhead, prefill_fixed, prefill_ctx = best[1]
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
    )


Theta = tuple[float, float, float, float, float, float]
#: gemm, attention, memory, rest, prefill step, cached context tokens, seconds
Row = tuple[float, float, float, float, float, float, float]


def _predict(theta: Theta, row: Row) -> float:
    g, a, m, r, pf, ctx, _ = row
    roof = max(theta[0] * g + theta[1] * a, theta[2] * m)
    return roof + theta[3] + r + theta[4] * pf + theta[5] * ctx


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
        # of a prefill step; target: seconds minus the rest.
        x = [
            (
                (g if cb else 0.0) / s,
                (a if cb else 0.0) / s,
                (0.0 if cb else m) / s,
                1.0 / s,
                pf / s,
                ctx / s,
                (s - r) / s,
            )
            for (g, a, m, r, pf, ctx, s), cb in zip(rows, compute_bound, strict=True)
        ]
        free = [k for k in range(6) if any(row[k] for row in x)]
        solved = _least_squares([[row[k] for k in free] for row in x], [row[6] for row in x])
        if solved is None:
            break
        new = list(theta)
        for k, value in zip(free, solved, strict=True):
            new[k] = value
        theta = (new[0], new[1], new[2], new[3], new[4], new[5])
    return theta


def _least_squares(a: Sequence[Sequence[float]], y: Sequence[float]) -> list[float] | None:
    """Solve min |a x - y|^2 by the normal equations; None when they are singular."""
    n = len(a[0]) if a else 0
    if n == 0:
        return None
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

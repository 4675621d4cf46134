"""Roofline cost of one SGLang-like engine step.

Owns ``CostModel`` (seconds for a mixed chunked-prefill + decode iteration, closed-form runs of
decode or mixed steps, KV capacity per tier, host/disk transfer times) and the ``preset``
lookup. Its knobs and their JSON profiles are in :mod:`.profile`; fitting them to measured
steps is :mod:`.fit`.

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

import math
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

from agentconsole.server.runtime.sim.hardware import GpuSpec, ModelSpec, gpu, model
from agentconsole.server.runtime.sim.profile import (
    Efficiency,
    MeasuredStep,
    Profile,
    load_profile,
    profile_name,
)


class Link(StrEnum):
    """Where offloaded KV travels: host DRAM over PCIe, or the disk tier."""

    PCIE = "pcie"
    DISK = "disk"


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
        "_pf_ctx_sq",
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
        self._pf_ctx_sq = eff.prefill_context_sq_s

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
        prefill_context_sq: int = 0,
    ) -> float:
        """Seconds of one iteration running ``prefill_tokens`` of (chunked) prefill and one token
        for each of ``decode_batch`` requests, in one forward pass as SGLang mixes them.

        ``prefill_attn_pairs``: causal pairs of the prefill chunks (sum of ``attention_pairs``).
        ``decode_context``: KV tokens the decode batch attends to, summed over its requests.
        ``prefill_context_tokens``: cached prefix tokens whose KV the prefill chunks read;
        ``prefill_context_sq``: the same per request, squared and summed.
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
            step += (
                self._pf_fixed
                + self._pf_ctx * prefill_context_tokens
                + self._pf_ctx_sq * prefill_context_sq
            )
        return step

    def work_floor_seconds(
        self, prefill_tokens: int, prefill_pairs: int, decode_tokens: int, decode_context: int
    ) -> tuple[float, float]:
        """(compute, memory) seconds this work needs however it is batched: the roofline's
        terms with the weights read for free (an infinite batch) and no per-step overheads.
        Each is a floor; a schedule at best overlaps them completely. ``decode_context``: KV
        tokens the decode steps read, summed over the steps. Pure."""
        compute = (
            self._c_tok * (prefill_tokens + decode_tokens)
            + self._c_lm * decode_tokens
            + self._c_pair * (prefill_pairs + decode_context)
        )
        # every computed token's KV is written once; every decode step reads its context
        memory = self._m_kv * (prefill_tokens + decode_context)
        return compute, memory

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
            total += self.step_seconds(n, attention_pairs(n, ctx), 0, 0, ctx, ctx * ctx)
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
        if chunk <= 0:  # nothing to prefill: plain decode steps, no prefill-step costs
            return self.decode_steps_seconds(batch, decode_context, steps)
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
        # the prompt's context before step j is prefill_done + j * chunk: its linear and
        # squared per-context costs grow with j
        grow = self._pf_ctx * chunk + 2.0 * self._pf_ctx_sq * prefill_done * chunk
        squared = self._pf_ctx_sq * (
            prefill_done * prefill_done * steps + chunk * chunk * _sum_sq(steps)
        )
        return (
            _run_seconds(c0, c1, m0, m1, fixed, steps) + _linear_sum(0.0, grow, 0, steps) + squared
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

    def prefill_terms(self, point: MeasuredStep) -> tuple[float, float, float]:
        """(1, cached context tokens, their per-request squares summed) for a step that
        prefills, else zeros: the features of the prefill overheads in :func:`fit_efficiency`."""
        if not point.prefill_tokens:
            return 0.0, 0.0, 0.0
        return 1.0, float(point.prefill_context_tokens), float(point.prefill_context_sq)


def _run_seconds(c0: float, c1: float, m0: float, m1: float, fixed: float, steps: int) -> float:
    """Sum over j in [0, steps) of ``max(c0 + c1 j, m0 + m1 j) + fixed``: both roofline sides
    are linear in the step index, so the larger one switches at most once."""
    first, second = ((c0, c1), (m0, m1)) if c0 >= m0 else ((m0, m1), (c0, c1))
    split = steps
    if second[1] > first[1]:
        split = min(steps, max(0, math.ceil((first[0] - second[0]) / (second[1] - first[1]))))
    return _linear_sum(*first, 0, split) + _linear_sum(*second, split, steps) + fixed * steps


def _sum_sq(n: int) -> float:
    """Sum of j * j for j in [0, n)."""
    return (n - 1) * n * (2 * n - 1) / 6 if n > 0 else 0.0


def _linear_sum(a: float, b: float, start: int, stop: int) -> float:
    """Sum of ``a + b * j`` for j in [start, stop)."""
    n = stop - start
    return 0.0 if n <= 0 else n * a + b * (start + stop - 1) * n / 2


#: the model preset simulated when none is named
DEFAULT_PRESET_MODEL = "llama-3.1-8b"


@lru_cache(maxsize=64)
def preset(gpu: str = "H200-141GB", model: str = DEFAULT_PRESET_MODEL, tp: int = 1) -> CostModel:
    """The ``CostModel`` of a bundled profile; raises ``KeyError`` listing the known presets."""
    return CostModel.from_profile(profile_name(gpu, model, tp))

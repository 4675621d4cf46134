"""The simulator's GPU roofline measured with PyTorch kernels at Llama-3.1-8B's shape.

``benchmarks/gpu_lane.py`` is the GPU lane proper (SGLang itself with ``--load-format dummy``).
It needs SGLang's CUDA stack, which a lent machine without a registry may not be able to take:
SGLang 0.5.23 pins torch 2.14.1, and its kernel wheel (``sglang-kernel`` 0.4.10, 373 MB) links
libtorch symbols older torches lack. This script needs only torch and measures what the cost
model (``server/runtime/sim/costmodel.py``) prices, one engine step at a time:

* the dense bf16 GEMMs SGLang runs for an unquantised Llama (``F.linear``, cuBLAS), all 32
  layers, the LM head on each request's last token, with RMSNorm, rotary and SiLU as plain
  torch ops (about 18 kernels a layer where SGLang's fused ones make about 10; the fit puts
  1.2 ms a step on fixed costs, a fifth of a batch-1 decode step, part of which SGLang's
  fused kernels would not pay);
* the KV cache written for every new token and read by attention: a prefill over a cached
  prefix by FlashAttention-2 through torch (varlen, GQA, causal aligned to the end; SGLang on
  Hopper runs FlashAttention-3, faster on long prefixes), a decode step by batched matmuls
  over each request's KV split in chunks of 256 tokens (split-KV, as decode kernels spread a
  long context over the GPU; memory-bound like a paged decode kernel);
* decode steps replayed from a CUDA graph, as SGLang captures them; prefill steps eager.

Each grid point is the median of CUDA-event-timed repetitions after a warm-up. The weights are
random (one layer's weights serve all 32 layers: 436 MB, far above the L2, so the traffic is
the real model's; the KV is one copy per layer unless that exceeds 8 GB, when a copy is itself
far above the L2). Nothing runs SGLang's scheduler, so a step here is kernel time only.

    python benchmarks/gpu_kernels.py --out OUT            # on the GPU: OUT/gpu_kernels.json
    python benchmarks/gpu_kernels.py --fit OUT/gpu_kernels.json --profile-out P.json

``--fit`` (any machine) prints each point's error under the bundled H200 profile and under the
fit (``fit_profile``), and writes the fitted profile. ``--tiny`` runs a toy shape on the CPU
(the smoke test, ``tests/gpu/test_gpu_kernels.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PRESET = ("H200-141GB", "llama-3.1-8b")
KV_COPY_LIMIT_BYTES = 8e9
#: decode attention's KV split: tokens a chunk (the context padded to whole chunks)
DECODE_SPLIT = 256
#: what a decode point's ``decode_context`` counts (a report says so: earlier reports counted
#: the unpadded context)
DECODE_CONTEXT_READ = f"KV tokens read: each context plus its new token, padded to {DECODE_SPLIT}s"


@dataclass(frozen=True, slots=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int


LLAMA_8B = Shape(4096, 32, 32, 8, 128, 14336, 128256)
TINY = Shape(64, 2, 4, 2, 16, 128, 512)
#: decode (batch, context per request) and prefill (batch, new tokens, cached tokens) points:
#: contexts a 141 GB card can hold for this model (128 KB of KV a token)
DECODE_GRID = [(b, c) for b in (1, 8, 32) for c in (1024, 8192, 32768)] + [
    (1, 131072),
    (64, 8192),
    (128, 1024),
    (128, 4096),
]
PREFILL_GRID = [
    (1, 512, 0),
    (1, 2048, 0),
    (1, 8192, 0),
    (1, 512, 8192),
    (1, 512, 65536),
    (1, 2048, 32768),
    (1, 4096, 65536),
    (4, 1024, 0),
    (4, 1024, 16384),
    (8, 512, 8192),
]
TINY_DECODE = [(1, 16), (4, 64)]
TINY_PREFILL = [(1, 32, 0), (2, 16, 48)]


def decode_split(context: int) -> tuple[int, int]:
    """(chunk, chunks): the decode step's split of a request's ``context`` plus its new token
    into whole chunks of at most ``DECODE_SPLIT`` tokens."""
    chunk = min(DECODE_SPLIT, context + 1)
    return chunk, -(-(context + 1) // chunk)


def read(context: int) -> int:
    """The KV tokens a decode step over ``context`` reads: padded to whole chunks."""
    chunk, chunks = decode_split(context)
    return chunk * chunks


def measure(shape: Shape, device: str, decode: list[Any], prefill: list[Any]) -> dict[str, Any]:
    import torch

    from agentconsole.server.runtime.sim.costmodel import attention_pairs

    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = _Model(shape, device, dtype)
    flash = device == "cuda" and _flash_matches(model)
    points: list[dict[str, Any]] = []
    for batch, context in decode:
        seconds = _time(model.decode_step(batch, context), device, graph=device == "cuda")
        # the step read the KV padded to whole chunks: what its time is the time of
        points.append(
            {"seconds": seconds, "decode_batch": batch, "decode_context": batch * read(context)}
        )
        print(f"decode b={batch} ctx={context}: {seconds * 1e3:.2f} ms", flush=True)
    for batch, new, cached in prefill:
        seconds = _time(model.prefill_step(batch, new, cached, flash), device, graph=False)
        pairs = attention_pairs(new, cached)
        points.append(
            {
                "seconds": seconds,
                "prefill_tokens": batch * new,
                "prefill_attn_pairs": batch * pairs,
                "prefill_context_tokens": batch * cached,
                "prefill_context_sq": batch * cached * cached,
            }
        )
        print(f"prefill b={batch} new={new} cached={cached}: {seconds * 1e3:.2f} ms", flush=True)
    return {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "shape": asdict(shape),
        "prefill_attention": "flash-varlen" if flash else "sdpa-expanded",
        "decode_context": DECODE_CONTEXT_READ,
        "points": points,
    }


class _Model:
    """One layer's weights, run ``layers`` times; the KV made per step (see the docstring)."""

    def __init__(self, shape: Shape, device: str, dtype: Any) -> None:
        import torch

        s, self.s, self.device, self.dtype = shape, shape, device, dtype

        def w(*size: int) -> Any:
            return torch.randn(*size, device=device, dtype=dtype) * 0.02

        qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.qkv, self.o = w(qkv, s.hidden), w(s.hidden, s.heads * s.head_dim)
        self.gate_up, self.down = w(2 * s.intermediate, s.hidden), w(s.hidden, s.intermediate)
        self.norm = torch.ones(s.hidden, device=device, dtype=dtype)
        self.embed, self.lm_head = w(s.vocab, s.hidden), w(s.vocab, s.hidden)

    def _kv(self, batch: int, length: int, *, heads_first: bool) -> list[tuple[Any, Any]]:
        """Per-layer (K, V) caches, [batch, length, kv_heads, head_dim] each (FlashAttention's
        layout), or [batch, kv_heads, length, head_dim] (``heads_first``: what a batched
        matmul reads without a copy)."""
        import torch

        s = self.s
        size = (
            (batch, s.kv_heads, length, s.head_dim)
            if heads_first
            else (batch, length, s.kv_heads, s.head_dim)
        )
        per_layer = 2 * batch * length * s.kv_heads * s.head_dim * 2
        copies = s.layers if per_layer * s.layers <= KV_COPY_LIMIT_BYTES else 1
        caches = [
            (
                torch.randn(size, device=self.device, dtype=self.dtype),
                torch.randn(size, device=self.device, dtype=self.dtype),
            )
            for _ in range(copies)
        ]
        return [caches[i % copies] for i in range(s.layers)]

    def _layer(self, x: Any, attend: Callable[[Any, Any, Any, int], Any], layer: int) -> Any:
        import torch.nn.functional as F

        s = self.s
        h = F.rms_norm(x, (s.hidden,), self.norm, 1e-5)
        qkv: Any = F.linear(h, self.qkv)
        q, k, v = qkv.split(
            [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], -1
        )
        # rotary's memory traffic, one elementwise pass each (the angle does not change the
        # cost); the attention scale folded into the queries' pass
        q, k = q * (0.8 * s.head_dim**-0.5), k * 0.8
        x = x + F.linear(attend(q, k, v, layer), self.o)
        gate, up = F.linear(F.rms_norm(x, (s.hidden,), self.norm, 1e-5), self.gate_up).chunk(2, -1)
        return x + F.linear(F.silu(gate) * up, self.down)

    def _logits(self, x: Any) -> Any:
        import torch.nn.functional as F

        return F.linear(F.rms_norm(x, (self.s.hidden,), self.norm, 1e-5), self.lm_head).argmax(-1)

    def decode_step(self, batch: int, context: int) -> Callable[[], Any]:
        import torch

        s = self.s
        chunk, chunks = decode_split(context)  # the cache padded to whole chunks
        kv = self._kv(batch, chunks * chunk, heads_first=True)
        ids = torch.zeros(batch, dtype=torch.long, device=self.device)
        group, heads = s.heads // s.kv_heads, (batch, s.kv_heads)

        def attend(q: Any, k: Any, v: Any, layer: int) -> Any:
            kc, vc = kv[layer]  # [b, kvh, len, d]
            kc[:, :, context] = k.view(*heads, s.head_dim)  # the new token's KV
            vc[:, :, context] = v.view(*heads, s.head_dim)
            # split-KV, as decode kernels do: one small matmul a chunk, so a long context
            # spreads over the whole GPU; softmax over the whole context
            keys = kc.view(*heads, chunks, chunk, s.head_dim)
            qg = q.view(*heads, 1, group, s.head_dim)
            scores = (qg @ keys.transpose(-1, -2)).transpose(2, 3)  # [b, kvh, g, n, chunk]
            p = torch.softmax(scores.reshape(*heads, group, -1), -1)
            p = p.view(*heads, group, chunks, chunk).transpose(2, 3)  # [b, kvh, n, g, chunk]
            out = (p @ vc.view(*heads, chunks, chunk, s.head_dim)).sum(2)
            return out.reshape(batch, s.heads * s.head_dim)

        def step() -> Any:
            x = self.embed[ids]
            for layer in range(s.layers):
                x = self._layer(x, attend, layer)
            return self._logits(x)

        return step

    def prefill_step(self, batch: int, new: int, cached: int, flash: bool) -> Callable[[], Any]:
        import torch

        s, length = self.s, cached + new
        kv = self._kv(batch, length, heads_first=False)
        ids = torch.zeros(batch * new, dtype=torch.long, device=self.device)

        def attend(q: Any, k: Any, v: Any, layer: int) -> Any:
            kc, vc = kv[layer]
            kc[:, cached:] = k.view(batch, new, s.kv_heads, s.head_dim)
            vc[:, cached:] = v.view(batch, new, s.kv_heads, s.head_dim)
            return _prefill_attention(q, kc, vc, new, flash).reshape(batch * new, -1)

        def step() -> Any:
            x = self.embed[ids]
            for layer in range(s.layers):
                x = self._layer(x, attend, layer)
            return self._logits(x.view(batch, new, -1)[:, -1])

        return step


def _prefill_attention(q: Any, kc: Any, vc: Any, new: int, flash: bool) -> Any:
    """Causal attention of ``new`` queries a request over its whole cache (the queries are the
    cache's last ``new`` positions). ``q``: [batch * new, heads * d]; returns
    [batch, new, heads, d]."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    batch, length, kv_heads, d = kc.shape
    heads = q.shape[-1] // d
    if flash:
        cu_q = torch.arange(0, (batch + 1) * new, new, dtype=torch.int32, device=q.device)
        cu_k = torch.arange(0, (batch + 1) * length, length, dtype=torch.int32, device=q.device)
        out = torch.ops.aten._flash_attention_forward(
            q.view(batch * new, heads, d),
            kc.view(batch * length, kv_heads, d),
            vc.view(batch * length, kv_heads, d),
            cu_q,
            cu_k,
            new,
            length,
            0.0,
            True,
            False,
        )[0]
        return out.view(batch, new, heads, d)
    group = heads // kv_heads
    keys = kc.transpose(1, 2).repeat_interleave(group, 1)
    values = vc.transpose(1, 2).repeat_interleave(group, 1)
    queries = q.view(batch, new, heads, d).transpose(1, 2)
    out = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=causal_lower_right(new, length)
    )
    return out.transpose(1, 2)


def _flash_matches(model: _Model) -> bool:
    """FlashAttention's varlen kernel runs here and agrees with the expanded SDPA (GQA, causal
    aligned to the end); False: prefill falls back to the expanded SDPA."""
    import torch

    s = model.s
    kv = model._kv(2, 96, heads_first=False)[0]
    q = torch.randn(2 * 32, s.heads * s.head_dim, device=model.device, dtype=model.dtype)
    try:
        fast = _prefill_attention(q, *kv, 32, True)
    except (RuntimeError, TypeError) as exc:
        print(f"flash varlen unavailable ({exc}); prefill uses expanded SDPA", flush=True)
        return False
    slow = _prefill_attention(q, *kv, 32, False)
    return bool(torch.allclose(fast.float(), slow.float(), atol=2e-2, rtol=2e-2))


def _time(step: Callable[[], Any], device: str, *, graph: bool, reps: int = 7) -> float:
    """Median seconds of ``step`` after a warm-up (CUDA events on a GPU; a CUDA graph when
    ``graph``)."""
    import torch

    if device != "cuda":
        step()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    run = step
    cuda: Any = torch.cuda  # partly untyped in torch's stubs
    side = cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            step()
        run = captured.replay
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        began, ended = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        began.record()
        run()
        ended.record()
        ended.synchronize()
        times.append(began.elapsed_time(ended) / 1e3)
    return statistics.median(times)


def fit(measured: Path, profile_out: Path | None) -> dict[str, Any]:
    """Errors of the bundled profile and of a fit on the measured points; writes the fit."""
    from agentconsole.server.runtime.sglang.calibration import fit_profile, step_errors
    from agentconsole.server.runtime.sim.profile import (
        MeasuredStep,
        load_profile,
        profile_name,
        save_profile,
    )

    report = json.loads(measured.read_text())
    if not str(report.get("decode_context", "")).startswith(DECODE_CONTEXT_READ):
        raise SystemExit(f"{measured}: decode contexts not counted as read ({DECODE_CONTEXT_READ})")
    points = [MeasuredStep(**p) for p in report["points"]]
    bundled = load_profile(profile_name(*PRESET, 1))
    status = (
        f"measured by benchmarks/gpu_kernels.py on {report['device']} (torch {report['torch']}, "
        f"prefill attention {report['prefill_attention']}): kernel time, no SGLang scheduler"
    )
    fitted = fit_profile(points, bundled.efficiency, preset=PRESET, status=status)
    rows = [
        {**asdict(p), "bundled_error": before, "fitted_error": after}
        for (p, before), (_, after) in zip(
            step_errors(bundled, points), step_errors(fitted, points), strict=True
        )
    ]
    for row in rows:
        print(
            f"{row['seconds'] * 1e3:9.2f} ms  prefill {row['prefill_tokens']:6d} "
            f"ctx {row['prefill_context_tokens']:6d}  decode {row['decode_batch']:4d} x "
            f"{row['decode_context'] // max(row['decode_batch'], 1):6d}  bundled "
            f"{row['bundled_error']:+7.1%}  fitted {row['fitted_error']:+7.1%}"
        )
    if profile_out is not None:
        save_profile(fitted, profile_out)
    summary = {
        "efficiency": fitted.to_json()["efficiency"],
        "bundled_mean_abs_error": statistics.fmean(abs(r["bundled_error"]) for r in rows),
        "fitted_mean_abs_error": statistics.fmean(abs(r["fitted_error"]) for r in rows),
    }
    print(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder for gpu_kernels.json (measuring)")
    p.add_argument("--tiny", action="store_true", help="a toy shape on the CPU (smoke test)")
    p.add_argument("--fit", type=Path, help="a gpu_kernels.json to fit (no measuring)")
    p.add_argument("--profile-out", type=Path, help="where --fit writes the fitted profile")
    args = p.parse_args(argv)
    if args.fit is not None:
        return fit(args.fit, args.profile_out)
    if args.out is None:
        p.error("--out or --fit is required")
    if args.tiny:
        report = measure(TINY, "cpu", TINY_DECODE, TINY_PREFILL)
    else:
        report = measure(LLAMA_8B, "cuda", DECODE_GRID, PREFILL_GRID)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_kernels.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()

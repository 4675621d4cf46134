"""How a simulated engine's prefix cache treats a prompt with tokens inserted mid-prompt.

An agent that puts new tokens (retrieved memory, the latest tool results) between a fixed
system prefix and its history (seed section 8) changes every position after the insertion.
With absolute positions in the KV (RoPE), an ordinary prefix cache (SGLang's radix cache,
vLLM's prefix caching) reuses the prompt only up to the insertion point: the suffix after it,
computed for the program's previous call and still resident, is prefilled again. That is the
*lost reuse*.

*Relative-position* caching (CacheSlide, FAST 2026: "Relative-Position-Dependent Caching")
reuses the suffix's KV at its shifted positions: the segments keep their relative order, and
a correction (re-encoding positions, recomputing attention for a small subset of tokens and
blending it with the cached KV) replaces the full prefill. The simulator models that
correction as prefilling a fixed share of the reused tokens (:attr:`PrefixCacheMode.correction`).

The real engine keeps ordinary prefix caching: ``relative`` exists only in the simulator,
to say what such a cache would buy on a workload with insertions (``bench --prefix-cache``).
:class:`~agentconsole.server.runtime.sim.kvstate.EngineKv` is the one place that consumes a
mode (:meth:`PrefixCacheMode.reuse`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentconsole.server.runtime.sim.modes import mode_named

#: The share of a reused suffix a relative-position cache still prefills. CacheSlide reports
#: no such share; this is CacheBlend's selective-recompute ratio (Yao et al., "CacheBlend: Fast
#: Large Language Model Serving for RAG with Cached Knowledge Fusion", arXiv 2405.16444: ~15%
#: of the reused tokens recomputed keeps quality; LMCache's blending defaults to 0.15), the
#: closest published figure for fixing up KV reused at shifted positions.
DEFAULT_CORRECTION = 0.15


@dataclass(frozen=True, slots=True)
class PrefixCacheMode:
    """A prefix-cache behaviour for the suffix after a mid-prompt insertion.

    ``reuses_suffix``: whether the resident suffix's KV is reused at its shifted positions
    (relative) or not at all (ordinary). ``correction``: the share of the reused tokens still
    prefilled to correct them (0 <= correction <= 1).
    """

    name: str
    reuses_suffix: bool
    correction: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.correction <= 1.0:
            raise ValueError(f"correction must be in [0, 1], got {self.correction}")

    def reuse(self, resident_suffix_tokens: int) -> tuple[int, int]:
        """Of a resident suffix of ``resident_suffix_tokens`` after an insertion: the tokens
        reused (not prefilled again) and the correction tokens prefilled in their stead."""
        if not self.reuses_suffix or resident_suffix_tokens <= 0:
            return 0, 0
        return resident_suffix_tokens, math.ceil(self.correction * resident_suffix_tokens)


ORDINARY = PrefixCacheMode("ordinary", reuses_suffix=False)
RELATIVE = PrefixCacheMode("relative", reuses_suffix=True, correction=DEFAULT_CORRECTION)
PREFIX_CACHE_MODES: dict[str, PrefixCacheMode] = {m.name: m for m in (ORDINARY, RELATIVE)}


def get_prefix_cache(name: str) -> PrefixCacheMode:
    """The mode called ``name``; ``ValueError`` naming the choices for an unknown one."""
    return mode_named(PREFIX_CACHE_MODES, name, "prefix cache")

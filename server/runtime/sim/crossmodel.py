"""Cross-model KV: what a call on one model may make of what another model cached.

Every model's engine keeps its own prefix index, so a program whose call moves from model A
to model B prefills on B what A already holds for the same tenant. Whether B could use A's KV
depends on the two models: for the same tokens, a layer's KV is identical only when that layer
and every layer below it have identical weights. ``hardware.shared_kv_layers`` says how many
leading layers two presets share (two fine-tunes of one base that froze their lower layers,
or a fine-tune and its base).

A :class:`CrossModelKv` mode decides what a call does with it (:meth:`CrossModelKv.use`, the
one place a mode is consumed, from ``EngineKv.admit``):

* ``none`` (the default, what engines do): nothing is reused. The prompt tokens beyond the
  call's own prefix hit that another model had cached are counted as *lost cross-model reuse*.
* ``shared-prefill`` (PrefillShare, arXiv 2602.12029, and DroidSpeak, arXiv 2411.02820): the
  tokens a compatible model cached are reused for its first ``L`` of ``N`` layers, copied over
  the engine's host link (``L/N`` of their KV bytes, plus the activations entering layer ``L``
  when ``L < N``, which the recompute starts from), and the other ``N - L`` layers are
  recomputed: a prefill of ``ceil(tokens x (N - L) / N)`` token-equivalents. ``L = N``
  (PrefillShare's shared prefill module) recomputes nothing.

Simulator only: the real engine shares no KV across models (issue 14: not without a test
that outputs are unchanged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentconsole.server.runtime.sim.modes import mode_named


@dataclass(frozen=True, slots=True)
class ForeignKv:
    """What other models held of a call's prompt when it was placed: the longest prefix any
    of them cached (``cached_tokens``) and the longest a compatible one cached
    (``compatible_tokens``), whose first ``shared_layers`` of ``layers`` have identical KV;
    ``activation_layers`` is the size of the activations entering the first recomputed layer,
    in layers of KV (0 when every layer is shared)."""

    cached_tokens: int = 0
    compatible_tokens: int = 0
    shared_layers: int = 0
    layers: int = 1
    activation_layers: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.shared_layers <= self.layers:
            raise ValueError("shared_layers must be in [0, layers]")
        if self.compatible_tokens > self.cached_tokens or self.compatible_tokens < 0:
            raise ValueError("compatible_tokens must be in [0, cached_tokens]")


@dataclass(frozen=True, slots=True)
class CrossModelUse:
    """What a call made of other models' KV at admission: ``reused`` tokens (compatible layers
    copied), ``recompute`` token-equivalents prefilled for their other layers, ``copy``
    token-equivalents of KV moved over the host link, and ``lost`` tokens another model had
    cached that this call prefilled in full."""

    lost: int = 0
    reused: int = 0
    recompute: int = 0
    copy: int = 0


NO_USE = CrossModelUse()


@dataclass(frozen=True, slots=True)
class CrossModelKv:
    """A cross-model KV mode: whether compatible layers are reused (``shares``)."""

    name: str
    shares: bool

    def use(self, foreign: ForeignKv, own_hit: int, misses: int) -> CrossModelUse:
        """Of a call whose own prefix hit is ``own_hit`` tokens with ``misses`` to prefill:
        what it reuses of ``foreign`` and what stays lost (changes nothing). Other models'
        prefixes start at the prompt's start too, so what they add is what lies past
        ``own_hit``, at most the misses."""
        beyond = min(max(foreign.cached_tokens - own_hit, 0), misses)
        if not self.shares or foreign.shared_layers == 0:
            return CrossModelUse(lost=beyond) if beyond else NO_USE
        reused = min(max(foreign.compatible_tokens - own_hit, 0), misses)
        n, shared = foreign.layers, foreign.shared_layers
        recompute = math.ceil(reused * (n - shared) / n)
        copy = math.ceil(reused * (shared + foreign.activation_layers) / n)
        return CrossModelUse(beyond - reused, reused, recompute, copy)


NONE = CrossModelKv("none", shares=False)
SHARED_PREFILL = CrossModelKv("shared-prefill", shares=True)
CROSS_MODEL_MODES: dict[str, CrossModelKv] = {m.name: m for m in (NONE, SHARED_PREFILL)}


def get_cross_model(name: str) -> CrossModelKv:
    """The mode called ``name``; ``ValueError`` naming the choices for an unknown one."""
    return mode_named(CROSS_MODEL_MODES, name, "cross-model KV mode")

"""The compatibility matrix of the served models: for each pair, whether one could use the
other's KV for the same tokens, for how many leading layers, and why, in words.

Two models share the KV of layer ``i`` for the same text only when they read it the same way
(same tokenizer), lay a layer out the same way (same architecture: widths, heads, rope) and
compute the same K/V up to there: identical embeddings, identical weights in layers
``0..i-1`` and identical K/V inputs in layer ``i`` (:mod:`.weights`). ``shared_kv_layers`` is
the longest such prefix; a pair is ``compatible`` when it is at least one layer (a fine-tune
that froze its lower layers and its base, two such fine-tunes, or one model served twice).

This is an analysis only: the engines share no KV across models (:data:`ENABLED` is False;
issue 14: not without a test that the outputs are unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from agentconsole.server.modelcompat.digest import ModelDigest, model_digest

#: cross-model KV sharing in the real engine: off, and stays off until a test shows a
#: model's outputs are unchanged when it reuses another's KV
ENABLED = False
NOTE = (
    "analysis only: the engines share no KV across models; no sharing in the real engine "
    "without a test that the outputs are unchanged"
)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One served model as the matrix read it: its layers, architecture and tokenizer
    digest, or the ``error`` that kept it out (no directory, not a model)."""

    name: str
    directory: str | None
    layers: int = 0
    architecture: dict[str, Any] = field(default_factory=dict)
    tokenizer: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PairCompat:
    """Two served models: ``compatible`` when ``shared_kv_layers`` >= 1, that many of
    ``layers`` leading layers having identical KV for the same tokens; ``reasons`` in words."""

    a: str
    b: str
    compatible: bool
    shared_kv_layers: int
    layers: int
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CompatMatrix:
    """Every served model and every pair of them (in listing order)."""

    models: tuple[ModelInfo, ...]
    pairs: tuple[PairCompat, ...]
    enabled: bool = ENABLED
    note: str = NOTE


def _span(first: int, last: int) -> str:
    return f"layer {first}" if first == last else f"layers {first}-{last}"


def shared_layers(a: ModelDigest, b: ModelDigest) -> tuple[int, int]:
    """(layers wholly identical from the bottom, layers whose KV is identical): the second
    is one more when the first differing layer's K/V inputs are identical. Both 0 when the
    embeddings differ."""
    if a.weights.input != b.weights.input:
        return 0, 0
    whole = 0
    for left, right in zip(a.weights.layers, b.weights.layers, strict=False):
        if left.full != right.full:
            return whole, whole + (left.kv == right.kv)
        whole += 1
    return whole, whole


def _architecture_diff(a: ModelDigest, b: ModelDigest) -> list[str]:
    keys = sorted(set(a.architecture) | set(b.architecture))
    return [
        f"{key} {a.architecture.get(key)} vs {b.architecture.get(key)}"
        for key in keys
        if a.architecture.get(key) != b.architecture.get(key)
    ]


def _weights_reasons(a: ModelDigest, b: ModelDigest, whole: int, kv: int) -> list[str]:
    n = a.layers
    if a.weights.input != b.weights.input:
        return ["the embeddings differ: no layer's KV is identical (another model of this shape)"]
    if kv == n:
        return [f"embeddings and all {n} layers identical: the KV of every layer is identical"]
    if kv == 0:
        return ["layer 0 differs: no layer's KV is identical (a fine-tune of every layer)"]
    reasons = [f"embeddings and {_span(0, whole - 1)} identical"] if whole else []
    if kv > whole:  # the first differing layer still computes the same K/V
        reasons.append(f"layer {whole}'s K/V inputs are identical, its other weights differ")
    reasons.append(
        f"the KV of {_span(0, kv - 1)} is identical for the same tokens; "
        f"{_span(kv, n - 1)} differ (a fine-tune of the upper layers)"
    )
    return reasons


def compare(name_a: str, a: ModelDigest, name_b: str, b: ModelDigest) -> PairCompat:
    """The pair's compatibility from the two digests (changes nothing)."""
    reasons: list[str] = []
    arch = _architecture_diff(a, b)
    if arch:
        reasons.append(f"different architecture: {'; '.join(arch)}")
    if a.tokenizer is None or b.tokenizer is None:
        reasons.append("a tokenizer is missing: the same text's token ids are unknown")
    elif a.tokenizer != b.tokenizer:
        reasons.append("different tokenizer: the same text becomes other token ids")
    layers = min(a.layers, b.layers)
    if reasons:
        reasons.append("no layer's KV can be shared")
        return PairCompat(name_a, name_b, False, 0, layers, tuple(reasons))
    whole, kv = shared_layers(a, b)
    reasons = ["same architecture and tokenizer", *_weights_reasons(a, b, whole, kv)]
    return PairCompat(name_a, name_b, kv > 0, kv, layers, tuple(reasons))


def _info(name: str, directory: str | Path | None) -> tuple[ModelInfo, ModelDigest | None]:
    if directory is None:
        return ModelInfo(name, None, error="no model directory (the runtime's default)"), None
    if not Path(directory).is_dir():
        error = f"{str(directory)!r} is not a model directory (a simulator preset?)"
        return ModelInfo(name, str(directory), error=error), None
    try:
        digest = model_digest(Path(directory))
    except (OSError, ValueError) as failure:
        return ModelInfo(name, str(directory), error=str(failure)), None
    info = ModelInfo(
        name, str(digest.directory), digest.layers, digest.architecture, digest.tokenizer
    )
    return info, digest


def compatibility_matrix(sources: Sequence[tuple[str, str | Path | None]]) -> CompatMatrix:
    """The matrix of the served models given as (name, model directory) pairs: each model
    read (digests cached by the directory's fingerprint) and every pair compared. A model
    that cannot be read is listed with its error, and its pairs are incompatible."""
    read = [_info(name, directory) for name, directory in sources]
    pairs = []
    for (left, a), (right, b) in combinations(read, 2):
        if a is None or b is None:
            why = tuple(f"{m.name}: {m.error}" for m in (left, right) if m.error)
            pairs.append(PairCompat(left.name, right.name, False, 0, 0, why))
        else:
            pairs.append(compare(left.name, a, right.name, b))
    return CompatMatrix(tuple(info for info, _ in read), tuple(pairs))

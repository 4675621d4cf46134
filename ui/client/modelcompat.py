"""The consoles' view of ``GET /v1/models/compatibility``: which served models could share
KV for the same tokens (leading layers with identical weights), and why; sharing itself is
off (``enabled`` false)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentconsole.httpclient import jsonread as j


@dataclass(frozen=True, slots=True)
class CompatModel:
    """One served model as the matrix read it (``error``: why it could not be)."""

    name: str
    layers: int
    directory: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class CompatPair:
    """Two served models: ``shared_kv_layers`` of ``layers`` have identical KV."""

    a: str
    b: str
    compatible: bool
    shared_kv_layers: int
    layers: int
    reasons: tuple[str, ...]

    @property
    def verdict(self) -> str:
        """``compatible: 2 of 4 layers`` or ``incompatible``."""
        if not self.compatible:
            return "incompatible"
        return f"compatible: {self.shared_kv_layers} of {self.layers} layers"


@dataclass(frozen=True, slots=True)
class ModelCompat:
    """The matrix: the models, each pair, and whether engines share KV (never, today)."""

    enabled: bool
    note: str
    models: tuple[CompatModel, ...]
    pairs: tuple[CompatPair, ...]

    @staticmethod
    def parse(data: Any) -> ModelCompat:
        """Parse the answer object."""
        d = j.obj(data)
        models = tuple(
            CompatModel(
                j.text(m, "name"),
                j.integer(m, "layers"),
                j.opt_text(m, "directory"),
                j.opt_text(m, "error"),
            )
            for m in j.objects(d.get("models"))
        )
        pairs = tuple(
            CompatPair(
                j.text(p, "a"),
                j.text(p, "b"),
                j.flag(p, "compatible"),
                j.integer(p, "shared_kv_layers"),
                j.integer(p, "layers"),
                j.strings(p.get("reasons")),
            )
            for p in j.objects(d.get("pairs"))
        )
        return ModelCompat(j.flag(d, "enabled"), j.text(d, "note"), models, pairs)

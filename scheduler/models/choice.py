"""The values model selection reads and returns: a candidate, a request, a choice."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ModelOption:
    """One candidate model for one call, as its engine stands now.

    ``tier`` is the model's quality tier (higher is better); ``price_per_mtok`` its price per
    million tokens; ``queue_s`` and ``service_s`` the predicted wait and run time of this call
    on its engine (``service_s`` already counts the ``cached_tokens`` it would not prefill);
    ``load_s`` is paid before anything when the model is not ``loaded``; ``tokens`` is what the
    call would bill (prompt plus expected output).
    """

    name: str
    tier: int
    price_per_mtok: float = 0.0
    loaded: bool = True
    load_s: float = 0.0
    queue_s: float = 0.0
    service_s: float = 0.0
    cached_tokens: int = 0
    tokens: int = 0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a model option needs a name")
        values = (self.price_per_mtok, self.load_s, self.queue_s, self.service_s)
        if min(values) < 0 or self.cached_tokens < 0 or self.tokens < 0:
            raise ValueError(f"{self.name}: prices, seconds and tokens must be non-negative")

    @property
    def finish_s(self) -> float:
        """Predicted seconds until the call's answer: cold start, queue, service."""
        return (0.0 if self.loaded else self.load_s) + self.queue_s + self.service_s

    @property
    def price(self) -> float:
        """What this call would cost on the model, in the price's currency."""
        return self.price_per_mtok * self.tokens / 1e6


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Who asks: the program, the node's role (``None`` when unmarked) and the least quality
    tier the node or its role accepts."""

    program_id: str
    role: str | None = None
    min_tier: int = 0


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The model chosen for a call and why: ``reason`` names the pin or the rule and its
    deciding figure; the per-candidate figures are those of every option considered, and
    ``excluded`` says why a candidate could not be chosen."""

    chosen: str
    reason: str
    finish_s: dict[str, float] = field(default_factory=dict)
    price: dict[str, float] = field(default_factory=dict)
    cached_tokens: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)

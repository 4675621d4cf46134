"""What ``serve`` says about each model it runs, and what intake reads of several of them.

:class:`ServedModel` is one entry of the settings' ``models`` list as plain values: what the
selector and the API read (name, tier, price, roles, cold start) and what a runtime needs to
start its engine (source, tokenizer, memory share, devices, engine options). :class:`ModelFleet`
is what a runtime that serves several models shows the server beyond the ``Runtime`` protocol:
its models, and each model's own runtime (to render a prompt in that model's format and probe
that model's cache). Plain data and a protocol; no engine import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentconsole.scheduler.runtime import Runtime


@dataclass(frozen=True, slots=True)
class ServedModel:
    """One served model. ``name`` is what requests and responses call it; ``source`` the model
    directory (SGLang) or preset (sim), None for the runtime's default; ``tier`` its quality
    (higher is better); ``roles`` the node roles it is meant for (the ``fixed-roles`` rule's
    map); ``load_s`` its cold start, charged by the selector while it is not loaded."""

    name: str
    source: str | None = None
    tier: int = 1
    roles: tuple[str, ...] = ()
    price_per_mtok: float = 0.0
    load_s: float = 0.0
    #: a tokenizer other than the model's own (a directory or hub id); None: the model's
    tokenizer: str | None = None
    #: share of the device's memory the model's engine takes (SGLang ``mem_fraction_static``)
    memory_share: float | None = None
    #: the device ids the model's engine runs on (SGLang: the first is ``base_gpu_id``)
    devices: tuple[int, ...] = ()
    #: tensor-parallel degree (None: ``len(devices)``, else the runtime's)
    tp: int | None = None
    #: the KV pool in tokens (None: the runtime's default)
    max_total_tokens: int | None = None
    #: runtime-specific options for this model's engine, over the runtime's own
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or self.name == "auto":
            raise ValueError(f"a served model needs a name other than 'auto' (got {self.name!r})")
        if self.price_per_mtok < 0 or self.load_s < 0:
            raise ValueError(f"{self.name}: price and load time must be non-negative")
        if self.memory_share is not None and not 0 < self.memory_share <= 1:
            raise ValueError(f"{self.name}: memory_share must be in (0, 1]")


def role_map(models: Sequence[ServedModel]) -> dict[str, str]:
    """Role -> the first model listing it (what ``fixed-roles`` maps)."""
    out: dict[str, str] = {}
    for model in models:
        for role in model.roles:
            out.setdefault(role, model.name)
    return out


@runtime_checkable
class ModelFleet(Protocol):
    """A runtime over several named models (``server/runtime/fleet``): its ``submit`` runs a
    request on ``request.model``; these say what it serves and give each model's runtime."""

    def served_models(self) -> Sequence[ServedModel]:
        """The models, the default (a request naming none) first."""
        ...

    def member(self, name: str) -> Runtime:
        """The runtime of model ``name`` (``KeyError`` if it is not served)."""
        ...

    def loaded(self, name: str) -> bool:
        """Whether model ``name`` is loaded and answering (else it pays its ``load_s``)."""
        ...

"""Tiny local models for the compatibility matrix's tests, made once in the user's cache
(``make_tiny_model`` and ``derive_variant`` write nothing when their marker is there), and
the extension that makes a test server serve them (``model_sources``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from litestar.di import Provide
from litestar.types import ControllerRouterHandler

from agentconsole.server.api.deps import Live

ROOT = Path.home() / ".cache" / "agentconsole" / "compat-models"
#: the variant keeps the large model's embeddings and this many leading layers
KEPT = 2


def compat_models(root: Path = ROOT) -> dict[str, Path]:
    """``large`` (4 layers, hidden 64), ``small`` (2 layers, hidden 32, another seed),
    ``variant`` (``large`` with layers 2-3, the final norm and the head re-randomised) and
    ``llama3`` (``large``'s weights, another tokenizer)."""
    pytest.importorskip("transformers")
    from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model
    from agentconsole.server.runtime.sglang.tiny_variants import derive_variant

    large = make_tiny_model(root / "large", seed=0, layers=4, hidden=64)
    return {
        "large": large,
        "small": make_tiny_model(root / "small", seed=1, layers=2, hidden=32),
        "variant": derive_variant(large, root / "variant", keep_layers=KEPT, seed=7),
        "llama3": make_tiny_model(root / "llama3", seed=0, layers=4, chat_style="llama3"),
    }


class ServedDirs:
    """An extension that only provides ``model_sources``: the served (name, directory)."""

    route_handlers: Sequence[ControllerRouterHandler] = ()

    def __init__(self, sources: Sequence[tuple[str, str | None]]) -> None:
        self.sources = sources

    def dependencies(self) -> Mapping[str, Provide]:
        return {"model_sources": Provide(lambda: self.sources, sync_to_thread=False)}

    async def start(self, live: Live) -> None:
        return None

    def shut_down(self) -> None:
        """Nothing in flight: it only provides a dependency."""

    async def stop(self) -> None:
        return None

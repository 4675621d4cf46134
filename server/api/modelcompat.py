"""``GET /v1/models/compatibility`` (any key): which served models could share KV, and why.

For each pair of served models, computed from their directories (``server/modelcompat``):
``compatible``, ``shared_kv_layers`` of ``layers`` (the leading layers whose KV is identical
for the same tokens) and the ``reasons`` in words. ``enabled`` is always false: no engine shares
KV across models (not without a test that the outputs are unchanged). The first request reads
each model's weights (in a worker thread); later ones answer from the cache until a model's
files change.

Which models: the ``model_sources`` dependency, (name, directory) pairs. Unless an app-level
provider is registered, :func:`configured_sources` reads the server's settings (``models``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import SkipValidation
from pydantic import BaseModel

from agentconsole.server.api.config import ServerConfig
from agentconsole.server.api.contract import contract
from agentconsole.server.api.deps import LiveDep, PrincipalDep
from agentconsole.server.modelcompat import CompatMatrix, compatibility_matrix

ModelSources = Sequence[tuple[str, str | None]]
#: the one thread that reads model directories for the matrix (requests queue behind it)
_DIGESTS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-digest")
SourcesDep = NamedDependency[SkipValidation[ModelSources | None]]


class CompatModelOut(BaseModel):
    """A served model as the matrix read it (``error``: why it could not be)."""

    name: str
    directory: str | None
    layers: int
    architecture: dict[str, Any]
    tokenizer: str | None
    error: str | None


class CompatPairOut(BaseModel):
    """Two served models: the leading layers whose KV is identical for the same tokens."""

    a: str
    b: str
    compatible: bool
    shared_kv_layers: int
    layers: int
    reasons: list[str]


class CompatibilityOut(BaseModel):
    """The matrix; ``enabled`` (cross-model KV sharing in the engines) is always false."""

    enabled: bool
    note: str
    models: list[CompatModelOut]
    pairs: list[CompatPairOut]


def configured_sources(config: ServerConfig) -> list[tuple[str, str | None]]:
    """The served models as (name, directory) pairs: the settings' ``models`` (else the one
    ``model``); a source is a directory on SGLang, a preset on the simulator (which the matrix
    lists with its error), None for the runtime's default model."""
    return [(model.name, model.source) for model in config.served_models()]


def matrix_json(matrix: CompatMatrix, *, directories: bool = True) -> CompatibilityOut:
    """The matrix at the HTTP edge; ``directories`` False: each model's ``directory`` null."""
    models = [CompatModelOut(**asdict(model)) for model in matrix.models]
    if not directories:
        models = [model.model_copy(update={"directory": None}) for model in models]
    return CompatibilityOut(
        enabled=matrix.enabled,
        note=matrix.note,
        models=models,
        pairs=[
            CompatPairOut(**{**asdict(pair), "reasons": list(pair.reasons)})
            for pair in matrix.pairs
        ],
    )


class ModelCompatController(Controller):
    path = "/v1/models/compatibility"
    tags = ("models",)

    @get("/", summary="Which served models could share KV", opt=contract())
    async def compatibility(
        self, live: LiveDep, principal: PrincipalDep, model_sources: SourcesDep = None
    ) -> CompatibilityOut:
        """Every served model and every pair: ``compatible``, ``shared_kv_layers`` of
        ``layers``, ``reasons``; ``enabled: false`` (no engine shares KV across models)."""
        sources = configured_sources(live.config) if model_sources is None else model_sources
        # reading weights is file I/O (seconds per GB the first time): off the event loop, on
        # a thread of its own (the default executor's threads serve the store's reads)
        matrix = await asyncio.get_running_loop().run_in_executor(
            _DIGESTS, compatibility_matrix, list(sources)
        )
        # any valid key may read it; where the weights lie on disk is the operator's to know
        return matrix_json(matrix, directories=principal.operator)

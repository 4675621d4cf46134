"""Starting one engine per served model: each model's ``RuntimeOptions`` from the runtime's
and its ``ServedModel`` entry, then a :class:`FleetRuntime` over them (one model: its runtime
alone, exactly as before).

Per model: its ``source`` (model directory or sim preset), KV pool, tensor-parallel size
(``len(devices)``), and runtime options over the shared ones. Engines in this process (SGLang's:
``RuntimeSpec.engine_in_process``) also get their own state folder and engine log (the plugin's
files and SGLang's output must not mix), the tokenizer, the memory share
(``mem_fraction_static``) and first device (``base_gpu_id``) as ``Engine`` arguments. Each
engine's ``engine.stats`` events are labelled with its model (the metrics count GPU-busy
seconds per engine and per model), and the engine's own name is kept under the model's
(``<model>/<engine>``): the reports of a model's data-parallel ranks must stay apart, since the
metrics keep the latest report of each engine name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentconsole.scheduler.events import Event, EventKind, EventSink
from agentconsole.scheduler.models.served import ServedModel
from agentconsole.scheduler.runtime import Runtime
from agentconsole.server.runtime.fleet.runtime import FleetRuntime
from agentconsole.server.runtime.registry import RuntimeOptions, create_runtime, runtime_spec

Factory = Callable[[str, RuntimeOptions], Runtime]


class ModelSink:
    """An engine's event sink: ``engine.stats`` labelled with the engine's model."""

    def __init__(self, sink: EventSink, model: str) -> None:
        self.sink = sink
        self.model = model

    def emit(self, event: Event) -> None:
        """Pass ``event`` on; an ``engine.stats`` one (a copy) gets ``model`` and its engine
        name prefixed with the model (two models' engines may share a name, as ``sglang``)."""
        if event.kind is EventKind.ENGINE_STATS:
            data = {**event.data, "engine": self._engine_name(event), "model": self.model}
            event = dataclasses.replace(event, data=data)
        self.sink.emit(event)

    def _engine_name(self, event: Event) -> str:
        """``<model>/<engine>``; the model alone when the engine gave no name."""
        own = str(event.data.get("engine") or "")
        return f"{self.model}/{own}" if own else self.model


def member_options(
    kind: str, base: RuntimeOptions, model: ServedModel, *, alone: bool = False
) -> RuntimeOptions:
    """The options of ``model``'s engine under runtime ``kind``: the shared ``base`` with the
    model's own source, pool, devices and options over them. ``alone``: the only model (its
    files and events stay as a one-model runtime's)."""
    extra: dict[str, Any] = {**base.extra, **model.extra}
    sink = extra.get("event_sink")
    if sink is not None and not alone:
        extra["event_sink"] = ModelSink(sink, model.name)
    if runtime_spec(kind).engine_in_process:
        extra.update(_engine_extra(base.extra, model, alone))
    return dataclasses.replace(
        base,
        model=model.source or base.model,
        tp=model.tp or len(model.devices) or base.tp,
        max_total_tokens=model.max_total_tokens or base.max_total_tokens,
        gpu=str(model.extra.get("gpu", base.gpu)),
        extra=extra,
    )


def _engine_extra(shared: dict[str, Any], model: ServedModel, alone: bool) -> dict[str, Any]:
    """An engine in this process: a state folder and engine log of its own, and the model's
    ``Engine`` arguments."""
    out: dict[str, Any] = {}
    engine_args = {**shared.get("engine_args", {}), **model.extra.get("engine_args", {})}
    if model.tokenizer:
        engine_args["tokenizer_path"] = model.tokenizer
    if model.memory_share is not None:
        engine_args["mem_fraction_static"] = model.memory_share
    if model.devices:
        engine_args["base_gpu_id"] = model.devices[0]
    out["engine_args"] = engine_args
    if alone:
        return out
    if shared.get("engine_log"):
        log = Path(str(shared["engine_log"]))
        out["engine_log"] = str(log.with_name(f"{log.stem}.{model.name}{log.suffix}"))
    if shared.get("state_dir"):
        out["state_dir"] = str(Path(str(shared["state_dir"])) / model.name)
    return out


def build_runtime(
    kind: str,
    base: RuntimeOptions,
    models: Sequence[ServedModel],
    factory: Factory = create_runtime,
) -> Runtime:
    """The runtime of ``kind`` serving ``models``: with none or one, the plain runtime (its
    source as the model); with several, a fleet of one engine each. Nothing is started."""
    if len(models) <= 1:
        options = base if not models else member_options(kind, base, models[0], alone=True)
        return factory(kind, options)
    members = {m.name: factory(kind, member_options(kind, base, m)) for m in models}
    return FleetRuntime(models, members)

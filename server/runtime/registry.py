"""Runtimes by name: ``serve --runtime sim|sglang|sglang-router``; the CLI's choices and the
settings' check of ``runtime.name`` both come from :func:`available_runtimes`.

This is the one place that knows runtimes by name: what the wiring needs to know of one before
it is built (serve's banner and start-up checks, the fleet's per-engine options, the what-if's
hardware) is its :class:`RuntimeSpec`'s capabilities (:func:`runtime_spec`), never its name.

Factories (and model checks) are imported lazily, so choosing the simulated runtime never
imports torch or SGLang.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentconsole.kvtiers.toolwait import DEFAULT_TOOL_WAIT_POLICY
from agentconsole.scheduler.policies import DEFAULT_POLICY
from agentconsole.scheduler.runtime import Runtime


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """What a runtime factory may need; unknown knobs go in ``extra``."""

    model: str | None = None  # a model directory (SGLang) or a model preset name (sim)
    policy: str = DEFAULT_POLICY
    kv_policy: str = DEFAULT_TOOL_WAIT_POLICY
    gpu: str = "H200-141GB"  # sim: GPU preset
    tp: int = 1
    profile: str | None = None  # sim: calibration profile file or bundled name
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RuntimeSpec:
    """A registered runtime: how to build it and what it is, known before it is built."""

    #: "module:factory", the factory taking RuntimeOptions and returning a Runtime
    factory: str
    #: a simulated engine: its model is a preset simulated on a GPU preset (``gpu``, ``tp``,
    #: ``profile``), and the what-if benches that same hardware
    simulated: bool = False
    #: an SGLang ``Engine`` in this process: its own output goes to an engine log file, and
    #: each served model's engine takes ``Engine`` arguments and a state folder of its own
    engine_in_process: bool = False
    #: what it serves when no model is given, as the banner says it
    default_model: str = "the runtime's default"
    #: "module:function" taking the runtime's ``extra`` options and returning why, with no
    #: model given, it would have none to serve (None: it has a default); None: never missing
    model_check: str | None = None
    #: it runs several data-parallel ranks when asked (``runtime.dp``)
    data_parallel: bool = False
    #: it serves through workers behind a router (``runtime.workers``, ``runtime.router``)
    routed_workers: bool = False

    def missing_model(self, extra: Mapping[str, Any]) -> str | None:
        """Why this runtime, with ``extra`` options and no model given, would have no model to
        serve, else None. May import the runtime's own packages (ImportError if absent)."""
        if self.model_check is None:
            return None
        check = _load(self.model_check)
        missing: str | None = check(extra)
        return missing


#: name -> what that runtime is (the only place that knows runtimes by name)
_RUNTIMES: dict[str, RuntimeSpec] = {
    "sim": RuntimeSpec("agentconsole.server.runtime.sim.live:create_runtime", simulated=True),
    "sglang": RuntimeSpec(
        "agentconsole.server.runtime.sglang.adapter:create_runtime",
        engine_in_process=True,
        default_model="the tiny CPU model",
        model_check="agentconsole.server.runtime.sglang.factory:missing_model",
        data_parallel=True,
    ),
    # several SGLang servers behind sglang-router (docs/DEPLOY.md)
    "sglang-router": RuntimeSpec(
        "agentconsole.server.runtime.sglang.cluster.runtime:create_runtime",
        default_model="the workers' own",
        routed_workers=True,
    ),
}


def available_runtimes() -> list[str]:
    """The registered runtime names, in registration order."""
    return list(_RUNTIMES)


def runtime_spec(name: str) -> RuntimeSpec:
    """What the runtime registered as ``name`` is (KeyError naming the choices if none is)."""
    try:
        return _RUNTIMES[name]
    except KeyError:
        raise KeyError(f"unknown runtime {name!r}; choose from {', '.join(_RUNTIMES)}") from None


def create_runtime(name: str, options: RuntimeOptions) -> Runtime:
    """Build the runtime registered as ``name`` (not started yet)."""
    factory = _load(runtime_spec(name).factory)
    runtime: Runtime = factory(options)
    return runtime


def _load(target: str) -> Any:
    """The object a "module:attribute" target names (the module imported now)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)

"""Runtimes by name: ``serve --runtime sim|sglang|sglang-router``; the CLI's choices and the
settings' check of ``runtime.name`` both come from :func:`available_runtimes`.

Factories are imported lazily, so choosing the simulated runtime never imports torch or SGLang.
"""

from __future__ import annotations

import importlib
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


#: name -> "module:factory", the factory taking RuntimeOptions and returning a Runtime
_FACTORIES: dict[str, str] = {
    "sim": "agentconsole.server.runtime.sim.live:create_runtime",
    "sglang": "agentconsole.server.runtime.sglang.adapter:create_runtime",
    # several SGLang servers behind sglang-router (docs/DEPLOY.md)
    "sglang-router": "agentconsole.server.runtime.sglang.cluster.runtime:create_runtime",
}


def available_runtimes() -> list[str]:
    """The registered runtime names, in registration order."""
    return list(_FACTORIES)


def create_runtime(name: str, options: RuntimeOptions) -> Runtime:
    """Build the runtime registered as ``name`` (not started yet)."""
    try:
        target = _FACTORIES[name]
    except KeyError:
        raise KeyError(f"unknown runtime {name!r}; choose from {', '.join(_FACTORIES)}") from None
    module, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    runtime: Runtime = factory(options)
    return runtime

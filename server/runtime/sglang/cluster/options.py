"""What the ``sglang-router`` runtime is built from: ``RuntimeOptions`` read into the router's
and workers' URLs, the engine settings (the local tokenizer folder) and the initial control
state."""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sglang.control import ControlState
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.factory import settings_from_options


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    router_url: str
    worker_urls: tuple[str, ...]
    #: the model name sent in each request (the router forwards it; SGLang ignores it)
    served_model: str = "default"
    #: seconds ``start`` waits for the router and every worker's plugin
    ready_timeout_s: float = 120.0


def _urls(value: object) -> tuple[str, ...]:
    items: list[object] = []
    if isinstance(value, str):
        items = list(value.split(","))
    elif isinstance(value, list | tuple):
        items = list(value)
    return tuple(str(u).strip() for u in items if str(u).strip())


def cluster_from_options(
    options: RuntimeOptions,
) -> tuple[EngineSettings, ClusterSettings, ControlState]:
    """``extra["router"]`` (URL), ``extra["workers"]`` (URLs: a list, or comma-separated),
    optional ``extra["served_model"]``, ``fairness``, ``preemption``, ``deferral``,
    ``tool_call_parser``;
    ``model``: the local folder of the model's tokenizer and chat template (default: the tiny
    CPU model, made once)."""
    extra = options.extra
    router, workers = str(extra.get("router") or ""), _urls(extra.get("workers"))
    if not router or not workers:
        raise ValueError("the sglang-router runtime needs extra['router'] and extra['workers']")
    control = ControlState.from_options(extra)
    served = str(extra.get("served_model") or "default")
    cluster = ClusterSettings(router.rstrip("/"), workers, served)
    # the tokenizer only: no engine runs here, so no device is probed
    local = RuntimeOptions(model=options.model, extra={**extra, "device": "cpu", "dp": 1})
    return settings_from_options(local), cluster, control

"""Building the SGLang runtime's engine settings from ``RuntimeOptions``.

A CUDA GPU when torch sees one, else the CPU engine; with no model on a CPU machine, the tiny
model (made once, in a cache folder). On a GPU there is no default model: the tiny one is made
for the CPU engine (float32, 16-wide attention heads), and which real model a GPU serves is the
operator's choice (``ModelRequired`` says how to give it).

Recognised ``RuntimeOptions.extra`` keys: ``device``, ``plugin`` (False: stock SGLang),
``schedule_policy`` (stock policy), ``enable_metrics``, ``cpu_threads``, ``dp`` (SGLang
data-parallel ranks), ``hicache_size_gb`` (GPU: a HiCache host KV tier), ``engine_args`` (extra
``Engine`` keyword arguments), ``model_cache_dir``, ``state_dir``, ``fairness`` and
``preemption`` (the plugin's settings), ``tool_call_parser`` (SGLang's parser name) and
``engine_log`` (a file for SGLang's own output).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sglang.engine_config import EngineSettings


def default_model_dir(options: RuntimeOptions) -> Path:
    """Where the tiny CPU model lives: ``extra["model_cache_dir"]``, else
    ``$AGENTCONSOLE_MODEL_CACHE``, else ``~/.cache/agentconsole/tiny-llama``."""
    explicit = options.extra.get("model_cache_dir") or os.environ.get("AGENTCONSOLE_MODEL_CACHE")
    if explicit:
        return Path(str(explicit))
    return Path.home() / ".cache" / "agentconsole" / "tiny-llama"


class ModelRequired(ValueError):
    """The SGLang runtime on a GPU was given no model (there is no default there)."""


#: what is missing when the SGLang runtime on a GPU has no model, and where to give one
GPU_MODEL_REQUIRED = (
    "the SGLang runtime on a GPU needs a model (the tiny default model is for the CPU engine):"
    " give a model directory or Hugging Face id with `serve --model PATH`"
    " (AGENTCONSOLE_RUNTIME__MODEL, runtime.model in --config; a `models` entry's path)"
)


def engine_device(extra: Mapping[str, Any]) -> str:
    """The device an engine with ``extra`` options runs on: ``extra["device"]``, else
    ``cuda`` when torch sees a GPU, else ``cpu`` (imports torch)."""
    return str(extra.get("device") or _default_device())


def missing_model(extra: Mapping[str, Any]) -> str | None:
    """Why an engine with ``extra`` options and no model given would have none to load
    (:data:`GPU_MODEL_REQUIRED` on a GPU), else None (the CPU engine's tiny model). Imports
    torch. The registry's ``model_check`` for SGLang: ``serve`` asks it before starting."""
    return None if engine_device(extra) == "cpu" else GPU_MODEL_REQUIRED


def settings_from_options(options: RuntimeOptions) -> EngineSettings:
    """Engine settings for ``options``: a CUDA GPU when torch sees one, else the CPU engine;
    with no model on a CPU machine, the tiny model (made once, in the cache folder); with none
    on a GPU, :class:`ModelRequired`."""
    extra = options.extra
    device = engine_device(extra)
    if options.model:
        model = Path(options.model)
    elif (missing := missing_model(extra)) is not None:
        raise ModelRequired(missing)
    else:
        from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

        model = make_tiny_model(default_model_dir(options))
    return EngineSettings(
        model_path=model,
        device=device,
        plugin=bool(extra.get("plugin", True)),
        schedule_policy=str(extra.get("schedule_policy", "fcfs")),
        max_total_tokens=options.max_total_tokens,
        max_running_requests=options.max_running_requests,
        tp=options.tp,
        dp=int(extra.get("dp") or 1),
        enable_metrics=bool(extra.get("enable_metrics", True)),
        cpu_threads=int(extra["cpu_threads"]) if extra.get("cpu_threads") else None,
        hicache_size_gb=int(extra["hicache_size_gb"]) if extra.get("hicache_size_gb") else None,
        overrides=dict(extra.get("engine_args", {})),
        tool_call_parser=str(extra["tool_call_parser"]) if extra.get("tool_call_parser") else None,
        log_file=Path(str(extra["engine_log"])) if extra.get("engine_log") else None,
    )


def _default_device() -> str:
    torch = importlib.import_module("torch")
    return "cuda" if torch.cuda.is_available() else "cpu"

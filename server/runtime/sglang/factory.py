"""Building the SGLang runtime's engine settings from ``RuntimeOptions``.

A CUDA GPU when torch sees one, else the CPU engine; with no model on a CPU machine, the tiny
model (made once, in a cache folder). Recognised ``RuntimeOptions.extra`` keys: ``device``,
``plugin`` (False: stock SGLang), ``schedule_policy`` (stock policy), ``enable_metrics``,
``cpu_threads``, ``dp`` (SGLang data-parallel ranks), ``hicache_size_gb`` (GPU: a HiCache host
KV tier), ``engine_args`` (extra ``Engine`` keyword arguments), ``model_cache_dir``,
``state_dir``, ``fairness`` and ``preemption`` (the plugin's settings), ``tool_call_parser``
(SGLang's parser name) and ``engine_log`` (a file for SGLang's own output).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sglang.engine_config import EngineSettings


def default_model_dir(options: RuntimeOptions) -> Path:
    """Where the tiny CPU model lives: ``extra["model_cache_dir"]``, else
    ``$AGENTCONSOLE_MODEL_CACHE``, else ``~/.cache/agentconsole/tiny-llama``."""
    explicit = options.extra.get("model_cache_dir") or os.environ.get("AGENTCONSOLE_MODEL_CACHE")
    if explicit:
        return Path(str(explicit))
    return Path.home() / ".cache" / "agentconsole" / "tiny-llama"


def settings_from_options(options: RuntimeOptions) -> EngineSettings:
    """Engine settings for ``options``: a CUDA GPU when torch sees one, else the CPU engine;
    with no model on a CPU machine, the tiny model (made once, in the cache folder)."""
    extra = options.extra
    device = str(extra.get("device") or _default_device())
    if options.model:
        model = Path(options.model)
    elif device == "cpu":
        from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model

        model = make_tiny_model(default_model_dir(options))
    else:
        raise ValueError("the SGLang runtime on a GPU needs a model (RuntimeOptions.model)")
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

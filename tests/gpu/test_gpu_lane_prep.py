"""What the GPU lane prepares, checked on any machine: the dummy-weight model folder loads,
its tokenizer fits the 8B vocabulary, and SGLang knows every engine argument it passes."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.sglang
ROOT = Path(__file__).resolve().parents[2]


def _lane() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_lane", ROOT / "benchmarks" / "gpu_lane.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_model_folder_is_llama_8b_with_a_local_tokenizer(tmp_path: Path) -> None:
    lane = _lane()
    transformers: Any = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = lane.write_model_dir(tmp_path / "model")
    config = transformers.AutoConfig.from_pretrained(str(folder))
    assert config.hidden_size == 4096
    assert config.num_hidden_layers == 32
    assert config.num_key_value_heads == 8
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    ids = tok.encode("program-aware serving for agents", add_special_tokens=False)
    assert ids
    assert max(ids) < config.vocab_size
    assert config.eos_token_id < config.vocab_size
    assert not list(folder.glob("*.safetensors"))  # no weights: --load-format dummy


def test_engine_arguments_are_known_to_sglang(tmp_path: Path) -> None:
    from agentconsole.server.runtime.sglang.engine_config import engine_kwargs
    from agentconsole.server.runtime.sglang.symbols import load

    lane = _lane()
    fields = set(load("sglang.srt.server_args:ServerArgs").__struct_fields__)
    args = lane.parse_args(["--out", str(tmp_path)])
    for plugin, policy in ((True, "fcfs"), (False, "lpm")):
        kwargs = engine_kwargs(lane.settings(tmp_path, plugin, policy, args))
        assert set(kwargs) <= fields, set(kwargs) - fields
    workload = lane.scaled_workload(
        "seed-mix",
        8,
        2.0,
        0,
        token_factor=lane.TOKEN_FACTOR,
        time_factor=lane.TIME_FACTOR,
        max_context=lane.MAX_CONTEXT,
    )
    assert workload

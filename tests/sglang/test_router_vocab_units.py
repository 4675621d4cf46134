"""The ``sglang-router`` runtime knows its served model's vocabulary, as the in-process engine
does: read from the local model folder's config at start, so the intake refuses a
``logit_bias`` id past it (422) before anything runs. No SGLang process; the router and
workers are stubs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from transformers import LlamaConfig

from agentconsole.server.live.chatformat import ChatMLFormat
from agentconsole.server.live.errors import InvalidRequest
from agentconsole.server.live.intake import check_logit_bias
from agentconsole.server.runtime.sglang import symbols
from agentconsole.server.runtime.sglang.cluster import runtime as cluster_runtime
from agentconsole.server.runtime.sglang.cluster.options import ClusterSettings
from agentconsole.server.runtime.sglang.cluster.runtime import RouterRuntime, model_vocab_size
from agentconsole.server.runtime.sglang.engine_config import EngineSettings

VOCAB = 321


def _model(folder: Path) -> Path:
    LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, num_attention_heads=2, num_hidden_layers=1
    ).save_pretrained(folder)
    return folder


def test_the_vocabulary_is_the_model_configs(tmp_path: Path) -> None:
    assert model_vocab_size(_model(tmp_path / "m")) == VOCAB
    (tmp_path / "tokenizer-only").mkdir()
    assert model_vocab_size(tmp_path / "tokenizer-only") is None  # no config: no check


async def _true(*_: Any) -> bool:
    return True


async def _context() -> int:
    return 2048


def test_a_started_router_runtime_refuses_a_logit_bias_past_the_vocabulary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = EngineSettings(model_path=_model(tmp_path / "m"))
    rt = RouterRuntime(settings, ClusterSettings("http://router", ("http://w0",)))
    assert rt.vocab_size is None  # not started: unknown
    # the router, the workers and the tokenizer are stubs: start reads the config only
    monkeypatch.setattr(symbols, "load", lambda _: lambda path: object())
    monkeypatch.setattr(cluster_runtime, "build_format", lambda *_: ChatMLFormat())
    monkeypatch.setattr(cluster_runtime, "_answers", _true)
    monkeypatch.setattr(rt, "_all_reported", lambda: True)
    monkeypatch.setattr(rt.workers, "start", lambda: None)
    monkeypatch.setattr(rt.workers, "push", lambda state: None)
    monkeypatch.setattr(rt.workers, "context_length", _context)

    async def go() -> None:
        await rt.start()
        try:
            assert rt.vocab_size == VOCAB
            check_logit_bias({VOCAB - 1: 5.0}, rt.vocab_size)  # the last id passes
            with pytest.raises(InvalidRequest) as refused:
                check_logit_bias({VOCAB: 5.0}, rt.vocab_size)
            assert refused.value.status == 422
            assert refused.value.field == f"logit_bias.{VOCAB}"
        finally:
            await rt.stop()

    asyncio.run(go())

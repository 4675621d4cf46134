"""``reasoning_effort`` over real HTTP with the official client, on both lanes: one of OpenAI's
levels (or null) reaches the served model's chat format as ``render``'s keyword (the SGLang
runtime hands it to the model's template, as SGLang's own server does:
``tests/sglang/test_reasoning_effort_template.py``); anything else is a 400 naming the field,
and nothing runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from agentconsole.scheduler.runtime import Prompt
from agentconsole.server.live.chatformat import ChatMLFormat
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from tests.server.api.harness import LiveServer, make_config


class RecordingFormat(ChatMLFormat):
    """The simulator's ChatML, recording the ``reasoning_effort`` of every render."""

    def __init__(self) -> None:
        super().__init__()
        self.efforts: list[str | None] = []

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: object,
        *,
        reasoning_effort: str | None = None,
    ) -> Prompt:
        self.efforts.append(reasoning_effort)
        return super().render(messages, tools, tool_choice, reasoning_effort=reasoning_effort)


class Recording(SimLiveRuntime):
    def __init__(self) -> None:
        super().__init__(preset("H200-141GB", "llama-3.1-8b", 1), time_scale=0.05)
        self.recorded = RecordingFormat()
        self.chat_format = self.recorded


@pytest.fixture(scope="module", params=[True, False], ids=["lane", "plain"])
def server(tmp_path_factory: pytest.TempPathFactory, request: Any) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("effort")) / "api.duckdb"
    with LiveServer(make_config(db, express_lane=request.param), runtime=Recording()) as live:
        live.wait_ready()
        yield live


def _client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-a", max_retries=0)


def _recorded(server: LiveServer) -> RecordingFormat:
    runtime = server.live.service.runtime
    assert isinstance(runtime, Recording)
    return runtime.recorded


@pytest.mark.parametrize("effort", ["none", "minimal", "low", "medium", "high", "xhigh", None])
def test_an_openai_level_reaches_the_chat_format(server: LiveServer, effort: str | None) -> None:
    efforts = _recorded(server).efforts
    done = _client(server).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": f"think {effort}"}],
        max_tokens=4,
        extra_body={"reasoning_effort": effort},
    )
    assert done.choices[0].message.content
    assert efforts[-1] == effort


@pytest.mark.parametrize("effort", ["extreme", "ultra", "HIGH", 1, True])
def test_anything_else_is_a_400_naming_the_field(server: LiveServer, effort: object) -> None:
    efforts = _recorded(server).efforts
    before = len(efforts)
    with pytest.raises(openai.BadRequestError) as refused:
        _client(server).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "think"}],
            max_tokens=4,
            extra_body={"reasoning_effort": effort},
        )
    assert refused.value.param == "reasoning_effort"
    assert len(efforts) == before  # refused at the edge: nothing rendered, nothing ran

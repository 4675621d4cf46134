"""OpenAI chat fields this server cannot honour, over real HTTP with the official client:
``web_search_options`` is refused (400 naming it: an answer without the search asked for would
read as one made with it); ``prediction`` (a speed-up that changes no answer) and ``seed``
are accepted and ignored, as docs/API.md says, and never reach the runtime's request; nor
does ``reasoning_effort`` reach its sampling (it goes to the chat template:
test_api_reasoning_effort.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from agentconsole.server.runtime.sglang import wire
from tests.server.api.harness import LiveServer, make_config
from tests.server.api.recording import RecordingRuntime


@pytest.fixture(scope="module", params=[True, False], ids=["lane", "plain"])
def server(tmp_path_factory: pytest.TempPathFactory, request: Any) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("ignored")) / "api.duckdb"
    config = make_config(db, express_lane=request.param)
    with LiveServer(config, runtime=RecordingRuntime()) as live:
        live.wait_ready()
        yield live


def _client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-a", max_retries=0)


def test_web_search_options_are_refused_naming_the_field(server: LiveServer) -> None:
    runtime = server.live.service.runtime
    assert isinstance(runtime, RecordingRuntime)
    before = len(runtime.sent)
    with pytest.raises(openai.BadRequestError) as refused:
        _client(server).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "news today?"}],
            max_tokens=4,
            web_search_options={"search_context_size": "low"},
        )
    assert refused.value.param == "web_search_options"
    assert "does not search the web" in refused.value.message
    assert len(runtime.sent) == before  # nothing ran
    # null is "not asked": it passes
    done = _client(server).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        extra_body={"web_search_options": None},
    )
    assert done.choices[0].message.content


@pytest.mark.parametrize(
    "extra",
    [
        {"prediction": {"type": "content", "content": "the predicted answer"}},
        {"reasoning_effort": "low"},
        {"seed": 7},
    ],
    ids=["prediction", "reasoning_effort", "seed"],
)
def test_fields_harmless_to_ignore_are_accepted_and_ignored(
    server: LiveServer, extra: dict[str, Any]
) -> None:
    runtime = server.live.service.runtime
    assert isinstance(runtime, RecordingRuntime)
    done = _client(server).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": f"ignored {sorted(extra)}"}],
        max_tokens=4,
        extra_body=extra,
    )
    assert done.choices[0].message.content
    assert done.system_fingerprint is None
    sent = runtime.sent[-1]
    assert not set(extra) & set(sent.sampling)
    # nor would SGLang be sent it (its ``sampling_seed`` is read only in its deterministic
    # inference mode, which the engine is not started in)
    params = wire.sampling_params(sent, clock_offset=0.0)
    assert "sampling_seed" not in params
    assert not set(extra) & set(params)

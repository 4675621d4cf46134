"""A call's ``max_tokens`` bounds what serve expects it to generate, over real HTTP with the
official ``openai`` client, on both lanes (the express lane and Litestar's controllers).

The scheduler predicts a call's output from its tenant's earlier calls (a prior before any);
a call that asks for at most a few tokens (a verifier's verdict, a router's label) is known to
be short whatever its kind's calls produced, and its ticket, which prices its service for the
policies' keys and the prefill deferral, says so. Without ``max_tokens`` the server's default
(1,024 for chat, less where the prompt leaves less room) caps it the same way, above what a
fresh tenant is predicted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.server.api.harness import LiveServer, both_lanes
from tests.server.api.recording import RecordingRuntime


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    root = Path(tmp_path_factory.mktemp("max-tokens"))
    with both_lanes(root, RecordingRuntime) as (lane, plain):
        yield {"lane": lane, "plain": plain}


@pytest.mark.parametrize("lane", ["lane", "plain"])
def test_a_short_max_tokens_is_what_the_ticket_expects(
    servers: dict[str, LiveServer], lane: str
) -> None:
    server = servers[lane]
    runtime = server.live.service.runtime
    assert isinstance(runtime, RecordingRuntime)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-a", max_retries=0)
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [
        {"role": "user", "content": "is the patch right? answer yes or no"}
    ]
    client.chat.completions.create(model="m", messages=messages)
    unbounded = runtime.sent[-1].ticket
    client.chat.completions.create(model="m", messages=messages, max_tokens=3)
    verdict = runtime.sent[-1].ticket
    client.chat.completions.create(model="m", messages=messages, max_completion_tokens=4)
    newer_name = runtime.sent[-1].ticket

    assert unbounded.expected_output_tokens > 4  # the learned length (or the prior)
    assert verdict.expected_output_tokens == 3
    assert newer_name.expected_output_tokens == 4
    assert verdict.service_estimate_s < unbounded.service_estimate_s

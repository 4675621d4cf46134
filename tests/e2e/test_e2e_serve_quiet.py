"""``agentconsole serve --runtime sglang`` starts quietly: the terminal shows the banner (runtime,
model, store, engine log, keys), the URL and one line when the runtime is ready; SGLang's
server-args dump, import warnings and its processes' logs are in the engine log. The served
engine answers ``/v1/completions`` from the official ``openai`` client.

The server is the e2e package's shared ``sglang_serve`` (``tests/e2e/conftest.py``), whose
teardown checks that its shutdown leaves the terminal as quiet."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.conftest import SGLANG_NOISE, ServeProcess

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]


def test_serve_with_sglang_is_quiet_and_serves_completions(sglang_serve: ServeProcess) -> None:
    client = openai.OpenAI(base_url=sglang_serve.url + "/v1", api_key="sk-dev", max_retries=0)
    served = client.models.list().data[0].id
    done = client.completions.create(model="x", prompt="The quick brown fox", max_tokens=4)
    assert done.model == served
    assert done.choices[0].finish_reason in ("stop", "length")
    assert done.usage is not None
    assert done.usage.prompt_tokens > 0
    terminal = "".join(sglang_serve.output)
    # one line, not a second from a logger
    (ready,) = [line for line in sglang_serve.output if "runtime sglang ready" in line]
    assert "runtime sglang ready in " in ready
    assert sglang_serve.db is not None
    log = sglang_serve.db.with_suffix(".sglang.log")
    assert "runtime: sglang" in terminal
    assert f"model:   the tiny CPU model  (served as {served})" in terminal
    assert f"engine log: {log}" in terminal
    assert "tenant key:   sk-dev" in terminal
    assert "chat format template+hermes" in ready
    for noise in SGLANG_NOISE:
        assert noise not in terminal, noise
    written = log.read_text(encoding="utf-8")
    for noise in ("server_args=", "UserWarning", "loading shards"):
        assert noise in written, noise

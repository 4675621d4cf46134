"""``agentconsole serve --runtime sglang`` starts quietly: the terminal shows the banner (runtime,
model, store, engine log, keys), the URL and one line when the runtime is ready; SGLang's
server-args dump, import warnings and its processes' logs are in the engine log. The served
engine answers ``/v1/completions`` from the official ``openai`` client."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.e2e.conftest import start_serve

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
READY_S = 300  # the CPU engine starts in 15-70 s on 2 busy cores


def test_serve_with_sglang_is_quiet_and_serves_completions(tmp_path: Path) -> None:
    db = tmp_path / "quiet.duckdb"
    env = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}
    served_process = start_serve(["--runtime", "sglang", "--db", str(db)], env, timeout_s=READY_S)
    try:
        client = openai.OpenAI(base_url=served_process.url + "/v1", api_key="sk-dev", max_retries=0)
        served = client.models.list().data[0].id
        done = client.completions.create(model="x", prompt="The quick brown fox", max_tokens=4)
        assert done.model == served
        assert done.choices[0].finish_reason in ("stop", "length")
        assert done.usage is not None
        assert done.usage.prompt_tokens > 0
    finally:
        served_process.stop(timeout=60)
    terminal = "".join(served_process.output)
    (ready,) = [line for line in served_process.output if "runtime sglang ready in " in line]
    log = db.with_suffix(".sglang.log")
    assert "runtime: sglang" in terminal
    assert f"model:   the tiny CPU model  (served as {served})" in terminal
    assert f"engine log: {log}" in terminal
    assert "tenant key:   sk-dev" in terminal
    assert "chat format template+hermes" in ready
    for noise in ("server_args", "UserWarning", "Ignore import error", "loading shards"):
        assert noise not in terminal, noise
    written = log.read_text(encoding="utf-8")
    for noise in ("server_args=", "UserWarning", "loading shards"):
        assert noise in written, noise

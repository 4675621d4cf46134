"""Two SGLang models in one ``serve`` on the CPU machine (issue 14's done-when): two tiny models
of different sizes made by ``agentconsole make-model``, each its own in-process engine with the
plugin, one server for the module (two engines take a minute or two to start on 2 cores).

``model: auto`` calls are answered, each node records which model ran it and why
(``GET /v1/programs/{id}``), the response's ``model`` is that model, a program's later call
finds its context cached on the model that ran it, and a role's minimum tier sends its call to
the larger model.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e import early
from tests.e2e.conftest import CLI, ServeProcess, start_serve

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
TENANT = {"Authorization": "Bearer sk-dev"}
ENV = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}


def _config(small: Path, large: Path) -> str:
    return f"""
[runtime]
name = "sglang"

[[models]]
name = "tiny-large"
path = "{large}"
tier = 2
price_per_mtok = 0.5
roles = ["planner"]

[[models]]
name = "tiny-small"
path = "{small}"
tier = 1
price_per_mtok = 0.1

[selection]
role_tiers = {{ planner = 2 }}
"""


def start_multimodel_serve(tmp: Path, base_env: Mapping[str, str]) -> ServeProcess:
    """Two tiny models made (at once), then ``serve`` with both in its ``[[models]]``."""
    small, large = tmp / "small", tmp / "large"
    # both at once: each ``make-model`` spends most of its time importing torch and
    # transformers on one core, and the machine has two
    makers = [
        subprocess.Popen([CLI, "make-model", str(out), *size], env={**base_env, **ENV})
        for out, size in ((small, []), (large, ["--layers", "4", "--hidden", "128", "--seed", "1"]))
    ]
    try:
        for maker in makers:
            assert maker.wait(timeout=600) == 0, maker.args
    finally:
        for maker in makers:
            if maker.poll() is None:  # the other one failed or timed out
                maker.kill()
                maker.wait()
    (tmp / "serve.toml").write_text(_config(small, large), encoding="utf-8")
    args = ["--config", str(tmp / "serve.toml"), "--db", str(tmp / "db.duckdb")]
    # started early, beside the rest of the suite
    return start_serve(args, ENV, timeout_s=900, base_env=base_env)


early.register("multimodel_serve", start_multimodel_serve)


@pytest.fixture(scope="module")
def multimodel_serve(early_starts: early.EarlyStarts) -> Iterator[ServeProcess]:
    yield from early_starts.lend("multimodel_serve", ServeProcess)


def _chat(http: httpx.Client, program: str, text: str, **extras: Any) -> dict[str, Any]:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 8,
        "agentconsole": {"program_id": program, **extras},
    }
    response = http.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    out: dict[str, Any] = response.json()
    return out


def test_auto_calls_run_on_two_models_and_say_why(multimodel_serve: ServeProcess) -> None:
    with httpx.Client(base_url=multimodel_serve.url, headers=TENANT, timeout=120) as http:
        listed = [m["id"] for m in http.get("/v1/models").json()["data"]]
        assert listed == ["tiny-large", "tiny-small"]
        text = "the agent reads the file and runs the tests " * 12
        first = _chat(http, "two-models", text)
        second = _chat(http, "two-models", text + " then fixes the bug")
        planner = _chat(http, "two-models", "plan the work " * 10, role="planner")
        program = http.get("/v1/programs/two-models").json()
    nodes = [n for n in program["nodes"] if n["kind"] == "llm"]
    ran = [first["model"], second["model"], planner["model"]]
    assert [n["model"] for n in nodes] == ran
    assert planner["model"] == "tiny-large"  # the planner's tier excludes the small model
    excluded = {c["model"]: c["excluded"] for c in nodes[2]["model_choice"]["candidates"]}
    assert excluded == {"tiny-large": None, "tiny-small": "tier 1 < required 2"}
    for node in nodes[:2]:
        choice = node["model_choice"]
        assert choice["reason"].startswith("finish-time:")
        assert {c["model"] for c in choice["candidates"]} == {"tiny-large", "tiny-small"}
    # the second call's prompt extends the first: cached on the model that ran the first only
    cached = {c["model"]: c["cached_tokens"] for c in nodes[1]["model_choice"]["candidates"]}
    other = ({"tiny-large", "tiny-small"} - {first["model"]}).pop()
    assert cached[first["model"]] > 0
    assert cached[other] == 0
    assert all(n["state"] == "done" for n in nodes)

"""Several models in one ``serve`` over real HTTP, on the simulator: a 70B and an 8B preset.

``model: auto`` calls are given a model by the selector (the choice and its reasons on the
node in ``GET /v1/programs/{id}``, the response's ``model`` the one that ran); a role with a
minimum tier only runs on the large model; an operator pin moves a role (audited); an explicit
model runs there; an unknown one is 404 ``model_not_found``; ``/v1/models`` lists both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServeProcess, start_serve

pytestmark = pytest.mark.e2e
TENANT = {"Authorization": "Bearer sk-dev"}
OPERATOR = {"Authorization": "Bearer sk-operator"}
CONFIG = """
[runtime]
name = "sim"
time_scale = 0.02

[[models]]
name = "big"
path = "llama-3.1-70b"
tp = 4
tier = 2
price_per_mtok = 0.88
roles = ["planner"]

[[models]]
name = "small"
path = "llama-3.1-8b"
tier = 1
price_per_mtok = 0.18
roles = ["verifier"]

[selection]
role_tiers = { planner = 2 }
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    tmp = Path(tmp_path_factory.mktemp("multimodel"))
    (tmp / "serve.toml").write_text(CONFIG, encoding="utf-8")
    process = start_serve(["--config", str(tmp / "serve.toml"), "--db", str(tmp / "db.duckdb")])
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def http(served: ServeProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, headers=TENANT, timeout=60) as client:
        yield client


def _chat(
    http: httpx.Client,
    model: str,
    program: str,
    headers: dict[str, str] | None = None,
    **extras: Any,
) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"plan the next step of {program} " * 20}],
        "max_tokens": 16,
        "agentconsole": {"program_id": program, **extras},
    }
    return http.post("/v1/chat/completions", json=body, headers=headers or {})


def _nodes(http: httpx.Client, program: str) -> list[dict[str, Any]]:
    response = http.get(f"/v1/programs/{program}")
    response.raise_for_status()
    return [n for n in response.json()["nodes"] if n["kind"] == "llm"]


def test_models_lists_every_served_model(http: httpx.Client) -> None:
    data = http.get("/v1/models").json()["data"]
    assert [(m["id"], m["tier"], m["price_per_mtok"], m["roles"]) for m in data] == [
        ("big", 2, 0.88, ["planner"]),
        ("small", 1, 0.18, ["verifier"]),
    ]
    assert all(m["loaded"] and m["object"] == "model" for m in data)


def test_auto_calls_record_the_model_and_why(http: httpx.Client) -> None:
    answers = [_chat(http, "auto", "mm-auto") for _ in range(3)]
    ran = []
    for answer in answers:
        answer.raise_for_status()
        ran.append(answer.json()["model"])
    nodes = _nodes(http, "mm-auto")
    assert [n["model"] for n in nodes] == ran  # the response names the model that ran
    for node in nodes:
        choice = node["model_choice"]
        assert choice["reason"].startswith("finish-time:")
        figures = {c["model"]: c for c in choice["candidates"]}
        assert set(figures) == {"big", "small"}
        # the chosen model is the one with the least predicted finish
        best = min(figures.values(), key=lambda c: c["finish_s"])
        assert node["model"] == best["model"]
        assert figures["big"]["price"] > figures["small"]["price"] > 0
    # the program's second call finds its first prompt cached on the model that ran it
    assert any(c["cached_tokens"] > 0 for c in nodes[1]["model_choice"]["candidates"])


def test_role_tier_pin_and_explicit_model(http: httpx.Client) -> None:
    planner = _chat(http, "auto", "mm-roles", role="planner")
    assert planner.json()["model"] == "big"  # planner needs tier 2: small is excluded
    excluded = {
        c["model"]: c["excluded"] for c in _nodes(http, "mm-roles")[0]["model_choice"]["candidates"]
    }
    assert excluded == {"big": None, "small": "tier 1 < required 2"}

    pin = {"role": "verifier", "model": "big"}
    pinned = http.post("/v1/operator/models/pins", json=pin, headers=OPERATOR)
    assert pinned.status_code == 200
    assert pinned.json()["roles"] == {"verifier": "big"}
    verifier = _chat(http, "auto", "mm-roles", role="verifier")
    assert verifier.json()["model"] == "big"
    assert _nodes(http, "mm-roles")[1]["model_choice"]["reason"] == "pinned by role verifier"
    unpin = {"role": "verifier", "model": None}
    assert http.post("/v1/operator/models/pins", json=unpin, headers=OPERATOR).json()["roles"] == {}
    audit = http.get("/v1/operator/audit", headers=OPERATOR).json()["actions"]
    assert [a["action"] for a in audit[:2]] == ["pin_model", "pin_model"]
    assert audit[1]["args"]["model"] == "big"
    assert audit[1]["result"] == "ok"

    explicit = _chat(http, "small", "mm-roles")
    assert explicit.json()["model"] == "small"
    node = _nodes(http, "mm-roles")[2]
    assert node["model"] == "small"
    assert node["model_choice"]["reason"] == "requested by the client"


def test_candidates_from_the_header_and_unknown_models(http: httpx.Client) -> None:
    header = {"X-Agentconsole-Model-Candidates": "small"}
    answer = _chat(http, "auto", "mm-header", headers=header)
    assert answer.json()["model"] == "small"
    assert _nodes(http, "mm-header")[0]["model_choice"]["reason"] == "requested by the client"
    unknown = _chat(http, "gpt-17", "mm-unknown")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["type"] == "model_not_found"
    listed = _chat(http, "auto", "mm-unknown", model_candidates=["small", "nope"])
    assert listed.status_code == 404
    assert listed.json()["error"]["field"] == "model_candidates"
    repeated = _chat(http, "auto", "mm-unknown", model_candidates=["small", "small"])
    assert repeated.status_code == 400, repeated.text  # (OpenAI's routes: 400)
    assert repeated.json()["error"]["field"] == "model_candidates"  # not the body's model
    # a refused call opened no program
    assert http.get("/v1/programs/mm-unknown").status_code == 404
    bad_pin = http.post(
        "/v1/operator/models/pins", json={"role": "x", "model": "nope"}, headers=OPERATOR
    )
    assert bad_pin.status_code == 404
    # a pin of a program nobody runs would outlive nothing: 404, as for a model not served
    ghost = {"program_id": "mm-never-started", "model": "small"}
    ghost_pin = http.post("/v1/operator/models/pins", json=ghost, headers=OPERATOR)
    assert ghost_pin.status_code == 404, ghost_pin.text
    assert ghost_pin.json()["error"]["field"] == "program_id"
    assert _chat(http, "auto", "mm-ended").status_code == 200
    assert http.post("/v1/programs/mm-ended/finish", json={}).status_code == 200
    ended = {"program_id": "mm-ended", "model": "small"}
    refused = http.post("/v1/operator/models/pins", json=ended, headers=OPERATOR)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["field"] == "program_id"
    unpin = {"program_id": "mm-never-started", "model": None}  # an unpin always answers
    assert http.post("/v1/operator/models/pins", json=unpin, headers=OPERATOR).status_code == 200
    pins = http.get("/v1/operator/models/pins", headers=OPERATOR).json()
    assert "mm-never-started" not in pins["programs"]
    assert "mm-ended" not in pins["programs"]
    # a pinned program that ends takes its pin with it at once (it was listed until the
    # program left memory, ten minutes later; a restart listed none)
    assert _chat(http, "auto", "mm-pinned").status_code == 200
    pinned = {"program_id": "mm-pinned", "model": "big"}
    assert http.post("/v1/operator/models/pins", json=pinned, headers=OPERATOR).status_code == 200
    assert http.post("/v1/programs/mm-pinned/finish", json={}).status_code == 200
    pins = http.get("/v1/operator/models/pins", headers=OPERATOR).json()
    assert "mm-pinned" not in pins["programs"]


def _lost_total(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    (line,) = [x for x in text.splitlines() if x.startswith("agentconsole_cross_model_lost_tokens")]
    return float(line.split()[-1])


def test_a_program_moved_to_another_model_counts_the_reuse_it_lost(http: httpx.Client) -> None:
    """Both presets read the same tokens; a program's call sent to ``small`` after its first
    ran on ``big`` prefills what ``big`` holds: lost cross-model reuse in the overview and
    ``/metrics``. A call that stays on its model loses none."""
    before = http.get("/v1/overview").json()["cross_model_lost_tokens"]
    metrics_before = _lost_total(http)
    assert _chat(http, "big", "mm-move").status_code == 200
    assert _chat(http, "big", "mm-move").status_code == 200  # stays: nothing lost
    assert http.get("/v1/overview").json()["cross_model_lost_tokens"] == before
    assert _chat(http, "small", "mm-move").status_code == 200
    lost = http.get("/v1/overview").json()["cross_model_lost_tokens"] - before
    assert lost > 0
    assert _lost_total(http) - metrics_before == lost


def test_the_operators_pins_survive_a_restart(tmp_path: Path) -> None:
    """Pins are replayed from the audit log at start: role pins, and program pins of programs
    the restart brings back; an unpin stays an unpin."""
    (tmp_path / "serve.toml").write_text(CONFIG, encoding="utf-8")
    args = ["--config", str(tmp_path / "serve.toml"), "--db", str(tmp_path / "db.duckdb")]
    pins = [
        {"role": "verifier", "model": "big"},
        {"role": "planner", "model": "small"},
        {"role": "planner", "model": None},
        {"program_id": "mm-pinned", "model": "small"},
    ]
    first = start_serve(args)
    try:
        with httpx.Client(base_url=first.url, headers=TENANT, timeout=60) as http:
            assert _chat(http, "auto", "mm-pinned").status_code == 200  # an open program
            for pin in pins:
                answer = http.post("/v1/operator/models/pins", json=pin, headers=OPERATOR)
                assert answer.status_code == 200
            before = http.get("/v1/operator/models/pins", headers=OPERATOR).json()
    finally:
        first.stop()
    assert before == {"programs": {"mm-pinned": "small"}, "roles": {"verifier": "big"}}
    second = start_serve(args)
    try:
        with httpx.Client(base_url=second.url, headers=TENANT, timeout=60) as http:
            assert http.get("/v1/operator/models/pins", headers=OPERATOR).json() == before
            answer = _chat(http, "auto", "mm-pinned")
            assert answer.json()["model"] == "small"
            assert _nodes(http, "mm-pinned")[-1]["model_choice"]["reason"].startswith("pinned")
    finally:
        second.stop()

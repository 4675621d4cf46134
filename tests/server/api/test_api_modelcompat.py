"""``GET /v1/models/compatibility`` over real HTTP: the matrix of the served models (given by
an app-level ``model_sources`` provider, as a server of several models gives them), any key,
``enabled: false``; with the settings' one model by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentconsole.scheduler.models import ServedModel
from agentconsole.server.runtime.registry import RuntimeOptions, create_runtime
from tests.server.api.harness import OPERATOR, LiveServer, make_config
from tests.server.compat_models import KEPT, ServedDirs, compat_models


def test_the_matrix_of_served_models(tmp_path: Path) -> None:
    models = compat_models()
    sources = [(name, str(models[name])) for name in ("large", "small", "variant")]
    with LiveServer(make_config(tmp_path / "db.duckdb"), extensions=[ServedDirs(sources)]) as s:
        for key in ("sk-a", OPERATOR):
            with s.client(key) as client:
                answer = client.get("/v1/models/compatibility")
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            assert body["enabled"] is False
            assert "no sharing in the real engine" in body["note"]
            assert [m["name"] for m in body["models"]] == ["large", "small", "variant"]
            assert [m["layers"] for m in body["models"]] == [4, 2, 4]
            # where the weights lie on disk is the operator's to know
            directories = [m["directory"] for m in body["models"]]
            assert directories == ([None] * 3 if key == "sk-a" else [s for _, s in sources])
            pairs = {(p["a"], p["b"]): p for p in body["pairs"]}
            assert set(pairs) == {("large", "small"), ("large", "variant"), ("small", "variant")}
            shared = pairs["large", "variant"]
            assert (shared["compatible"], shared["shared_kv_layers"]) == (True, KEPT)
            assert shared["layers"] == 4
            assert any("layers 2-3 differ" in reason for reason in shared["reasons"])
            apart = pairs["large", "small"]
            assert (apart["compatible"], apart["shared_kv_layers"]) == (False, 0)
            assert apart["reasons"][0].startswith("different architecture")
        with s.client(None) as anonymous:
            assert anonymous.get("/v1/models/compatibility").status_code == 401


def test_the_settings_models_by_default(tmp_path: Path) -> None:
    models = compat_models()
    served = tuple(ServedModel(name, source=str(models[name])) for name in ("large", "variant"))
    # the endpoint reads only the settings; the runtime runs the simulator's default model
    config = make_config(tmp_path / "db.duckdb", models=served)
    runtime = create_runtime("sim", RuntimeOptions(extra={"time_scale": 0.05}))
    with LiveServer(config, runtime=runtime) as server, server.client() as client:
        body = client.get("/v1/models/compatibility").json()
    assert [m["name"] for m in body["models"]] == ["large", "variant"]
    (pair,) = body["pairs"]
    assert (pair["a"], pair["b"], pair["shared_kv_layers"]) == ("large", "variant", KEPT)


def test_the_settings_model_by_default(tmp_path: Path) -> None:
    config = make_config(tmp_path / "db.duckdb", model="llama-3.1-8b")
    with LiveServer(config) as server, server.client() as client:
        body = client.get("/v1/models/compatibility").json()
    assert body["enabled"] is False
    assert body["pairs"] == []
    (model,) = body["models"]
    assert model["name"] == "llama-3.1-8b"
    assert "not a model directory" in model["error"]

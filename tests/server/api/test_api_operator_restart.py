"""The operator's standing decisions survive a restart: a drain (and its end), a scheduling
or tool-wait policy switch (and a switch back) and the model pins are replayed from the audit
log at start, before any call is served, and win over the configured values as pins do
(``live/operator.py``, ``OperatorMemory``). Each test runs two or three app lives on one store
file and reads the outcome through the API's read routes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from agentconsole.server.live.operator import OperatorMemory
from tests.server.api.harness import OPERATOR, LiveServer, make_config


def _standing(op: httpx.Client) -> dict[str, Any]:
    """What the read routes say of the operator's settings: the service's and the engine's."""
    overview = op.get("/v1/overview").json()
    runtime = op.get("/v1/runtime").json()
    return {
        "draining": overview["draining"],
        "policy": overview["policy"],
        "kv_policy": overview["kv_policy"],
        "engine_policy": runtime["policy"],
        "engine_paused": runtime["paused"],
    }


def _act(op: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = op.post(path, json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_a_drain_a_policy_switch_and_a_pin_survive_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "operator.duckdb"
    config = make_config(db)
    with LiveServer(config) as first:
        first.wait_ready()
        with first.client(OPERATOR) as op:
            assert _standing(op)["policy"] == "cp-cache"  # the configured default
            _act(op, "/v1/operator/drain", {"enabled": True})
            switched = {"policy": "fcfs", "kv_policy": "offload"}
            assert _act(op, "/v1/operator/policy", switched) == switched
            pin = {"role": "planner", "model": config.model_name}
            _act(op, "/v1/operator/models/pins", pin)
            before = _standing(op)
    assert before == {
        "draining": True,
        "policy": "fcfs",
        "kv_policy": "offload",
        "engine_policy": "fcfs",
        "engine_paused": True,
    }
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        with second.client(OPERATOR) as op:
            assert _standing(op) == before
            pins = op.get("/v1/operator/models/pins").json()
            assert pins["roles"] == {"planner": config.model_name}


def test_an_undrain_and_a_switch_back_survive_a_restart_too(tmp_path: Path) -> None:
    db = tmp_path / "back.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client(OPERATOR) as op:
            _act(op, "/v1/operator/drain", {"enabled": True})
            _act(op, "/v1/operator/policy", {"policy": "sjf", "kv_policy": "recompute"})
    with LiveServer(make_config(db)) as second:
        second.wait_ready()  # up, though drained: it must not wait for a 200
        with second.client(OPERATOR) as op, second.client(None) as anon:
            assert _standing(op)["draining"] is True  # remembered...
            # ...and so not ready: the drain is the one part that is not
            drained = anon.get("/ready")
            assert drained.status_code == 503
            assert drained.json() == {"runtime": True, "store": True, "draining": True}
            # ...and undone by the operator, one field at a time: the kv switch alone
            _act(op, "/v1/operator/drain", {"enabled": False})
            assert anon.get("/ready").status_code == 200
            _act(op, "/v1/operator/policy", {"policy": "cp-cache"})
            _act(op, "/v1/operator/policy", {"kv_policy": "keep"})
    with LiveServer(make_config(db)) as third:
        third.wait_ready()
        with third.client(OPERATOR) as op, third.client(None) as anon:
            assert anon.get("/ready").status_code == 200  # the undrain was remembered too
            assert _standing(op) == {
                "draining": False,
                "policy": "cp-cache",
                "kv_policy": "keep",
                "engine_policy": "cp-cache",
                "engine_paused": False,
            }


def test_a_remembered_switch_wins_over_the_configured_policy_as_pins_do(tmp_path: Path) -> None:
    db = tmp_path / "precedence.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client(OPERATOR) as op:
            _act(op, "/v1/operator/policy", {"policy": "sjf"})
            refused = op.post("/v1/operator/policy", json={"policy": "no-such-policy"})
            assert refused.status_code == 422  # refused switches are audited, not remembered
    # restarted with other policies configured: the operator's switch stands, the kv policy
    # (never switched by an operator) is the configured one
    with LiveServer(make_config(db, policy="fcfs", kv_policy="offload")) as second:
        second.wait_ready()
        with second.client(OPERATOR) as op:
            standing = _standing(op)
            assert (standing["policy"], standing["engine_policy"]) == ("sjf", "sjf")
            assert standing["kv_policy"] == "offload"
            assert standing["draining"] is False


def test_a_remembered_policy_no_longer_registered_is_skipped(tmp_path: Path) -> None:
    with LiveServer(make_config(tmp_path / "gone.duckdb")) as server:
        server.wait_ready()
        memory = OperatorMemory(policy="retired-policy", kv_policy="retired-kv")
        server.run(server.live.desk.restore(memory))
        with server.client(OPERATOR) as op:
            standing = _standing(op)
    assert (standing["policy"], standing["kv_policy"]) == ("cp-cache", "keep")


def test_the_memory_folds_the_audit_rows_in_order() -> None:
    memory = OperatorMemory.of(
        [
            ("drain", {"enabled": True}),
            ("policy", {"policy": "fcfs", "kv_policy": None}),
            ("pin_model", {"program_id": None, "role": "r", "model": "m"}),
            ("policy", {"policy": None, "kv_policy": "keep"}),
            ("boost", {"amount": 5.0}),  # not a standing setting
            ("drain", {"enabled": False}),
            ("pin_model", {"program_id": None, "role": "r", "model": None}),
        ]
    )
    assert memory.draining is False
    assert (memory.policy, memory.kv_policy) == ("fcfs", "keep")
    assert [p["model"] for p in memory.pins] == ["m", None]

"""``Repository.succeeded_actions``: the audited actions a restart replays (pins, drain,
policy switches), read in one scan, oldest first across every name asked for; refused actions
and other names are left out."""

from __future__ import annotations

from agentconsole.server.store import OperatorAction, Store
from agentconsole.server.store.jsonutil import JSONValue


def test_succeeded_actions_of_several_names_in_the_order_taken(store: Store) -> None:
    rows: list[tuple[str, str, dict[str, JSONValue]]] = [
        ("drain", "ok", {"enabled": True}),
        ("policy", "refused: 422 unknown policy", {"policy": "nope"}),
        ("pin_model", "ok", {"role": "r", "model": "m"}),
        ("boost", "ok", {"amount": 5.0}),
        ("policy", "ok", {"policy": "fcfs", "kv_policy": None}),
        ("drain", "ok", {"enabled": False}),
    ]
    for i, (action, result, args) in enumerate(rows):
        store.writer.put_durable(
            OperatorAction(float(i), "operator-x", action, "", result, args)
        ).result(10)
    kept = store.repo.succeeded_actions("pin_model", "drain", "policy")
    assert [(a.action, dict(a.args)) for a in kept] == [
        ("drain", {"enabled": True}),
        ("pin_model", {"role": "r", "model": "m"}),
        ("policy", {"policy": "fcfs", "kv_policy": None}),
        ("drain", {"enabled": False}),
    ]
    assert [a.action for a in store.repo.succeeded_actions("drain")] == ["drain", "drain"]
    assert store.repo.succeeded_actions() == []

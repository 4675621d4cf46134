"""Invariants of the call pipeline under random sequences of calls, duplicates, changed
arguments and restarts that leave intents in doubt (the research's state-machine property):
at most one applied effect per key, every committed result replays as it was, a changed
argument never executes, and a call in doubt is re-run only when the tool is idempotent."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentconsole.server.gateway import GatewayConfig, ToolGateway
from agentconsole.server.gateway.errors import (
    GatewayError,
    IdempotencyMismatch,
    NeedsReconcile,
)
from agentconsole.server.store import Store, make_tool_call_id, params_hash
from agentconsole.server.store.jsonutil import JSONValue
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import applied, call, register_ledger

# (op, node, amount, idempotent tool?) with op: call | orphan (an intent a crash left behind)
Op = tuple[str, int, int, bool]
OPS = st.lists(
    st.tuples(st.sampled_from(["call", "call", "call", "orphan"]), st.integers(0, 3),
              st.integers(1, 2), st.booleans()),
    min_size=1, max_size=25,
)  # fmt: skip


def _tool(idempotent: bool) -> str:
    return "keyed_ledger" if idempotent else "ledger"


async def _open(db: Path, ledger: Path) -> ToolGateway:
    gateway = ToolGateway(Store.open(db), GatewayConfig(ledger_path=ledger, tenant_builtins=None))
    await gateway.start()
    return gateway


async def _close(gateway: ToolGateway) -> None:
    await gateway.close()
    gateway.store.close()


async def _play(ops: list[Op], tmp: Path) -> None:
    db, ledger = tmp / "s.duckdb", tmp / "ledger.jsonl"
    gateway, port = await _open(db, ledger), FakePort()
    await register_ledger(gateway, idempotent=False)
    await register_ledger(gateway, idempotent=True)
    first_args: dict[str, tuple[str, int]] = {}  # key -> (tool, amount) it was claimed with
    committed: dict[str, object] = {}
    in_doubt: set[str] = set()
    for op, node, amount, idempotent in ops:
        tool, program = _tool(idempotent), f"p{int(idempotent)}"
        key = make_tool_call_id(program, f"n{node}", 1)
        arguments: dict[str, JSONValue] = {"account": "acct", "amount": amount}
        if op == "orphan" and key not in first_args:  # claimed, then the process died
            body: dict[str, JSONValue] = {"tool": tool, "arguments": arguments}
            claim = gateway.store.intents.claim(
                key, params_hash(body), program, f"n{node}", tool,
                side_effect=True, idempotent=idempotent,
            )  # fmt: skip
            await asyncio.wrap_future(claim)
            first_args[key] = (tool, amount)
            await _close(gateway)
            gateway = await _open(db, ledger)
            in_doubt.add(key)
            continue
        if op == "orphan":
            continue
        before = applied(ledger).get(key, 0)
        same = first_args.get(key, (tool, amount)) == (tool, amount)
        expect_reconcile = key in in_doubt and not idempotent and same
        try:
            result = await call(gateway, port, tool, arguments, program=program, node=f"n{node}")
        except IdempotencyMismatch:
            assert first_args[key] != (tool, amount)
            assert applied(ledger).get(key, 0) == before  # never executed
            continue
        except NeedsReconcile:
            assert expect_reconcile  # an idempotent tool is re-executed instead
            assert applied(ledger).get(key, 0) == before
            continue
        except GatewayError as error:  # nothing else may happen here
            raise AssertionError(f"unexpected {error.type}") from error
        assert not expect_reconcile
        assert first_args.setdefault(key, (tool, amount)) == (tool, amount)
        if key in committed:
            assert result.status == "replayed"
            assert result.result == committed[key]
        committed.setdefault(key, result.result)
        assert applied(ledger).get(key, 0) <= 1
    await _close(gateway)
    assert all(count == 1 for count in applied(ledger).values())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
@example([("orphan", 0, 1, False), ("call", 0, 1, False), ("call", 0, 2, False)])
@example([("orphan", 1, 1, True), ("call", 1, 1, True), ("call", 1, 1, True)])
def test_random_histories_keep_every_invariant(ops: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_play(ops, Path(tmp)))

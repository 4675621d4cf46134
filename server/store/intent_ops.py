"""The tool-intent transitions, each an :class:`Op` applied in the writer thread.

Running every transition in the one writer thread makes check-and-insert atomic without
relying on a constraint error (a failed statement aborts DuckDB's whole transaction, and so
the batch); the primary key on ``tool_intents`` is the backstop. In-memory effects (leases,
waiters) are applied after commit only, so a rolled-back batch leaves none behind.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, InvalidStateError
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from agentconsole.server.store.intent_types import (
    TOOL_RESULTS,
    Claim,
    ClaimStatus,
    CommitOutcome,
    IntentState,
)
from agentconsole.server.store.ops import DEFERRED, Op, Txn

_SELECT = (
    "SELECT params_hash, state, epoch, side_effect, idempotent, error FROM tool_intents"
    " WHERE tool_call_id = ?"
)
_INSERT = (
    "INSERT INTO tool_intents (tool_call_id, params_hash, program_id, node_id, tool,"
    " side_effect, idempotent, state, epoch, created_at, updated_at, error, arguments)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, 'in_progress', 1, ?, ?, NULL, ?)"
)
_SET_STATE = (
    "UPDATE tool_intents SET state = ?, epoch = ?, error = ?, updated_at = ? WHERE tool_call_id = ?"
)


def _set_state(txn: Txn, params: list[object]) -> None:
    """Run :data:`_SET_STATE` (an in-place update: noted for the lane's checkpoint room)."""
    txn.con.execute(_SET_STATE, params)
    txn.updated("tool_intents")


_INSERT_RESULT = f"INSERT INTO tool_results ({', '.join(TOOL_RESULTS.names)}) VALUES (?, ?, ?, ?)"


@dataclass(slots=True)
class IntentBook:
    """Writer-thread-only memory: lease deadlines (monotonic) and attached waiters."""

    leases: dict[str, float] = field(default_factory=dict)
    waiters: dict[str, list[Future[Claim | None]]] = field(default_factory=dict)

    def finished(self, tool_call_id: str, claim: Claim) -> None:
        """Drop the lease and hand ``claim`` to everyone attached to ``tool_call_id``."""
        self.leases.pop(tool_call_id, None)
        for future in self.waiters.pop(tool_call_id, []):
            # (a waiter cancelled on its loop's thread between a check and the set would
            # raise here, on the writer's thread, and end it)
            with suppress(InvalidStateError):
                future.set_result(claim)

    def expired(self, tool_call_id: str) -> bool:
        """Whether the holder's lease ran out (no lease yet: claimed in this very batch)."""
        deadline = self.leases.get(tool_call_id)
        return deadline is not None and time.monotonic() > deadline


def _stored_claim(txn: Txn, tool_call_id: str, row: tuple[Any, ...]) -> Claim:
    state, epoch, error = IntentState(row[1]), int(row[2]), row[5]
    if state is IntentState.COMMITTED:
        result = txn.con.execute(
            "SELECT result FROM tool_results WHERE tool_call_id = ?", [tool_call_id]
        ).fetchone()
        return Claim(ClaimStatus.COMMITTED, tool_call_id, epoch, result[0] if result else None)
    if state is IntentState.NEEDS_RECONCILE:
        return Claim(ClaimStatus.NEEDS_RECONCILE, tool_call_id, epoch, error=error)
    if state is IntentState.IN_PROGRESS:
        return Claim(ClaimStatus.IN_PROGRESS, tool_call_id, epoch)
    retryable = state is IntentState.RETRYABLE
    return Claim(ClaimStatus.FAILED, tool_call_id, epoch, error=error, retryable=retryable)


class ClaimOp(Op[Claim]):
    """Claim ``tool_call_id``: insert the intent, re-arm it, or report why not."""

    __slots__ = (
        "arguments",
        "book",
        "idempotent",
        "key",
        "lease_s",
        "node_id",
        "params_hash",
        "program_id",
        "side_effect",
        "tool",
    )

    def __init__(
        self,
        book: IntentBook,
        key: str,
        params_hash: str,
        program_id: str,
        node_id: str,
        tool: str,
        side_effect: bool,
        idempotent: bool,
        lease_s: float,
        arguments: str | None = None,
    ) -> None:
        super().__init__()
        self.book, self.key, self.params_hash = book, key, params_hash
        self.arguments = arguments
        self.program_id, self.node_id, self.tool = program_id, node_id, tool
        self.side_effect, self.idempotent, self.lease_s = side_effect, idempotent, lease_s

    def _arm(self, txn: Txn, epoch: int) -> Claim:
        txn.wrote_intent = True
        deadline = time.monotonic() + self.lease_s
        txn.after_commit.append(lambda: self.book.leases.__setitem__(self.key, deadline))
        return Claim(ClaimStatus.NEW, self.key, epoch)

    def apply(self, txn: Txn) -> Claim:
        row = txn.con.execute(_SELECT, [self.key]).fetchone()
        if row is None:
            txn.con.execute(
                _INSERT,
                [
                    self.key,
                    self.params_hash,
                    self.program_id,
                    self.node_id,
                    self.tool,
                    self.side_effect,
                    self.idempotent,
                    txn.now,
                    txn.now,
                    self.arguments,
                ],
            )
            return self._arm(txn, 1)
        if row[0] != self.params_hash:
            return Claim(ClaimStatus.MISMATCH, self.key, int(row[2]))
        state, epoch = IntentState(row[1]), int(row[2])
        reexecutable = not row[3] or bool(row[4])
        if state is IntentState.RETRYABLE or (
            state is IntentState.IN_PROGRESS and reexecutable and self.book.expired(self.key)
        ):
            _set_state(txn, ["in_progress", epoch + 1, None, txn.now, self.key])
            return self._arm(txn, epoch + 1)
        return _stored_claim(txn, self.key, row)


class FinishOp(Op[CommitOutcome]):
    """Commit a result (``result_json`` set) or record a failure, fenced by ``epoch``."""

    __slots__ = ("book", "epoch", "error", "in_doubt", "key", "result_json", "retryable")

    def __init__(
        self,
        book: IntentBook,
        key: str,
        epoch: int,
        result_json: str | None,
        error: str | None = None,
        retryable: bool = False,
        in_doubt: bool = False,
    ) -> None:
        super().__init__()
        self.book, self.key, self.epoch = book, key, epoch
        self.result_json, self.error, self.retryable = result_json, error, retryable
        self.in_doubt = in_doubt

    def apply(self, txn: Txn) -> CommitOutcome:
        row = txn.con.execute(_SELECT, [self.key]).fetchone()
        if row is None:
            return CommitOutcome.UNKNOWN_CALL
        if int(row[2]) != self.epoch:
            return CommitOutcome.STALE_EPOCH
        if row[1] != IntentState.IN_PROGRESS:
            return CommitOutcome.WRONG_STATE
        if self.result_json is not None:
            txn.con.execute(_INSERT_RESULT, [self.key, self.epoch, self.result_json, txn.now])
            _set_state(txn, ["committed", self.epoch, None, txn.now, self.key])
            txn.wrote_result = True
            claim = Claim(ClaimStatus.COMMITTED, self.key, self.epoch, self.result_json)
        elif self.in_doubt:
            state = IntentState.NEEDS_RECONCILE
            _set_state(txn, [state.value, self.epoch, self.error, txn.now, self.key])
            claim = Claim(ClaimStatus.NEEDS_RECONCILE, self.key, self.epoch, error=self.error)
        else:
            state = IntentState.RETRYABLE if self.retryable else IntentState.FAILED
            _set_state(txn, [state.value, self.epoch, self.error, txn.now, self.key])
            claim = Claim(
                ClaimStatus.FAILED, self.key, self.epoch, error=self.error, retryable=self.retryable
            )
        txn.after_commit.append(lambda: self.book.finished(self.key, claim))
        return CommitOutcome.ACCEPTED


class ReconcileOp(Op[CommitOutcome]):
    """An operator's decision on a ``needs_reconcile`` intent: a result, or run it again."""

    __slots__ = ("book", "key", "result_json")

    def __init__(self, book: IntentBook, key: str, result_json: str | None) -> None:
        super().__init__()
        self.book, self.key, self.result_json = book, key, result_json

    def apply(self, txn: Txn) -> CommitOutcome:
        row = txn.con.execute(_SELECT, [self.key]).fetchone()
        if row is None:
            return CommitOutcome.UNKNOWN_CALL
        if row[1] != IntentState.NEEDS_RECONCILE:
            return CommitOutcome.WRONG_STATE
        epoch = int(row[2]) + 1  # fences the executor that was in doubt
        if self.result_json is None:
            _set_state(txn, ["retryable", epoch, row[5], txn.now, self.key])
            claim = Claim(ClaimStatus.FAILED, self.key, epoch, error=row[5], retryable=True)
        else:
            txn.con.execute(_INSERT_RESULT, [self.key, epoch, self.result_json, txn.now])
            _set_state(txn, ["committed", epoch, None, txn.now, self.key])
            txn.wrote_result = True
            claim = Claim(ClaimStatus.COMMITTED, self.key, epoch, self.result_json)
        txn.after_commit.append(lambda: self.book.finished(self.key, claim))
        return CommitOutcome.ACCEPTED


class AttachOp(Op[Claim | None]):
    """Wait for ``tool_call_id`` to leave ``in_progress``; ``None`` if it is unknown."""

    __slots__ = ("book", "key")

    def __init__(self, book: IntentBook, key: str) -> None:
        super().__init__()
        self.book, self.key = book, key

    def apply(self, txn: Txn) -> Claim | None:
        row = txn.con.execute(_SELECT, [self.key]).fetchone()
        if row is None:
            return None
        if row[1] == IntentState.IN_PROGRESS:
            txn.after_commit.append(
                lambda: self.book.waiters.setdefault(self.key, []).append(self.future)
            )
            result: Claim | None = DEFERRED
            return result
        return _stored_claim(txn, self.key, row)

"""Durable side-effect records: claim a tool call before running it, commit its result after.

Usage by the tool gateway::

    claim = await asyncio.wrap_future(store.intents.claim(key, phash, prog, node, "send_mail",
                                                          side_effect=True, idempotent=False))
    if claim.execute:                       # the intent is on disk: run the tool
        result = await run_tool(..., idempotency_key=key)
        await asyncio.wrap_future(store.intents.commit(key, result_json, claim.epoch))

Every future resolves only after the transition has committed. See :mod:`intent_types` for
the state machine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from concurrent.futures import Future

from agentconsole.server.store.intent_ops import (
    AttachOp,
    ClaimOp,
    FinishOp,
    IntentBook,
    ReconcileOp,
)
from agentconsole.server.store.intent_types import Claim, CommitOutcome, RecoveryReport
from agentconsole.server.store.jsonutil import JSONValue, storable
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.writer import StoreWriter

DEFAULT_LEASE_S = 300.0


def make_tool_call_id(program_id: str, node_id: str, logical_attempt: int) -> str:
    """The idempotency key of a tool call: a hash of length-prefixed fields, so that
    different field values can never concatenate to the same input."""
    parts = (program_id, node_id, str(logical_attempt))
    raw = "".join(f"{len(p.encode())}:{p}" for p in parts)
    return "tc_" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def params_hash(params: Mapping[str, JSONValue]) -> str:
    """A stable hash of a tool call's arguments (canonical JSON: sorted keys, no spaces)."""
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def recover_intents(con: SqlConnection, now: float) -> RecoveryReport:
    """Resolve intents a crash left ``in_progress``; run once at start-up, before serving.

    Read-only and idempotent tools become ``retryable`` (the next claim gets ``NEW`` with a
    higher epoch); side-effecting, non-idempotent ones become ``needs_reconcile`` and are
    never re-run automatically. Requires exclusive use of ``con`` (the writer not started).
    """
    con.execute("BEGIN TRANSACTION")
    try:
        rows = con.execute(
            "UPDATE tool_intents SET updated_at = ?, state = CASE WHEN side_effect AND NOT"
            " idempotent THEN 'needs_reconcile' ELSE 'retryable' END"
            " WHERE state = 'in_progress' RETURNING tool_call_id, state",
            [now],
        ).fetchall()
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return RecoveryReport(
        retryable=tuple(sorted(str(k) for k, s in rows if s == "retryable")),
        needs_reconcile=tuple(sorted(str(k) for k, s in rows if s == "needs_reconcile")),
    )


class ToolIntents:
    """The tool-call state machine, run through the store writer."""

    def __init__(self, writer: StoreWriter, recovery: RecoveryReport | None = None) -> None:
        self._writer = writer
        self._book = IntentBook()
        #: What start-up recovery found (empty for a clean start).
        self.recovery = recovery or RecoveryReport()

    def claim(
        self,
        tool_call_id: str,
        params_hash: str,
        program_id: str,
        node_id: str,
        tool: str,
        *,
        side_effect: bool,
        idempotent: bool,
        lease_s: float = DEFAULT_LEASE_S,
        arguments: str | None = None,
    ) -> Future[Claim]:
        """Atomically claim ``tool_call_id``; see :class:`ClaimStatus` for the answers.

        ``NEW`` resolves only after the intent is committed, so running the tool after it is
        safe. A holder whose ``lease_s`` ran out is taken over (``NEW`` with epoch + 1) only
        for re-executable tools (read-only or idempotent); others stay ``IN_PROGRESS``.
        ``arguments`` is what the intent keeps of the call's arguments (JSON text, already
        redacted by the caller; None: nothing; stored as :meth:`commit` stores a result).
        """
        kept = None if arguments is None else storable(arguments)
        return self._writer.submit(
            ClaimOp(
                self._book,
                tool_call_id,
                params_hash,
                program_id,
                node_id,
                tool,
                side_effect,
                idempotent,
                lease_s,
                kept,
            )
        )

    def commit(self, tool_call_id: str, result_json: str, epoch: int) -> Future[CommitOutcome]:
        """Store the result of the execution that claimed at ``epoch``.

        ``STALE_EPOCH`` if the intent was re-claimed since (the result is dropped). Raises
        ``ValueError`` at once if ``result_json`` is not JSON (an unpaired surrogate in it is
        stored as U+FFFD: a tool's answer cut mid-character still commits).
        """
        stored = storable(result_json)
        return self._writer.submit(FinishOp(self._book, tool_call_id, epoch, stored))

    def fail(
        self, tool_call_id: str, error: str, epoch: int, *, retryable: bool
    ) -> Future[CommitOutcome]:
        """Record a failed execution; a retryable one may be claimed again (epoch + 1)."""
        return self._writer.submit(
            FinishOp(self._book, tool_call_id, epoch, None, error=error, retryable=retryable)
        )

    def flag(self, tool_call_id: str, error: str, epoch: int) -> Future[CommitOutcome]:
        """The execution at ``epoch`` ended in doubt (a timeout or a lost connection on a
        side-effecting tool without a downstream key): mark it ``needs_reconcile`` so an
        operator decides; nothing re-runs it automatically."""
        return self._writer.submit(
            FinishOp(self._book, tool_call_id, epoch, None, error=error, in_doubt=True)
        )

    def attach(self, tool_call_id: str) -> Future[Claim | None]:
        """Resolve with the outcome once ``tool_call_id`` is no longer in progress (at once
        if it is not); ``None`` for an unknown key. Waiters do not survive a restart."""
        return self._writer.submit(AttachOp(self._book, tool_call_id))

    def reconcile(self, tool_call_id: str, result_json: str | None = None) -> Future[CommitOutcome]:
        """Settle a ``needs_reconcile`` intent: with the result a human established, or (no
        result) allow one new execution. ``WRONG_STATE`` for any other state."""
        if result_json is not None:
            json.loads(result_json)
        return self._writer.submit(ReconcileOp(self._book, tool_call_id, result_json))

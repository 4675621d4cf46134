"""Values of the durable tool-call state machine (research §1.3).

Stored states (``tool_intents.state``)::

    (none) --claim--> in_progress --commit(epoch)--> committed        (result replayed)
                         |  \\----fail(epoch)-----> failed | retryable
                         |   \\--lease expired, re-executable tool --> in_progress(epoch+1)
                         \\--crash, then recover()--> retryable        (read-only / idempotent)
                                                  needs_reconcile  (side effect, not idempotent)
    retryable --claim--> in_progress(epoch+1);  needs_reconcile --reconcile--> committed | retryable
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import pyarrow as pa

from agentconsole.server.store.tablespec import (
    BOOL,
    FLOAT,
    INT,
    JSON,
    JSON_TEXT,
    STR,
    Kind,
    TableRecord,
    TableSpec,
)


class IntentState(StrEnum):
    """Stored state of one tool call."""

    IN_PROGRESS = "in_progress"
    COMMITTED = "committed"
    FAILED = "failed"
    RETRYABLE = "retryable"
    NEEDS_RECONCILE = "needs_reconcile"


class ClaimStatus(StrEnum):
    """What a claimant must do next."""

    #: The intent is durable and yours (at ``Claim.epoch``): execute the tool, then commit.
    NEW = "new"
    #: Another claimant holds it: answer 409 ``in_progress`` or ``attach`` and wait.
    IN_PROGRESS = "in_progress"
    #: Done before: replay ``Claim.result_json``; do not execute.
    COMMITTED = "committed"
    #: Failed terminally before: replay ``Claim.error``; do not execute.
    FAILED = "failed"
    #: Same key, different parameters: reject with 422; do not execute.
    MISMATCH = "mismatch"
    #: A crash left a non-idempotent side effect in doubt: a human must decide.
    NEEDS_RECONCILE = "needs_reconcile"


class CommitOutcome(StrEnum):
    """Answer to ``commit``, ``fail`` and ``reconcile``."""

    ACCEPTED = "accepted"
    #: The epoch is not the current one: a stale executor was fenced off; nothing changed.
    STALE_EPOCH = "stale_epoch"
    UNKNOWN_CALL = "unknown_call"
    #: The intent is not in a state this transition starts from; nothing changed.
    WRONG_STATE = "wrong_state"


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to a claim (or an attach)."""

    status: ClaimStatus
    tool_call_id: str
    epoch: int
    result_json: str | None = None
    error: str | None = None
    #: For ``FAILED``: the failure was retryable, a new claim will get ``NEW``.
    retryable: bool = False

    @property
    def execute(self) -> bool:
        """True only for ``NEW``: the caller must run the tool now."""
        return self.status is ClaimStatus.NEW


@dataclass(frozen=True, slots=True)
class IntentRecord(TableRecord):
    """One row of ``tool_intents`` (for the console and the API)."""

    tool_call_id: str
    params_hash: str
    program_id: str
    node_id: str
    tool: str
    side_effect: bool
    idempotent: bool
    state: IntentState
    epoch: int
    created_at: float
    updated_at: float
    error: str | None
    #: what the store keeps of the call's arguments (JSON text per the tenant's redaction)
    arguments: str | None = None


IntentRecord.SPEC = TableSpec(
    "tool_intents",
    (
        ("tool_call_id", STR),
        ("params_hash", STR),
        ("program_id", STR),
        ("node_id", STR),
        ("tool", STR),
        ("side_effect", BOOL),
        ("idempotent", BOOL),
        ("state", Kind("VARCHAR", pa.string(), decode=IntentState)),
        ("epoch", INT),
        ("created_at", FLOAT),
        ("updated_at", FLOAT),
        ("error", STR),
        ("arguments", JSON_TEXT),
    ),
    key=("tool_call_id",),
)
#: The committed result of a tool call (one row per key, replaced by a later epoch's commit).
TOOL_RESULTS = TableSpec(
    "tool_results",
    (("tool_call_id", STR), ("epoch", INT), ("result", JSON), ("committed_at", FLOAT)),
    key=("tool_call_id",),
)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What start-up recovery did with intents a crash left ``in_progress``."""

    retryable: tuple[str, ...] = ()
    needs_reconcile: tuple[str, ...] = ()

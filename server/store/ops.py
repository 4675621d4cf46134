"""Work items the writer thread runs inside a batch transaction.

An :class:`Op` is anything that is not a plain event or record: an intent claim, a tool
result, a barrier, a call. The writer applies each op in queue order inside the batch's one
transaction, commits, runs the ``after_commit`` callbacks the ops registered (in-memory
effects that must not happen if the transaction rolls back), and only then resolves each
op's future with the value ``apply`` returned.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agentconsole.server.store.sqlconn import SqlConnection

T = TypeVar("T")

#: Returned by :meth:`Op.apply` when the op resolves its future later itself (a waiter).
DEFERRED: Any = object()


@dataclass(slots=True)
class Txn:
    """What an op sees of the batch transaction it runs in."""

    con: SqlConnection
    now: float
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    #: Set by ops that insert or re-arm a tool intent / commit a tool result (crash points).
    wrote_intent: bool = False
    wrote_result: bool = False
    #: Tables whose stored rows an op updated in place -> how many updates: a checkpoint
    #: rewrites the updated columns of every row group touched, which the WAL's size does not
    #: show (the lane's room check counts them).
    updated_in_place: dict[str, int] = field(default_factory=dict)

    def updated(self, table: str) -> None:
        """An op updated one stored row of ``table`` in place."""
        self.updated_in_place[table] = self.updated_in_place.get(table, 0) + 1


class Op(Generic[T]):
    """A unit of work with a future resolved after its batch commits."""

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: Future[T] = Future()

    def apply(self, txn: Txn) -> T:
        """Do the work on ``txn.con`` (inside the open transaction); must not commit.

        Raising fails the batch; the writer then retries each item alone, so only the
        faulty op's future gets the exception.
        """
        raise NotImplementedError


class CallOp(Op[T]):
    """Run ``fn(con)`` in the writer thread inside the batch transaction."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[SqlConnection], T]) -> None:
        super().__init__()
        self.fn = fn

    def apply(self, txn: Txn) -> T:
        return self.fn(txn.con)


class BarrierOp(Op[None]):
    """Resolves once everything enqueued before it has committed."""

    __slots__ = ()

    def apply(self, txn: Txn) -> None:
        return None

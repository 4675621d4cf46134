"""Child process for the kill -9 tests: drives a store and reports every acknowledgement.

Run as ``python crash_child.py <mode> <db_path>``; each acknowledged write is printed (and
flushed) only after its future resolved, i.e. after its batch committed. The parent kills
the process (or ``AGENTCONSOLE_CRASH_AT`` does) and checks the reopened file.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.store import Store, StoreOpenError


def _say(*parts: object) -> None:
    print(*parts, flush=True)


def events(db: str, total: int) -> None:
    """Append acknowledged events in groups of 50 and print each ``seq``; close at the end."""
    store = Store.open(db)
    _say("OPEN")
    sent = 0
    while sent < total:
        futures: list[Future[int]] = []
        for _ in range(50):
            futures.append(
                store.writer.append(
                    Event(
                        t=time.time(),
                        kind=EventKind.CALL_QUEUED,
                        program_id=f"p{sent % 5}",
                        data={"n": sent},
                    )
                )
            )
            store.writer.emit(Event(t=time.time(), kind=EventKind.CALL_SCHEDULED))
            sent += 1
        for future in futures:
            _say("ACK", future.result(timeout=30))
    store.close()
    _say("CLOSED")


def intents(db: str) -> None:
    """Claim a non-idempotent (A) and an idempotent (B) side-effect tool, then commit both."""
    store = Store.open(db)
    for key, idem in (("A", False), ("B", True)):
        claim = store.intents.claim(
            key, "h", "prog", key, "tool", side_effect=True, idempotent=idem
        ).result(timeout=30)
        _say("CLAIMED", key, claim.status.value, claim.epoch)
    for key in ("A", "B"):
        outcome = store.intents.commit(key, f'{{"key": "{key}"}}', 1).result(timeout=30)
        _say("COMMITTED", key, outcome.value)
    store.close()
    _say("CLOSED")


def try_open(db: str) -> None:
    """Open the store; exit 3 with the error message if it is refused."""
    try:
        Store.open(db).close()
    except StoreOpenError as error:
        _say("REFUSED", error)
        sys.exit(3)
    _say("OPENED")


def open_raw(db: str) -> None:
    """Open the file read-write with plain DuckDB; print the error if that is refused."""
    import duckdb

    try:
        duckdb.connect(db).close()
    except duckdb.Error as error:
        _say("REFUSED", error)
        return
    _say("OPENED")


def hold_read_only(db: str) -> None:
    """Hold the file open read-only (like a misbehaving console) until killed."""
    import duckdb

    con = duckdb.connect(db, read_only=True)
    _say("HOLDING")
    time.sleep(120)
    con.close()


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "events":
        events(path, int(sys.argv[3]))
    elif mode == "intents":
        intents(path)
    elif mode == "open":
        try_open(path)
    elif mode == "hold":
        hold_read_only(path)
    elif mode == "open-raw":
        open_raw(path)
    else:
        raise SystemExit(f"unknown mode {mode}")

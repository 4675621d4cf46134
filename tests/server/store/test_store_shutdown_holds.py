"""The server begins to stop while the store holds a batch its files refused (a full disk):
the store, told first (``Store.give_up_holds``), fails what it holds at once, so the requests
waiting on it are answered (503) before the HTTP server's grace period ends, instead of being
cancelled then with a traceback. Writes the files accept still commit until the close."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import duckdb
import pytest

from agentconsole.server.store import Store, StoreClosedError, StoreConfig
from tests.server.store.test_store_storage_full import (
    NO_SPACE,
    action,
    refuse_commits,
    wait_until,
)

#: far longer than any wait below: only a give-up can answer a held batch's waiters in time
RETRY_S = 60.0


def test_giving_up_holds_fails_the_held_batch_at_once_counted_and_logged(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store.open(db_path, StoreConfig(storage_retry_s=RETRY_S))
    main = refuse_commits(store.writer._main, lambda: duckdb.TransactionException(NO_SPACE))
    main.refusing.set()
    held = store.writer.put_durable(action(1))
    wait_until(lambda: not store.writer.alive)
    store.writer.put(action(2))  # queued behind the held batch, answered 2xx already
    assert not held.done()
    started = time.monotonic()
    with caplog.at_level(logging.CRITICAL, logger="agentconsole.server.store.lane"):
        store.give_up_holds()
        with pytest.raises(StoreClosedError):
            held.result(timeout=5)
        given_up_s = time.monotonic() - started
        # the lane fails the futures, counts the drop, then logs: wait for the last of them
        wait_until(lambda: any("items not written" in r.getMessage() for r in caplog.records))
    assert given_up_s < 5  # one last try, not the next retry in 60 s
    assert main.refused == 2  # the first try and the last one
    assert store.writer.stats.dropped == 2
    lost = [r.getMessage() for r in caplog.records if "items not written" in r.getMessage()]
    assert lost == [
        f"store writer store-writer stopped with 2 items not written: its files still refuse"
        f" writes ({NO_SPACE})"
    ]
    started = time.monotonic()
    assert store.close(timeout=30) is False  # nothing checkpointed: the disk is full
    assert time.monotonic() - started < 5
    with Store.open(db_path) as again:
        assert again.writer.alive


def test_after_giving_up_holds_accepted_writes_commit_and_a_refused_one_is_not_held(
    db_path: Path,
) -> None:
    store = Store.open(db_path, StoreConfig(storage_retry_s=RETRY_S))
    main = refuse_commits(store.writer._main, lambda: duckdb.TransactionException(NO_SPACE))
    store.give_up_holds()  # nothing held: the store goes on writing
    store.writer.put_durable(action(1)).result(timeout=10)
    assert store.writer.alive
    main.refusing.set()
    refused = store.writer.put_durable(action(2))
    with pytest.raises(StoreClosedError):
        refused.result(timeout=5)  # one retry, then failed, not held for the next 60 s
    assert main.refused == 2
    assert store.close(timeout=30) is False
    with Store.open(db_path) as again, again.cursor() as cur:
        assert cur.execute("SELECT count(*) FROM operator_actions").fetchall() == [(1,)]

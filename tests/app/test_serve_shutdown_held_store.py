"""``serve`` stops while its store holds a batch its files refused (a full disk): the request
waiting on that batch gets its 503 as soon as the server begins to stop (the store is told
first to give up its holds), not a cancellation with a logged traceback once uvicorn's grace
period ends."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import duckdb
import httpx
import pytest

from tests.server.api.harness import OPERATOR, LiveServer, make_config
from tests.server.store.test_store_storage_full import NO_SPACE, refuse_commits, wait_until

#: the harness's grace period for open connections at stop (``LiveServer``)
GRACE_S = 3.0


def test_a_request_waiting_on_a_held_commit_is_answered_503_when_serve_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    answers: list[httpx.Response | BaseException] = []
    with LiveServer(make_config(tmp_path / "s.duckdb")) as server:
        server.wait_ready()
        store = server.live.store
        main = refuse_commits(store.writer._main, lambda: duckdb.TransactionException(NO_SPACE))
        main.refusing.set()

        def drain() -> None:
            # the audit row of an operator action is written durably before the answer
            try:
                with server.client(OPERATOR) as client:
                    answers.append(client.post("/v1/operator/drain", json={"enabled": False}))
            except BaseException as error:  # a cut connection is the failure shown
                answers.append(error)

        caller = threading.Thread(target=drain)
        with caplog.at_level(logging.ERROR):
            caller.start()
            wait_until(lambda: main.refused >= 1 and not store.writer.alive)  # held
            time.sleep(0.2)  # the request waits on the held batch
            assert not answers
            stopping = time.monotonic()
            server.server.should_exit = True
            caller.join(30)
            answered_after = time.monotonic() - stopping
    assert len(answers) == 1
    answer = answers[0]
    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 503, answer.text
    assert answered_after < GRACE_S - 1  # answered at the stop, not when the grace ended
    assert not [record for record in caplog.records if record.exc_info]

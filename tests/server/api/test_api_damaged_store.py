"""A corrupt block in a table the server does not read at start (``prompt_blocks``): the
server starts and serves; the route that needs the block (``POST /v1/operator/whatif``)
answers a 5xx error with one log line naming the damage, where it used to log an unhandled
error with its whole traceback; the routes that do not need it keep answering."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from agentconsole.server.store import Store
from agentconsole.server.store.prompt_blocks import PromptBlocksRecord
from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config
from tests.server.store.store_helpers import corrupt_a_block_of


def _recorded_store(db: Path) -> None:
    """A program with calls, then enough prompt blocks that the table has blocks of its own
    (a real server's few rows would share theirs with nothing to corrupt alone)."""
    with LiveServer(make_config(db)) as server:
        server.wait_ready()
        with server.client() as c:
            assert c.post("/v1/programs", json={"program_id": "dm-1"}).status_code == 201
            call = chat_body("hello " * 300, program_id="dm-1")
            assert c.post("/v1/chat/completions", json=call).status_code == 200
    generator = random.Random(3)
    with Store.open(db) as store:
        for i in range(3000):
            hashes = tuple(generator.getrandbits(63) for _ in range(40))
            record = PromptBlocksRecord(
                "dm-1", f"x{i}", 0, f"dm-c{i}", "tenant-a", float(i), 2560, 0, blocks=hashes
            )
            store.writer.put(record)


def test_a_corrupt_block_fails_only_the_route_that_reads_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "damaged.duckdb"
    _recorded_store(db)
    corrupt_a_block_of(db, "prompt_blocks")
    with LiveServer(make_config(db)) as server:
        server.wait_ready()
        with server.client(OPERATOR) as op, server.client() as c:
            caplog.clear()
            with caplog.at_level(logging.ERROR):
                refused = op.post("/v1/operator/whatif", json={"since": 0})
            assert refused.status_code >= 500, refused.text
            assert refused.json()["error"]["type"] != "internal_error"
            # a retry meets the same block: the answer says so and names the file
            assert refused.headers["x-should-retry"] == "false"
            assert str(db) in refused.json()["error"]["message"]
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert errors, "the damage is logged"
            assert all(r.exc_info is None for r in errors), "one line, no traceback"
            assert any("Corrupt database file" in r.getMessage() for r in errors)
            # the rest of the store serves
            assert c.get("/v1/programs/dm-1").status_code == 200
            assert c.post("/v1/programs", json={"program_id": "dm-2"}).status_code == 201
        with server.client(None) as anon:
            assert anon.get("/ready").status_code == 200

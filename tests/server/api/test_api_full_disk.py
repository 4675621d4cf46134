"""A disk that refuses the store's commits (full, read-only): ``/ready`` says ``store: false``
and writes answer 503 while the refused rows are held; once the disk has room they commit and
the server is ready again. The creation that met the full disk is answered once its rows are
written, and a restart finds it: it used to be answered 201 at once while its rows were
dropped, the writer still reporting itself alive.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb

from tests.server.api.harness import LiveServer, make_config, wait_until
from tests.server.store.test_store_storage_full import NO_SPACE, refuse_commits


def test_a_full_disk_refuses_writes_and_loses_no_acknowledged_program(tmp_path: Path) -> None:
    db = tmp_path / "full.duckdb"
    with LiveServer(make_config(db)) as server:
        server.wait_ready()
        writer = server.live.store.writer
        lanes = [
            refuse_commits(lane, lambda: duckdb.TransactionException(NO_SPACE))
            for lane in (writer._main, writer._events)
        ]
        with (
            server.client() as c,
            server.client() as waiting,
            server.client(None) as anon,
            ThreadPoolExecutor(1) as pool,
        ):
            assert c.post("/v1/programs", json={"program_id": "fd-before"}).status_code == 201
            for lane in lanes:
                lane.refusing.set()  # the disk fills up
            # answered once its rows have committed: it waits for the disk
            kept = pool.submit(waiting.post, "/v1/programs", json={"program_id": "fd-kept"})
            wait_until(lambda: anon.get("/ready").status_code == 503)
            assert anon.get("/ready").json() == {"runtime": True, "store": False, "draining": False}
            refused = c.post("/v1/programs", json={"program_id": "fd-refused"})
            assert refused.status_code == 503, refused.text
            assert "store cannot record" in refused.json()["error"]["message"]
            assert refused.headers["x-should-retry"] == "true"
            listing = c.get("/v1/programs")  # reads still answer
            assert listing.status_code == 200, listing.text
            # what an operator's alerts see: the refused commits, counted as they come
            refusals = re.search(
                r"^agentconsole_store_commits_refused_total (\S+)$", c.get("/metrics").text, re.M
            )
            assert refusals is not None
            assert float(refusals.group(1)) >= 1

            for lane in lanes:
                lane.refusing.clear()  # room again: the held rows commit, writes resume
            wait_until(lambda: anon.get("/ready").status_code == 200)
            created = kept.result(timeout=10)
            assert created.status_code == 201, created.text
            assert c.post("/v1/programs", json={"program_id": "fd-after"}).status_code == 201
    with LiveServer(make_config(db)) as again, again.client() as c:
        again.wait_ready()
        for program_id in ("fd-before", "fd-kept", "fd-after"):
            assert c.get(f"/v1/programs/{program_id}").status_code == 200, program_id
        assert c.get("/v1/programs/fd-refused").status_code == 404

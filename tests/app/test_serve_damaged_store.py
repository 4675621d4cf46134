"""A store whose damage only start-up's first reads meet (no check before the start reads that
far) is refused as every other store refusal is: ``serve`` exits 2 with the store's one-line
message, no traceback, and the files as they were."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agentconsole.server.store import ProgramRecord, Store
from tests.server.store.store_helpers import corrupt_a_block_of, digest, store_files

#: enough finished programs, each with some data, to fill blocks that hold ``programs`` alone
PROGRAMS = 4000


def _store_with_programs(db: Path) -> None:
    """A closed store whose ``programs`` table (read by start-up) fills several blocks."""
    with Store.open(db) as store:
        for i in range(PROGRAMS):
            store.writer.put(
                ProgramRecord(
                    f"p{i}",
                    "default",
                    "finished",
                    float(i),
                    float(i),
                    data={"note": f"program {i} " + "x" * 200},
                    finished_at=float(i),
                )
            )
        store.writer.flush().result(timeout=30)


def serve_sim_on(db: Path, cwd: Path, *, log_level: str) -> subprocess.CompletedProcess[str]:
    """``agentconsole serve --runtime sim --port 0 --db db`` run to its end (a refused
    start-up ends at once), logging at ``log_level``."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from agentconsole.cli import main; main()",
            "serve",
            "--runtime",
            "sim",
            "--port",
            "0",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AGENTCONSOLE_SERVER__LOG_LEVEL": log_level},
        cwd=cwd,
    )


def test_damage_met_by_start_ups_reads_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Before: exit 3, after the lifespan's whole traceback (Litestar's, logged by uvicorn)."""
    db = tmp_path / "store.duckdb"
    _store_with_programs(db)
    corrupt_a_block_of(db, "programs")
    before = digest(*store_files(db))
    serve = serve_sim_on(db, tmp_path, log_level="info")
    output = serve.stdout + serve.stderr
    assert serve.returncode == 2, output
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, output
    assert errors[0].startswith(f"Error: store {db} (or its event log) is damaged: Corrupt")
    assert "restore from a backup" in errors[0]
    assert digest(*store_files(db)) == before

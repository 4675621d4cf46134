"""Checkpoints only where the store can afford them: a store whose disk fills up (or whose
files reach the process's file-size limit) past its checkpoint size stays alive. Its writes
are held and refused (503) until there is room, then they resume, and nothing acknowledged
is lost.

Before: DuckDB checkpointed by itself inside a COMMIT once the WAL passed
``checkpoint_threshold``, and a checkpoint that could not write invalidated the instance
("Transaction COMMIT succeeded and is durable, but the autocheckpoint failed ... The database
has been invalidated"): the lane died, the batch that had committed was answered as failed,
and the server could not write again until restarted.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from agentconsole.server.store import Store, StoreConfig
from agentconsole.server.store import lane as lane_module
from agentconsole.server.store.batch import is_storage_failure
from agentconsole.server.store.event_log import EVENTS

CHILD = Path(__file__).with_name("full_disk_child.py")
#: How far the event log may grow past its size at open under the file-size limit: with the
#: lanes' 8 MiB checkpoint headroom and the child's 1 MB checkpoint size, room for two or
#: three checkpoints, then not; the WAL then grows to the limit and its commits are refused.
FSIZE_ROOM = 11_000_000
#: The child's checkpoint size (``full_disk_child.THRESHOLD``, "1MB"), in bytes.
CHILD_CHECKPOINT_BYTES = 1_000_000
#: The WAL the child ends with is several times its checkpoint size: checkpoints were skipped.
WAL_PAST_CHECKPOINTS = 4 * CHILD_CHECKPOINT_BYTES


def run_child(mode: str, db: Path, arg: str) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """Run :mod:`full_disk_child`; its report when the storage refused, its report once there
    was room again (None if it did not get that far), and its log."""
    child = subprocess.run(
        [sys.executable, str(CHILD), mode, str(db), arg],
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the child reported nothing (rc {child.returncode}):\n{child.stderr[-3000:]}"
    return lines[0], lines[1] if len(lines) > 1 else None, child.stderr


def check_survived(
    full: dict[str, Any], after: dict[str, Any] | None, log: str, refusal: str, db: Path
) -> None:
    """The store held its writes while full, checkpointed and wrote again once it had room, and
    a reopen finds every acknowledged event."""
    # held, not dead: before, the failed automatic checkpoint invalidated the instance
    assert full["holding"], full
    assert not full["alive"], full
    assert refusal in full["failure"], full
    assert "cannot write to its files" in str(full["refused"]), full
    assert full["checkpoints"] >= 1, full  # the lane checkpoints by size while there is room
    assert full["wal_bytes"] > WAL_PAST_CHECKPOINTS, full  # and skipped them once there was none
    assert log.count("skips checkpoints") == 1, log  # once for the episode, not every batch
    assert after is not None
    assert after["alive_again"], after
    assert after["late_acks"] == full["pending"] > 0, after  # the held batch committed
    assert after["checkpointed_again"], after
    assert after["wal_bytes"] < CHILD_CHECKPOINT_BYTES, after
    assert after["closed_cleanly"], after
    with Store.open(db) as store, store.cursor() as cur:
        stored = [
            row[0] for row in cur.execute(f"SELECT seq FROM {EVENTS} ORDER BY seq").fetchall()
        ]
    assert stored == after["acked"]  # every acknowledged event, and only those


def test_a_file_size_limit_past_the_checkpoint_size_holds_writes_and_keeps_the_store(
    db_path: Path,
) -> None:
    full, after, log = run_child("fsize", db_path, str(FSIZE_ROOM))
    check_survived(full, after, log, "File too large", db_path)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs of the test's own (root only; skipped elsewhere)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr!r}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_past_the_checkpoint_size_holds_writes_and_keeps_the_store(
    small_disk: Path,
) -> None:
    db = small_disk / "store.duckdb"
    full, after, log = run_child("disk", db, "64m")
    check_survived(full, after, log, "No space left on device", db)


def test_a_file_size_limit_is_a_storage_failure_not_the_items_own() -> None:
    """What DuckDB 2.0.1 raises for a WAL past ``RLIMIT_FSIZE``: held like a full disk, where
    it used to fail each item alone (and drop the fire-and-forget ones)."""
    wal_too_large = duckdb.TransactionException(
        'TransactionContext Error: Failed to commit: Could not write file "/d/x.wal": '
        "File too large"
    )
    assert is_storage_failure(wal_too_large)
    assert is_storage_failure(OSError(errno.EFBIG, os.strerror(errno.EFBIG)))


@pytest.mark.parametrize(
    ("text", "size"),
    [("2MB", 2_000_000), ("2 mb", 2_000_000), ("1.5MiB", 1_572_864), ("512kb", 512_000)],
)
def test_the_checkpoint_size_is_read_as_duckdb_reads_it(text: str, size: int) -> None:
    assert StoreConfig(checkpoint_threshold=text).checkpoint_threshold_bytes == size


def test_a_checkpoint_size_duckdb_would_not_take_fails_at_once() -> None:
    with pytest.raises(ValueError, match="not a size"):
        StoreConfig(checkpoint_threshold="2000")


def test_intents_updated_in_place_count_in_the_room_a_checkpoint_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool intent's state change updates its row in place, and a checkpoint then rewrites
    the updated columns of the row group (~1 MB) however small the WAL: the room check counts
    one row group per update, at most every row group of the table."""
    config = StoreConfig(idle_checkpoint_s=3600.0)  # no idle checkpoint meanwhile
    with Store.open(tmp_path / "s.duckdb", config) as store:
        for key in ("k1", "k2", "k3"):
            claim = store.intents.claim(
                key, "h", "prog", "node", "tool", side_effect=True, idempotent=False
            ).result(timeout=10)
            store.intents.commit(key, "{}", claim.epoch).result(timeout=10)
        lane = store.writer._main
        assert lane._updated_in_place == {"tool_intents": 3}
        assert lane._rewritten_row_groups() == 1  # three rows, one row group
        wal = lane._wal_bytes()
        monkeypatch.setattr(lane_module, "room_to_grow", lambda _: lane_module.checkpoint_need(wal))
        reason = lane._no_room_for_checkpoint()
        assert reason is not None  # room for the WAL, not for the rewritten row group
        assert f"{lane_module.checkpoint_need(wal, 1):,}" in reason
        assert lane._checkpoint_if_safe()  # skipped, the lane alive
        assert store.writer.stats.checkpoints_skipped == 1  # counted for /metrics
        assert lane._updated_in_place == {"tool_intents": 3}
        lane.checkpoint_now()  # the lane is idle: its connection is free
        assert lane._updated_in_place == {}
        assert lane._no_room_for_checkpoint() is None

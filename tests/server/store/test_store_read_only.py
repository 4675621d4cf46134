"""A data directory the server cannot write (a read-only file system, or permissions) is
refused before anything is opened, in one line that says so and names the path: it used to
reach DuckDB's read-write open and come back as "the database file is damaged ... Restore
from a backup" about a healthy file."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from agentconsole.server.store import OperatorAction, Store, StoreConfig, StoreOpenError
from agentconsole.server.store.opening import check_openable, explain_open_error
from tests.server.store.store_helpers import digest, store_files


def _refusals(db: Path) -> list[StoreOpenError]:
    """What ``serve``'s pre-start check and the open itself raise for ``db``."""
    refusals = []
    for attempt in (lambda: check_openable(db, StoreConfig()), lambda: Store.open(db)):
        with pytest.raises(StoreOpenError) as caught:
            attempt()
        refusals.append(caught.value)
    return refusals


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of its own, to remount read-only (root with CAP_SYS_ADMIN only)."""
    where = tmp_path / "mnt"
    where.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    try:
        _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where))
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


def test_an_existing_store_on_a_file_system_remounted_read_only_is_refused(tmpfs: Path) -> None:
    db = tmpfs / "store.duckdb"
    with Store.open(db) as store:
        store.writer.put_durable(OperatorAction(1.0, "alice", "drain", "w", "ok")).result(10)
    before = digest(*store_files(db))
    _mount("-o", "remount,ro", str(tmpfs))
    for refusal in _refusals(db):
        assert f"the data directory {tmpfs} is on a read-only file system" in str(refusal)
        assert "damaged" not in str(refusal)
        assert "backup" not in str(refusal)
        assert refusal.path == db
    assert digest(*store_files(db)) == before
    _mount("-o", "remount,rw", str(tmpfs))
    with Store.open(db) as again:  # the store was healthy all along
        assert again.writer.alive


def test_a_new_store_on_a_read_only_file_system_is_refused(tmpfs: Path) -> None:
    _mount("-o", "remount,ro", str(tmpfs))
    db = tmpfs / "store.duckdb"
    for refusal in _refusals(db):
        assert "read-only file system" in str(refusal)
        assert "damaged" not in str(refusal)
    assert not db.exists()


def test_a_data_directory_without_write_permission_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = data / "store.duckdb"
    Store.open(db).close()
    before = digest(*store_files(db))
    data.chmod(0o555)
    try:
        if os.access(data, os.W_OK):
            pytest.skip(
                "this process writes whatever the mode bits say (root with CAP_DAC_OVERRIDE); "
                "the read-only mount tests cover root"
            )
        for refusal in _refusals(db):
            assert f"the data directory {data} is not writable by this user" in str(refusal)
            assert "damaged" not in str(refusal)
    finally:
        data.chmod(0o755)
    assert digest(*store_files(db)) == before


def test_duckdbs_read_only_error_is_not_called_damage(tmp_path: Path) -> None:
    """A file system remounted read-only between the check and DuckDB's open: DuckDB's own
    error gets the same answer."""
    db = tmp_path / "store.duckdb"
    error = duckdb.IOException(f'IO Error: Cannot open file "{db}": Read-only file system')
    refusal = explain_open_error(db, error)
    assert f"the data directory {tmp_path} is on a read-only file system" in str(refusal)
    assert "damaged" not in str(refusal)

"""Opening the DuckDB file read-write, or refusing to with a message an operator can act on.

Nothing here deletes, copies, truncates or rewrites a file: a database or WAL that cannot be
opened cleanly stops start-up and is left exactly as found, because the usual "fix" (delete
the ``.wal``) throws committed transactions away. An existing file is first opened
read-only as a probe (DuckDB then replays the WAL in memory and writes nothing), checked by
:mod:`preflight`, closed, and only then opened read-write: a read-write open checkpoints a
replayed WAL into the file, so it must not be the first to meet a damaged one.

The store is two files, the database and its event log (:mod:`event_log`); both go through
the same checks before either is opened read-write.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import duckdb

from agentconsole.server.store.config import StoreConfig
from agentconsole.server.store.errors import DAMAGE_REMEDY, StoreOpenError, is_corrupt_block
from agentconsole.server.store.event_log import (
    EVENT_LOG,
    REMEDY,
    ROW_GROUP_SIZE,
    SPLIT_VERSION,
    check_pair,
    event_log_path,
)
from agentconsole.server.store.preflight import missing_blocks, wal_path, wal_problem
from agentconsole.server.store.remote import DBPROCESS_MODULE, connect_in_process
from agentconsole.server.store.sqlconn import SqlConnection

T = TypeVar("T")

_KEEP = "Both files were left untouched; keep them (a copy is the safe way to experiment)"
_LOCK_HOLDER = re.compile(r"held in (?P<prog>.*?) \(PID (?P<pid>\d+)\)")
# DuckDB hands a second connect() of the same file in one process the *same* instance, which
# would give one file two writers; this registry refuses that instead.
_open_in_process: set[str] = set()
_registry_lock = threading.Lock()
#: How long an open waits for a lock held by a process that is exiting.
EXITING_HOLDER_WAIT_S = 10.0
_IN_PROCESS = "Use the open Store object (reads: Store.cursor(), export: pass the Store)."


@dataclass(frozen=True, slots=True)
class OpenInfo:
    """What was found at open: ``wal_bytes`` > 0 (the two files' WALs together) means the last
    shutdown was not clean."""

    path: Path
    created: bool
    wal_bytes: int

    @property
    def event_log(self) -> Path:
        """The event log file next to :attr:`path`."""
        return event_log_path(self.path)


def refuse_unsafe_paths(path: Path) -> None:
    """Raise :class:`StoreOpenError` for a missing directory, a non-file, or a bad WAL."""
    if not path.parent.is_dir():
        raise StoreOpenError(
            path, f"the directory {path.parent} does not exist", "Create it or choose another path."
        )
    if path.exists() and not path.is_file():
        raise StoreOpenError(path, "it is not a regular file", "Choose a file path.")
    problem = wal_problem(path)
    if problem is not None:
        raise StoreOpenError(
            path,
            problem,
            f"{_KEEP}. Inspect them with the duckdb {duckdb.__version__} CLI, or restore from a "
            "backup; deleting the WAL loses the transactions in it.",
        )


def refuse_unwritable(path: Path) -> None:
    """Raise :class:`StoreOpenError` when the store at ``path`` could not be written: its
    directory (where DuckDB creates the file and the WALs) or one of its existing files is
    read-only, by a read-only file system or by permissions. Read-write opens only: a
    read-only export of a store on a read-only disk is fine."""
    files = (path, wal_path(path), event_log_path(path), wal_path(event_log_path(path)))
    for target in (path.parent, *(file for file in files if file.exists())):
        # access() answers EROFS for a read-only mount whoever asks, root included, and
        # for the permission bits as the process's effective user (DuckDB's)
        if not os.access(target, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
            raise _unwritable(path, target, _read_only_mount(target))


def _read_only_mount(target: Path) -> bool:
    try:
        return bool(os.statvfs(target).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _unwritable(path: Path, target: Path, read_only_mount: bool) -> StoreOpenError:
    """The refusal of a store whose ``target`` (its directory or one of its files) cannot
    be written: not damage, so no talk of backups."""
    what = f"the data directory {target}" if target == path.parent else str(target)
    if read_only_mount:
        return StoreOpenError(
            path,
            f"{what} is on a read-only file system",
            "Remount it read-write or serve from a writable directory (--db); the files were "
            "not touched.",
        )
    return StoreOpenError(
        path,
        f"{what} is not writable by this user (uid {os.geteuid()})",
        "Fix its owner or mode, or serve from a writable directory (--db); the files were "
        "not touched.",
    )


def explain_open_error(path: Path, error: Exception) -> StoreOpenError:
    """Turn DuckDB's open error into a :class:`StoreOpenError` with a remedy."""
    message = str(error)
    wal = wal_path(path)
    if (
        isinstance(error, OSError) and error.errno == errno.EROFS
    ) or "Read-only file system" in message:
        # e.g. remounted read-only after refuse_unwritable looked
        return _unwritable(path, path.parent, read_only_mount=True)
    if "different configuration" in message:
        return StoreOpenError(path, "it is already open in this process", _IN_PROCESS)
    if "Could not set lock" in message or "Conflicting lock" in message:
        holder = _LOCK_HOLDER.search(message)
        who = f" ({_describe_holder(int(holder['pid']), holder['prog'])})" if holder else ""
        return StoreOpenError(
            path,
            f"it is locked by another process{who}",
            "Only the serve process may open the store, read-only openers included (consoles "
            "read through the HTTP API). Stop the other process or use another file.",
        )
    if "replaying WAL" in message or "WAL file" in message:
        return StoreOpenError(
            path,
            f"its write-ahead log {wal} cannot be replayed ({message})",
            f"{_KEEP}. Restore from a backup, or inspect them with the duckdb "
            f"{duckdb.__version__} CLI; deleting the WAL loses the transactions in it.",
        )
    if "not a valid DuckDB database file" in message:
        return StoreOpenError(
            path,
            "the file exists but is not a DuckDB database",
            "Check the path. agentconsole never overwrites a file it did not create.",
        )
    if "version" in message.lower() and "storage" in message.lower():
        return StoreOpenError(
            path,
            f"it was written by an incompatible DuckDB version ({message})",
            f"Open it with the DuckDB version that wrote it and export it; this build uses "
            f"{duckdb.__version__}.",
        )
    if is_corrupt_block(error):
        return StoreOpenError(
            path,
            f"a block of the database or its event log is corrupt ({message})",
            f"{DAMAGE_REMEDY}.",
        )
    if isinstance(error, PermissionError) or "Permission denied" in message:
        return StoreOpenError(
            path, f"permission denied ({message})", "Fix the file's owner or mode."
        )
    return StoreOpenError(
        path,
        f"the database file is damaged or unreadable ({message})",
        f"{_KEEP}. Restore from a backup or the last Parquet export.",
    )


def _process_state(pid: int) -> tuple[str, int] | None:
    """``(state, parent PID)`` of process ``pid`` from ``/proc`` (``Z``: exited, not yet
    reaped); None when there is no such process (or no ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _describe_holder(pid: int, program: str) -> str:
    """``PID n, program``; for a store's database process (``dbprocess.py``), also the
    process it serves, which is the one to stop."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""
    state = _process_state(pid)
    if state is None or DBPROCESS_MODULE.encode() not in cmdline:
        return f"PID {pid}, {program}"
    if state[1] == 1:  # its server is gone, and it is ending (or stuck: stop it)
        return f"PID {pid}, the database process of a server that has ended"
    return f"PID {pid}, the database process of PID {state[1]}"


def probe(path: Path, config: StoreConfig) -> None:
    """Open an existing ``path`` read-only, check it, close it; raise :class:`StoreOpenError`
    for anything :func:`explain_open_error` or :func:`missing_blocks` objects to."""
    settings: dict[str, str | bool | int | float | list[str]] = {
        "memory_limit": config.memory_limit,
        "threads": str(config.threads),
    }
    try:
        con = duckdb.connect(str(path), read_only=True, config=settings)
    except (duckdb.Error, OSError) as error:
        raise explain_open_error(path, error) from error
    try:
        problem = missing_blocks(con, path)
    except duckdb.Error as error:
        raise explain_open_error(path, error) from error
    finally:
        con.close()
    if problem is not None:
        raise StoreOpenError(path, problem, f"{_KEEP}. Restore from a backup or the last export.")


def open_connection(path: Path, config: StoreConfig) -> tuple[SqlConnection, OpenInfo]:
    """Open ``path`` read-write with ``config`` applied at open time (before WAL replay).

    Creates the file if it does not exist. Raises :class:`StoreOpenError` if the directory is
    missing or it or a file cannot be written (:func:`refuse_unwritable`), the file is locked
    by another process (or already open in this one), is not a DuckDB database, is damaged or
    truncated, or its WAL cannot be replayed or fails :func:`wal_problem`; the files are then
    unchanged. A lock held by a process that is exiting (a crashed server's database process,
    whose files close after its threads end) is waited for, up to
    :data:`EXITING_HOLDER_WAIT_S`.
    """
    path = path.absolute()
    files = (path, event_log_path(path))
    keys = [os.path.realpath(file) for file in files]
    with _registry_lock:
        # first, before any file is touched: closing a descriptor of a file this process
        # already serves would drop DuckDB's lock on it
        if any(key in _open_in_process for key in keys):
            raise StoreOpenError(path, "it is already open in this process", _IN_PROCESS)
        for file in files:
            refuse_unsafe_paths(file)
        refuse_foreign(files)
        created = _refuse_orphan_log(files)
        refuse_unwritable(path)
        wal_bytes = 0
        for file in files:
            wal = wal_path(file)
            wal_bytes += wal.stat().st_size if wal.is_file() else 0
        con = _while_holder_exits(lambda: _probe_and_connect(files, config))
        _open_in_process.update(keys)
    return con, OpenInfo(path=path, created=created, wal_bytes=wal_bytes)


def check_openable(path: Path, config: StoreConfig) -> None:
    """Raise the :class:`StoreOpenError` :func:`open_connection` would for ``path`` (locked
    by another process, a missing or read-only directory, a damaged file or WAL), reading
    only, with the same wait for a holder that is exiting; nothing for a store it would
    create."""
    path = path.absolute()
    files = (path, event_log_path(path))
    for file in files:
        refuse_unsafe_paths(file)
    refuse_foreign(files)
    _refuse_orphan_log(files)
    refuse_unwritable(path)
    _while_holder_exits(lambda: _probe_existing(files, config))


#: where DuckDB's file header says what the file is (after an 8-byte checksum)
_MAGIC_AT, _MAGIC = 8, b"DUCK"


def refuse_foreign(files: tuple[Path, Path]) -> None:
    """Refuse a file of the store that exists with content but is no DuckDB database, read
    from its header before DuckDB sees it: DuckDB reads some names otherwise (a ``.json``
    path opened as a JSON scan, "cannot launch in-memory database in read-only mode"),
    which read as a damaged store to restore from a backup."""
    for file in files:
        try:
            with file.open("rb") as handle:
                head = handle.read(_MAGIC_AT + len(_MAGIC))
        except OSError:
            continue  # missing (a new store), or unreadable: DuckDB's own error says which
        if head and head[_MAGIC_AT:] != _MAGIC:
            raise StoreOpenError(
                file,
                "the file exists but is not a DuckDB database",
                "Check the path. agentconsole never overwrites a file it did not create.",
            )


def _refuse_orphan_log(files: tuple[Path, Path]) -> bool:
    """Whether the store is new (no database file); refused when its event log exists."""
    created = not files[0].exists()
    if created and files[1].exists():
        raise StoreOpenError(files[1], "an event log exists but its database does not", REMEDY)
    return created


def _while_holder_exits(attempt: Callable[[], T]) -> T:
    """``attempt()``, again while it fails on a lock held by a process that is exiting, up to
    :data:`EXITING_HOLDER_WAIT_S`."""
    deadline = time.monotonic() + EXITING_HOLDER_WAIT_S
    while True:
        try:
            return attempt()
        except StoreOpenError as error:
            if time.monotonic() > deadline or not _holder_exiting(error.__cause__):
                raise
            time.sleep(0.05)


def _probe_existing(files: tuple[Path, Path], config: StoreConfig) -> None:
    for file in files:
        if file.exists():
            probe(file, config)


def _probe_and_connect(files: tuple[Path, Path], config: StoreConfig) -> SqlConnection:
    _probe_existing(files, config)
    try:
        return connect(files[0], config)
    except (duckdb.Error, OSError) as error:
        raise explain_open_error(files[0], error) from error


def _holder_exiting(error: BaseException | None) -> bool:
    """Whether ``error`` is a lock conflict with a process that is ending (a zombie, or gone)."""
    holder = _LOCK_HOLDER.search(str(error)) if error is not None else None
    if holder is None:
        return False
    state = _process_state(int(holder["pid"]))
    return state is None or state[0] in ("Z", "X")


def connect(path: Path, config: StoreConfig) -> SqlConnection:
    """``duckdb.connect`` of ``path`` read-write, in this process or in a database process of
    its own (``config.own_process``)."""
    if config.own_process:
        return connect_in_process(str(path), config.duckdb_config())
    return duckdb.connect(str(path), config=config.duckdb_config())


def attach_event_log(
    con: SqlConnection, path: Path, schema_version: int, *, read_only: bool = False
) -> bool:
    """Attach the event log of the store at ``path`` as ``event_log``, after checking that it
    belongs to this store (:func:`check_pair`); False if there is none to attach read-only (a
    store from before version 2 keeps its events in the main file).

    Read-write, an existing event log is first attached read-only for the check (a
    read-write attach replays its WAL into the file, so it must not be the first to meet a
    foreign one), and one is created for a store that has not moved its events yet. Raises
    :class:`StoreOpenError` if a store of version 2 or later has lost its event log, the log
    belongs elsewhere, or DuckDB refuses the file (locked, damaged); nothing is written then.
    """
    log_path = event_log_path(path)
    if not log_path.exists():
        if schema_version >= SPLIT_VERSION:
            raise StoreOpenError(log_path, "the store's event log is missing", REMEDY)
        if read_only:
            return False
    elif not read_only:
        _attach(con, log_path, read_only=True)
        try:
            check_pair(con, path, schema_version)
        finally:
            con.execute(f"DETACH {EVENT_LOG}")
    _attach(con, log_path, read_only=read_only)
    if read_only:  # read-write, an existing log was checked above and a new one is empty
        check_pair(con, path, schema_version)
    return True


def _attach(con: SqlConnection, log_path: Path, *, read_only: bool) -> None:
    quoted = "'" + str(log_path).replace("'", "''") + "'"
    mode = " (READ_ONLY)" if read_only else f" (ROW_GROUP_SIZE {ROW_GROUP_SIZE})"
    try:
        con.execute(f"ATTACH {quoted} AS {EVENT_LOG}{mode}")
    except (duckdb.Error, OSError) as error:
        raise explain_open_error(log_path, error) from error


def refuse_if_open_here(path: Path) -> None:
    """Raise :class:`StoreOpenError` if the store at ``path`` is open in this process (then
    this process must not touch its files at all; read it through the open ``Store``)."""
    with _registry_lock:
        if any(os.path.realpath(file) in _open_in_process for file in (path, event_log_path(path))):
            raise StoreOpenError(path, "it is already open in this process", _IN_PROCESS)


def release(path: Path) -> None:
    """Forget that the store at ``path`` is open in this process (after its connection was
    closed)."""
    with _registry_lock:
        for file in (path, event_log_path(path)):
            _open_in_process.discard(os.path.realpath(file))

"""The store's front door: open safely, migrate, recover, serve, close cleanly.

A store is two DuckDB files, the database and its event log (:mod:`event_log`), in one
DuckDB instance. Start-up order: refuse unsafe files (:mod:`opening`), attach the event log
and check that it belongs to the database, migrate the schema, resolve tool intents a crash
left in progress, ``CHECKPOINT`` both (so neither DDL nor recovery sits in a WAL while
serving), then start the writer's threads. Close: stop taking writes, commit everything
queued, wait for readers, ``CHECKPOINT`` both, close the connection.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import duckdb

from agentconsole.server.store.config import StoreConfig
from agentconsole.server.store.crash import CrashPoints
from agentconsole.server.store.errors import (
    StoreClosedError,
    StoreDamagedError,
    StoreOpenError,
    is_corrupt_block,
)
from agentconsole.server.store.event_log import EVENT_LOG
from agentconsole.server.store.intent_types import RecoveryReport
from agentconsole.server.store.intents import ToolIntents, recover_intents
from agentconsole.server.store.opening import (
    OpenInfo,
    attach_event_log,
    explain_open_error,
    open_connection,
    release,
)
from agentconsole.server.store.prompt_blocks import hashing_secret
from agentconsole.server.store.repository import Repository
from agentconsole.server.store.schema import (
    MigrationReport,
    SchemaError,
    migratable_version,
    migrate,
)
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.store.writer import StoreWriter

log = logging.getLogger(__name__)


class Store:
    """An open store. Build it with :meth:`open`; one per process and file."""

    def __init__(
        self,
        con: SqlConnection,
        info: OpenInfo,
        migration: MigrationReport,
        recovery: RecoveryReport,
        config: StoreConfig,
    ) -> None:
        self._con = con
        self._config = config
        self.info = info
        self.migration = migration
        #: keys the salted prompt block hashes (``prompt_blocks``); never exported
        self.prompt_secret = b""
        self._event_con = con.cursor()
        self.writer = StoreWriter(con, self._event_con, config)
        self.intents = ToolIntents(self.writer, recovery)
        self.repo = Repository(self.cursor)
        self._read_root = con.cursor()
        self._cursor_lock = threading.Lock()
        self._readers = 0
        self._readers_done = threading.Condition()
        self._closed = False

    @property
    def path(self) -> Path:
        """The database file."""
        return self.info.path

    @classmethod
    def open(cls, path: str | Path, config: StoreConfig | None = None) -> Store:
        """Open (or create) the store at ``path`` and start its writer.

        Raises :class:`StoreOpenError` when either file is locked by another process, is not a
        DuckDB database, is damaged, has a WAL that cannot be replayed, when the event log is
        missing or belongs to another store, or the schema cannot be migrated by this build;
        these refusals happen before anything is written, so the files are left exactly as
        they were.
        """
        config = config or StoreConfig()
        con, info = open_connection(Path(path), config)
        try:
            attach_event_log(con, info.path, migratable_version(con))
            migration = migrate(con, CrashPoints.from_env())
            recovery = recover_intents(con, time.time())
            secret = hashing_secret(con)
            con.execute("CHECKPOINT")
            con.execute(f"CHECKPOINT {EVENT_LOG}")
        except StoreOpenError:
            cls._abandon(con, info)
            raise
        except SchemaError as error:
            cls._abandon(con, info)
            raise StoreOpenError(
                info.path,
                f"its schema cannot be used ({error})",
                "Use the agentconsole release that wrote it, or export it and start afresh.",
            ) from error
        except duckdb.Error as error:
            cls._abandon(con, info)
            raise explain_open_error(info.path, error) from error
        except BaseException:
            cls._abandon(con, info)
            raise
        if recovery.needs_reconcile or recovery.retryable:
            log.warning(
                "recovered tool intents: %d re-executable, %d need reconciling",
                len(recovery.retryable),
                len(recovery.needs_reconcile),
            )
        try:
            store = cls(con, info, migration, recovery, config)
        except BaseException:
            cls._abandon(con, info)
            raise
        store.prompt_secret = secret
        store.writer.start()
        return store

    @staticmethod
    def _abandon(con: SqlConnection, info: OpenInfo) -> None:
        try:
            con.close()
        finally:
            release(info.path)

    @contextmanager
    def cursor(self) -> Iterator[SqlConnection]:
        """A fresh read cursor (its own connection and snapshot), closed on exit.

        Use from any thread; never write through it (writes go through :attr:`writer`).
        Raises :class:`StoreClosedError` once :meth:`close` has begun; a read inside the block
        that meets a damaged block of the files raises :class:`StoreDamagedError` (a
        :class:`StoreError`, which the API answers without a traceback) instead of DuckDB's
        bare error.
        """
        with self._readers_done:
            if self._closed:
                raise StoreClosedError("the store is closed")
            self._readers += 1
        try:
            with self._cursor_lock:
                cur = self._read_root.cursor()
            try:
                yield cur
            except duckdb.Error as error:
                if is_corrupt_block(error):
                    raise StoreDamagedError(self.path, str(error)) from error
                raise
            finally:
                cur.close()
        finally:
            with self._readers_done:
                self._readers -= 1
                self._readers_done.notify_all()

    def give_up_holds(self) -> None:
        """The server begins to stop: stop holding what the files refuse (disk full,
        read-only) and fail it, counted and logged, as :meth:`close` would, but now, so the
        requests waiting on it are answered before the HTTP server stops waiting for them.
        Writes the files accept still commit until :meth:`close`."""
        self.writer.give_up_holds()

    @property
    def closed(self) -> bool:
        """:meth:`close` ran (writes and new readers are refused)."""
        return self._closed

    def close(self, timeout: float = 30.0) -> bool:
        """Commit everything queued, wait for readers, ``CHECKPOINT``, close. Idempotent.

        Returns False if the writer died (or gave up on files that refuse writes: then it
        ends at once, not after ``timeout``), did not finish (or readers did not) within
        ``timeout``, or the checkpoint failed: then nothing is checkpointed, and the next start
        replays the WAL. A connection still in use by a stuck thread is left open rather than
        pulled away.
        """
        deadline = time.monotonic() + timeout
        with self._readers_done:
            if self._closed:
                return True
        stopped = self.writer.stop(timeout)
        with self._readers_done:
            self._closed = True
            idle = self._readers_done.wait_for(
                lambda: self._readers == 0, max(0.0, deadline - time.monotonic())
            )
        if not stopped or not idle or self.writer.failure is not None:
            log.error(
                "store %s not closed cleanly (writer stopped: %s, failure: %r, readers idle: %s)",
                self.path,
                stopped,
                self.writer.failure,
                idle,
            )
            if stopped and idle:
                self._disconnect()
            return False
        try:
            self.writer.checkpoint_now()
        except duckdb.Error as error:
            # e.g. a disk that filled up since the last commit: the WAL still holds every
            # commit and the next start replays it, so this is one line, not a traceback
            # out of the server's shutdown
            log.error("store %s not checkpointed at close (the WAL keeps it): %s", self.path, error)
            return False
        finally:
            self._disconnect()
        return True

    def _disconnect(self) -> None:
        try:
            self._read_root.close()
            self._event_con.close()
            self._con.close()
        except duckdb.Error as error:  # an invalidated instance may refuse even this
            log.error("closing store %s: %s", self.path, error)
        finally:
            release(self.path)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

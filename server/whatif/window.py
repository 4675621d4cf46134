"""A window of the *running* server's traffic written as a trace, and the bench command for it.

:func:`export_window` reads through a read cursor of the live store (``Store.cursor``: a cursor
of the server's own DuckDB connection; a second connection to the file is impossible while
``serve`` holds it), rebuilds the programs with :func:`load_recording` and
:func:`rebuild_trace` (as ``agentconsole trace export`` does on a stopped server's file) and
writes them under a directory the server owns, with a name the server chooses (no client ever
names a path). :func:`bench_command` is the ``agentconsole bench`` line that replays such a
trace under every scheduling policy.

Arrivals count from the first program's arrival in the window, not from ``since``: a window
opened before the traffic does not replay its idle lead (``trace export`` counts from
``--since``).
"""

from __future__ import annotations

import os
import secrets
import shlex
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agentconsole.sample_traces import dump_trace
from agentconsole.server.store.sqlconn import SqlConnection
from agentconsole.server.whatif.rebuild import rebuild_trace
from agentconsole.server.whatif.recording import load_recording

CursorFactory = Callable[[], AbstractContextManager[SqlConnection]]
PREFIX = "window-"
TRACE_SUFFIX = ".jsonl"
#: the JSON report a background bench run writes next to its trace (``runs.py``)
REPORT_SUFFIX = ".bench.json"


@dataclass(frozen=True, slots=True)
class BenchHardware:
    """What ``bench`` simulates: the served simulator's preset, or bench's defaults (None)."""

    gpu: str | None = None
    model: str | None = None
    tp: int | None = None
    profile: str | None = None
    kv_policy: str | None = None
    #: several served models: each preset as ``--models`` takes it (``name[:tpN]``), and
    #: the rule the server chooses between them by
    models: tuple[str, ...] = ()
    model_rule: str | None = None


@dataclass(frozen=True, slots=True)
class WindowTrace:
    """One export: the window read, the programs written (0: no file), the file and command."""

    since: float | None
    until: float
    tenant: str | None
    programs: int
    path: Path | None
    argv: tuple[str, ...]

    @property
    def command(self) -> str | None:
        """The shell line of :attr:`argv` (None when nothing was written)."""
        return shlex.join(self.argv) if self.argv else None


def bench_command(trace: Path, programs: int, hardware: BenchHardware) -> tuple[str, ...]:
    """``agentconsole bench`` replaying ``trace`` (all of its ``programs``, named so the
    command says how many) under every scheduling policy and the stock baseline, on
    ``hardware``."""
    argv = ["agentconsole", "bench", "--trace", str(trace), "--programs", str(max(programs, 1))]
    argv += ["--policies", "all"]
    # a calibration profile names its own GPU, model and tp (bench refuses them beside it)
    if hardware.profile is not None:
        named: tuple[tuple[str, object], ...] = (("--profile", hardware.profile),)
    elif hardware.models:  # each model on GPUs of its own, chosen by the server's rule
        models, rule = ",".join(hardware.models), hardware.model_rule
        named = (("--gpu", hardware.gpu), ("--models", models), ("--model-rules", rule))
    else:
        named = (("--gpu", hardware.gpu), ("--model", hardware.model), ("--tp", hardware.tp))
    for flag, value in (("--kv-policy", hardware.kv_policy), *named):
        if value is not None:
            argv += [flag, str(value)]
    return tuple(argv)


def trace_name(now: float) -> str:
    """A fresh file name: the export's UTC time (names sort by age) and a random tail (two
    exports in one second never collide)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{PREFIX}{stamp}-{secrets.token_hex(4)}{TRACE_SUFFIX}"


def export_window(
    cursor: CursorFactory,
    directory: Path,
    hardware: BenchHardware,
    *,
    since: float | None,
    until: float | None,
    tenant: str | None,
    now: float | None = None,
) -> WindowTrace:
    """Write the trace of the programs that arrived in ``[since, until)`` (``until``
    defaults to ``now``; of ``tenant`` only when given) to a new file under ``directory``
    (created if missing); nothing is written when no program of the window ran. Blocking:
    call from a worker thread. Raises ``OSError`` when the file cannot be written."""
    now = time.time() if now is None else now
    until = now if until is None else until
    with cursor() as con:
        con.execute("BEGIN TRANSACTION")  # the recording's reads share one snapshot
        try:
            recorded = load_recording(con, since=since, until=until, tenant=tenant)
        finally:
            con.execute("COMMIT")
    programs = rebuild_trace(recorded)
    if not programs:
        return WindowTrace(since, until, tenant, 0, None, ())
    directory.mkdir(parents=True, exist_ok=True)
    path = directory.resolve() / trace_name(now)
    partial = path.with_suffix(".partial")
    dump_trace(programs, partial)
    os.replace(partial, path)  # a reader never sees half a trace
    argv = bench_command(path, len(programs), hardware)
    return WindowTrace(since, until, tenant, len(programs), path, argv)


def _written(trace: Path) -> tuple[int, str]:
    try:
        return trace.stat().st_mtime_ns, trace.name
    except FileNotFoundError:  # deleted meanwhile: the oldest, and its unlink skips it
        return 0, trace.name


def prune(directory: Path, keep: int, spare: Sequence[Path] = ()) -> list[Path]:
    """Delete all but the newest ``keep`` traces of ``directory`` (and their bench reports),
    never one in ``spare`` (a trace a bench run is reading); returns what was deleted.
    Newest by the time written, then by name: two traces of one second sort by their random
    tails, so the name alone could delete the one just written."""
    traces = sorted(directory.glob(f"{PREFIX}*{TRACE_SUFFIX}"), key=_written, reverse=True)
    deleted = []
    for trace in traces[keep:]:
        if trace in spare:
            continue
        for path in (trace, trace.with_name(trace.name + REPORT_SUFFIX)):
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            deleted.append(path)
    return deleted

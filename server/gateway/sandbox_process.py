"""One sandbox process from the outside: start it bare, feed stdin, keep at most N bytes of
output, stop it at a wall-clock deadline, and kill its whole tree whatever happens.

The process is started with an empty environment, only the file descriptors named in
``pass_fds`` (plus the three standard ones), ``/`` as working directory, its own session
(so ``killpg`` reaches it), and, when this server runs as root, an unprivileged identity.
It is started by :class:`subprocess.Popen`, not the event loop: uvloop, the loop ``serve``
runs on, neither takes ``user=``/``group=`` nor closes inherited descriptors (``close_fds``),
so a library's descriptor without close-on-exec would reach the sandbox; the loop only reads
the pipes.
Killing its process group kills ``bwrap``; ``--die-with-parent`` then SIGKILLs the sandbox's
init, and the kernel kills every process left in its pid namespace. Cancelling :func:`run`
(the gateway's timeout, a program cancel, shutdown) kills the tree the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

Killed = Literal["timeout", "output_limit"]
_CHUNK = 64 * 1024
_REAP_S = 5.0


@dataclass(frozen=True, slots=True)
class Identity:
    """The host uid/gid to run as (``None``: this process's own)."""

    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True, slots=True)
class RawRun:
    """What happened: the exit status (``None`` when killed here), the kept output, whether
    output was cut, why the executor killed it, and the wall time."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    truncated: bool
    killed: Killed | None
    duration_s: float


@dataclass(slots=True)
class _Output:
    """Both streams against one byte budget."""

    budget: int
    streams: dict[str, bytearray] = field(
        default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()}
    )
    truncated: bool = False

    def take(self, name: str, chunk: bytes) -> bool:
        """Keep what fits of ``chunk``; False once the budget is exceeded."""
        room = self.budget - sum(len(s) for s in self.streams.values())
        self.streams[name] += chunk[: max(room, 0)]
        if len(chunk) > room:
            self.truncated = True
        return not self.truncated


@dataclass(slots=True)
class _Child:
    """A started sandbox process: its pipes as the event loop reads them."""

    popen: subprocess.Popen[bytes]
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def kill(self) -> None:
        self.popen.kill()

    async def wait(self) -> int:
        return await asyncio.to_thread(self.popen.wait)


async def _start(argv: Sequence[str], pass_fds: Sequence[int], identity: Identity) -> _Child:
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={},
        cwd="/",
        close_fds=True,
        pass_fds=tuple(pass_fds),
        start_new_session=True,
        user=identity.uid,
        group=identity.gid,
        extra_groups=[] if identity.gid is not None else None,
    )
    loop = asyncio.get_running_loop()
    readers = (asyncio.StreamReader(limit=_CHUNK), asyncio.StreamReader(limit=_CHUNK))
    for pipe, reader in zip((popen.stdout, popen.stderr), readers, strict=True):
        await loop.connect_read_pipe(partial(asyncio.StreamReaderProtocol, reader), pipe)
    return _Child(popen, *readers)


def _kill_tree(process: _Child) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


async def _feed(process: _Child, data: bytes) -> None:
    stdin = process.popen.stdin
    if stdin is None:
        return

    def write() -> None:  # a thread: blocks while the pipe is full, ends when it breaks
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ValueError):
            stdin.write(data)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ValueError):
            stdin.close()

    await asyncio.to_thread(write)


async def _pump(
    process: _Child,
    reader: asyncio.StreamReader | None,
    name: str,
    output: _Output,
    over: asyncio.Event,
) -> None:
    if reader is None:
        return
    while chunk := await reader.read(_CHUNK):
        if not output.take(name, chunk) and not over.is_set():
            over.set()
            _kill_tree(process)  # then drain to EOF, which comes once the tree is dead


async def _reap(process: _Child, work: asyncio.Future[Any]) -> None:
    """Kill the tree and wait (a little) for its pipes to close and its exit status."""
    _kill_tree(process)
    try:
        await asyncio.wait_for(asyncio.shield(work), _REAP_S)
    except TimeoutError:  # something holds a pipe open: stop reading it
        work.cancel()
    except asyncio.CancelledError:
        work.cancel()
        raise


async def run(
    argv: Sequence[str],
    *,
    stdin: bytes,
    output_bytes: int,
    wall_s: float,
    pass_fds: Sequence[int] = (),
    identity: Identity = Identity(),
) -> RawRun:
    """Run ``argv`` as described in the module docstring and return what happened. Raises
    ``OSError`` if it cannot be started at all."""
    started = time.monotonic()
    process = await _start(argv, pass_fds, identity)
    output = _Output(output_bytes)
    over = asyncio.Event()
    killed: Killed | None = None
    work = asyncio.gather(
        _feed(process, stdin),
        _pump(process, process.stdout, "stdout", output, over),
        _pump(process, process.stderr, "stderr", output, over),
        process.wait(),
    )
    try:
        await asyncio.wait_for(asyncio.shield(work), wall_s)
    except TimeoutError:
        killed = "timeout"
    finally:
        if not work.done():  # timed out, or cancelled: the tree dies before anything goes on
            await _reap(process, work)
    if over.is_set() and killed is None:
        killed = "output_limit"
    return RawRun(
        returncode=None if killed else process.returncode,
        stdout=bytes(output.streams["stdout"]),
        stderr=bytes(output.streams["stderr"]),
        truncated=output.truncated,
        killed=killed,
        duration_s=time.monotonic() - started,
    )

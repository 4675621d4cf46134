"""The ``sandbox`` executor's sandbox: bubblewrap (Debian's ``bwrap``) around one program.

Each call gets fresh namespaces (``--unshare-all --unshare-user``: user, pid, network, ipc,
uts, cgroup, mount) and ``--disable-userns`` (no nested user namespace: the kernel's userns
surface stays shut), so it has

* **no network**: its own network namespace holds only its own loopback, so the host's
  loopback listeners, abstract unix sockets and DNS are out of reach;
* **a read-only system**: a new root (made read-only once set up) holding only
  ``SandboxConfig.system_paths`` (``/usr``) bound read-only, the ``/bin``, ``/lib*``,
  ``/sbin`` links, a fresh ``/proc`` of its own pid namespace (no host process is visible),
  a minimal read-only ``/dev``, and the program at ``/sandbox/main.py`` (read-only): no
  ``/etc``, ``/home``, ``/root``, ``/work``, no store file, no repository;
* **a private scratch directory**: ``/tmp``, a tmpfs of ``scratch_mb`` (also the working
  directory and ``HOME``), gone with the namespace when the call ends;
* **limits** set by util-linux ``prlimit`` inside the sandbox (so the process count is
  counted in the sandbox's own user namespace, not across the host uid), see
  :class:`~.sandbox_spec.SandboxLimits`; the executor keeps at most ``output_bytes`` of
  output and kills the sandbox past it or past ``wall_s`` (:mod:`.sandbox_process`);
* **nothing inherited**: an empty environment (``--clearenv`` and an empty one for
  ``bwrap`` itself), no file descriptor but stdin/stdout/stderr, no capability
  (``--cap-drop ALL``, ``no_new_privs``), its own session (``--new-session``: no terminal
  injection), and ``--die-with-parent``.

When the server runs as root, ``bwrap`` is started as ``SandboxConfig.run_as_uid`` (nobody):
the kernel never enforces ``RLIMIT_NPROC`` for host uid 0, and an unprivileged uid cannot
read a root-only file even if one were bound. ``bwrap`` then uses unprivileged user
namespaces, which this kernel allows (checked as root in this container: every flag above
works, both as root and as nobody).

Trade-offs, and what is *not* done:

* no seccomp filter (bwrap needs a compiled BPF program; none is shipped): the sandbox can
  make any syscall an unprivileged process may, without capabilities, nested namespaces or
  network. A kernel bug reachable that way is the residual risk;
* limits are per process (rlimits), not per sandbox (no cgroup: this host has cgroup v1 and
  no delegation): memory is bounded by ``processes * memory_mb`` plus ``scratch_mb`` of
  tmpfs, CPU by ``cpu_s`` per process and, for the whole tree, by ``wall_s``; the number of
  inodes in the scratch tmpfs is not limited (bwrap has no option for it);
* ``SandboxConfig.max_parallel`` bounds how many sandboxes run at once; later calls wait,
  and the wait counts against the call's ``timeout_s``. The slots are shared fairly between
  tenants (:mod:`.slots`): a slot that frees while calls wait goes to the waiting tenant
  holding the fewest, ties to the one served least recently. One tenant's backlog therefore
  delays another tenant's call by at most one run (per tenant served before it), not by the
  whole backlog; a tenant alone may still use every slot.

Availability is checked by running exactly what a call runs (the same command line, identity
and default limits) with a probe program that reports its namespaces, limits, root directory
and network interfaces; a registration is refused (422 ``sandbox_unavailable``, naming the
reason) unless every one of them is as required. Code never runs outside ``bwrap``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from agentconsole.server.gateway.errors import InvalidTool
from agentconsole.server.gateway.sandbox_process import Identity, RawRun, run
from agentconsole.server.gateway.sandbox_spec import SandboxConfig, SandboxLimits
from agentconsole.server.gateway.slots import FairSlots

PROGRAM = "/sandbox/main.py"
#: Whose slot the availability probe takes (no tenant id is empty).
_PROBE_TENANT = ""
SCRATCH = "/tmp"
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_NAMESPACES = ("net", "pid", "mnt", "user", "ipc", "uts")
_PROBE = """import json, os, resource, socket, sys
limits = {n: resource.getrlimit(getattr(resource, "RLIMIT_" + n)) for n in
          ("CPU", "AS", "NPROC", "FSIZE")}
names = ("net", "pid", "mnt", "user", "ipc", "uts")
print(json.dumps({"ns": {n: os.readlink("/proc/self/ns/" + n) for n in names},
                  "limits": limits, "root": sorted(os.listdir("/")), "stdin": sys.stdin.read(),
                  "net": [name for _, name in socket.if_nameindex()]}))
"""


class SandboxUnavailable(InvalidTool):
    """The sandbox cannot run here (registration refused; a call fails without running)."""

    type = "sandbox_unavailable"


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """One finished sandbox: what :mod:`.sandbox_process` saw, and the bwrap status lines."""

    raw: RawRun
    status: list[dict[str, object]]

    @property
    def started(self) -> bool:
        """Whether bwrap set the sandbox up and started the program."""
        return any("child-pid" in line for line in self.status)


def _system_binds(config: SandboxConfig) -> Iterator[str]:
    for path in config.system_paths:
        yield from ("--ro-bind", path, path)
    for name in _TOP_LEVEL:
        path = f"/{name}"
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in config.system_paths):
            continue
        if os.path.islink(path):
            yield from ("--symlink", os.readlink(path), path)
        elif os.path.isdir(path):
            yield from ("--ro-bind", path, path)


def build_argv(
    config: SandboxConfig, bwrap: str, language: str, limits: SandboxLimits, fds: tuple[int, int]
) -> list[str]:
    """The full command line: ``bwrap`` options, then ``prlimit``, then the interpreter and
    :data:`PROGRAM`. ``fds`` are the program's file and bwrap's status pipe."""
    code_fd, status_fd = fds
    scratch = limits.scratch_mb * 1024 * 1024
    memory = limits.memory_mb * 1024 * 1024
    return [
        bwrap,
        *("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"),
        *("--new-session", "--cap-drop", "ALL", "--clearenv"),
        *("--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", SCRATCH),
        *("--setenv", "TMPDIR", SCRATCH, "--setenv", "LANG", "C.UTF-8"),
        *("--uid", "1000", "--gid", "1000", "--hostname", "sandbox"),
        *_system_binds(config),
        *("--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"),
        *("--perms", "0444", "--ro-bind-data", str(code_fd), PROGRAM),
        *("--size", str(scratch), "--tmpfs", SCRATCH, "--remount-ro", "/", "--chdir", SCRATCH),
        *("--json-status-fd", str(status_fd), "--"),
        config.prlimit,
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        f"--as={memory}",
        f"--nproc={limits.processes}",
        f"--fsize={scratch}",
        "--nofile=256",
        "--core=0",
        "--",
        *config.interpreters[language],
        PROGRAM,
    ]


def _read_status(fd: int) -> list[dict[str, object]]:
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass  # a process of the dead tree still holds the write end: what is there is all
    lines: list[dict[str, object]] = []
    for line in data.decode(errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return lines


class Sandbox:
    """Runs programs in bwrap; one per gateway. See the module docstring."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._slots = FairSlots(self.config.max_parallel)
        self._probe_lock = asyncio.Lock()
        self._works = False

    def _identity(self) -> Identity:
        if os.geteuid() != 0:
            return Identity()
        return Identity(self.config.run_as_uid, self.config.run_as_gid)

    async def run(
        self, language: str, source: str, stdin: bytes, limits: SandboxLimits, *, tenant: str
    ) -> SandboxRun:
        """Run ``source`` with ``stdin`` in one of ``tenant``'s fair share of the slots;
        raises :class:`SandboxUnavailable` if the sandbox does not work here (nothing ran)
        and ``OSError`` if bwrap could not be started."""
        reason = await self.unavailable()
        if reason is not None:
            raise SandboxUnavailable(reason, field="executor/type")
        return await self._run(language, source, stdin, limits, tenant)

    async def _run(
        self, language: str, source: str, stdin: bytes, limits: SandboxLimits, tenant: str
    ) -> SandboxRun:
        bwrap = shutil.which(self.config.bwrap)
        if bwrap is None:
            raise SandboxUnavailable(self._missing(), field="executor/type")
        code_fd = os.memfd_create("sandbox-program", os.MFD_CLOEXEC)
        status_r, status_w = os.pipe()
        try:
            program = memoryview(source.encode(errors="replace"))  # lone surrogates: '?'
            while program:
                program = program[os.write(code_fd, program) :]
            os.lseek(code_fd, 0, os.SEEK_SET)
            argv = build_argv(self.config, bwrap, language, limits, (code_fd, status_w))
            async with self._slots.hold(tenant):
                raw = await run(
                    argv,
                    stdin=stdin,
                    output_bytes=limits.output_bytes,
                    wall_s=limits.wall_s,
                    pass_fds=(code_fd, status_w),
                    identity=self._identity(),
                )
            os.close(status_w)
            status_w = -1
            return SandboxRun(raw, _read_status(status_r))
        finally:
            for fd in (code_fd, status_r, status_w):
                if fd >= 0:
                    os.close(fd)

    def _missing(self) -> str:
        return (
            f"bubblewrap ({self.config.bwrap!r}) is not installed on this server: install"
            " Debian's bubblewrap package (scripts/setup.sh does)"
        )

    async def unavailable(self) -> str | None:
        """``None`` if sandboxes work here, else why not. Probed until it first works."""
        if self._works:
            return None
        async with self._probe_lock:
            return await self._probe_once()

    async def _probe_once(self) -> str | None:
        if self._works:  # another call probed while this one waited
            return None
        reason = await self._probe()
        self._works = reason is None
        return reason

    async def _probe(self) -> str | None:
        if shutil.which(self.config.bwrap) is None:
            return self._missing()
        if "python" not in self.config.interpreters:
            return "the sandbox probe needs a 'python' interpreter in SandboxConfig"
        for path in (self.config.prlimit, self.config.interpreters["python"][0]):
            if not os.access(path, os.X_OK):
                return f"the sandbox needs {path!r}, which is missing on this server"
        limits = replace(self.config.default_limits, wall_s=self.config.probe_timeout_s)
        try:
            done = await self._run("python", _PROBE, b"probe", limits, _PROBE_TENANT)
        except OSError as error:
            return f"bwrap cannot be started: {error}"
        return _judge(done, limits, self.config)


def _judge(done: SandboxRun, limits: SandboxLimits, config: SandboxConfig) -> str | None:
    """Why the probe's run shows a sandbox that is not what calls need (``None``: it is)."""
    raw = done.raw
    if raw.killed is not None:
        return f"the sandbox probe did not finish ({raw.killed}, {limits.wall_s:g} s)"
    if not done.started or raw.returncode != 0:
        first = raw.stderr.decode(errors="replace").strip().splitlines()[:1]
        detail = first[0] if first else f"exit status {raw.returncode}, {raw.killed or 'no'} kill"
        return f"bwrap cannot create the sandbox here: {detail[:300]}"
    try:
        seen = json.loads(raw.stdout)
        return _compare(seen, limits, config)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return "the sandbox probe printed no readable report"


def _compare(seen: dict[str, Any], limits: SandboxLimits, config: SandboxConfig) -> str | None:
    for name in _NAMESPACES:
        if seen["ns"].get(name) == os.readlink(f"/proc/self/ns/{name}"):
            return f"the sandbox does not get its own {name} namespace"
    scratch = limits.scratch_mb * 1024 * 1024
    want = {
        "CPU": limits.cpu_s + 1,
        "AS": limits.memory_mb * 1024 * 1024,
        "NPROC": limits.processes,
        "FSIZE": scratch,
    }
    for name, value in want.items():
        if seen["limits"].get(name, [None, None])[1] != value:
            return f"the sandbox's RLIMIT_{name} is not applied"
    if seen["net"] != ["lo"]:
        return f"the sandbox sees network interfaces {seen['net']!r}, not just its loopback"
    if seen["stdin"] != "probe":
        return "the sandbox's stdin does not reach the program"
    allowed = {"proc", "dev", "tmp", PROGRAM.split("/")[1], *_TOP_LEVEL}
    allowed |= {path.strip("/").split("/")[0] for path in config.system_paths}
    leaked = set(seen["root"]) - allowed
    if leaked:
        return f"the sandbox sees host directories: {sorted(leaked)}"
    return None

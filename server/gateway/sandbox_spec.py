"""What a ``sandbox`` tool is and what the server allows: its language, where its code comes
from, its limits, and the check of the ``executor`` object of a registration.

Two kinds of tool (docs/API.md, "Sandboxed code"):

* **code from the call** (no ``script``): the call's ``code`` argument is the program, so the
  tool's ``parameters`` must declare ``code`` as a required string; the other arguments reach
  the program as one JSON object on stdin;
* **a fixed script** (``script``): the registrant's program; the call's arguments reach it as
  one JSON object on stdin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from agentconsole.server.gateway.errors import InvalidTool, UnsafeArguments
from agentconsole.server.gateway.semantic import check_characters
from agentconsole.server.store.jsonutil import JSONValue

CODE_ARGUMENT = "code"
MAX_SCRIPT_CHARS = 64 * 1024
#: The sandbox's wall clock is at most this share of the tool's ``timeout_s``, so the sandbox
#: kills and reports a runaway program before the gateway's own timeout fires.
WALL_SHARE = 0.9
_SPEC_FIELDS = frozenset({"type", "language", "script", "limits"})


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Limits of one call.

    ``cpu_s``: CPU seconds per process (``RLIMIT_CPU``: SIGXCPU, then SIGKILL a second
    later); ``memory_mb``: address space per process (``RLIMIT_AS``); ``processes``: tasks in
    the sandbox, its init included (``RLIMIT_NPROC``, counted in the sandbox's own user
    namespace); ``output_bytes``: stdout plus stderr kept (the sandbox is killed past it);
    ``scratch_mb``: size of the ``/tmp`` tmpfs and of any one file (``RLIMIT_FSIZE``);
    ``wall_s``: wall clock, after which the whole sandbox is killed.
    """

    cpu_s: int = 10
    memory_mb: int = 512
    processes: int = 16
    output_bytes: int = 64 * 1024
    scratch_mb: int = 16
    wall_s: float = 27.0

    def to_json(self) -> dict[str, JSONValue]:
        """The wire shape (every limit)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, value: object) -> SandboxLimits:
        """Inverse of :meth:`to_json` for stored rows (a missing or odd value: the default)."""
        data = value if isinstance(value, Mapping) else {}
        default = cls()

        def number(name: str) -> float:
            item = data.get(name)
            if isinstance(item, int | float) and not isinstance(item, bool):
                return float(item)
            return float(getattr(default, name))

        return cls(
            cpu_s=int(number("cpu_s")),
            memory_mb=int(number("memory_mb")),
            processes=int(number("processes")),
            output_bytes=int(number("output_bytes")),
            scratch_mb=int(number("scratch_mb")),
            wall_s=number("wall_s"),
        )


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """A registered sandbox tool: its language, its fixed ``script`` (``None``: the code
    comes with each call) and its limits."""

    language: str
    script: str | None
    limits: SandboxLimits

    def to_json(self) -> dict[str, JSONValue]:
        """The ``executor`` fields after ``type``."""
        out: dict[str, JSONValue] = {"language": self.language}
        if self.script is not None:
            out["script"] = self.script
        out["limits"] = self.limits.to_json()
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> SandboxSpec:
        """Inverse of :meth:`to_json` for stored rows."""
        script = value.get("script")
        return cls(
            language=str(value.get("language") or "python"),
            script=script if isinstance(script, str) else None,
            limits=SandboxLimits.from_json(value.get("limits")),
        )


#: Debian's interpreter: under /usr, so inside the sandbox's read-only system.
DEFAULT_PYTHON = "/usr/bin/python3"


def python_interpreter(path: str = DEFAULT_PYTHON) -> dict[str, tuple[str, ...]]:
    """The ``interpreters`` entry running Python at ``path`` (it must lie under one of the
    ``system_paths``, the only host files a sandbox sees): isolated mode (no user site, no
    PYTHON* variables, no script directory on sys.path), no .pyc writes."""
    return {"python": (path, "-I", "-B")}


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Server-wide settings of the ``sandbox`` executor.

    ``bwrap``: the bubblewrap command (looked up on ``PATH`` if not absolute); ``prlimit``:
    util-linux's ``prlimit`` inside the sandbox; ``interpreters``: language -> command line
    (the program's file is appended); ``system_paths``: host directories bound read-only
    (plus the top-level ``/bin``, ``/lib*``, ``/sbin`` links or directories);
    ``run_as_uid``/``run_as_gid``: the unprivileged host identity the sandbox runs as when
    the server runs as root; ``max_limits``: the most a registration may ask for;
    ``default_limits``: what it gets when it asks nothing (``wall_s`` aside: 90% of the
    tool's ``timeout_s``); ``max_parallel``: sandboxes running at once (calls beyond wait,
    the slots shared fairly between tenants: :mod:`.slots`).
    """

    bwrap: str = "bwrap"
    prlimit: str = "/usr/bin/prlimit"
    interpreters: Mapping[str, tuple[str, ...]] = field(default_factory=python_interpreter)
    system_paths: tuple[str, ...] = ("/usr",)
    run_as_uid: int = 65534
    run_as_gid: int = 65534
    max_limits: SandboxLimits = SandboxLimits(
        cpu_s=300,
        memory_mb=4096,
        processes=256,
        output_bytes=128 * 1024,
        scratch_mb=256,
        wall_s=600.0,
    )
    default_limits: SandboxLimits = SandboxLimits()
    max_parallel: int = 4
    probe_timeout_s: float = 20.0


def parse_sandbox(
    value: Mapping[str, JSONValue],
    parameters: JSONValue,
    timeout_s: float,
    config: SandboxConfig,
) -> SandboxSpec:
    """Check a registration's ``{"type": "sandbox", ...}`` executor against ``config`` and
    the tool's ``parameters`` schema; raises :class:`InvalidTool` naming the field. Pure."""
    extra = sorted(set(value) - _SPEC_FIELDS)
    if extra:
        raise InvalidTool(f"unknown executor field {extra[0]!r}", field="executor")
    language = value.get("language")
    if not isinstance(language, str) or language not in config.interpreters:
        known = ", ".join(sorted(config.interpreters))
        raise InvalidTool(f"executor language must be one of: {known}", field="executor/language")
    script = value.get("script")
    if script is not None:
        if not isinstance(script, str) or not script.strip() or len(script) > MAX_SCRIPT_CHARS:
            raise InvalidTool(
                f"executor script must be a non-empty string of at most {MAX_SCRIPT_CHARS}"
                " characters (or absent: the code then comes with each call)",
                field="executor/script",
            )
        try:
            check_characters(script, "executor/script")
        except UnsafeArguments as error:
            raise InvalidTool(error.message, field="executor/script") from error
    elif not _requires_code(parameters):
        raise InvalidTool(
            f"a sandbox tool without a script runs the call's {CODE_ARGUMENT!r} argument:"
            f" parameters must declare {CODE_ARGUMENT!r} as a required string",
            field="parameters",
        )
    limits = _limits(value.get("limits"), timeout_s, config)
    return SandboxSpec(language=language, script=script, limits=limits)


def _requires_code(parameters: JSONValue) -> bool:
    if not isinstance(parameters, dict):
        return False
    properties = parameters.get("properties")
    required = parameters.get("required")
    if not isinstance(properties, dict) or not isinstance(required, list):
        return False
    code = properties.get(CODE_ARGUMENT)
    return isinstance(code, dict) and code.get("type") == "string" and CODE_ARGUMENT in required


def _limits(value: JSONValue, timeout_s: float, config: SandboxConfig) -> SandboxLimits:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise InvalidTool("executor limits must be an object", field="executor/limits")
    names = {f.name for f in fields(SandboxLimits)}
    unknown = sorted(set(value) - names)
    if unknown:
        raise InvalidTool(f"unknown limit {unknown[0]!r}", field=f"executor/limits/{unknown[0]}")
    wall_cap = min(config.max_limits.wall_s, WALL_SHARE * timeout_s)
    chosen: dict[str, float] = {}
    for name in sorted(names):
        top = wall_cap if name == "wall_s" else float(getattr(config.max_limits, name))
        default = wall_cap if name == "wall_s" else float(getattr(config.default_limits, name))
        item = value.get(name, min(default, top))
        integral = name != "wall_s"
        if (
            isinstance(item, bool)
            or not isinstance(item, int | float)
            or not math.isfinite(item)
            or (integral and item != int(item))
            or not 0 < item <= top
        ):
            kind = "an integer" if integral else "a number"
            raise InvalidTool(
                f"{name} must be {kind} in (0, {top:g}]"
                + (f" (at most {WALL_SHARE:.0%} of timeout_s)" if name == "wall_s" else ""),
                field=f"executor/limits/{name}",
            )
        chosen[name] = float(item)
    return SandboxLimits.from_json(chosen)

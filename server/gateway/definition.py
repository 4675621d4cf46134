"""A registered tool's definition and its mapping to the store's ``tools`` rows."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from agentconsole.scheduler.program import ToolSpec
from agentconsole.server.gateway.sandbox_spec import SandboxSpec
from agentconsole.server.store import ToolRecord
from agentconsole.server.store.jsonutil import JSONValue

ExecutorType = Literal["builtin", "http", "agent", "sandbox"]


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    """How a tool runs: a builtin by ``name``, an HTTP POST to ``url``, by the agent, or in
    the bubblewrap ``sandbox``."""

    type: ExecutorType
    name: str | None = None
    url: str | None = None
    sandbox: SandboxSpec | None = None

    def to_json(self) -> dict[str, JSONValue]:
        """The wire shape (``{"type": ..., "name"|"url"|<sandbox fields>: ...}``)."""
        out: dict[str, JSONValue] = {"type": self.type}
        if self.name is not None:
            out["name"] = self.name
        if self.url is not None:
            out["url"] = self.url
        if self.sandbox is not None:
            out.update(self.sandbox.to_json())
        return out


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One registered tool. ``tenant`` is the owner, ``""`` for a platform-wide tool."""

    name: str
    tenant: str
    description: str
    parameters: Mapping[str, JSONValue]
    side_effect: bool
    idempotent: bool
    timeout_s: float
    executor: ExecutorSpec
    created_at: float
    updated_at: float
    allowed_tenants: tuple[str, ...] | None = None
    rate_limit_per_s: float | None = None
    burst: int | None = None
    max_concurrency: int | None = None

    @property
    def auto_retry_safe(self) -> bool:
        """A re-execution cannot repeat an effect: read-only, or deduplicated downstream."""
        return not self.side_effect or self.idempotent

    def spec(self) -> ToolSpec:
        """The scheduler's view of this tool (for the program's tool node)."""
        return ToolSpec(
            self.name,
            side_effect=self.side_effect,
            idempotent=self.idempotent,
            timeout_s=self.timeout_s,
        )

    def allows(self, tenant: str) -> bool:
        """Whether ``tenant`` may call this tool (its owner always may)."""
        if self.tenant:
            return tenant == self.tenant
        return self.allowed_tenants is None or tenant in self.allowed_tenants

    def view_for(self, tenant: str, *, operator: bool) -> dict[str, JSONValue]:
        """The ``Tool`` object as ``tenant`` may see it: in full for its own tools and for
        operator keys; a tool it did not register (a platform tool) shows its executor's
        ``type`` only, as the URL or the script behind it is the operator's, and of the
        tenants allowed to call it only ``tenant`` itself (the others' names are theirs)."""
        full = operator or self.tenant == tenant
        view = self.to_json(executor_details=full)
        if not full and self.allowed_tenants is not None:
            view["allowed_tenants"] = [tenant]  # restricted, and listed: it sees the tool
        return view

    def to_json(self, *, executor_details: bool = True) -> dict[str, JSONValue]:
        """The API's ``Tool`` object; ``owner`` is ``null`` for a platform tool. Without
        ``executor_details`` the executor is ``{"type": ...}`` alone."""
        executor: dict[str, JSONValue] = (
            self.executor.to_json() if executor_details else {"type": self.executor.type}
        )
        return {
            "name": self.name,
            "owner": self.tenant or None,
            "description": self.description,
            "parameters": dict(self.parameters),
            "side_effect": self.side_effect,
            "idempotent": self.idempotent,
            "timeout_s": self.timeout_s,
            "allowed_tenants": None if self.allowed_tenants is None else list(self.allowed_tenants),
            "rate_limit_per_s": self.rate_limit_per_s,
            "burst": self.burst,
            "max_concurrency": self.max_concurrency,
            "executor": executor,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def to_record(self) -> ToolRecord:
        """The store row; the fields the ``tools`` table has no column for go in ``flags``."""
        flags: dict[str, JSONValue] = {
            "description": self.description,
            "executor": self.executor.to_json(),
            "allowed_tenants": None if self.allowed_tenants is None else list(self.allowed_tenants),
            "rate_limit_per_s": self.rate_limit_per_s,
            "burst": self.burst,
            "max_concurrency": self.max_concurrency,
        }
        return ToolRecord(
            name=self.name,
            tenant=self.tenant,
            json_schema=json.dumps(self.parameters, separators=(",", ":")),
            side_effect=self.side_effect,
            idempotent=self.idempotent,
            timeout_s=self.timeout_s,
            created_at=self.created_at,
            updated_at=self.updated_at,
            permissions=self.allowed_tenants or (),
            flags=flags,
        )

    @classmethod
    def from_record(cls, record: ToolRecord) -> ToolDefinition:
        """Inverse of :meth:`to_record` (rows this module wrote)."""
        flags = record.flags
        executor = flags.get("executor")
        spec = executor if isinstance(executor, dict) else {"type": "agent"}
        allowed = flags.get("allowed_tenants")
        return cls(
            name=record.name,
            tenant=record.tenant,
            description=str(flags.get("description") or ""),
            parameters=json.loads(record.json_schema),
            side_effect=record.side_effect,
            idempotent=record.idempotent,
            timeout_s=record.timeout_s,
            executor=ExecutorSpec(
                type=_executor_type(spec.get("type")),
                name=_opt_str(spec.get("name")),
                url=_opt_str(spec.get("url")),
                sandbox=SandboxSpec.from_json(spec) if spec.get("type") == "sandbox" else None,
            ),
            created_at=record.created_at,
            updated_at=record.updated_at,
            allowed_tenants=tuple(map(str, allowed)) if isinstance(allowed, list) else None,
            rate_limit_per_s=_opt_float(flags.get("rate_limit_per_s")),
            burst=_opt_int(flags.get("burst")),
            max_concurrency=_opt_int(flags.get("max_concurrency")),
        )


def _executor_type(value: object) -> ExecutorType:
    if value == "builtin":
        return "builtin"
    if value == "http":
        return "http"
    if value == "sandbox":
        return "sandbox"
    return "agent"


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _opt_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

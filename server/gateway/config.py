"""Settings of the tool gateway (limits, which builtins tenants may use, the ledger file)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentconsole.server.gateway.redaction import Redaction
from agentconsole.server.gateway.sandbox_spec import SandboxConfig
from agentconsole.server.gateway.toolbounds import ToolBounds


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Knobs of :class:`agentconsole.server.gateway.gateway.ToolGateway`.

    ``tenant_builtins`` lists the builtin executors a tenant key may register (operators may
    register every builtin); ``None`` allows all, for tests. ``ledger_path`` is where the
    side-effecting ``ledger``/``keyed_ledger`` builtins append their effects; without it they
    cannot be registered. ``allow_private_executor_urls`` lets *tenants* register ``http``
    executors on loopback or private addresses (operators always may): for development only.
    Without it, a tenant's ``http`` tool also connects only where its host resolves to public
    addresses, checked on every call (:mod:`.egress`).
    """

    max_body_bytes: int = 64 * 1024
    max_result_bytes: int = 1024 * 1024
    max_timeout_s: float = 600.0
    default_timeout_s: float = 30.0
    tenant_builtins: frozenset[str] | None = field(default=frozenset({"echo", "sleep"}))
    ledger_path: Path | None = None
    allow_private_executor_urls: bool = False
    #: How long a duplicate waits for the first call beyond the tool's timeout before 409.
    attach_grace_s: float = 30.0
    #: Extra lease beyond the tool's timeout before a stalled re-executable call is taken over.
    lease_grace_s: float = 30.0
    #: What the store keeps of tool arguments and results (``redaction``): every tenant's
    #: default, and named tenants' own.
    redaction: Redaction = "full"
    tenant_redaction: Mapping[str, Redaction] = field(default_factory=dict)
    #: The ``sandbox`` executor's server-wide settings (interpreter, identity, parallelism).
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    #: What one tenant's tools may take (``limits.tools``, ``limits.tool_bytes``).
    tool_bounds: ToolBounds = field(default_factory=ToolBounds)

    def private_urls_allowed(self, *, platform: bool) -> bool:
        """Whether an ``http`` tool may reach non-public addresses: a platform tool (an
        operator's) may; a tenant's only with ``allow_private_executor_urls``."""
        return platform or self.allow_private_executor_urls

    def redaction_for(self, tenant: str) -> Redaction:
        """The redaction of ``tenant``'s tool data."""
        return self.tenant_redaction.get(tenant, self.redaction)

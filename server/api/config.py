"""What the server needs to start, as plain values (``app/settings.py`` builds it from the
one settings object; tests build it directly)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentconsole.kvtiers.toolwait import DEFAULT_TOOL_WAIT_POLICY
from agentconsole.scheduler.door import DOOR_ON_BY_DEFAULT
from agentconsole.scheduler.models import ServedModel
from agentconsole.scheduler.policies import DEFAULT_POLICY
from agentconsole.server.live.modeldesk import SelectionConfig
from agentconsole.server.live.tenants import TenantLimits

DEV_TENANT_KEYS = {"sk-dev": "default"}
DEV_OPERATOR_KEYS = ("sk-operator",)
DEMO_TENANT_KEYS = {"sk-tenant-a": "tenant-a", "sk-tenant-b": "tenant-b", "sk-tenant-c": "tenant-c"}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """See the fields of ``agentconsole.settings.Settings`` for their meaning."""

    db_path: Path = Path("agentconsole.duckdb")
    store_memory_limit: str = "1GB"
    store_own_process: bool = False
    runtime: str = "sim"
    model: str | None = None
    policy: str = DEFAULT_POLICY
    kv_policy: str = DEFAULT_TOOL_WAIT_POLICY
    gpu: str = "H200-141GB"
    tp: int = 1
    #: the KV pool in tokens per engine (None: the runtime's default)
    max_total_tokens: int | None = None
    profile: str | None = None
    runtime_extra: Mapping[str, Any] = field(default_factory=dict)
    tenant_keys: Mapping[str, str] = field(default_factory=lambda: dict(DEV_TENANT_KEYS))
    operator_keys: tuple[str, ...] = DEV_OPERATOR_KEYS
    max_body_bytes: int = 4 * 1024 * 1024
    express_lane: bool = True
    default_max_tokens: int = 1024
    max_tokens_limit: int = 32_768
    ready_timeout_s: float = 30.0
    program_idle_s: float = 300.0
    pending_tool_s: float = 3600.0
    metrics_snapshot_s: float = 10.0
    store_sync_s: float = 1.0
    tenant_limits: TenantLimits = field(default_factory=TenantLimits)
    tenant_overrides: Mapping[str, TenantLimits] = field(default_factory=dict)
    retain_finished_s: float = 600.0
    program_admission: bool = DOOR_ON_BY_DEFAULT
    admission_wait_s: float = 120.0
    admission_budget_tokens: int | None = None
    admission_shortest_first: bool = True
    sse_coalesce_s: float = 0.1
    sse_batch_max: int = 500
    feeds_per_tenant: int = 16
    operator_feeds: int = 16
    feed_lifetime_s: float = 3600.0
    served_model_name: str | None = None
    whatif_dir: Path | None = None
    whatif_keep: int = 20
    whatif_run_timeout_s: float = 300.0
    whatif_run_jobs: int = 1
    #: several models in one serve (empty: the one ``model``, named ``model_name``)
    models: tuple[ServedModel, ...] = ()
    selection: SelectionConfig = field(default_factory=SelectionConfig)

    @property
    def model_name(self) -> str:
        """The name of the default model (``/v1/models`` lists it first)."""
        if self.models:
            return self.models[0].name
        return self.served_model_name or self.model or f"{self.runtime}-default"

    def served_models(self) -> tuple[ServedModel, ...]:
        """The served models: ``models``, else the one ``model`` as a one-entry list."""
        return self.models or (ServedModel(self.model_name, source=self.model),)

    @property
    def whatif_directory(self) -> Path:
        """Where what-if traces go: ``whatif_dir``, else ``whatif/`` beside the store file."""
        return self.whatif_dir or self.db_path.parent / "whatif"

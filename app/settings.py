"""The one settings object of ``agentconsole serve``.

Sources, highest first: command-line flags > environment (``AGENTCONSOLE_`` prefix, ``__``
between nested names, e.g. ``AGENTCONSOLE_RUNTIME__POLICY=fcfs``) > a TOML config file
(``--config``; the same nesting as tables, e.g. ``[runtime] policy = "fcfs"``) > defaults.
Read once at start and passed down; nothing else reads the environment.

API keys: ``auth.tenant_keys`` maps a key to its tenant, ``auth.operator_keys`` lists operator
keys. With none configured at all the development defaults of docs/API.md are used (and
printed); once one is configured, no development key is live.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings import SettingsError as SourceError

from agentconsole.kvtiers.toolwait import DEFAULT_TOOL_WAIT_POLICY, available_tool_wait_policies
from agentconsole.scheduler.door import DOOR_ON_BY_DEFAULT
from agentconsole.scheduler.fairness import MAX_TENANT_WEIGHT, FairnessConfig
from agentconsole.scheduler.models import ServedModel, available_rules, get_rule
from agentconsole.scheduler.policies import DEFAULT_POLICY
from agentconsole.scheduler.policies import available as available_policies
from agentconsole.server.api.auth import check_tenant_name
from agentconsole.server.api.config import (
    DEMO_TENANT_KEYS,
    DEV_OPERATOR_KEYS,
    DEV_TENANT_KEYS,
    ServerConfig,
)
from agentconsole.server.gateway.redaction import Redaction
from agentconsole.server.gateway.sandbox_spec import (
    DEFAULT_PYTHON,
    SandboxConfig,
    python_interpreter,
)
from agentconsole.server.gateway.toolbounds import DEFAULT_TOOL_BYTES, DEFAULT_TOOLS, ToolBounds
from agentconsole.server.live.modeldesk import SelectionConfig
from agentconsole.server.live.tenants import (
    DEFAULT_CONCURRENT_PROGRAMS,
    DEFAULT_PROGRAM_EDGES,
    DEFAULT_PROGRAM_NODES,
    TenantLimits,
)
from agentconsole.server.runtime.registry import available_runtimes, runtime_spec

#: what the ``sim`` runtime simulates without ``runtime.model`` (``server/runtime/sim/live.py``)
SIM_DEFAULT_MODEL = "llama-3.1-8b"

#: uvicorn's log levels, lower-cased before they are checked (``--log-level INFO`` works)
LogLevel = Annotated[
    Literal["critical", "error", "warning", "info", "debug", "trace"],
    BeforeValidator(lambda value: value.lower() if isinstance(value, str) else value),
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


def _one_of(name: str, known: list[str], what: str) -> str:
    """``name`` if ``known`` lists it; else the ``ValueError`` naming the choices (checked at
    load, so a typo is a usage error before anything starts, not a crash once serving)."""
    if name not in known:
        raise ValueError(f"unknown {what} {name!r}; choose from {', '.join(known)}")
    return name


def _serve_policy(name: str) -> str:
    """A scheduling policy ``serve`` can run; ``bench --list`` also lists bench baselines
    (``stock-sglang``: SGLang as shipped), which only ``bench`` compares against."""
    if name not in available_policies():
        from agentconsole.bench.runner import BASELINES  # only on a refusal: bench is heavy

        if name in BASELINES:
            raise ValueError(
                f"{name!r} is a bench baseline (SGLang as shipped, for comparison), not a serve"
                f" policy; choose from {', '.join(available_policies())}"
            )
    return _one_of(name, available_policies(), "policy")


class ServerSection(_Section):
    host: str = "127.0.0.1"
    """Interface to listen on."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port (0: any free port)."""
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    """Largest request body accepted; larger ones answer 413."""
    express_lane: bool = True
    """Answer plain generation calls (a chat or text completion, streamed or not, with a valid
    body and key) without Litestar's per-request machinery, with the same code and answers
    (``server/api/express.py``); false sends every request through Litestar."""
    log_level: LogLevel = "info"
    """uvicorn and application log level (any case): critical, error, warning, info, debug,
    or trace (uvicorn's, below debug)."""
    timeout_keep_alive: int = Field(default=5, ge=1, le=3600)
    """Seconds an idle kept-alive connection stays open after a response."""
    timeout_headers_s: float = Field(default=10.0, gt=0, le=3600)
    """Seconds a request's head (request line and headers) may take, from the connection's
    start or the request's first byte; then 408 (an idle new connection is closed)."""
    timeout_body_s: float = Field(default=60.0, gt=0, le=3600)
    """Seconds a request's body may take after its head; then 408."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """Largest request head (target and headers); larger ones answer 431."""
    limit_concurrency: int | None = Field(default=1000, ge=1)
    """Requests with a valid key in flight at once, every tenant's and operator's together
    (SSE feeds included; from a request's complete head to the end of its answer: an idle or
    still-arriving connection holds none); past it a request answers 503 with ``Retry-After``
    at once. None: no limit."""
    per_tenant_concurrency: int | None = Field(default=None, ge=1)
    """Of those, what one tenant may hold (all operator keys together are one more); past it
    its request answers 429 ``tenant_limit`` with ``Retry-After`` at once, taking no slot from
    the others. None (the default): half of ``limit_concurrency``, rounded up (unlimited when
    that is None). Half, not a fixed number: it follows ``limit_concurrency`` when that is
    tuned, a lone tenant (a single-tenant deployment, a demo) still has 500 of the default
    1,000 (set this higher, up to the limit, for a deployment of one tenant), and whatever one
    tenant does, half the slots stay for everyone else; set a smaller share for many tenants."""
    unauthenticated_concurrency: int = Field(default=32, ge=1)
    """Requests without a valid key in flight at once on routes that need one, a pool apart
    from the tenants' slots, where the app answers 401; past it the 401 is sent at once,
    before the body is read, and the connection closed. A valid client never needs these, so
    a few are enough."""
    public_concurrency: int = Field(default=64, ge=1)
    """Requests in flight at once on the routes needing no key, in two pools of this size
    apart from the tenants' slots: the probes (``/health``, ``/ready``, ``/metrics``), and the
    console's page and assets with the OpenAPI schema; past a pool 503 with ``Retry-After``.
    Each is answered at once, so a pool fills only under a flood, which then leaves the
    tenants' slots alone."""
    feeds_per_tenant: int = Field(default=16, ge=1)
    """``GET /v1/events`` feeds one tenant may hold open at once (a console tab or dashboard
    holds one); past it 429 ``tenant_limit`` with ``Retry-After``."""
    operator_feeds: int = Field(default=16, ge=1)
    """The same for the operator keys' feeds, all operator keys together, counted apart from
    the tenants' (so no tenant can keep the operators' consoles out)."""
    feed_lifetime_s: float = Field(default=3600.0, gt=0)
    """Seconds a ``GET /v1/events`` feed lasts; then the server ends it cleanly, after a last
    (empty) ``batch`` frame whose ``id`` is the feed's cursor, and the client reconnects and
    resumes (``since`` or ``Last-Event-ID``) without losing an event. Bounds how long a
    forgotten feed holds a slot; both consoles reconnect by themselves."""


class RuntimeSection(_Section):
    name: str = "sglang"
    """Runtime: ``sglang`` (the real engine; on a CPU-only machine the tiny local model),
    ``sim`` (the simulated engine) or ``sglang-router`` (SGLang servers behind sglang-router)."""
    model: str | None = None
    """SGLang: a model path (needed on a GPU); sim: a model preset (default llama-3.1-8b)."""
    policy: str = DEFAULT_POLICY
    """Scheduling policy (``agentconsole bench --list`` shows them; its ``stock-sglang`` is a
    bench baseline, not a serve policy)."""
    kv_policy: str = DEFAULT_TOOL_WAIT_POLICY
    """Tool-wait KV policy: keep, offload, recompute or adaptive."""
    gpu: str = "H200-141GB"
    """Sim: the GPU preset."""
    tp: int = Field(default=1, ge=1)
    """Tensor-parallel size."""
    dp: int = Field(default=1, ge=1)
    """SGLang: data-parallel ranks (SGLang's ``dp_size``), each a scheduler with its own KV
    pool (``max_total_tokens`` is per rank). A program's first call is placed on a rank by the
    KV-aware router score; its later calls stay there while the rank holds its KV."""
    max_total_tokens: int | None = Field(default=None, ge=1)
    """The KV pool in tokens per engine (rank), SGLang's ``--max-total-tokens``. Default:
    SGLang on CPU 16384, on GPU what ``mem_fraction_static`` leaves; sim: what the GPU preset
    leaves after the weights. A ``[[models]]`` entry's own value wins."""
    workers: list[str] = Field(default_factory=list)
    """``sglang-router``: each SGLang worker's URL (docs/DEPLOY.md)."""
    router: str | None = None
    """``sglang-router``: the URL of sglang-router in front of the workers."""
    profile: str | None = None
    """Sim: a calibration profile (file or bundled name) instead of gpu/model."""
    time_scale: float = Field(default=1.0, ge=0)
    """Sim: wall seconds per simulated second; 0 makes every step free (API benchmarks).
    The engine and its host link follow it; what is wall time stays wall time (tool
    latencies, each HTTP round trip of an agent, the pressure average, the door's cooldown),
    and the store's timestamps are wall clock. So a session below 0.5 reads slower than
    bench on the same trace (a round trip of ~0.1 s is ~1 simulated s at 0.1), and its
    ``trace export`` is in wall time, not the engine's."""
    served_model_name: str | None = None
    """The model name ``/v1/models`` reports (default: derived from ``model``)."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Runtime-specific options passed through to the runtime factory."""

    @model_validator(mode="after")
    def _options_the_runtime_reads(self) -> RuntimeSection:
        # an option the runtime never reads would run without a word (``--dp 2`` on the
        # simulator serves one engine)
        spec = runtime_spec(self.name)
        if "time_scale" in self.model_fields_set and not spec.simulated:
            raise ValueError(f"time_scale: runtime {self.name} runs in real time (sim only)")
        if self.dp > 1 and not spec.data_parallel:
            hint = " (bench --replicas simulates several)" if spec.simulated else ""
            raise ValueError(f"dp: runtime {self.name} runs no data-parallel ranks{hint}")
        if (self.workers or self.router) and not spec.routed_workers:
            raise ValueError(
                f"workers, router: runtime {self.name} serves no workers behind a router"
                " (runtime sglang-router does)"
            )
        given = (self.workers or self.extra.get("workers"), self.router or self.extra.get("router"))
        if spec.routed_workers and not all(given):
            # it failed at start-up in a 60-line traceback that named no flag
            raise ValueError(
                f"workers, router: runtime {self.name} needs the router's URL (--router) and"
                " its workers' (--workers)"
            )
        return self

    @field_validator("name")
    @classmethod
    def _known_runtime(cls, name: str) -> str:
        return _one_of(name, available_runtimes(), "runtime")

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        return _serve_policy(name)

    @field_validator("kv_policy")
    @classmethod
    def _known_kv_policy(cls, name: str) -> str:
        return _one_of(name, available_tool_wait_policies(), "tool-wait policy")

    @field_validator("extra")
    @classmethod
    def _usable_fairness(cls, extra: dict[str, Any]) -> dict[str, Any]:
        """``extra.fairness`` is read by serve's door and the engines' guard
        (``FairnessConfig.from_settings``): a weight they cannot share by is refused here, at
        start, not mid-serving."""
        fairness = extra.get("fairness")
        if fairness is not None:
            if not isinstance(fairness, dict):
                raise ValueError("extra.fairness must be a table of the guard's settings")
            FairnessConfig.from_settings(fairness)
        return extra


class ModelSection(_Section):
    """One served model of a multi-model ``serve`` (an entry of ``models``)."""

    name: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
    """What requests (``model``, ``model_candidates``) and responses call it; not ``auto``."""
    path: str | None = None
    """SGLang: the model directory (or hub id); sim: a model preset (``bench --list``). None:
    the runtime's default model (SGLang on CPU: the tiny model)."""
    tier: int = Field(default=1, ge=0, le=1000)
    """Quality tier, higher is better: a node's or role's minimum tier excludes lower ones."""
    roles: list[str] = Field(default_factory=list)
    """Node roles this model is meant for (``selection.rule = "fixed-roles"`` maps them)."""
    price_per_mtok: float = Field(default=0.0, ge=0)
    """Price per million tokens (prompt plus output): the selector weighs it (and breaks ties
    on it)."""
    load_s: float = Field(default=0.0, ge=0)
    """Cold start in seconds, charged by the selector while the model is not loaded."""
    tokenizer: str | None = None
    """SGLang: a tokenizer other than the model's own (directory or hub id). Default: the
    model's."""
    memory_share: float | None = Field(default=None, gt=0, le=1)
    """SGLang on GPU: the share of device memory its engine takes (``mem_fraction_static``);
    models sharing a GPU must add up to less than 1."""
    devices: list[int] = Field(default_factory=list)
    """SGLang on GPU: the device ids its engine runs on (tensor parallel over all of them;
    the first is ``base_gpu_id``). Empty: ``runtime.tp`` devices from 0."""
    tp: int | None = Field(default=None, ge=1, le=64)
    """Tensor-parallel degree of its engine (sim: of its preset, e.g. 4 for a 70B on H200).
    Default: the number of ``devices``, else ``runtime.tp``."""
    max_total_tokens: int | None = Field(default=None, ge=1)
    """The KV pool in tokens (SGLang on CPU: 16384 by default)."""
    gpu: str | None = None
    """Sim: the GPU preset of this model's engine (default ``runtime.gpu``)."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Runtime options for this model's engine, over ``runtime.extra``."""

    @field_validator("name")
    @classmethod
    def _not_auto(cls, name: str) -> str:
        if name == "auto":  # what a request asks to have a model chosen for it
            raise ValueError("'auto' asks the selector to choose; name the model otherwise")
        return name

    def served(self) -> ServedModel:
        """The server's view of this entry."""
        extra = dict(self.extra)
        if self.gpu is not None:
            extra["gpu"] = self.gpu
        return ServedModel(
            self.name,
            source=self.path,
            tier=self.tier,
            roles=tuple(self.roles),
            price_per_mtok=self.price_per_mtok,
            load_s=self.load_s,
            tokenizer=self.tokenizer,
            memory_share=self.memory_share,
            devices=tuple(self.devices),
            tp=self.tp,
            max_total_tokens=self.max_total_tokens,
            extra=extra,
        )


class SelectionSection(_Section):
    rule: str = "finish-time"
    """How ``auto`` calls get a model: ``finish-time`` (least predicted finish: queue plus
    service on each engine, cold start; price breaks ties), ``all-large`` (the top tier) or
    ``fixed-roles`` (each model's ``roles``)."""
    seconds_per_price: float = Field(default=0.0, ge=0)
    """``finish-time``: seconds of predicted finish one unit of price is worth (0: price only
    breaks ties)."""
    role_tiers: dict[str, int] = Field(default_factory=dict)
    """Role -> the least quality tier its nodes accept (a request's ``min_tier`` wins)."""
    role_pins: dict[str, str] = Field(default_factory=dict)
    """Role -> model: operator pins in place at start (``/v1/operator/models/pins`` changes
    them while serving)."""

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, name: str) -> str:
        return _one_of(name, available_rules(), "model selection rule")

    def config(self) -> SelectionConfig:
        """The server's view of these settings (``KeyError`` for an unknown rule)."""
        get_rule(self.rule)
        return SelectionConfig(
            self.rule, self.seconds_per_price, dict(self.role_tiers), dict(self.role_pins)
        )


#: ``serve --runtime sim --demo`` without ``models``: a large and a small preset, so the
#: selector and the consoles have a choice to show (list prices: Together AI, Llama 3.1 Turbo)
DEMO_SIM_MODELS = (
    ModelSection(name="llama-3.1-70b", path="llama-3.1-70b", tier=2, tp=4, price_per_mtok=0.88),
    ModelSection(name="llama-3.1-8b", path="llama-3.1-8b", tier=1, price_per_mtok=0.18),
)


class StoreSection(_Section):
    db: Path = Path("agentconsole.duckdb")
    """The DuckDB file. Its event log lives next to it (``x.duckdb`` -> ``x.events.duckdb``);
    ``serve`` holds both exclusively while it runs."""
    memory_limit: str = Field(
        default="1GB", pattern=r"^\s*\d+(\.\d+)?\s*([KMGT]i?B|B)\s*$", examples=["256MB", "2GB"]
    )
    """DuckDB's memory limit (its buffer pool, which caches the store's blocks as the store
    grows: the server's memory grows with it up to this). Leave room to replay a full WAL at
    start; 128MB is enough for the WAL (2 MB checkpoints), 1GB keeps more of a big store's
    history in memory for the consoles' queries."""
    own_process: bool = False
    """Run DuckDB in a process of its own, which ``serve`` starts and stops with itself: the
    store's statements then take none of Python's GIL from the serving thread (in ``serve``
    DuckDB takes it back after every task of a statement). Measured in alternated runs
    (docs/BENCHMARKS.md section 7): on a loaded host the API's p99 added fell from 4.5 to
    3.9 ms; on a quiet one it rose from 1.0 to 1.2 ms (0.65 to 1.1 ms with a million nodes
    stored), so it is off unless the host's other work makes the GIL hand-over the tail."""


class WhatIfSection(_Section):
    dir: Path | None = None
    """Where ``POST /v1/operator/whatif`` writes the traces of replayed windows (the server
    names the files). Default: ``whatif/`` beside the store file (``store.db``)."""
    keep: int = Field(default=20, ge=1, le=10_000)
    """Traces kept there; older ones (and their bench reports) are deleted."""
    run_timeout_s: float = Field(default=300.0, gt=0, le=86_400)
    """A background bench run (``run: true``) is killed past this many seconds."""
    run_jobs: int = Field(default=1, ge=1, le=64)
    """Worker processes of a background bench run (``bench --jobs``): it shares the machine
    with the server."""


class AuthSection(_Section):
    tenant_keys: dict[str, str] = Field(default_factory=dict)
    """API key -> tenant. Both this and ``operator_keys`` empty: the development keys
    ``sk-dev`` (tenant ``default``) and ``sk-operator``; once any key is configured no
    development key is live."""
    operator_keys: list[str] = Field(default_factory=list)
    """Operator keys. Empty while tenant keys are set: no operator key (the operator routes
    answer 401/403)."""

    @field_validator("tenant_keys")
    @classmethod
    def _no_reserved_tenant(cls, keys: dict[str, str]) -> dict[str, str]:
        # a blank name is the platform's marker (it would own platform tools and read events
        # of no tenant), ``operator`` runs the operator keys' own calls: refused before serve
        # starts, with the reason, rather than by the key ring at start-up
        for tenant in keys.values():
            check_tenant_name(tenant)
        return keys

    @model_validator(mode="after")
    def _a_key_is_a_tenants_or_an_operators(self) -> AuthSection:
        # listed as both, the key ring takes it for an operator's: a copy-paste slip would
        # give a tenant every operator power. The keys themselves are never echoed
        both = set(self.tenant_keys) & set(self.operator_keys)
        if both:
            tenants = sorted(self.tenant_keys[key] for key in both)
            raise ValueError(
                f"{len(both)} key(s) of tenant(s) {tenants} also listed in operator_keys:"
                " a key is a tenant's or an operator's"
            )
        return self


class TenantLimitsSection(_Section):
    tokens_per_minute: int | None = Field(default=None, ge=1)
    """Prompt tokens computed plus output tokens of all the tenant's calls in any 60 s; a call
    past it gets 429 with ``Retry-After``. None: unlimited."""
    concurrent_programs: int | None = Field(default=DEFAULT_CONCURRENT_PROGRAMS, ge=1)
    """Programs of the tenant running at once (waiting at the door or between calls too: each
    holds memory until it ends or idles out); a new one past it gets 429. None: unlimited."""
    concurrent_calls: int | None = Field(default=None, ge=1)
    """LLM calls of the tenant in flight at once (one program may run many, and the server's
    request slots give a tenant only a coarse share, ``server.per_tenant_concurrency``); a call
    past it gets 429. None: unlimited."""
    stored_bytes: int | None = Field(default=None, ge=1)
    """Bytes the store keeps for the tenant (events, tool results); new programs, calls and
    nodes past it get 429. None: unlimited."""
    program_nodes: int | None = Field(default=DEFAULT_PROGRAM_NODES, ge=1)
    """Nodes one program of the tenant may hold (program quotas are the client's to choose:
    this bounds one program's memory and events whatever it asks); a node past it gets 403.
    None: unlimited."""
    program_edges: int | None = Field(default=DEFAULT_PROGRAM_EDGES, ge=1)
    """Parent links one program's DAG may hold (each node takes at most 256 parents: this
    bounds what a program's view and events cost, whatever its nodes name); a node whose
    parents would pass it gets 403. None: unlimited."""
    max_priority: int = Field(default=0, ge=-1000, le=1000)
    """The highest chat ``priority`` the tenant's calls take (a higher one is taken as this).
    Below it the tenant orders its own calls; above 0 its calls go ahead of other tenants',
    which is the operator's to grant."""


class LimitsSection(_Section):
    default_max_tokens: int = Field(default=1024, ge=1)
    """``max_tokens`` of a chat call that gives none."""
    max_tokens_limit: int = Field(default=32_768, ge=1)
    """Largest ``max_tokens`` accepted (a larger one: 400, as OpenAI refuses it)."""
    ready_timeout_s: float = Field(default=30.0, gt=0)
    """How long a call waits for a runtime that is still starting before 503."""
    program_idle_s: float = Field(
        default=300.0, gt=0, validation_alias=AliasChoices("program_idle_s", "inferred_idle_s")
    )
    """A program with nothing running and no activity for this long is finished: agents
    that never say they are done (unmodified OpenAI clients, inferred programs) end this way.
    A tool call the model asked for whose result has not come back keeps a named program open
    up to ``pending_tool_s`` (an inferred program: not at all). (``inferred_idle_s`` is read as
    this too.)"""
    pending_tool_s: float = Field(default=3600.0, gt=0)
    """How long a tool call the model asked for, whose result has not come back, keeps its
    named program open (the agent runs it: a test suite, a build, a person's approval); past
    it the call is closed as abandoned and the program may end as idle."""
    tenant: TenantLimitsSection = Field(default_factory=lambda: TenantLimitsSection())
    """Tenant-level limits for every tenant (a tenant's programs together)."""
    tenants: dict[str, TenantLimitsSection] = Field(default_factory=dict)
    """Tenant-level limits of named tenants, replacing ``tenant`` for them."""
    tenant_weights: dict[str, Annotated[float, Field(gt=0, le=MAX_TENANT_WEIGHT)]] = Field(
        default_factory=dict
    )
    """Tenant -> its weight in the shares between tenants (default 1 for a tenant not named):
    the engines' fairness guard shares service by them (a tenant below its weighted share of
    recent service goes first), and the admission door shares program starts by them (of the
    KV memory started programs hold). A tenant of weight 2 is due twice the share of one of
    weight 1. Given to the runtime as ``runtime.extra.fairness.tenant_weights``, over any
    weight named there for the same tenant."""
    tools: int = Field(default=DEFAULT_TOOLS, ge=1)
    """Tools one tenant may have registered at once (``POST /v1/tools``); a new one past it
    gets 429 ``tenant_limit`` (replacing or deleting one of its tools still passes). Each is
    held in memory, compiled, while it is registered. Platform tools are not counted."""
    tool_bytes: int = Field(default=DEFAULT_TOOL_BYTES, ge=1024)
    """Bytes one tenant's tool definitions may take together, each counted as its stored row
    (name, owner, schema and other fields as JSON text); a registration that would pass it
    gets 429 ``tenant_limit`` (one that does not grow its tool always passes). Lowering it
    below what a tenant holds deletes nothing."""
    metrics_snapshot_s: float = Field(default=10.0, gt=0)
    """How often the live metrics are sampled into the store's ``metric_snapshots`` table."""
    store_sync_s: float = Field(default=1.0, gt=0)
    """How often changed programs' and nodes' rows are written to the store. Events are
    written within milliseconds whatever this is, and a restart replays the events the rows
    miss, so a crash loses no committed event's effect; longer means fewer writes."""
    retain_finished_s: float = Field(default=600.0, ge=0)
    """Ended programs stay in memory this long (then they are read from the store)."""
    program_admission: bool = DOOR_ON_BY_DEFAULT
    """Under a program-aware policy, a new program's first call waits at the door while the
    working set of the started programs fills 90% of the runtime's KV memory (HBM + DRAM) and
    the engine's batch is full, so overload does not thrash (docs/BENCHMARKS.md, 2b and 8: on
    the real engine 1.16x programs/s where the pool binds, no loss where compute does)."""
    admission_wait_s: float = Field(default=120.0, gt=0)
    """How long a first call waits at the admission door before 503 with Retry-After."""
    admission_budget_tokens: int | None = Field(default=None, ge=1)
    """The door's budget in KV tokens (default: 90% of the runtime's HBM + DRAM)."""
    admission_shortest_first: bool = True
    """Programs waiting at the door start by highest response ratio, (wait + expected run)
    / expected run: the expected run is learned from finished programs of the same tenant and
    ``workload`` (else ``agent``) label, else of the label, else of all
    (``scheduler/doorline.py``); a short kind of agent does not wait behind every long one
    that came before it. False: first come first served."""

    def tool_bounds(self) -> ToolBounds:
        """The tool gateway's view of ``tools`` and ``tool_bytes``."""
        return ToolBounds(tools=self.tools, tool_bytes=self.tool_bytes)


class PrivacySection(_Section):
    tool_data: Redaction = "full"
    """What the store keeps of tool arguments and results: ``full`` (as they are; a retried
    call replays its result exactly), ``hash`` (a SHA-256 digest and the size) or ``none``.
    Exports and the consoles show only what is stored."""
    tenants: dict[str, Redaction] = Field(default_factory=dict)
    """``tool_data`` of named tenants, replacing the default for them."""


class SandboxSection(_Section):
    python: str = Field(default=DEFAULT_PYTHON, pattern="^/")
    """The Python interpreter sandboxed code runs with (``-I -B`` added). It must lie under
    ``/usr``: the sandbox sees no other host directory."""
    run_as_uid: int = Field(default=65534, ge=1, le=2**31 - 1)
    """Host uid the sandbox runs as when the server runs as root (nobody; never 0: the kernel
    does not enforce the process limit for root)."""
    run_as_gid: int = Field(default=65534, ge=1, le=2**31 - 1)
    """Host gid the sandbox runs as when the server runs as root."""
    max_parallel: int = Field(default=4, ge=1, le=1024)
    """Sandboxed tool calls running at once; later ones wait for a slot."""

    def config(self) -> SandboxConfig:
        """The sandbox executor's view of these settings."""
        return SandboxConfig(
            interpreters=python_interpreter(self.python),
            run_as_uid=self.run_as_uid,
            run_as_gid=self.run_as_gid,
            max_parallel=self.max_parallel,
        )


class Settings(BaseSettings):
    """Everything ``serve`` can be told; see the module docstring for the sources."""

    model_config = SettingsConfigDict(
        env_prefix="AGENTCONSOLE_",
        env_nested_delimiter="__",
        extra="forbid",
        use_attribute_docstrings=True,
    )
    #: the TOML file of this load (set by :func:`load_settings`)
    config_file: ClassVar[Path | None] = None

    server: ServerSection = Field(default_factory=lambda: ServerSection())
    """HTTP server."""
    runtime: RuntimeSection = Field(default_factory=lambda: RuntimeSection())
    """The LLM runtime and its policies."""
    store: StoreSection = Field(default_factory=lambda: StoreSection())
    """The DuckDB store."""
    whatif: WhatIfSection = Field(default_factory=lambda: WhatIfSection())
    """What-if replays of recorded windows (``/v1/operator/whatif``)."""
    auth: AuthSection = Field(default_factory=lambda: AuthSection())
    """API keys."""
    limits: LimitsSection = Field(default_factory=lambda: LimitsSection())
    """Request limits and housekeeping."""
    privacy: PrivacySection = Field(default_factory=lambda: PrivacySection())
    """What the store keeps of tenants' tool data."""
    sandbox: SandboxSection = Field(default_factory=lambda: SandboxSection())
    """The tool gateway's ``sandbox`` executor (bubblewrap)."""
    models: list[ModelSection] = Field(default_factory=list)
    """Several models in one ``serve``, each its own engine (the first is the default).
    Empty: the one ``runtime.model``. TOML: ``[[models]]`` tables; environment:
    ``AGENTCONSOLE_MODELS`` as a JSON list."""
    selection: SelectionSection = Field(default_factory=lambda: SelectionSection())
    """How calls are given one of several models (``model: auto``, candidates)."""
    demo: bool = False
    """Add the demo tenants and run built-in agents against the server."""
    tui: bool = False
    """Open the terminal dashboard on the server once it is up."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls.config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls.config_file))
        return tuple(sources)

    @model_validator(mode="after")
    def _models_named_once_and_pinned_to(self) -> Settings:
        names = [entry.name for entry in self.models]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"models: each served model needs a name of its own: {twice}")
        served = {entry.name for entry in self.served_models()}
        for role, model in self.selection.role_pins.items():
            if not served:
                raise ValueError(
                    f"selection.role_pins: {role!r} is pinned, but pins choose among several"
                    " served models and one is served (add [[models]])"
                )
            if model not in served:
                raise ValueError(
                    f"selection.role_pins: {role!r} is pinned to {model!r}, which is not"
                    f" served (served: {sorted(served)})"
                )
        return self

    def keys(self) -> tuple[dict[str, str], list[str]]:
        """(tenant keys, operator keys): the configured ones, or the development defaults when
        none is configured (a configured tenant key never leaves the public ``sk-operator``
        live)."""
        tenants, operators = dict(self.auth.tenant_keys), list(self.auth.operator_keys)
        if self.uses_dev_keys:
            tenants, operators = dict(DEV_TENANT_KEYS), list(DEV_OPERATOR_KEYS)
        if self.demo:
            tenants = {**tenants, **DEMO_TENANT_KEYS}
        return tenants, operators

    @property
    def uses_dev_keys(self) -> bool:
        """No key is configured: ``serve`` runs with the public development keys."""
        return not self.auth.tenant_keys and not self.auth.operator_keys

    def server_config(self) -> ServerConfig:
        """The server's view of these settings."""
        tenants, operators = self.keys()
        runtime, limits = self.runtime, self.limits
        extra = dict(runtime.extra)
        if runtime_spec(runtime.name).simulated:
            extra.setdefault("time_scale", runtime.time_scale)
        if runtime.dp > 1:
            extra.setdefault("dp", runtime.dp)
        if runtime.workers:
            extra.setdefault("workers", list(runtime.workers))
        if runtime.router:
            extra.setdefault("router", runtime.router)
        if limits.tenant_weights:
            # the guard's weights, which serve's door also reads (``server.app.door_settings``)
            fairness = dict(extra.get("fairness") or {})
            weights = {**dict(fairness.get("tenant_weights") or {}), **limits.tenant_weights}
            extra["fairness"] = {**fairness, "tenant_weights": weights}
        return ServerConfig(
            db_path=self.store.db,
            store_memory_limit=self.store.memory_limit.strip(),
            store_own_process=self.store.own_process,
            runtime=runtime.name,
            model=runtime.model,
            policy=runtime.policy,
            kv_policy=runtime.kv_policy,
            gpu=runtime.gpu,
            tp=runtime.tp,
            max_total_tokens=runtime.max_total_tokens,
            profile=runtime.profile,
            runtime_extra=extra,
            tenant_keys=tenants,
            operator_keys=tuple(operators),
            max_body_bytes=self.server.max_body_bytes,
            express_lane=self.server.express_lane,
            feeds_per_tenant=self.server.feeds_per_tenant,
            operator_feeds=self.server.operator_feeds,
            feed_lifetime_s=self.server.feed_lifetime_s,
            default_max_tokens=limits.default_max_tokens,
            max_tokens_limit=limits.max_tokens_limit,
            ready_timeout_s=limits.ready_timeout_s,
            program_idle_s=limits.program_idle_s,
            pending_tool_s=limits.pending_tool_s,
            metrics_snapshot_s=limits.metrics_snapshot_s,
            store_sync_s=limits.store_sync_s,
            tenant_limits=TenantLimits(**limits.tenant.model_dump()),
            tenant_overrides={
                name: TenantLimits(**section.model_dump())
                for name, section in limits.tenants.items()
            },
            retain_finished_s=limits.retain_finished_s,
            program_admission=limits.program_admission,
            admission_wait_s=limits.admission_wait_s,
            admission_budget_tokens=limits.admission_budget_tokens,
            admission_shortest_first=limits.admission_shortest_first,
            served_model_name=runtime.served_model_name,
            whatif_dir=self.whatif.dir,
            whatif_keep=self.whatif.keep,
            whatif_run_timeout_s=self.whatif.run_timeout_s,
            whatif_run_jobs=self.whatif.run_jobs,
            models=tuple(m.served() for m in self.served_models()),
            selection=self.selection.config(),
        )

    def served_models(self) -> list[ModelSection]:
        """``models``; with none, the demo's two presets under ``--demo`` on the simulator."""
        if self.models or not (self.demo and runtime_spec(self.runtime.name).simulated):
            return list(self.models)
        if self.runtime.model is not None or self.runtime.profile is not None:
            return []  # the operator chose the demo's model: one, as before
        return list(DEMO_SIM_MODELS)


def load_settings(
    config_file: Path | None = None, overrides: Mapping[str, Any] | None = None
) -> Settings:
    """Settings from ``overrides`` (nested dicts of CLI values; None values are ignored) >
    environment > ``config_file`` > defaults. Raises ``pydantic.ValidationError``."""

    class _Loaded(Settings):
        pass

    _Loaded.config_file = config_file
    return _Loaded(**_without_none(overrides or {}))


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            nested = _without_none(value)
            if nested:
                out[key] = nested
        elif value is not None:
            out[key] = value
    return out


class InvalidSettings(ValueError):
    """Settings that cannot be loaded, said for the person who wrote them: each bad setting by
    its dotted name, where it can be set (a ``serve`` flag, its environment variable), what
    is wrong and the value given. ``str()`` is the whole explanation."""


def load_settings_or_explain(
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Settings:
    """:func:`load_settings`, with every way settings can be wrong (a value, a name no
    registry knows, a TOML file that does not parse, an environment variable that is not
    JSON) raised as :class:`InvalidSettings`. ``flags`` maps a dotted setting to the
    command-line flag that sets it, named in the explanation."""
    unknown = unknown_environment_sections(os.environ)
    if unknown:
        raise InvalidSettings(
            "unknown settings section in the environment: "
            + ", ".join(unknown)
            + f" (sections: {', '.join(Settings.model_fields)}; e.g. AGENTCONSOLE_RUNTIME__POLICY)"
        )
    try:
        return load_settings(config_file, overrides)
    except ValidationError as error:
        raise InvalidSettings(_explain_values(error, flags or {}, config_file)) from error
    except tomllib.TOMLDecodeError as error:
        raise InvalidSettings(
            f"the config file {config_file} is not valid TOML: {error}"
        ) from error
    except SourceError as error:
        raise InvalidSettings(_explain_environment(error)) from error


def unknown_environment_sections(environ: Mapping[str, str]) -> list[str]:
    """The environment variables that name a nested setting (``AGENTCONSOLE_<SECTION>__...``)
    of a section ``Settings`` does not have, sorted. pydantic-settings reads only the names
    it knows, so a misspelt section (``AGENTCONSOLE_RUNTIMES__POLICY``) was silently ignored
    and ``serve`` ran with the default it was meant to change (a misspelt key inside a known
    section is refused by the section itself). Variables without the ``__`` are the other
    tools' (``AGENTCONSOLE_URL``, ``AGENTCONSOLE_COMPILE``, ...) and are left alone."""
    prefix = Settings.model_config.get("env_prefix", "")
    sections = set(Settings.model_fields)
    return sorted(
        name
        for name in environ
        if name.upper().startswith(prefix)
        and "__" in name[len(prefix) :]
        and name[len(prefix) :].split("__", 1)[0].lower() not in sections
    )


def _explain_values(
    error: ValidationError, flags: Mapping[str, str], config_file: Path | None
) -> str:
    # pydantic names the model (a class private to load_settings): name the settings instead
    lines = [f"invalid setting{'s' if error.error_count() > 1 else ''}:"]
    for problem in error.errors():
        location = problem["loc"]
        dotted = ".".join(str(part) for part in location)
        message = str(problem["msg"]).removeprefix("Value error, ")
        if not location:  # a rule across settings: its message names them (input: them all)
            lines.append(f"  {message}")
            continue
        given = repr(problem["input"])
        # the keys are secrets: an error names what is wrong with them, never echoes them
        if location[:1] != ("auth",) and given not in message:
            message += f" (given: {given if len(given) <= 80 else given[:77] + '...'})"
        where = [flags[dotted]] if dotted in flags else []
        where.append(_environment_name(location))
        if config_file is not None and all(isinstance(part, str) for part in location):
            *tables, key = location
            where.append(
                f"{'[' + '.'.join(map(str, tables)) + '] ' if tables else ''}{key} in {config_file}"
            )
        lines.append(f"  {dotted} ({', '.join(where)}): {message}")
    return "\n".join(lines)


def _environment_name(location: tuple[int | str, ...]) -> str:
    """The variable that sets the setting at ``location`` (a list's items are given in the
    list's variable, as JSON)."""
    names: list[str] = []
    for part in location:
        if isinstance(part, int):
            break
        names.append(part.upper())
    return "AGENTCONSOLE_" + "__".join(names)


def _explain_environment(error: SourceError) -> str:
    # pydantic-settings names only the top-level field whose variable did not parse
    field = str(error).split('"')[1] if str(error).count('"') >= 2 else "?"
    prefix = f"AGENTCONSOLE_{field.upper()}"
    named = sorted(key for key in os.environ if key.upper().startswith(prefix))
    cause = f" ({error.__cause__})" if error.__cause__ is not None else ""
    return (
        f"the environment's {', '.join(named) or prefix} for setting {field} is not valid"
        f" JSON{cause}: lists and tables are given as JSON, e.g."
        """ AGENTCONSOLE_MODELS='[{"name": "a"}]'"""
    )

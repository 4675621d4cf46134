"""Typed, immutable views of the API's observation JSON (``docs/API.md``), parsed at the edge;
the program shapes live in :mod:`agentconsole.ui.client.programs`.

Each ``parse`` function accepts the decoded JSON of one response (or one item of it) and never
raises on missing or extra fields; see :mod:`agentconsole.httpclient.jsonread`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentconsole.httpclient import jsonread as j

TIER_ORDER = ("hbm", "dram", "disk")


@dataclass(frozen=True, slots=True)
class TierUse:
    """Occupancy of one KV tier."""

    tier: str
    used_tokens: int
    capacity_tokens: int
    used_bytes: int

    @property
    def fraction(self) -> float:
        """Used share of capacity as the server reports it; 0 when the capacity is unknown.

        Not capped at 1: should a runtime report more in use than its capacity, a 100% would
        hide that; a meter clamps, the number shows what was reported (see ``fmt.fill``)."""
        if self.capacity_tokens <= 0:
            return 0.0
        return self.used_tokens / self.capacity_tokens


def parse_tiers(data: Any) -> tuple[TierUse, ...]:
    """``{tier: {used_tokens, capacity_tokens, used_bytes}}`` in HBM, DRAM, disk order."""
    raw = j.obj(data)
    names = sorted(raw, key=lambda n: (TIER_ORDER.index(n) if n in TIER_ORDER else 9, n))
    out = []
    for name in names:
        item = j.obj(raw[name])
        out.append(
            TierUse(
                tier=name,
                used_tokens=j.integer(item, "used_tokens"),
                capacity_tokens=j.integer(item, "capacity_tokens"),
                used_bytes=j.integer(item, "used_bytes"),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Overview:
    """``GET /v1/overview`` and the feed's ``overview`` event."""

    policy: str
    kv_policy: str
    runtime: str
    draining: bool
    programs: Mapping[str, int]
    throughput: float
    goodput: float
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    e2e_p99_s: float | None
    queue_depth: int
    running_calls: int
    kv: tuple[TierUse, ...]
    prefix_hit_tokens: int
    ghost_tokens: int

    @staticmethod
    def parse(data: Any) -> Overview:
        """Parse the overview object."""
        d = j.obj(data)
        counts = j.obj(d.get("programs"))
        return Overview(
            policy=j.text(d, "policy", "?"),
            kv_policy=j.text(d, "kv_policy", "?"),
            runtime=j.text(d, "runtime", "?"),
            draining=j.flag(d, "draining"),
            programs={str(k): int(v) for k, v in counts.items() if isinstance(v, int | float)},
            throughput=j.num(d, "throughput_programs_per_s"),
            goodput=j.num(d, "goodput_programs_per_s"),
            e2e_p50_s=j.opt_num(d, "e2e_p50_s"),
            e2e_p95_s=j.opt_num(d, "e2e_p95_s"),
            e2e_p99_s=j.opt_num(d, "e2e_p99_s"),
            queue_depth=j.integer(d, "queue_depth"),
            running_calls=j.integer(d, "running_calls"),
            kv=parse_tiers(d.get("kv")),
            prefix_hit_tokens=j.integer(d, "prefix_hit_tokens"),
            ghost_tokens=j.integer(d, "ghost_tokens"),
        )


@dataclass(frozen=True, slots=True)
class TenantRow:
    """One tenant of ``GET /v1/tenants``."""

    tenant: str
    programs: int
    running: int
    slowdown: float | None
    #: the largest queue wait / service ratio of the tenant's programs; None while unknown
    #: (no program has had service yet), not 0, which would read as "never waited"
    starvation: float | None
    max_queue_wait_s: float
    tokens_used: int
    quota_use: Mapping[str, float]
    #: tenant-level limits (absent: unlimited) and what counts against them
    limits: Mapping[str, float]
    tokens_last_minute: int
    stored_bytes: int
    #: prompt tokens prefilled again because of mid-prompt insertions (since server start)
    lost_reuse_tokens: int = 0

    @staticmethod
    def parse(data: Any) -> TenantRow:
        """Parse one tenant row."""
        d = j.obj(data)
        return TenantRow(
            tenant=j.text(d, "tenant"),
            programs=j.integer(d, "programs"),
            running=j.integer(d, "running"),
            slowdown=j.opt_num(d, "slowdown"),
            starvation=j.opt_num(d, "starvation"),
            max_queue_wait_s=j.num(d, "max_queue_wait_s"),
            tokens_used=j.integer(d, "tokens_used"),
            quota_use=j.num_map(d.get("quota_use")),
            limits=j.num_map(d.get("limits")),
            tokens_last_minute=j.integer(d, "tokens_last_minute"),
            stored_bytes=j.integer(d, "stored_bytes"),
            lost_reuse_tokens=j.integer(j.obj(d.get("prompt_insertions")), "lost_reuse_tokens"),
        )


@dataclass(frozen=True, slots=True)
class RetainedPrefix:
    """KV kept for a program that waits on a tool."""

    program_id: str
    tenant: str
    tokens: int
    tier: str
    until: float | None


@dataclass(frozen=True, slots=True)
class KVState:
    """``GET /v1/kv``."""

    tiers: tuple[TierUse, ...]
    retained: tuple[RetainedPrefix, ...]
    migrations: int
    recomputes: int
    placement: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @staticmethod
    def parse(data: Any) -> KVState:
        """Parse the KV object."""
        d = j.obj(data)
        retained = tuple(
            RetainedPrefix(
                program_id=j.text(r, "program_id"),
                tenant=j.text(r, "tenant"),
                tokens=j.integer(r, "tokens"),
                tier=j.text(r, "tier"),
                until=j.opt_num(r, "until"),
            )
            for r in j.objects(d.get("retained"))
        )
        placement = {
            str(pid): {tier: int(tokens) for tier, tokens in j.num_map(tiers).items()}
            for pid, tiers in j.obj(d.get("placement")).items()
        }
        return KVState(
            tiers=parse_tiers(d.get("tiers")),
            retained=retained,
            migrations=j.integer(d, "migrations"),
            recomputes=j.integer(d, "recomputes"),
            placement=placement,
        )


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator action of ``GET /v1/operator/audit``."""

    ts: float
    actor: str
    action: str
    target: str
    args: str
    result: str

    @staticmethod
    def parse(data: Any) -> AuditEntry:
        """Parse one audit row; ``args``/``result`` are kept as compact text."""
        d = j.obj(data)
        return AuditEntry(
            ts=j.num(d, "ts"),
            actor=j.text(d, "actor"),
            action=j.text(d, "action"),
            target=j.text(d, "target"),
            args=compact(d.get("args")),
            result=compact(d.get("result")),
        )


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One ``Event`` of the SSE feed."""

    seq: int
    t: float
    kind: str
    program_id: str
    node_id: str
    attempt: int
    tenant: str
    data: str

    @staticmethod
    def parse(data: Any) -> FeedEvent:
        """Parse one event; ``data`` is kept as compact text for the tail."""
        d = j.obj(data)
        return FeedEvent(
            seq=j.integer(d, "seq"),
            t=j.num(d, "t"),
            kind=j.text(d, "kind"),
            program_id=j.text(d, "program_id"),
            node_id=j.text(d, "node_id"),
            attempt=j.integer(d, "attempt"),
            tenant=j.text(d, "tenant"),
            data=compact(d.get("data")),
        )


def compact(value: Any) -> str:
    """A short one-line rendering of a JSON value (``k=v k2=v2`` for objects)."""
    if value is None:
        return ""
    if isinstance(value, Mapping):
        return " ".join(f"{k}={compact(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(compact(v) for v in value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@dataclass(frozen=True, slots=True)
class Policies:
    """The policies in force: ``POST /v1/operator/policy``'s answer (the overview's names)."""

    policy: str
    kv_policy: str

    @staticmethod
    def parse(data: Any) -> Policies:
        """Parse the policy switch's answer."""
        d = j.obj(data)
        return Policies(policy=j.text(d, "policy"), kv_policy=j.text(d, "kv_policy"))


@dataclass(frozen=True, slots=True)
class PolicyChoices:
    """``GET /v1/operator/policy``: the policies in force and every name the switch accepts
    for each (what the consoles offer, so no name is typed)."""

    policy: str
    kv_policy: str
    policies: tuple[str, ...]
    kv_policies: tuple[str, ...]

    @staticmethod
    def parse(data: Any) -> PolicyChoices:
        """Parse the policy choices."""
        d = j.obj(data)
        return PolicyChoices(
            policy=j.text(d, "policy"),
            kv_policy=j.text(d, "kv_policy"),
            policies=j.strings(d.get("policies")),
            kv_policies=j.strings(d.get("kv_policies")),
        )


@dataclass(frozen=True, slots=True)
class Identity:
    """``GET /v1/whoami``: whose key this is (``key_id`` is the audit's actor, not the key)."""

    tenant: str
    operator: bool
    key_id: str

    @staticmethod
    def parse(data: Any) -> Identity:
        """Parse the key's principal."""
        d = j.obj(data)
        return Identity(
            tenant=j.text(d, "tenant"), operator=j.flag(d, "operator"), key_id=j.text(d, "key_id")
        )

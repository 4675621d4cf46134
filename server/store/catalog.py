"""Slowly changing configuration rows: tenants, API keys and registered tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentconsole.server.store.jsonutil import JSONValue
from agentconsole.server.store.tablespec import (
    BOOL,
    FLOAT,
    JSON,
    JSON_TEXT,
    NO_DATA,
    STR,
    STR_LIST,
    TableRecord,
    TableSpec,
)


@dataclass(frozen=True, slots=True)
class TenantRecord(TableRecord):
    """A tenant: display name, fair-share weight and quotas."""

    tenant: str
    display_name: str
    created_at: float
    updated_at: float
    weight: float = 1.0
    quotas: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)


TenantRecord.SPEC = TableSpec(
    "tenants",
    (
        ("tenant", STR),
        ("display_name", STR),
        ("weight", FLOAT),
        ("quotas", JSON),
        ("created_at", FLOAT),
        ("updated_at", FLOAT),
    ),
    key=("tenant",),
)


@dataclass(frozen=True, slots=True)
class ApiKeyRecord(TableRecord):
    """An API key, stored only as a hash, with its tenant and role."""

    key_id: str
    tenant: str
    key_hash: str
    role: str
    created_at: float
    revoked_at: float | None = None


ApiKeyRecord.SPEC = TableSpec(
    "api_keys",
    (
        ("key_id", STR),
        ("tenant", STR),
        ("key_hash", STR),
        ("role", STR),
        ("created_at", FLOAT),
        ("revoked_at", FLOAT),
    ),
    key=("key_id",),
)


@dataclass(frozen=True, slots=True)
class ToolRecord(TableRecord):
    """A registered tool. ``tenant`` is ``""`` for a platform-wide tool."""

    name: str
    tenant: str
    json_schema: str
    side_effect: bool
    idempotent: bool
    timeout_s: float
    created_at: float
    updated_at: float
    permissions: tuple[str, ...] = ()
    flags: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)


ToolRecord.SPEC = TableSpec(
    "tools",
    (
        ("name", STR),
        ("tenant", STR),
        ("json_schema", JSON_TEXT),
        ("side_effect", BOOL),
        ("idempotent", BOOL),
        ("timeout_s", FLOAT),
        ("permissions", STR_LIST),
        ("flags", JSON),
        ("created_at", FLOAT),
        ("updated_at", FLOAT),
    ),
    key=("tenant", "name"),
)

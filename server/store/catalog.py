"""Slowly changing configuration rows: tenants, API keys and registered tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentconsole.server.store.jsonutil import JSONValue, dumps, loads_object
from agentconsole.server.store.tablespec import (
    BOOL,
    FLOAT,
    NO_DATA,
    STR,
    STR_LIST,
    TableSpec,
    opt_float,
)


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """A tenant: display name, fair-share weight and quotas."""

    SPEC: ClassVar[TableSpec]
    tenant: str
    display_name: str
    created_at: float
    updated_at: float
    weight: float = 1.0
    quotas: Mapping[str, JSONValue] = field(default_factory=lambda: NO_DATA)

    def row(self) -> tuple[object, ...]:
        """Values in ``SPEC.columns`` order."""
        return (
            self.tenant,
            self.display_name,
            self.weight,
            dumps(self.quotas),
            self.created_at,
            self.updated_at,
        )

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> TenantRecord:
        """Inverse of :meth:`row`."""
        return cls(
            tenant=r[0],
            display_name=r[1],
            weight=r[2],
            quotas=loads_object(r[3]),
            created_at=r[4],
            updated_at=r[5],
        )


TenantRecord.SPEC = TableSpec(
    "tenants",
    (
        ("tenant", STR),
        ("display_name", STR),
        ("weight", FLOAT),
        ("quotas", STR),
        ("created_at", FLOAT),
        ("updated_at", FLOAT),
    ),
    key=("tenant",),
)


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key, stored only as a hash, with its tenant and role."""

    SPEC: ClassVar[TableSpec]
    key_id: str
    tenant: str
    key_hash: str
    role: str
    created_at: float
    revoked_at: float | None = None

    def row(self) -> tuple[object, ...]:
        """Values in ``SPEC.columns`` order."""
        return (
            self.key_id,
            self.tenant,
            self.key_hash,
            self.role,
            self.created_at,
            self.revoked_at,
        )

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> ApiKeyRecord:
        """Inverse of :meth:`row`."""
        return cls(
            key_id=r[0],
            tenant=r[1],
            key_hash=r[2],
            role=r[3],
            created_at=r[4],
            revoked_at=opt_float(r[5]),
        )


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
class ToolRecord:
    """A registered tool. ``tenant`` is ``""`` for a platform-wide tool."""

    SPEC: ClassVar[TableSpec]
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

    def row(self) -> tuple[object, ...]:
        """Values in ``SPEC.columns`` order."""
        return (
            self.name,
            self.tenant,
            self.json_schema,
            self.side_effect,
            self.idempotent,
            self.timeout_s,
            list(self.permissions),
            dumps(self.flags),
            self.created_at,
            self.updated_at,
        )

    @classmethod
    def from_row(cls, r: tuple[Any, ...]) -> ToolRecord:
        """Inverse of :meth:`row`."""
        return cls(
            name=r[0],
            tenant=r[1],
            json_schema=r[2],
            side_effect=r[3],
            idempotent=r[4],
            timeout_s=r[5],
            permissions=tuple(r[6] or ()),
            flags=loads_object(r[7]),
            created_at=r[8],
            updated_at=r[9],
        )


ToolRecord.SPEC = TableSpec(
    "tools",
    (
        ("name", STR),
        ("tenant", STR),
        ("json_schema", STR),
        ("side_effect", BOOL),
        ("idempotent", BOOL),
        ("timeout_s", FLOAT),
        ("permissions", STR_LIST),
        ("flags", STR),
        ("created_at", FLOAT),
        ("updated_at", FLOAT),
    ),
    key=("tenant", "name"),
)

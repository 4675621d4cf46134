"""API keys: ``Authorization: Bearer <key>`` -> a tenant, or an operator.

Keys are held only as SHA-256 hashes. A tenant key acts for its tenant and sees nothing of
other tenants; an operator key sees every tenant and may call ``/v1/operator/*`` (acting, for
its own chat calls, as tenant ``operator``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentconsole.server.api.errors import ApiError
from agentconsole.server.refusals import NO_KEY_ACTOR, UNKNOWN_KEY_ACTOR_PREFIX

OPERATOR_TENANT = "operator"
#: Tenant names the server itself uses as markers, so no key may act as one: ``""`` is the
#: tool registry's owner of platform tools and the tenant of events that belong to no tenant
#: (a tenant of that name would replace platform tools and read every untenanted event),
#: ``operator`` runs the operator keys' own chat calls, and ``__probe__`` is the tenant of the
#: SGLang adapter's health probe (``server/runtime/sglang/adapter.py``: ``_probe``).
RESERVED_TENANTS = frozenset({"", OPERATOR_TENANT, "__probe__"})


def check_tenant_name(tenant: str) -> None:
    """Raise ValueError for a name no tenant may have: blank, or one of
    :data:`RESERVED_TENANTS` (the message says why)."""
    if not tenant.strip():
        # blank names are the platform's marker (``""``) or look like it in every listing
        raise ValueError(f"tenant name {tenant!r} is empty: name every tenant")
    if tenant == OPERATOR_TENANT:
        # the operator key's chat calls run as that tenant: one of the name would read and
        # cancel them and share their cache namespace
        raise ValueError(f"tenant name {OPERATOR_TENANT!r} is reserved for operator keys")
    if tenant in RESERVED_TENANTS:
        raise ValueError(f"tenant name {tenant!r} is reserved for the server's own use")


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling. ``scope`` is the tenant filter of reads (None: every tenant)."""

    tenant: str
    operator: bool
    key_id: str

    @property
    def scope(self) -> str | None:
        return None if self.operator else self.tenant

    def as_json(self) -> dict[str, str | bool]:
        """What ``GET /v1/whoami`` answers: the tenant, the role and the key's id (the audit
        log's actor; a hash prefix, never the key)."""
        return {"tenant": self.tenant, "operator": self.operator, "key_id": self.key_id}


class KeyRing:
    """Resolves bearer keys; built once from the settings."""

    def __init__(self, tenant_keys: Mapping[str, str], operator_keys: Sequence[str]) -> None:
        self._keys: dict[str, Principal] = {}
        # the settings refuse these names already; a KeyRing built any other way must too
        for tenant in tenant_keys.values():
            check_tenant_name(tenant)
        for key, tenant in tenant_keys.items():
            digest = key_hash(key)
            self._keys[digest] = Principal(tenant, False, f"key-{digest[:8]}")
        for key in operator_keys:
            digest = key_hash(key)
            self._keys[digest] = Principal(OPERATOR_TENANT, True, f"operator-{digest[:8]}")

    @property
    def tenants(self) -> list[str]:
        """The tenants that have keys."""
        return sorted({p.tenant for p in self._keys.values() if not p.operator})

    def resolve(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization`` header value; 401 when missing or unknown."""
        if not authorization:
            raise ApiError(401, "missing API key (Authorization: Bearer <key>)", headers=_CHALLENGE)
        scheme, _, key = authorization.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "use Authorization: Bearer <key>", headers=_CHALLENGE)
        principal = self._keys.get(key_hash(key.strip()))
        if principal is None:
            raise ApiError(401, "invalid API key", headers=_CHALLENGE)
        return principal

    @staticmethod
    def actor_of(authorization: str | None) -> str:
        """Who presented ``authorization`` that :meth:`resolve` refused, for the audit log:
        ``anonymous`` without a key, else ``unknown-<hash prefix>`` (never the key itself)."""
        key = (authorization or "").partition(" ")[2].strip()
        return f"{UNKNOWN_KEY_ACTOR_PREFIX}{key_hash(key)[:8]}" if key else NO_KEY_ACTOR


_CHALLENGE = {"WWW-Authenticate": "Bearer"}

"""Parse and check a ``POST /v1/tools`` body into a :class:`ToolDefinition` (all but the
parameter schema, which :mod:`.schema_rules` checks)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeGuard

from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.definition import ExecutorSpec, ToolDefinition
from agentconsole.server.gateway.errors import InvalidTool, UnsafeArguments
from agentconsole.server.gateway.sandbox_spec import SandboxConfig, parse_sandbox
from agentconsole.server.gateway.semantic import check_characters, check_url
from agentconsole.server.store.jsonutil import JSONValue

#: A tool's name: the consoles show it, and ``/v1/tools/{name}/call`` carries it in its path.
#: The patterns here are published in the OpenAPI contract (JSON Schema, where ``$`` ends the
#: text); Python's ``$`` also matches before a final newline, so they are checked with
#: ``fullmatch``, never ``match``.
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
#: what :data:`NAME_PATTERN` asks, in words, for the refusals that name it
NAME_RULE = (
    "a letter, then letters, digits, '_', '.' or '-', 64 characters at most "
    f"({NAME_PATTERN.pattern})"
)
#: bounds of ``rate_limit_per_s`` (a slower rate would answer a ``Retry-After`` of years)
MIN_RATE_PER_S, MAX_RATE_PER_S = 0.001, 1_000_000.0
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def is_tool_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a string a tool may be named (all of it: no trailing newline)."""
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None


_FIELDS = frozenset(
    {
        "name",
        "description",
        "parameters",
        "side_effect",
        "idempotent",
        "timeout_s",
        "allowed_tenants",
        "rate_limit_per_s",
        "burst",
        "max_concurrency",
        "executor",
    }
)


@dataclass(frozen=True, slots=True)
class Registrant:
    """Who registers: a tenant (its own tool) or an operator (a platform-wide tool)."""

    tenant: str
    operator: bool


def parse_registration(
    body: Mapping[str, JSONValue],
    who: Registrant,
    config: GatewayConfig,
    builtins: frozenset[str],
    now: float,
    sandbox: SandboxConfig | None = None,
) -> ToolDefinition:
    """Check a ``POST /v1/tools`` body (everything but ``parameters``, which
    :func:`~agentconsole.server.gateway.schema_rules.check_parameters_schema` checks) and
    build the definition. Raises :class:`InvalidTool` naming the field. Pure: whether the
    sandbox works on this server is the gateway's check."""
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise InvalidTool(f"unknown field {unknown[0]!r}", field=unknown[0])
    name = body.get("name")
    if not is_tool_name(name):
        raise InvalidTool(f"name must be {NAME_RULE}", field="name")
    description = body.get("description", "")
    if not isinstance(description, str) or len(description) > 4096:
        raise InvalidTool(
            "description must be a string of at most 4096 characters", field="description"
        )
    try:
        check_characters(description, "description")
    except UnsafeArguments as error:
        raise InvalidTool(error.message, field="description") from error
    side_effect = _bool(body, "side_effect", False)
    idempotent = _bool(body, "idempotent", not side_effect)
    timeout = _number(body, "timeout_s", config.default_timeout_s)
    if timeout is None or not 0 < timeout <= config.max_timeout_s:
        raise InvalidTool(f"timeout_s must be in (0, {config.max_timeout_s:g}]", field="timeout_s")
    rate = _number(body, "rate_limit_per_s", None)
    if rate is not None and not MIN_RATE_PER_S <= rate <= MAX_RATE_PER_S:
        raise InvalidTool(
            f"rate_limit_per_s must be in [{MIN_RATE_PER_S:g}, {MAX_RATE_PER_S:g}] or null",
            field="rate_limit_per_s",
        )
    spec = body.get("executor")
    if isinstance(spec, dict) and spec.get("type") == "sandbox":
        if side_effect:
            raise InvalidTool(
                "a sandbox tool has no effect outside its scratch directory:"
                " register it with side_effect false",
                field="side_effect",
            )
        checked = parse_sandbox(spec, body.get("parameters"), timeout, sandbox or SandboxConfig())
        executor = ExecutorSpec("sandbox", sandbox=checked)
    else:
        executor = _executor(spec, who, config, builtins)
    return ToolDefinition(
        name=name,
        tenant="" if who.operator else who.tenant,
        description=description,
        parameters={},  # filled in by the caller once the schema passed
        side_effect=side_effect,
        idempotent=idempotent,
        timeout_s=timeout,
        executor=executor,
        created_at=now,
        updated_at=now,
        allowed_tenants=_allowed_tenants(body.get("allowed_tenants"), who),
        rate_limit_per_s=rate,
        burst=_count(body, "burst"),
        max_concurrency=_count(body, "max_concurrency"),
    )


def _bool(body: Mapping[str, JSONValue], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise InvalidTool(f"{key} must be true or false", field=key)
    return value


def _number(body: Mapping[str, JSONValue], key: str, default: float | None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidTool(f"{key} must be a finite number", field=key)
    return float(value)


def _count(body: Mapping[str, JSONValue], key: str) -> int | None:
    value = body.get(key)
    if type(value) is float and value.is_integer():
        value = int(value)  # JSON Schema's integer
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise InvalidTool(f"{key} must be an integer in [1, 1000000] or null", field=key)
    return value


def _allowed_tenants(value: JSONValue, who: Registrant) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not who.operator:
        raise InvalidTool(
            "only operators register tools for other tenants", field="allowed_tenants"
        )
    if not isinstance(value, list) or len(value) > 1000:
        raise InvalidTool(
            "allowed_tenants must be a list of tenant ids or null", field="allowed_tenants"
        )
    tenants: list[str] = []
    for item in value:
        if not isinstance(item, str) or not TENANT_PATTERN.fullmatch(item):
            raise InvalidTool(f"not a tenant id: {item!r}", field="allowed_tenants")
        tenants.append(item)
    return tuple(sorted(set(tenants)))


def _executor(
    value: JSONValue, who: Registrant, config: GatewayConfig, builtins: frozenset[str]
) -> ExecutorSpec:
    if not isinstance(value, dict):
        raise InvalidTool(
            'executor must be {"type": "builtin"|"http"|"agent"|"sandbox", ...}',
            field="executor",
        )
    kind = value.get("type")
    extra = set(value) - {"type", {"builtin": "name", "http": "url"}.get(str(kind), "type")}
    if extra:
        raise InvalidTool(f"unknown executor field {sorted(extra)[0]!r}", field="executor")
    if kind == "agent":
        return ExecutorSpec("agent")
    if kind == "builtin":
        name = value.get("name")
        allowed = (
            builtins
            if who.operator or config.tenant_builtins is None
            else (builtins & config.tenant_builtins)
        )
        if not isinstance(name, str) or name not in allowed:
            raise InvalidTool(
                f"unknown builtin; this key may use: {', '.join(sorted(allowed))}",
                field="executor/name",
            )
        return ExecutorSpec("builtin", name=name)
    if kind == "http":
        url = value.get("url")
        if not isinstance(url, str) or len(url) > 2048:
            raise InvalidTool("executor url must be a string", field="executor/url")
        private_ok = config.private_urls_allowed(platform=who.operator)
        try:
            check_url(url, "executor/url", allow_private=private_ok)
        except UnsafeArguments as error:
            raise InvalidTool(error.message, field="executor/url") from error
        return ExecutorSpec("http", url=url)
    raise InvalidTool(
        'executor type must be "builtin", "http", "agent" or "sandbox"', field="executor/type"
    )

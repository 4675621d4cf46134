"""The tool gateway's part of the published OpenAPI contract (``server/api/contract.py``).

The gateway reads its bodies raw (its own strict parser, in pipeline order), so Litestar
cannot see them: each route publishes its body's JSON Schema and its error statuses here.
The schemas say what ``request.py`` and ``registration.py`` check; what a JSON Schema cannot
say (a tool's ``parameters`` must be a closed JSON Schema 2020-12 object, an executor's
details, a URL's address, control characters) is a 422 naming the field
(``invalid_tool``, ``unsafe_arguments``).
"""

from __future__ import annotations

from typing import Any

from agentconsole.server.api.contract import contract
from agentconsole.server.gateway.registration import (
    MAX_RATE_PER_S,
    MIN_RATE_PER_S,
    NAME_PATTERN,
    TENANT_PATTERN,
)
from agentconsole.server.gateway.request import ID_PATTERN, MAX_ATTEMPT

JSON = dict[str, Any]
ID: JSON = {"type": "string", "pattern": ID_PATTERN.pattern}
NAME: JSON = {"type": "string", "pattern": NAME_PATTERN.pattern}
COUNT: JSON = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 1_000_000}, {"type": "null"}]}


def _closed(required: list[str], **properties: JSON) -> JSON:
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
    }


REGISTER = _closed(
    ["name", "parameters", "executor"],
    name=NAME,
    description={"type": "string", "maxLength": 4096},
    parameters={
        "type": "object",
        "description": 'a JSON Schema 2020-12 {"type": "object", ...}; every object schema in '
        'it sets "additionalProperties": false',
    },
    side_effect={"type": "boolean"},
    idempotent={"type": "boolean"},
    timeout_s={"type": "number", "exclusiveMinimum": 0, "maximum": 600},
    allowed_tenants={
        "anyOf": [
            {
                "type": "array",
                "maxItems": 1000,
                "items": {"type": "string", "pattern": TENANT_PATTERN.pattern},
            },
            {"type": "null"},
        ],
        "description": "operators only",
    },
    rate_limit_per_s={
        "anyOf": [
            {"type": "number", "minimum": MIN_RATE_PER_S, "maximum": MAX_RATE_PER_S},
            {"type": "null"},
        ]
    },
    burst=COUNT,
    max_concurrency=COUNT,
    executor={
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": ["builtin", "http", "agent", "sandbox"]}},
        "description": '{"type": "builtin", "name"} | {"type": "http", "url"} | '
        '{"type": "agent"} | {"type": "sandbox", "language", "script"?, "limits"?}',
    },
)
CALL = _closed(
    ["program_id", "node_id"],
    program_id=ID,
    node_id=ID,
    arguments={"type": "object"},
    attempt={"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPT},
)
STARTED = _closed(["node_id", "tool"], node_id=ID, tool=NAME)
FINISHED = _closed(
    ["node_id", "outcome"],
    node_id=ID,
    outcome={"enum": ["ok", "fail", "timeout"]},
    latency_s={"anyOf": [{"type": "number", "minimum": 0, "maximum": 86_400}, {"type": "null"}]},
)
RECONCILE: JSON = {
    "oneOf": [
        _closed(["action"], action={"const": "commit"}, result={}),
        _closed(["action"], action={"const": "retry"}),
    ]
}

PROGRAM_PARAM = {"program_id": ID}
# 429: the tenant's bounds on its tools (``registry``) or its stored bytes
REGISTER_CONTRACT = contract(403, 409, 429, body=REGISTER)
LIST_CONTRACT = contract()
# 403: a platform tool, with a tenant key; 404: no tool of the caller's of that name
DELETE_CONTRACT = contract(403, 404)
CALL_CONTRACT = contract(403, 404, 409, 424, 429, body=CALL)
REPORT_STARTED_CONTRACT = contract(403, 404, 409, 429, body=STARTED, params=PROGRAM_PARAM)
REPORT_FINISHED_CONTRACT = contract(403, 404, 409, 429, body=FINISHED, params=PROGRAM_PARAM)
INTENTS_CONTRACT = {**contract(), "audit_action": "tool.list_calls"}
RECONCILE_CONTRACT = {**contract(404, 409, body=RECONCILE), "audit_action": "tool.reconcile"}

"""The published OpenAPI schema is the contract: schemathesis against a live server.

For every operation of ``/schema/openapi.json`` (core routes and the tool gateway), examples
are generated from the schema, valid and invalid, and each one is sent with a tenant key and
with an operator key. Every answer must pass schemathesis's checks: no 5xx, a documented
status, the documented content type and schema (the one error shape), invalid data rejected,
valid data accepted. "Valid data accepted" is checked here rather than by schemathesis, for one
reason: a few refusals are semantic, not expressible in a JSON Schema, and documented as such
(a named ``tool_choice`` missing from ``tools``, an unknown parent, a what-if window whose
``until`` is not after its ``since``, an ``Idempotency-Key`` sent again with another body, a
tool registration's ``parameters``/executor rules, a tool's own argument schema, and integers
beyond 64 bits inside free-form objects); a valid request may be refused only with those (422
naming the field, 400 on OpenAI's routes, or 400 ``integer out of range``). Bounded:
``EXAMPLES`` per operation, about a minute on 2 cores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode

from agentconsole.server.api.jsonguard import OUT_OF_RANGE
from tests.server.api.harness import OPERATOR, LiveServer, gateway_server

EXAMPLES = 20
KEYS = ("sk-a", OPERATOR)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
#: (method, path) -> fields a schema-valid request may be refused for (semantic rules)
SEMANTIC: dict[tuple[str, str], set[str | None]] = {
    # parent ids with no program id: the header may name it, so the schema cannot say it
    ("POST", "/v1/chat/completions"): {"tool_choice", "parents", "agentconsole.parent_ids"},
    ("POST", "/v1/completions"): {"parents", "agentconsole.parent_ids"},
    # a key the same tenant sent before with another body (``idempotency_mismatch``)
    ("POST", "/v1/programs"): {"Idempotency-Key"},
    ("POST", "/v1/programs/{program_id}/nodes"): {"parents", "node_id"},
    ("POST", "/v1/tools/{name}/call"): {"arguments", None},
    ("POST", "/v1/operator/policy"): {"policy", "kv_policy"},
    ("POST", "/v1/operator/whatif"): {"until"},  # not after ``since``
    # a cursor the server did not write, or one with a non-zero offset
    ("GET", "/v1/programs"): {"cursor", "offset"},
    ("GET", "/v1/tools"): {"cursor"},  # a cursor the server did not write
}
#: the operations of OpenAI's API that a schema-valid request can be refused on
OPENAI_ROUTES = {"/v1/chat/completions", "/v1/completions"}
#: how invalid data may be refused: schemathesis's own list (its 5xx included; the
#: ``not_a_server_error`` check fails those anyway), and 413 for a body too large
REJECTED = [
    *("400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"),
    "5xx",
]
#: error types a schema-valid registration may be refused with (parameters, executor rules)
SEMANTIC_TYPES = {"invalid_tool", "unsafe_arguments", "sandbox_unavailable"}
TALLY: Counter[str] = Counter()
OPERATIONS: set[str] = set()


@pytest.fixture(scope="module")
def contract_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("contract")) / "contract.duckdb"
    changes = {"runtime_extra": {"time_scale": 0.0}, "max_tokens_limit": 256}
    with gateway_server(db, **changes) as live:
        yield live
    figures = dict(sorted(TALLY.items()))
    print(f"\nschemathesis: {len(OPERATIONS)} operations, {figures}")


@pytest.fixture(scope="module")
def contract(contract_server: LiveServer) -> Any:
    config = schemathesis.Config.from_dict(
        {
            "phases": {"coverage": {"enabled": True}, "stateful": {"enabled": False}},
            # unknown query parameters are ignored (OpenAPI does not close a query string)
            "generation": {"max-examples": EXAMPLES, "allow-extra-parameters": False},
            # the event feed never ends: its first frame is enough
            "max-stream-events": 1,
            # invalid data is rejected; a generated body past ``max_body_bytes`` (a few MB of
            # messages over their limit) is rejected unread, 413, before its schema counts
            "checks": {"negative_data_rejection": {"expected-statuses": REJECTED}},
            "request-timeout": 20,
        }
    )
    return schemathesis.openapi.from_url(
        f"{contract_server.url}/schema/openapi.json", config=config
    )


schema = schemathesis.pytest.from_fixture("contract")


def _semantic(case: Any, status: int, body: Any) -> bool:
    """Whether a refusal of schema-valid ``case`` is one of the documented semantic ones."""
    error = body.get("error", {}) if isinstance(body, dict) else {}
    if status == 400 and error.get("message") == OUT_OF_RANGE:
        return True
    key = (case.operation.method.upper(), case.operation.path)
    # OpenAI's routes refuse an invalid request 400, as OpenAI does; the others 422
    if status != (400 if key[1] in OPENAI_ROUTES else 422):
        return False
    if key == ("POST", "/v1/tools"):
        return error.get("type") in SEMANTIC_TYPES
    fields = SEMANTIC.get(key, set())
    return error.get("field") in fields or error.get("type") == "invalid_arguments"


def _null_as_text(value: Any) -> Any:
    if isinstance(value, list):
        return [_null_as_text(item) for item in value]
    return "null" if value is None else value


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_server_keeps_its_published_contract(case: Any, contract_server: LiveServer) -> None:
    positive = case.meta.generation.mode is GenerationMode.POSITIVE
    OPERATIONS.add(case.operation.label)
    TALLY[f"{case.meta.generation.mode.value} cases"] += 1
    if case.query:  # requests drops None from a query; send what the case means: "null"
        case.query = {name: _null_as_text(value) for name, value in case.query.items()}
    header = case.meta.components.get(ParameterLocation.HEADER)
    # a case whose invalid part is its headers (no Authorization) goes as generated
    keys = (None,) if header is not None and header.mode is GenerationMode.NEGATIVE else KEYS
    for key in keys:
        auth = {"Authorization": f"Bearer {key}"} if key else None
        response = case.call(base_url=contract_server.url, headers=auth)
        TALLY["requests"] += 1
        TALLY[f"{response.status_code // 100}xx"] += 1
        case.validate_response(response, checks=CHECKS, headers=auth)
        if positive and response.status_code in (400, 413, 422):
            body = response.json()
            assert _semantic(case, response.status_code, body), (
                f"schema-valid request refused: {case.operation.label} "
                f"{response.status_code} {body} {case.body!r}"
            )

"""Which published paths answer their refusals in OpenAI's shape (400 ``invalid_request_error``,
``errors.route_answer``): OpenAI's own and no other. ``errors.openai_route`` tells them by
path, so a route of agentconsole's added under ``/v1/models/`` would be taken for OpenAI's
unless it is named there as ``/v1/models/compatibility`` is; this checks every path the
server publishes."""

from __future__ import annotations

from agentconsole.server.api.errors import openai_route
from tests.server.api.harness import LiveServer

OPENAI_API_PATHS = {
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/v1/models/{model_id}",
}


def test_only_openais_own_paths_answer_as_openai(server: LiveServer) -> None:
    with server.client(None) as c:
        paths = c.get("/schema/openapi.json").json()["paths"]
    assert set(paths) >= OPENAI_API_PATHS
    assert {path for path in paths if openai_route(path)} == OPENAI_API_PATHS

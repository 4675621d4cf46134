"""What the sync and async clients share: the base URL, the key, and the helpers for using
any OpenAI client against agentconsole with program identity in headers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from agentconsole.client import calls
from agentconsole.client.errors import error_for
from agentconsole.client.types import JSON

DEFAULT_TIMEOUT_S = 60.0


def program_headers(
    program_id: str, node_id: str | None = None, parents: Sequence[str] = ()
) -> dict[str, str]:
    """``X-Program-Id`` / ``X-Node-Id`` / ``X-Parent-Ids`` for one call of a program: pass them
    as ``default_headers`` (or per call as ``extra_headers``) of any OpenAI client."""
    headers = {"X-Program-Id": program_id}
    if node_id is not None:
        headers["X-Node-Id"] = node_id
    if parents:
        headers["X-Parent-Ids"] = ",".join(parents)
    return headers


class ClientBase:
    """Settings shared by :class:`AgentConsole` and :class:`AsyncAgentConsole`."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    @property
    def headers(self) -> dict[str, str]:
        """The authentication header every request carries."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def openai_headers(
        self, program_id: str, node_id: str | None = None, parents: Sequence[str] = ()
    ) -> dict[str, str]:
        """Program identity headers for an OpenAI client (see :func:`program_headers`)."""
        return program_headers(program_id, node_id, parents)

    def openai_kwargs(
        self, program_id: str, node_id: str | None = None, parents: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Keyword arguments for ``openai.OpenAI(...)`` or ``openai.AsyncOpenAI(...)``:
        ``base_url`` (this server's ``/v1``), ``api_key`` and ``default_headers`` with the
        program's identity. ``openai.OpenAI(**console.openai_kwargs("p1", "n1"))``."""
        return {
            "base_url": f"{self.base_url}/v1",
            "api_key": self.api_key,
            "default_headers": program_headers(program_id, node_id, parents),
        }

    @staticmethod
    def _decode(call: calls.Call[Any], response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise error_for(response)
        return call.parse(response.json() if response.content else {})

    @staticmethod
    def _tool_body(
        name: str,
        parameters: Mapping[str, Any],
        executor: Mapping[str, Any],
        options: Mapping[str, Any],
    ) -> JSON:
        return {"name": name, "parameters": dict(parameters), "executor": dict(executor), **options}

    @staticmethod
    def _reconcile_body(result: Any, retry: bool) -> JSON:
        return {"action": "retry"} if retry else {"action": "commit", "result": result}

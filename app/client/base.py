"""What the blocking and the asynchronous client share: the base URL and the key, every API
method (each listed once, from its request builder in :mod:`agentconsole.client.calls`), and
the helpers for using any OpenAI client against agentconsole with program identity in headers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentconsole.client import calls
from agentconsole.client.endpoint import endpoint, every_page
from agentconsole.httpclient import Transport, auth_headers


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
    """Settings and methods shared by :class:`AgentConsole` and :class:`AsyncAgentConsole`."""

    _transport: Transport

    @property
    def base_url(self) -> str:
        """The server's URL, without a trailing slash."""
        return self._transport.base_url

    @property
    def api_key(self) -> str:
        """The key every request carries."""
        return self._transport.api_key

    @property
    def headers(self) -> dict[str, str]:
        """The authentication header every request carries."""
        return auth_headers(self.api_key)

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

    # -- programs and nodes --------------------------------------------------------------------
    create_program = endpoint(calls.create_program)
    get_program = endpoint(calls.get_program)
    list_programs = endpoint(calls.list_programs)
    cancel_program = endpoint(calls.cancel_program)
    cancel_node = endpoint(calls.cancel_node)
    finish_program = endpoint(calls.finish_program)
    add_node = endpoint(calls.add_node)
    get_node = endpoint(calls.get_node)
    # -- tools ---------------------------------------------------------------------------------
    register_tool = endpoint(calls.register_tool)
    tool_page = endpoint(calls.tool_page)
    list_tools = every_page(calls.list_tools, lambda page: page.tools)
    delete_tool = endpoint(calls.delete_tool)
    call_tool = endpoint(calls.call_tool)
    tool_started = endpoint(calls.tool_started)
    tool_finished = endpoint(calls.tool_finished)
    # -- operators (operator key) --------------------------------------------------------------
    preempt = endpoint(calls.preempt)
    operator_cancel = endpoint(calls.operator_cancel)
    boost = endpoint(calls.boost)
    drain = endpoint(calls.drain)
    set_policy = endpoint(calls.set_policy)
    audit = endpoint(calls.audit)
    tool_calls = endpoint(calls.tool_calls)
    reconcile = endpoint(calls.reconcile)
    # -- observation ---------------------------------------------------------------------------
    health = endpoint(calls.health)
    overview = endpoint(calls.overview)

"""Tool calls the model asked for, as tool nodes: whole programs for agents that report nothing.

An unmodified agent (OpenAI Agents SDK, LangGraph, a plain ``openai`` loop) runs its tools
itself and never tells the server. Its program would show LLM calls only, and the tool-latency
estimators, the tool-wait decision and the DAG would see nothing of its tools. This book infers
them from the conversation:

* when a response carries ``tool_calls`` (ids from :func:`tool_call_id`), each becomes a tool
  node (parent: the LLM node that asked; named after the function) that starts at the
  response's end; the program then waits on tools, and the driver decides its KV as for any
  tool wait;
* when a later call of the program carries ``tool`` messages answering them, those nodes finish
  at the call's arrival (latency: from the response's end), before the new LLM node is added,
  so it takes them as its parents;
* a tool the agent does report through the gateway (``/v1/tools/...``) under the same name
  adopts the pending inferred node instead of adding a second one;
* a call whose answer never comes back does not hold its program open: the idle sweep closes it
  as abandoned.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentconsole.scheduler.controller import ABANDONED
from agentconsole.scheduler.program import Node, NodeKind, NodeState, Program, ToolSpec
from agentconsole.server.live.errors import ServiceError

if TYPE_CHECKING:
    from agentconsole.server.live.service import ProgramService


def tool_call_id(call_id: str, index: int) -> str:
    """The OpenAI ``tool_calls[].id`` of the ``index``-th tool call of call ``call_id``
    (stable, so the service and the HTTP layer derive the same ids)."""
    digest = hashlib.blake2b(f"{call_id}#{index}".encode(), digest_size=12).hexdigest()
    return f"call_{digest}"


def _node_id(tool_call: str) -> str:
    return f"tool-{tool_call.removeprefix('call_')}"


class ToolCallBook:
    """Pending tool calls per program (tool call id -> tool node id)."""

    def __init__(self, service: ProgramService) -> None:
        self.service = service
        self._pending: dict[str, dict[str, str]] = {}

    def pending(self, program_id: str) -> set[str]:
        """Tool nodes of ``program_id`` still waiting for their answer."""
        return set(self._pending.get(program_id, {}).values())

    def asked(self, program_id: str, node_id: str, call_id: str, names: Sequence[str]) -> None:
        """Call ``call_id`` (LLM node ``node_id``) answered with tool calls to ``names``: add
        their tool nodes, running from now. A program over its tool-call quota gets no more
        nodes (the agent runs the tools anyway; the quota refuses its next call)."""
        svc = self.service
        program = svc.controller.programs.get(program_id)
        if program is None or program.state.terminal or not names:
            return
        book = self._pending.setdefault(program_id, {})
        now = time.time()
        for index, name in enumerate(names):
            ask = tool_call_id(call_id, index)
            tool_node = _node_id(ask)
            if tool_node in program.nodes:
                continue
            spec = ToolSpec(name or "tool")
            try:
                svc.nodes.add(program, tool_node, NodeKind.TOOL, (node_id,), now, tool=spec)
            except ServiceError:  # a quota: the agent's next call is refused
                break
            svc.driver.tool_started(program_id, tool_node, now)
            book[ask] = tool_node
        svc.settle()

    def answered(self, program_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """A new call of ``program_id`` carries ``messages``: the tool calls its ``tool``
        messages answer are over (their nodes finish now, outcome ``ok``)."""
        book = self._pending.get(program_id)
        if not book:
            return
        now = time.time()
        for message in messages:
            if message.get("role") != "tool":
                continue
            node_id = book.pop(str(message.get("tool_call_id", "")), None)
            if node_id is not None:
                self._finish(program_id, node_id, "ok", now)
        if not book:
            self._pending.pop(program_id, None)

    def asked_node(self, program: Program, node_id: str) -> Node | None:
        """The tool node of the model's tool call ``node_id`` (an agent names the call it
        runs by its id, ``call_...``), whether still pending or not; None for any other id."""
        if not node_id.startswith("call_"):
            return None
        node = program.nodes.get(_node_id(node_id))
        return node if node is not None and node.kind is NodeKind.TOOL else None

    def adopt(self, program_id: str, tool: str, ask: str | None = None) -> str | None:
        """The agent reports a tool named ``tool`` itself: the pending inferred node of that
        name it is (None: none pending), taken out of the book; the model's call ``ask``
        (the id the agent names it by) first, when that is a pending call of ``tool``."""
        book = self._pending.get(program_id, {})
        program = self.service.controller.programs.get(program_id)
        if program is None:
            return None
        asked = book.get(ask) if ask is not None else None
        if ask is not None and asked is not None:
            node = program.nodes.get(asked)
            if node is not None and node.tool is not None and node.tool.name == tool:
                del book[ask]
                return asked
        for other, node_id in list(book.items()):
            node = program.nodes.get(node_id)
            if node is not None and node.tool is not None and node.tool.name == tool:
                del book[other]
                return node_id
        return None

    def abandon(self, program_id: str) -> None:
        """The program is ending: its unanswered tool calls close as abandoned."""
        book = self._pending.pop(program_id, {})
        program = self.service.controller.programs.get(program_id)
        if program is None:
            return
        now = time.time()
        for node_id in book.values():
            node = program.nodes.get(node_id)
            if node is not None and node.state is NodeState.RUNNING:
                self.service.controller.close_node(program_id, node_id, now, ABANDONED)

    def withdraw(self, program_id: str, node_ids: set[str]) -> None:
        """A node cancel took ``node_ids``: their tool calls are no longer awaited (an answer
        to one finishes nothing; the agent's report of it is refused)."""
        book = self._pending.get(program_id)
        if not book:
            return
        for ask in [a for a, node_id in book.items() if node_id in node_ids]:
            del book[ask]
        if not book:
            self._pending.pop(program_id, None)

    def forget(self, program_id: str) -> None:
        self._pending.pop(program_id, None)

    def _finish(self, program_id: str, node_id: str, outcome: str, now: float) -> None:
        program = self.service.controller.programs.get(program_id)
        node: Node | None = program.nodes.get(node_id) if program is not None else None
        if node is None or node.state is not NodeState.RUNNING or not node.attempts:
            return
        latency = max(now - node.attempts[-1].started_at, 0.0)
        self.service.driver.tool_finished(
            program_id, node_id, now, outcome=outcome, latency_s=latency, final=True
        )

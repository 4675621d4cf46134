"""A small Python client for the agentconsole API, sync and async, with typed results.

::

    from agentconsole.client import AgentConsole
    import openai

    with AgentConsole("http://127.0.0.1:8000", "sk-dev") as console:
        program = console.create_program(labels={"team": "search"})
        llm = openai.OpenAI(**console.openai_kwargs(program.program_id, "plan"))
        llm.chat.completions.create(model="any", messages=[{"role": "user", "content": "hi"}])
        console.add_node(program.program_id, "fetch", kind="tool", parents=["plan"], tool="web")
        result = console.call_tool("web", program.program_id, "fetch", {"url": "https://..."})
        console.finish_program(program.program_id)

Any OpenAI client works: give it ``openai_kwargs(...)`` (or ``program_headers(...)`` as
``default_headers`` / ``extra_headers``) and it speaks to agentconsole with program identity.
The transport and the error classes are :mod:`agentconsole.httpclient`'s, shared with the
consoles.
"""

from __future__ import annotations

from agentconsole.client.aio import AsyncAgentConsole
from agentconsole.client.base import program_headers
from agentconsole.client.sync import AgentConsole
from agentconsole.client.types import (
    AuditAction,
    CancelResult,
    Node,
    NodeCancelResult,
    Program,
    ProgramPage,
    Tool,
    ToolCallRecord,
    ToolCallResult,
    ToolOptions,
    ToolPage,
)
from agentconsole.httpclient.errors import (
    ApiError,
    AuthenticationError,
    ConflictError,
    IdempotencyMismatchError,
    InProgressError,
    NeedsReconcileError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
    ToolFailedError,
    ValidationError,
)

__all__ = [
    "AgentConsole",
    "ApiError",
    "AsyncAgentConsole",
    "AuditAction",
    "AuthenticationError",
    "CancelResult",
    "ConflictError",
    "IdempotencyMismatchError",
    "InProgressError",
    "NeedsReconcileError",
    "Node",
    "NodeCancelResult",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "Program",
    "ProgramPage",
    "QuotaExceededError",
    "RateLimitError",
    "ServerError",
    "Tool",
    "ToolCallRecord",
    "ToolCallResult",
    "ToolFailedError",
    "ToolOptions",
    "ToolPage",
    "ValidationError",
    "program_headers",
]

"""The tool gateway: a registry of tools with strict JSON Schemas, and a call pipeline that
validates, rate-limits, claims an idempotency key durably, executes with a timeout and
commits the result, so that retries replay instead of repeating side effects.

Wiring for the app: :mod:`agentconsole.server.gateway.routes` (controllers and the DI names
``gateway``, ``program_port``, ``tenant``, ``operator``); the program core implements
:class:`ProgramPort`. What is and is not exactly-once: :mod:`agentconsole.server.gateway.runner`.
"""

from __future__ import annotations

from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.definition import ExecutorSpec, ToolDefinition
from agentconsole.server.gateway.errors import GatewayError
from agentconsole.server.gateway.extension import GatewayExtension
from agentconsole.server.gateway.gateway import ToolGateway
from agentconsole.server.gateway.outcome import CallResult
from agentconsole.server.gateway.ports import (
    ProgramClosed,
    ProgramNotFound,
    ProgramPort,
    ReportPort,
    ToolOutcome,
)
from agentconsole.server.gateway.routes import (
    EXCEPTION_HANDLERS,
    GATEWAY_CONTROLLERS,
    gateway_dependencies,
)
from agentconsole.server.gateway.runner import CancelReport, RunningTool

__all__ = [
    "EXCEPTION_HANDLERS",
    "GATEWAY_CONTROLLERS",
    "CallResult",
    "CancelReport",
    "ExecutorSpec",
    "GatewayConfig",
    "GatewayError",
    "GatewayExtension",
    "ProgramClosed",
    "ProgramNotFound",
    "ProgramPort",
    "ReportPort",
    "RunningTool",
    "ToolDefinition",
    "ToolGateway",
    "ToolOutcome",
    "gateway_dependencies",
]

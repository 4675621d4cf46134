"""An in-memory :class:`ConsoleApi` over a :class:`StubWorld`, for deterministic snapshots.

Goes through the same JSON projections and model parsers as the HTTP client, without a
socket or a clock. Its feed delivers the world's recorded events once, then stays quiet
(but connected) until stopped.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from agentconsole.httpclient import ApiError, NotFoundError, UnreachableError
from agentconsole.ui.client.door import Door
from agentconsole.ui.client.feed import EventBatch, FeedItem, FeedStatus, OverviewTick
from agentconsole.ui.client.http import ActionResult
from agentconsole.ui.client.modelcompat import ModelCompat
from agentconsole.ui.client.models import (
    AuditEntry,
    FeedEvent,
    Identity,
    KVState,
    Overview,
    Policies,
    PolicyChoices,
    TenantRow,
)
from agentconsole.ui.client.nodecancel import NodeCancel
from agentconsole.ui.client.programs import ProgramDetail, ProgramPage, ProgramSummary
from agentconsole.ui.client.toolcalls import ToolCall
from agentconsole.ui.client.whatif import WindowReplay
from tests.ui.stub_world import StubWorld

#: the matrix a server of a tiny model, a smaller one and a variant of the first answers
COMPAT: dict[str, Any] = {
    "enabled": False,
    "note": "analysis only: no sharing in the real engine without a test that the outputs "
    "are unchanged",
    "models": [
        {"name": "large", "directory": "/m/large", "layers": 4, "error": None},
        {"name": "small", "directory": "/m/small", "layers": 2, "error": None},
        {"name": "variant", "directory": "/m/variant", "layers": 4, "error": None},
    ],
    "pairs": [
        {
            "a": "large",
            "b": "small",
            "compatible": False,
            "shared_kv_layers": 0,
            "layers": 2,
            "reasons": ["different architecture: hidden_size 64 vs 32"],
        },
        {
            "a": "large",
            "b": "variant",
            "compatible": True,
            "shared_kv_layers": 2,
            "layers": 4,
            "reasons": ["same architecture and tokenizer", "layers 2-3 differ"],
        },
    ],
}


class CannedClient:
    """A :class:`ConsoleApi` answering from ``world`` in-process."""

    def __init__(self, world: StubWorld) -> None:
        self.world = world
        self.calls: list[str] = []
        #: how many times each read was made (``overview``, ``programs``, ``program``, ...)
        self.reads: Counter[str] = Counter()
        #: reads that fail as an unreachable server's do, until taken out again
        self.failing: set[str] = set()
        #: what ``whoami`` answers; None: a server older than it (404)
        self.identity: Identity | None = Identity("operator", True, "operator-canned")
        #: whether ``policy_choices`` answers (False: a server older than the route, 404)
        self.publishes_policies = True

    def _read(self, what: str) -> None:
        self.reads[what] += 1
        if what in self.failing:
            raise UnreachableError(f"stub: {what} is down")

    def overview(self) -> Overview:
        self._read("overview")
        return Overview.parse(self.world.overview_json())

    def programs(self, state: str | None = None, limit: int = 2000) -> ProgramPage:
        self._read("programs")
        body = self.world.list_json(state, None, limit, 0)
        rows = tuple(ProgramSummary.parse(p) for p in body["programs"])
        return ProgramPage(rows, int(body["total"]))

    def program(self, program_id: str) -> ProgramDetail:
        self._read("program")
        body = self.world.program_json(program_id)
        if body is None:
            raise ApiError(404, "not_found", f"no program {program_id}")
        return ProgramDetail.parse(body)

    def tenants(self) -> list[TenantRow]:
        self._read("tenants")
        return [TenantRow.parse(t) for t in self.world.tenants_json()["tenants"]]

    def kv(self) -> KVState:
        self._read("kv")
        return KVState.parse(self.world.kv_json())

    def audit(self, limit: int = 100) -> list[AuditEntry]:
        return [AuditEntry.parse(a) for a in self.world.audit_json(limit)["actions"]]

    def door(self) -> Door:
        return Door.parse(self.world.door_json())

    def act(self, action: str, program_id: str, amount: float | None = None) -> ActionResult:
        self.calls.append(f"{action} {program_id}")
        status, body = self.world.act(
            action, program_id, {} if amount is None else {"amount": amount}
        )
        if status >= 400:
            raise ApiError(status, body["error"]["type"], body["error"]["message"])
        return ActionResult(action, program_id, body)

    def cancel_node(self, program_id: str, node_id: str) -> NodeCancel:
        self.calls.append(f"cancel node {program_id} {node_id}")
        status, body = self.world.cancel_node(program_id, node_id)
        if status >= 400:
            raise ApiError(status, body["error"]["type"], body["error"]["message"])
        return NodeCancel.parse(body)

    def drain(self, enabled: bool) -> Mapping[str, Any]:
        self.world.draining = enabled
        return {"draining": enabled}

    def set_policy(self, policy: str | None, kv_policy: str | None) -> Policies:
        self.calls.append(f"policy {policy} {kv_policy}")
        status, body = self.world.set_policy({"policy": policy, "kv_policy": kv_policy})
        if status >= 400:
            raise ApiError(status, body["error"]["type"], body["error"]["message"])
        return Policies.parse(body)

    def policy_choices(self) -> PolicyChoices:
        self._read("policy_choices")
        if not self.publishes_policies:
            raise NotFoundError(404, "not_found", "no route GET /v1/operator/policy")
        return PolicyChoices.parse(self.world.policy_choices_json())

    def whoami(self) -> Identity:
        self._read("whoami")
        if self.identity is None:
            raise NotFoundError(404, "not_found", "no route /v1/whoami")
        return self.identity

    def replay_window(self, since: float, tenant: str | None = None) -> WindowReplay:
        # the stub world records no traffic the server could write as a trace
        self.calls.append(f"replay {tenant or 'all'}")
        message = "no program of the window ran: nothing to replay"
        return WindowReplay(since, since, 0, None, None, message, None)

    def model_compatibility(self) -> ModelCompat:
        self.calls.append("model compatibility")
        return ModelCompat.parse(COMPAT)

    def tool_calls(self, state: str, limit: int = 500) -> list[ToolCall]:
        self._read("tool_calls")
        rows = self.world.tool_calls_json(state, limit)["tool_calls"]
        return [ToolCall.parse(c) for c in rows]

    def reconcile(self, tool_call_id: str, action: str, result: Any = None) -> ToolCall:
        self.calls.append(f"reconcile {tool_call_id} {action}")
        row = next((c for c in self.world.tool_calls if c["tool_call_id"] == tool_call_id), None)
        if row is None:
            raise NotFoundError(404, "tool_not_found", f"no tool call {tool_call_id!r}")
        if row["state"] != "needs_reconcile":
            raise ApiError(409, "conflict", "only a needs_reconcile tool call can be reconciled")
        row["state"] = "committed" if action == "commit" else "retryable"
        return ToolCall.parse(row)

    def feed(self, stop: threading.Event) -> Iterator[FeedItem]:
        yield FeedStatus(True, "live")
        events = tuple(FeedEvent.parse(e) for e in self.world.events)
        yield EventBatch(self.world.seq, events)
        yield OverviewTick(self.overview())
        stop.wait()

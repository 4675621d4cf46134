"""The JSON shapes of programs and nodes (``ProgramSummary``, ``Program``, ``Node`` of API.md),
from the controller's live objects or from store records.

Derived fields: ``critical_path`` is the observed one (the chain of last-finishing parents);
``critical_path_idle_s`` sums queue, KV-restore and tool time along it; ``priority_key`` is the
active policy's key of the program's call in flight with the lowest key (``null`` when none);
``deadline_slack_s`` is the deadline minus the end (or now).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from agentconsole.scheduler import dag
from agentconsole.scheduler.models import ModelChoice
from agentconsole.scheduler.policies.base import Policy
from agentconsole.scheduler.program import Node, NodeKind, NodeState, Program, ToolSpec
from agentconsole.server.live.eventtail import STREAMED_ATTEMPT, STREAMED_TOKENS
from agentconsole.server.live.insertionbook import NODE_KEY, PROGRAM_KEY, InsertionBook, empty
from agentconsole.server.store.records import NodeRecord, ProgramRecord
from agentconsole.server.store.repository import ProgramView

JSON = dict[str, Any]


def finite(value: float | None) -> float | None:
    """``value``, or None for NaN and infinities (JSON has neither)."""
    if value is None or not math.isfinite(value):
        return None
    return value


def labels_list(labels: Mapping[str, str]) -> tuple[str, ...]:
    """Labels as stored (``k:v`` strings)."""
    return tuple(f"{k}:{v}" for k, v in sorted(labels.items()))


def labels_dict(labels: tuple[str, ...]) -> dict[str, str]:
    """Inverse of :func:`labels_list`."""
    return dict(item.partition(":")[::2] for item in labels)


def timeline(node: Node) -> list[JSON]:
    """Phases of the node's last run: queue, kv, prefill, decode (LLM) or tool. A node run
    again (a retry after an abort) is drawn from its last attempt's start and first token: the
    node's own are its first run's, which drew a decode of seconds for a retry of 0.4 s."""
    if node.started_at is None:
        return []
    last = node.attempts[-1] if node.attempts else None
    start = last.started_at if last is not None else node.started_at
    if node.kind is NodeKind.TOOL:
        return [{"phase": "tool", "start": start, "end": node.finished_at}]
    spans: list[JSON] = []
    cursor = start
    # the waits are drawn before the first token, never past it: a call preempted after it
    # began decoding waited again later (its queue time counts both waits)
    first = node.first_token_at
    if last is not None and len(node.attempts) > 1:
        first = last.first_token_at  # none yet (or not kept by the store): no decode drawn
    for phase, length in (("queue", node.queue_s), ("kv", node.kv_restore_s)):
        end = cursor + length if first is None else min(cursor + length, max(first, cursor))
        if end > cursor:
            spans.append({"phase": phase, "start": cursor, "end": end})
            cursor = end
    if first is not None:
        spans.append({"phase": "prefill", "start": cursor, "end": first})
        spans.append({"phase": "decode", "start": first, "end": node.finished_at})
    return spans


#: a node without a tool: its tool fields, all null
_NO_TOOL = dict.fromkeys(ToolSpec("").fields())
#: how a tool's run can end by itself (not cut short: ``interrupted``, ``abandoned``)
_TOOL_ENDS = frozenset(("ok", "fail", "timeout"))


def outcome_after_cancel(node: Node) -> str | None:
    """How the tool of a cancelled node ended when it ran on past its program's cancel, its
    own node cancel or its program's finish (a side effect let commit, an agent's own tool
    reported): ``ok``, ``fail`` or ``timeout``; else None. Such an end closes the node's
    attempt and moves the node's end to its own
    (``ProgramController.finish_tool_after_cancel``); a try that failed before the cancel
    (the node waited for its retry) closed before the node ended. Read from the attempts and
    the node's end, which the store's rows and a restart's replay keep."""
    if node.kind is not NodeKind.TOOL or node.state is not NodeState.CANCELLED:
        return None
    last = node.attempts[-1] if node.attempts else None
    if last is None or last.finished_at is None or last.outcome not in _TOOL_ENDS:
        return None
    if node.finished_at is None or last.finished_at < node.finished_at:
        return None
    return last.outcome


def node_json(node: Node, kv_tier: str | None = None) -> JSON:
    """``Node`` of API.md."""
    return {
        "node_id": node.node_id,
        "kind": node.kind.value,
        "state": node.state.value,
        "parents": list(node.parents),
        "branch": node.branch.value,
        **(node.tool.fields() if node.tool is not None else _NO_TOOL),
        "attempts": node.attempt,
        "created_at": node.created_at,
        "ready_at": node.ready_at,
        "started_at": node.started_at,
        "first_token_at": node.first_token_at,
        "finished_at": node.finished_at,
        "prompt_tokens": node.prompt_tokens,
        "cached_tokens": node.cached_tokens,
        "output_tokens": node.output_tokens,
        "max_tokens": node.max_output_tokens,
        "queue_s": node.queue_s,
        "service_s": node.service_s,
        "tool_s": node.tool_s,
        "kv_restore_s": node.kv_restore_s,
        "kv_tier": kv_tier,
        "timeline": timeline(node),
        "outcome_after_cancel": outcome_after_cancel(node),
        "withdrawn": node.withdrawn,
        "model": node.model_choice.chosen if node.model_choice is not None else None,
        "model_choice": choice_json(node.model_choice),
    }


def choice_json(choice: ModelChoice | None) -> JSON | None:
    """Why a node runs on its model (several models served), with every candidate's figures:
    predicted finish s, price, cached tokens, and why any was excluded."""
    if choice is None:
        return None
    return {
        "reason": choice.reason,
        "candidates": [
            {
                "model": name,
                "finish_s": finite(finish),
                "price": choice.price.get(name, 0.0),
                "cached_tokens": choice.cached_tokens.get(name, 0),
                "excluded": choice.excluded.get(name),
            }
            for name, finish in choice.finish_s.items()
        ],
    }


def _seconds(value: object) -> float:
    """A stored finish time; null was not finite."""
    return float(value) if isinstance(value, int | float) else math.inf


def choice_from_json(model: object, data: object) -> ModelChoice | None:
    """The :class:`ModelChoice` a stored node's ``model`` and ``model_choice`` describe (the
    inverse of :func:`choice_json`; a finish of null was not finite); None without a model."""
    if not isinstance(model, str) or not model:
        return None
    found = data if isinstance(data, dict) else {}
    rows = [c for c in found.get("candidates") or () if isinstance(c, dict) and c.get("model")]
    finish = {str(c["model"]): c.get("finish_s") for c in rows}
    return ModelChoice(
        chosen=model,
        reason=str(found.get("reason", "")),
        finish_s={
            m: float(f) if isinstance(f, int | float) else math.inf for m, f in finish.items()
        },
        price={str(c["model"]): float(c.get("price") or 0.0) for c in rows},
        cached_tokens={str(c["model"]): int(c.get("cached_tokens") or 0) for c in rows},
        excluded={str(c["model"]): str(c["excluded"]) for c in rows if c.get("excluded")},
    )


def summary_json(
    program: Program, priority_key: float | None = None, idle_s: float | None = None
) -> JSON:
    """``ProgramSummary`` of API.md. ``idle_s``: its critical path's idle seconds as the live
    metrics count them (``MetricsAggregator.critical_path_idle_s``: its waits at the door
    included, the figure the overview averages); None (a program they no longer follow):
    its nodes' own waits along its observed critical path."""
    idle = idle_s
    if idle is None:
        path = dag.observed_critical_path(program)
        idle = sum(
            program.nodes[n].queue_s + program.nodes[n].kv_restore_s + program.nodes[n].tool_s
            for n in path
        )
    end = program.finished_at if program.finished_at is not None else time.time()
    slack = program.deadline - end if program.deadline is not None else None
    return {
        "program_id": program.program_id,
        "tenant": program.tenant,
        "state": program.state.value,
        "created_at": program.created_at,
        "finished_at": program.finished_at,
        "deadline": program.deadline,
        "labels": dict(program.labels),
        "nodes_done": program.done_nodes,
        "nodes_known": program.known_nodes,
        "attained_service_s": program.attained_service_s,
        "priority_key": finite(priority_key),
        "critical_path_idle_s": idle,
        "deadline_slack_s": slack,
        "tokens_used": program.tokens_used,
        "tool_calls": program.tool_calls,
        "branches": program.branches,
    }


def quotas_json(program: Program) -> JSON:
    """The program's four quotas (``null`` = unlimited)."""
    q = program.quotas
    return {
        "wall_time_s": q.wall_time_s,
        "tokens": q.tokens,
        "tool_calls": q.tool_calls,
        "branches": q.branches,
    }


def program_json(
    program: Program,
    priority_key: float | None,
    placement: Mapping[str, int],
    idle_s: float | None = None,
) -> JSON:
    """``Program`` of API.md: the summary plus quotas, the DAG and KV placement."""
    tier = max(placement, key=lambda t: placement[t]) if placement else None
    out = summary_json(program, priority_key, idle_s)
    nodes = program.nodes.values()
    out.update(
        quotas=quotas_json(program),
        # the program's context is where its calls' KV is: an LLM node that never ran a call
        # (pending, or withdrawn before it ran) holds none
        nodes=[
            node_json(n, tier if n.kind is NodeKind.LLM and n.attempts else None) for n in nodes
        ],
        edges=[[p, n.node_id] for n in program.nodes.values() for p in n.parents],
        critical_path=list(dag.observed_critical_path(program)),
        kv={f"{t}_tokens": placement.get(t, 0) for t in ("hbm", "dram", "disk")},
    )
    return out


def key_of(program: Program, policy: Policy, tickets: list[Any], now: float) -> float | None:
    """The lowest policy key among the program's calls in flight (``tickets``)."""
    keys = [policy.key(t, now) for t in tickets if t.program_id == program.program_id]
    return min(keys) if keys else None


# -- store records --------------------------------------------------------------------------------
def program_record(
    program: Program,
    now: float,
    insertions: InsertionBook | None = None,
    synced_seq: int | None = None,
    idle_s: float | None = None,
) -> ProgramRecord:
    """The store row of ``program``: its summary (and its ``prompt_insertions``) in ``data``,
    with ``synced_seq`` under :data:`SYNCED_SEQ` when given (the projector's mark)."""
    data: JSON = {**summary_json(program, idle_s=idle_s), "quotas": quotas_json(program)}
    if insertions is not None:
        data[PROGRAM_KEY] = insertions.program(program.program_id)
    if synced_seq is not None:
        data[SYNCED_SEQ] = synced_seq
    return ProgramRecord(
        program_id=program.program_id,
        tenant=program.tenant,
        state=program.state.value,
        created_at=program.created_at,
        updated_at=now,
        labels=labels_list(program.labels),
        finished_at=program.finished_at,
        deadline=program.deadline,
        data=data,
    )


def node_record(
    program: Program,
    node: Node,
    now: float,
    insertions: InsertionBook | None = None,
    synced_seq: int | None = None,
) -> NodeRecord:
    """The store row of ``node``: its ``Node`` JSON (with its ``prompt_insertion``) in ``data``,
    with ``synced_seq`` as :func:`program_record` puts it."""
    data = node_json(node)
    if insertions is not None:
        insertions.annotate_node(program.program_id, data)
    if synced_seq is not None:
        data[SYNCED_SEQ] = synced_seq
    return NodeRecord(
        program_id=program.program_id,
        node_id=node.node_id,
        kind=node.kind.value,
        state=node.state.value,
        created_at=node.created_at,
        updated_at=now,
        parents=node.parents,
        attempt=node.attempt,
        data=data,
    )


#: The key of a stored row's data holding the event ``seq`` the row reflects: the projector's
#: bookkeeping for a restart (``projector.py``), never shown.
SYNCED_SEQ = "synced_seq"


def stored_summary(record: ProgramRecord) -> JSON:
    """``ProgramSummary`` of a program known only to the store."""
    out: JSON = dict(record.data)
    out.pop(SYNCED_SEQ, None)
    out.update(
        program_id=record.program_id,
        tenant=record.tenant,
        state=record.state,
        created_at=record.created_at,
        finished_at=record.finished_at,
        deadline=record.deadline,
        labels=labels_dict(record.labels),
    )
    return out


def stored_program(view: ProgramView) -> JSON:
    """``Program`` of a program known only to the store."""
    out = stored_summary(view.program)
    nodes = [stored_node(n) for n in view.nodes]
    out.setdefault(PROGRAM_KEY, empty())  # rows written before insertions were counted
    out.update(
        quotas=out.get("quotas", {}),
        nodes=nodes,
        edges=[[p, n.node_id] for n in view.nodes for p in n.parents],
        critical_path=[],
        kv={"hbm_tokens": 0, "dram_tokens": 0, "disk_tokens": 0},
    )
    return out


def stored_node(record: NodeRecord) -> JSON:
    """``Node`` of a node known only to the store (without the projector's bookkeeping)."""
    out = dict(record.data)
    for key in (SYNCED_SEQ, STREAMED_ATTEMPT, STREAMED_TOKENS):
        out.pop(key, None)
    out.setdefault(NODE_KEY, None)
    out.setdefault("outcome_after_cancel", None)  # rows written before it was shown
    out.setdefault("withdrawn", False)
    return out

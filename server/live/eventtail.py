"""The event log's tail replayed onto programs rebuilt from their rows, after a crash.

Rows are projected about once a second, events commit within milliseconds (``projector.py``),
so after ``kill -9`` the event log knows up to a second more than the rows: programs created,
nodes added, calls and tools that ended. A restart reads the events past the projector's sync
mark and applies each to the rows that do not reflect it yet: a node's events past the
``synced_seq`` of its own row (every event for a node without a row), the program's counters
and state past the program row's. So each effect counts once, whichever rows the crash kept.

The replay mirrors :class:`~agentconsole.scheduler.controller.ProgramController`'s changes
event for event, from what each event's data records (the call's outcome and charged tokens,
the tool node's next state, the program's labels and quotas); it emits nothing. A call's end
past its node's row also drops what the row said that call had streamed (``streamed``): the
end's own ``charged_output_tokens`` charge it, and the restart must not charge it again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agentconsole.scheduler import dag
from agentconsole.scheduler.controller import AFTER_CANCEL, AFTER_FINISH, WITHDRAWN
from agentconsole.scheduler.creation import labels_of, quotas_of
from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind, Scalar
from agentconsole.scheduler.models import ModelChoice
from agentconsole.scheduler.program import (
    Attempt,
    Branch,
    Node,
    NodeKind,
    NodeState,
    Program,
    ProgramState,
    ToolSpec,
)

#: the outcome of an attempt whose run died with the process (the node may run again)
INTERRUPTED = "interrupted"
#: Keys of a node row written while its call streamed (``projector.py``): the attempt and the
#: tokens it had streamed, which a restart charges if that attempt was cut (``reopen.py``)
STREAMED_ATTEMPT = "streamed_attempt"
STREAMED_TOKENS = "streamed_tokens"


def _int(data: Mapping[str, Scalar], key: str) -> int:
    return int(number(data, key))


def created_program(event: Event) -> Program:
    """A program made again from its ``program.created`` event alone (no row was kept)."""
    deadline = event.data.get("deadline")
    return Program(
        event.program_id,
        event.tenant,
        event.t,
        float(deadline) if isinstance(deadline, int | float) else None,
        quotas_of(event.data),
        labels_of(event.data),
    )


@dataclass(slots=True)
class TailReplay:
    """Applies one program's tail events (see the module docstring). ``synced`` maps a node
    id to its row's ``synced_seq``; ``program_synced`` is the program row's; ``streamed`` maps
    a node id to the (attempt, tokens) its row says its call had streamed, left with those
    whose call no tail event ended."""

    program: Program
    synced: Mapping[str, int]
    program_synced: int
    streamed: dict[str, tuple[int, int]] = field(default_factory=dict)

    def apply(self, seq: int, event: Event) -> None:
        """Apply ``event`` (number ``seq``) where a row does not reflect it yet."""
        if seq > self.program_synced:
            self._program_part(event)
        node = self.program.nodes.get(event.node_id) if event.node_id else None
        if event.kind is EventKind.NODE_ADDED and node is None:
            self._add(event)
        elif node is not None and seq > self.synced.get(node.node_id, 0):
            handler = _NODE_HANDLERS.get(event.kind)
            if handler is not None:
                handler(node, event)
            if event.kind in _CALL_ENDS:
                # the row's call ended (or a later one, after it): the end charged it
                self.streamed.pop(node.node_id, None)

    def _program_part(self, event: Event) -> None:
        program, data = self.program, event.data
        kind = event.kind
        if kind is EventKind.NODE_ADDED and data.get("kind") == NodeKind.TOOL.value:
            program.tool_calls += 1
        elif kind in _CALL_ENDS:
            program.attained_service_s += number(data, "service_s")
            program.tokens_used += (
                _int(data, "prompt_tokens")
                - _int(data, "cached_tokens")
                + _int(data, "charged_output_tokens")
            )
        elif kind in _PROGRAM_END:
            program.state = _PROGRAM_END[kind]
            program.finished_at = event.t

    def _add(self, event: Event) -> None:
        data = event.data
        kind = NodeKind(str(data.get("kind", NodeKind.LLM.value)))
        parents = tuple(p for p in str(data.get("parents") or "").split(",") if p)
        node = Node(
            event.node_id,
            self.program.program_id,
            kind,
            parents,
            tool=ToolSpec.from_fields(data) if kind is NodeKind.TOOL else None,
            branch=Branch(str(data.get("branch", Branch.MAIN.value))),
            created_at=event.t,
        )
        dag.add_node(self.program, node)


_CALL_ENDS = frozenset((EventKind.CALL_FINISHED, EventKind.CALL_ABORTED, EventKind.CALL_FAILED))
_PROGRAM_END = {
    EventKind.PROGRAM_FINISHED: ProgramState.FINISHED,
    EventKind.PROGRAM_FAILED: ProgramState.FAILED,
    EventKind.PROGRAM_CANCELLED: ProgramState.CANCELLED,
}


def _ready(node: Node, event: Event) -> None:
    node.state, node.ready_at = NodeState.READY, event.t


def _start(node: Node, event: Event) -> None:
    """``call.queued`` / ``tool.started``: the controller's ``start_node`` (and, with several
    models served, the model the call was sent to and why; the per-candidate figures are
    only in the node's row). ``serve`` queues a call (its ticket) and starts its node at the
    one instant of ``call.queued``, so the controller counted no queue time here: a call's is
    the engine's, from its end's event (:func:`_call_end`)."""
    model, reason = event.data.get("model"), event.data.get("model_reason")
    if isinstance(model, str) and model:
        node.model_choice = ModelChoice(model, str(reason or ""))
    node.state = NodeState.RUNNING
    if node.started_at is None:
        node.started_at = event.t
    _close_attempt(node, event.t, INTERRUPTED)  # a retry after a restart (``toolport``)
    node.attempts.append(Attempt(event.attempt or node.attempt + 1, event.t))
    if node.is_llm:
        node.queued_at = event.t


def _first_token(node: Node, event: Event) -> None:
    if node.first_token_at is None:
        node.first_token_at = event.t
    if node.attempts and node.attempts[-1].first_token_at is None:
        node.attempts[-1].first_token_at = event.t


def _call_end(node: Node, event: Event) -> None:
    """``call.finished`` / ``call.aborted`` / ``call.failed``: ``finish_llm`` for a finished
    call of a running node, else ``charge`` (what an aborted or failed call streamed); a
    closing node's own ``node.cancelled`` events follow."""
    data = event.data
    node.service_s += number(data, "service_s")
    if data.get("outcome", "ok") == "ok" and node.state is NodeState.RUNNING:
        node.state, node.finished_at = NodeState.DONE, event.t
        _close_attempt(node, event.t, "ok")
    # as ``finish_llm`` and ``charge`` alike: the node shows its latest call, its times are
    # totals over its attempts
    node.prompt_tokens = _int(data, "prompt_tokens")
    node.cached_tokens = _int(data, "cached_tokens")
    node.output_tokens = _int(data, "charged_output_tokens")
    node.kv_restore_s += number(data, "restore_s")
    node.queue_s += number(data, "queue_s")


def _tool_end(node: Node, event: Event) -> None:
    """``tool.finished``: its attempt closes and the node takes the state the event names. A
    late end (``after_cancel``, ``after_finish``) closes the attempt its node's cancel (or
    the program's finish) left open in memory and the replay closed with the cancel's own
    ``node.cancelled``: its outcome is the tool's, as ``finish_tool_after_cancel`` set it."""
    data = event.data
    outcome = str(data.get("outcome", "ok"))
    if node.attempts and (data.get(AFTER_CANCEL) is True or data.get(AFTER_FINISH) is True):
        node.attempts[-1].finished_at, node.attempts[-1].outcome = event.t, outcome
    _close_attempt(node, event.t, outcome)
    node.tool_s += number(data, "latency_s")
    state = NodeState(str(data.get("node_state", NodeState.DONE.value)))
    node.state = state
    if state is NodeState.READY:
        node.ready_at = event.t
    else:
        node.finished_at = event.t


def _cancelled(node: Node, event: Event) -> None:
    _close_attempt(node, event.t, str(event.data.get("reason", "cancelled")))
    node.state, node.finished_at = NodeState.CANCELLED, event.t
    if event.data.get(WITHDRAWN) is True:  # a node cancel: it never runs again
        node.withdrawn = True


def _close_attempt(node: Node, t: float, outcome: str) -> None:
    if node.attempts and node.attempts[-1].finished_at is None:
        node.attempts[-1].finished_at, node.attempts[-1].outcome = t, outcome


#: What each kind of event changes on its node. An engine's own events (``call.scheduled``,
#: ``call.preempted``, ``kv.*``) change nothing the controller keeps: a preempted call's node
#: stays running in serve.
_NODE_HANDLERS: dict[EventKind, Callable[[Node, Event], None]] = {
    EventKind.NODE_READY: _ready,
    EventKind.CALL_QUEUED: _start,
    EventKind.TOOL_STARTED: _start,
    EventKind.CALL_FIRST_TOKEN: _first_token,
    EventKind.CALL_FINISHED: _call_end,
    EventKind.CALL_ABORTED: _call_end,
    EventKind.CALL_FAILED: _call_end,
    EventKind.TOOL_FINISHED: _tool_end,
    EventKind.NODE_CANCELLED: _cancelled,
}

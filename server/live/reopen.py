"""Programs survive a restart: a program is rebuilt from its store rows, DAG and standing.

The projector keeps the store's ``programs``, ``nodes`` and ``attempts`` rows in step with
the controller (a program's summary and quotas, every node as the API shows it). At start-up
the service rebuilds every program the store holds as running, and a program that left
memory is rebuilt when its owner names it again, so its next call continues its DAG and the
policies see its attained service, completed calls and tokens as before.

What cannot go on after a restart: an LLM call that was in the engine is gone with it; its
node is closed as ``interrupted`` (the agent's retry of that node id is a new attempt). What
it had streamed is charged as a failed call's would be (its node's output tokens and its
program's ``tokens_used``, so its quota and its tenant's usage): the tokens its node's row
recorded at the projector's last write while it streamed (``projector.py``), so the charge
lags the tokens delivered by at most one sync interval's worth. An LLM node declared ahead
and not called yet is no such call: it stays ready (or pending) for its first call. A tool
node stays running: the agent (or the gateway's recovered intent) still reports its end.
Rebuilding emits no events: nothing happened, the server only remembers.

Rows trail the event log by up to a second; :func:`rebuild` takes the program's events past
the projector's sync mark and replays them onto the rows (``eventtail.py``), and
:func:`rebuild_created` makes a program no row was written for from its events alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentconsole.scheduler import dag
from agentconsole.scheduler.eventdata import number, token_count
from agentconsole.scheduler.events import EventKind
from agentconsole.scheduler.program import (
    Attempt,
    Branch,
    Node,
    NodeKind,
    NodeState,
    Program,
    ProgramState,
    Quotas,
    ToolSpec,
)
from agentconsole.server.live.eventtail import (
    INTERRUPTED,
    STREAMED_ATTEMPT,
    STREAMED_TOKENS,
    TailReplay,
    created_program,
)
from agentconsole.server.live.views import SYNCED_SEQ, choice_from_json, labels_dict
from agentconsole.server.store.repository import ProgramView, Repository, StoredEvent
from agentconsole.server.store.syncmarks import PROJECTOR


def _opt(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, int | float) else None


def _quotas(data: Mapping[str, Any]) -> Quotas:
    raw = data.get("quotas")
    q: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    tokens, tools, branches = q.get("tokens"), q.get("tool_calls"), q.get("branches")
    return Quotas(
        wall_time_s=_opt(q, "wall_time_s"),
        tokens=int(tokens) if isinstance(tokens, int | float) else None,
        tool_calls=int(tools) if isinstance(tools, int | float) else None,
        branches=int(branches) if isinstance(branches, int | float) else None,
    )


def _node(view: ProgramView, index: int) -> Node:
    record = view.nodes[index]
    data = record.data
    kind = NodeKind(record.kind)
    node = Node(
        record.node_id,
        record.program_id,
        kind,
        tuple(record.parents),
        tool=ToolSpec.from_fields(data) if kind is NodeKind.TOOL else None,
        branch=Branch(str(data.get("branch", "main"))),
        state=NodeState(record.state),
        created_at=record.created_at,
        ready_at=_opt(data, "ready_at"),
        started_at=_opt(data, "started_at"),
        first_token_at=_opt(data, "first_token_at"),
        finished_at=_opt(data, "finished_at"),
        prompt_tokens=int(number(data, "prompt_tokens")),
        cached_tokens=int(number(data, "cached_tokens")),
        output_tokens=int(number(data, "output_tokens")),
        max_output_tokens=token_count(data, "max_tokens"),
        service_s=number(data, "service_s"),
        tool_s=number(data, "tool_s"),
        queue_s=number(data, "queue_s"),
        kv_restore_s=number(data, "kv_restore_s"),
        withdrawn=data.get("withdrawn") is True,
    )
    node.model_choice = choice_from_json(data.get("model"), data.get("model_choice"))
    if node.model_choice is not None:
        node.model_candidates = tuple(node.model_choice.finish_s) or (node.model_choice.chosen,)
    for a in view.attempts:
        if a.node_id == record.node_id:
            outcome = "" if a.state == "running" else a.state
            node.attempts.append(Attempt(a.attempt, a.started_at, a.finished_at, outcome))
    return node


def _close_interrupted(
    program: Program, now: float, streamed: Mapping[str, tuple[int, int]]
) -> None:
    """LLM calls died with the old process: their nodes close, so the agent can run them
    again (tools go on: their ends are still reported). Only a call in flight died: its node
    running, or with an attempt still open (a preempted call waits ready). A node the agent
    declared ahead and never called (ready or pending, no open attempt) lost nothing: it
    stays as it was, and its first call is a first attempt, not a retry. ``streamed``: node
    -> (attempt, tokens) its row recorded as streamed; a cut attempt pays that, as
    ``ProgramController.charge`` charges a call that failed mid-answer (no GPU time: none
    was recorded)."""
    for node in program.nodes.values():
        if node.kind is NodeKind.LLM and _call_in_flight(node):
            node.state = NodeState.FAILED
            node.finished_at = now
            if node.attempts and node.attempts[-1].finished_at is None:
                cut = node.attempts[-1]
                cut.finished_at, cut.outcome = now, INTERRUPTED
                attempt, tokens = streamed.get(node.node_id, (0, 0))
                if attempt == cut.number:  # else a row of an earlier attempt's stream
                    node.output_tokens += tokens
                    program.tokens_used += tokens


def _streamed(view: ProgramView) -> dict[str, tuple[int, int]]:
    """node -> (attempt, tokens) its call had streamed, for each node row written while its
    call streamed."""
    out = {}
    for record in view.nodes:
        attempt, tokens = record.data.get(STREAMED_ATTEMPT), record.data.get(STREAMED_TOKENS)
        if isinstance(attempt, int) and isinstance(tokens, int) and tokens > 0:
            out[record.node_id] = (attempt, tokens)
    return out


def _call_in_flight(node: Node) -> bool:
    """Whether the node's call was in the engine (or queued for it) when the process ended."""
    if node.state.terminal:
        return False
    open_attempt = bool(node.attempts) and node.attempts[-1].finished_at is None
    return node.state is NodeState.RUNNING or open_attempt


def _synced(data: Mapping[str, Any]) -> int:
    value = data.get(SYNCED_SEQ)
    return int(value) if isinstance(value, int) else 0  # a row from before marks: 0


def rebuild(view: ProgramView, now: float, tail: Sequence[StoredEvent] = ()) -> Program:
    """The program ``view`` stores, as the controller held it, with ``tail`` (its events past
    the projector's sync mark, in order) replayed where its rows miss them."""
    program = _from_rows(view)
    replay = TailReplay(
        program,
        {n.node_id: _synced(n.data) for n in view.nodes},
        _synced(view.program.data),
        _streamed(view),
    )
    for stored in tail:
        replay.apply(stored.seq, stored.event)
    _derive(program)
    _close_interrupted(program, now, replay.streamed)
    return program


def rebuild_created(tail: Sequence[StoredEvent], now: float) -> Program | None:
    """A program created after the last rows were written, from its events alone (``tail``
    starts with its ``program.created``); ``None`` if it does not (it is not this one's)."""
    if not tail or tail[0].event.kind is not EventKind.PROGRAM_CREATED:
        return None
    program = created_program(tail[0].event)
    replay = TailReplay(program, {}, tail[0].seq)
    for stored in tail[1:]:
        replay.apply(stored.seq, stored.event)
    _derive(program)
    _close_interrupted(program, now, replay.streamed)
    return program


def _from_rows(view: ProgramView) -> Program:
    record, data = view.program, view.program.data
    program = Program(
        record.program_id,
        record.tenant,
        record.created_at,
        deadline=record.deadline,
        quotas=_quotas(data),
        labels=labels_dict(tuple(record.labels)),
        state=ProgramState(record.state),
        finished_at=record.finished_at,
    )
    for index in range(len(view.nodes)):
        dag.add_node(program, _node(view, index))
    program.branches = max(int(number(data, "branches")), program.branches)
    program.attained_service_s = number(data, "attained_service_s")
    program.tokens_used = int(number(data, "tokens_used"))
    program.tool_calls = int(number(data, "tool_calls"))
    return program


def _derive(program: Program) -> None:
    """The program's figures that follow from its nodes."""
    nodes = program.nodes.values()
    program.completed_calls = sum(
        1 for n in nodes if n.kind is NodeKind.LLM and n.state is NodeState.DONE
    )
    program.wait_s = sum(n.queue_s for n in nodes if n.kind is NodeKind.LLM)
    program.first_progress_at = min(
        (n.first_token_at for n in nodes if n.first_token_at is not None), default=None
    )


def program_to_reopen(
    repo: Repository, program_id: str
) -> tuple[ProgramView | None, list[StoredEvent]]:
    """What rebuilding one program that left memory reads: its rows and its events past the
    projector's mark (the rows are written every second, fire-and-forget, so a program can
    leave memory before its last rows commit: its committed events say what they miss, a
    cancel among them). Two reads; changes nothing."""
    tail = repo.program_events_after(repo.sync_mark(PROJECTOR), program_id)
    return repo.get_program(program_id), tail


def programs_to_restore(repo: Repository) -> list[tuple[ProgramView | None, list[StoredEvent]]]:
    """What a start-up rebuilds, each with its event tail: every program the store holds as
    running, and every program with events past the projector's mark (``None``: created
    after the last rows were written). Six reads however many programs; changes nothing."""
    tails: dict[str, list[StoredEvent]] = {}
    for stored in repo.program_events_after(repo.sync_mark(PROJECTOR)):
        tails.setdefault(stored.event.program_id, []).append(stored)
    ids = [r.program_id for r in repo.list_programs(state="running", limit=1_000_000)]
    running = set(ids)
    ids += [pid for pid in tails if pid not in running]
    # one read per table for them all: a read per program made start-up grow with the store
    views = repo.get_programs(ids)
    return [(views.get(pid), tails.get(pid, [])) for pid in ids]

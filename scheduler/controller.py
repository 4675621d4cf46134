"""The program controller: the one place that knows programs.

It owns the program table, the estimators and the lifecycle rules (readiness, quotas, retries,
repair branches, cancellation), and turns a program's standing into a :class:`CallTicket` that
any runtime can order by. It is deliberately synchronous and clock-free (every method takes
``now``): the simulator drives it in virtual time, the server in wall-clock time, and both get
the same decisions. It never talks to a runtime itself: it returns what must happen (calls to
abort, nodes now ready) and the caller acts on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from agentconsole.scheduler import dag, learned
from agentconsole.scheduler.backlog import EngineBacklog
from agentconsole.scheduler.creation import creation_data
from agentconsole.scheduler.errors import UnknownProgram
from agentconsole.scheduler.estimators import (
    OutputLengthEstimator,
    PredictionLog,
    RemainingWorkEstimator,
    ToolLatencyEstimator,
)
from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind, EventSink, Scalar
from agentconsole.scheduler.latency import LogNormal
from agentconsole.scheduler.program import (
    Attempt,
    Node,
    NodeKind,
    NodeState,
    Program,
    ProgramState,
    Quotas,
)
from agentconsole.scheduler.ticket import CallTicket


class QuotaExceeded(Exception):
    """A program tried to exceed one of its quotas; ``quota`` names which."""

    def __init__(self, program_id: str, quota: str, limit: float, value: float) -> None:
        super().__init__(f"program {program_id!r} exceeds its {quota} quota ({value} > {limit})")
        self.program_id = program_id
        self.quota = quota
        self.limit = limit
        self.value = value


class ServiceModel(Protocol):
    """The runtime's cost model, as far as the controller needs it for estimates."""

    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        """Predicted GPU time of one call running alone."""


@dataclass(slots=True)
class CallUsage:
    """What a finished LLM call reports back."""

    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    service_s: float  # GPU time attributed to this call
    queue_s: float = 0.0
    kv_restore_s: float = 0.0
    #: time the call waited inside the runtime after ``start_node`` (a live runtime queues
    #: internally; the simulator calls ``start_node`` at admission, so it passes 0)
    runtime_queue_s: float = 0.0


@dataclass(slots=True)
class _ProgramEstimates:
    """The remaining-calls predictions made for one program's tickets, checked when it ends.

    Two flat lists (completed calls, predicted remaining) rather than a list of pairs: a
    ticket then allocates no tuple the garbage collector must track (this runs per ticket).
    """

    completed: list[int] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)

    @property
    def predictions(self) -> list[tuple[int, float]]:
        return list(zip(self.completed, self.predicted, strict=True))


class ProgramController:
    """Program lifecycle and ticket issuing. Emits program/node/tool events to ``sink``."""

    def __init__(
        self,
        sink: EventSink,
        service_model: ServiceModel,
        *,
        mean_call_s: float = 0.2,
        mean_tool_s: float = 1.0,
    ) -> None:
        self.sink = sink
        self.service_model = service_model
        self.programs: dict[str, Program] = {}
        self.prediction_log = PredictionLog()
        self.output_lengths = OutputLengthEstimator(log=self.prediction_log)
        self.tool_latency = ToolLatencyEstimator(log=self.prediction_log)
        self.remaining_work = RemainingWorkEstimator(log=self.prediction_log)
        self._estimates: dict[str, _ProgramEstimates] = {}
        # running means used to turn "remaining calls" into remaining critical-path seconds,
        # each tenant's its own (a tool's latency is its agent's report, and one tenant's long
        # calls or tools must not lengthen every other tenant's predicted paths); the priors
        # for a tenant with none yet
        self._mean_call_prior_s = mean_call_s
        self._mean_tool_prior_s = mean_tool_s
        self._mean_call_s: dict[str, float] = {}
        self._mean_tool_s: dict[str, float] = {}
        #: the live programs' expected remaining calls (the drain: ``backlog.py``)
        self.backlog = EngineBacklog()
        #: running mean of a call's latency, its queueing and its service
        self._mean_latency_s = mean_call_s

    # -- programs -------------------------------------------------------------------------
    def open_program(
        self,
        program_id: str,
        tenant: str,
        now: float,
        *,
        deadline: float | None = None,
        quotas: Quotas | None = None,
        labels: Mapping[str, str] | None = None,
        ideal_e2e_s: float | None = None,
    ) -> Program:
        """Create a program; raises ``ValueError`` if the id exists. ``ideal_e2e_s`` (its E2E
        alone on an idle engine, when a simulator knows it) is recorded for slowdowns."""
        if program_id in self.programs:
            raise ValueError(f"program {program_id!r} already exists")
        program = Program(program_id, tenant, now, deadline, quotas or Quotas(), dict(labels or {}))
        self.programs[program_id] = program
        self._estimates[program_id] = _ProgramEstimates()
        self._emit(
            now,
            EventKind.PROGRAM_CREATED,
            program,
            data={"deadline": deadline, "ideal_e2e_s": ideal_e2e_s, **creation_data(program)},
        )
        return program

    def adopt(self, program: Program) -> None:
        """Take ``program`` (rebuilt from a store after a restart) into the table as it is;
        emits nothing. Raises ``ValueError`` if the id is in use."""
        if program.program_id in self.programs:
            raise ValueError(f"program {program.program_id!r} already exists")
        self.programs[program.program_id] = program
        self._estimates[program.program_id] = _ProgramEstimates()

    def get(self, program_id: str) -> Program:
        try:
            return self.programs[program_id]
        except KeyError:
            raise UnknownProgram(program_id) from None

    def finish_program(
        self,
        program_id: str,
        now: float,
        *,
        success: bool = True,
        taught: Mapping[str, Scalar] | None = None,
        ended_at: float | None = None,
    ) -> Program:
        """Mark the program finished (or failed) at ``ended_at`` (when its last work ended:
        an idle finish comes ``program_idle_s`` after it; default ``now``, never later), which
        ends its E2E; learns its total size for estimates. Its event, at ``now``, records
        what it taught (its calls, under its ``workload`` label, and the caller's ``taught``
        figures), so a restarted server learns it again (:meth:`relearn`)."""
        program = self.get(program_id)
        if program.state.terminal:
            return program
        ended = now if ended_at is None else min(ended_at, now)
        program.state = ProgramState.FINISHED if success else ProgramState.FAILED
        program.finished_at = ended
        self.backlog.forget(program_id)
        label = program.labels.get("workload", "")
        self.remaining_work.observe_finished(
            program.tenant, label, program.completed_calls, self._estimates[program_id].predictions
        )
        kind = EventKind.PROGRAM_FINISHED if success else EventKind.PROGRAM_FAILED
        met = program.deadline is None or ended <= program.deadline
        data: dict[str, Scalar] = {"e2e_s": ended - program.created_at, "deadline_met": met}
        data |= {learned.LABEL: label, learned.CALLS: program.completed_calls}
        data |= self._output_lengths_taught(program)
        data |= taught or {}
        self._emit(now, kind, program, data=data)
        return program

    def _output_lengths_taught(self, program: Program) -> dict[str, Scalar]:
        """The program's ``model`` label and, as they stand now, the mean output tokens learned
        for its tenant's calls of that label and for all its tenant's calls (each when
        learned): what a restart takes back (``learned.py`` says why not a replay)."""
        model = program.labels.get("model", "")
        taught: dict[str, Scalar] = {learned.MODEL: model}
        for field_name, key in (
            (learned.MODEL_OUTPUT_TOKENS, model),
            (learned.TENANT_OUTPUT_TOKENS, ""),
        ):
            mean = self.output_lengths.learned(program.tenant, key)
            if mean is not None:
                taught[field_name] = mean
        return taught

    def relearn(self, event: Event) -> None:
        """Learn again what ``event`` (stored by an earlier run of the server) taught: a
        program's end (finished or failed, as live), the calls a program of its label made;
        a tool's end, its latency. Logs no prediction errors (they were logged when it
        happened); a program's end also restores the output lengths learned when it ended.
        """
        data = event.data
        if event.kind in (EventKind.PROGRAM_FINISHED, EventKind.PROGRAM_FAILED):
            label = data.get(learned.LABEL)
            if isinstance(label, str) and learned.CALLS in data:
                calls = int(number(data, learned.CALLS))
                self.remaining_work.observe_finished(event.tenant, label, calls, [])
            self._relearn_output_lengths(event.tenant, data)
        elif event.kind is EventKind.TOOL_FINISHED:
            latency_s = number(data, "latency_s")
            self._learn_tool_mean(event.tenant, latency_s)
            tool, kind = data.get(learned.TOOL), data.get(learned.TOOL_KIND)
            # a tool node declared without a tool learns nothing more live either
            if tool and kind and isinstance(tool, str) and isinstance(kind, str):
                self.tool_latency.learn(event.tenant, tool, kind, latency_s)

    def _relearn_output_lengths(self, tenant: str, data: Mapping[str, Scalar]) -> None:
        """Take back the output lengths a program's end recorded as learned then (an end
        stored before they were recorded, or with none learned, teaches none)."""
        model = data.get(learned.MODEL)
        for field_name, key in (
            (learned.MODEL_OUTPUT_TOKENS, model),
            (learned.TENANT_OUTPUT_TOKENS, ""),
        ):
            mean = data.get(field_name)
            if isinstance(mean, bool) or not isinstance(mean, int | float):
                continue  # a bool is an int, but no mean of tokens
            if isinstance(key, str) and 0 <= mean < math.inf:  # (NaN compares false)
                self.output_lengths.restore(tenant, key, mean)

    def cancel_program(self, program_id: str, now: float, *, reason: str = "user") -> list[Node]:
        """Cancel every non-terminal node; returns the nodes that were RUNNING (to abort or
        interrupt). Idempotent: a second cancel returns nothing."""
        program = self.get(program_id)
        if program.state.terminal:
            return []
        running = [n for n in program.nodes.values() if n.state is NodeState.RUNNING]
        for node in program.nodes.values():
            if not node.state.terminal:
                node.state = NodeState.CANCELLED
                node.finished_at = now
                _close_llm_attempt(node, now, CANCELLED_ON_REQUEST)  # as a node cancel does
                self._emit(now, EventKind.NODE_CANCELLED, program, node)
        program.state = ProgramState.CANCELLED
        program.finished_at = now
        self.backlog.forget(program_id)
        self._emit(now, EventKind.PROGRAM_CANCELLED, program, data={"reason": reason})
        return running

    def close_node(self, program_id: str, node_id: str, now: float, outcome: str) -> list[Node]:
        """A running node will not finish (its client left, the runtime failed it): close its
        attempt with ``outcome`` and cancel it and its pending descendants. Returns the nodes
        that changed; the program itself keeps running."""
        program = self.get(program_id)
        node = program.nodes[node_id]
        if node.state.terminal:
            return []
        if node.attempts and node.attempts[-1].finished_at is None:
            node.attempts[-1].finished_at, node.attempts[-1].outcome = now, outcome
        changed = dag.cancel_subtree(program, node_id, now)
        for n in changed:
            self._emit(now, EventKind.NODE_CANCELLED, program, n, data={"reason": outcome})
        return changed

    def cancel_node(self, program_id: str, node_id: str, now: float, *, by: str) -> list[Node]:
        """Cancel ``node_id`` and its descendants not yet ended on request (``by``: ``user``
        or ``operator``): each is ``withdrawn`` (never run again, no new child) and gets a
        ``node.cancelled`` saying so. A running LLM call's attempt closes ``cancelled`` (its
        abort is the caller's); a running tool's stays open, for the caller to close as
        interrupted or for its end to come (:meth:`finish_tool_after_cancel`). The program
        keeps running. Returns the nodes that changed (none for a node withdrawn already);
        the caller refuses a node that ended otherwise."""
        program = self.get(program_id)
        if program.nodes[node_id].withdrawn:
            return []
        changed = dag.cancel_subtree(program, node_id, now)
        data: dict[str, Scalar] = {"reason": CANCELLED_ON_REQUEST, WITHDRAWN: True, "by": by}
        for node in changed:
            node.withdrawn = True
            _close_llm_attempt(node, now, CANCELLED_ON_REQUEST)
            self._emit(now, EventKind.NODE_CANCELLED, program, node, data=data)
        return changed

    def forget(self, program_id: str) -> Program | None:
        """Drop an ended program from memory (a long-running server keeps the store's copy).
        Returns it, or None if unknown; raises ``ValueError`` if it is still running."""
        program = self.programs.get(program_id)
        if program is None:
            return None
        if not program.state.terminal:
            raise ValueError(f"program {program_id!r} is still running")
        del self.programs[program_id]
        self._estimates.pop(program_id, None)
        self.backlog.forget(program_id)
        return program

    def boost(self, program_id: str, amount: float) -> None:
        """Operator boost: every later ticket of the program has its key lowered by
        ``amount`` (the runtime re-ranks queued calls through ``ReadyQueue.rekey``)."""
        self.get(program_id).boost = amount

    # -- nodes ----------------------------------------------------------------------------
    def check_node(self, program_id: str, node: Node) -> None:
        """Raise what :meth:`add_node` would raise for ``node`` (``UnknownProgram``,
        ``ValueError`` for an ended program, ``QuotaExceeded``, ``DagError``); changes
        nothing. A caller with more checks of its own after the DAG's (a call's cost) runs
        them all before the node is added."""
        program = self.programs.get(program_id)
        if program is None:
            raise UnknownProgram(program_id)
        self._check_node(program, node)

    @staticmethod
    def _check_node(program: Program, node: Node) -> bool:
        """:meth:`check_node` for a known program; whether the node would open a branch."""
        if program.state is not _PROGRAM_RUNNING:
            raise ValueError(f"program {program.program_id!r} is {program.state.value}")
        quotas = program.quotas
        limit = quotas.tool_calls
        if node.kind is _TOOL and limit is not None and program.tool_calls + 1 > limit:
            raise QuotaExceeded(program.program_id, "tool_calls", limit, program.tool_calls + 1)
        opens_branch = dag.check_node(program, node)
        if quotas.branches is not None and program.branches + opens_branch > quotas.branches:
            value = program.branches + opens_branch
            raise QuotaExceeded(program.program_id, "branches", quotas.branches, value)
        return opens_branch

    def expected_output_tokens(self, program: Program) -> float:
        """What a new LLM node of ``program`` is expected to generate (its tenant's recent
        calls of its model; :meth:`add_node` gives it to a node that has no figure)."""
        return self.output_lengths.predict(program.tenant, program.labels.get("model", ""))

    def add_node(self, program_id: str, node: Node, now: float) -> Node:
        """Add a node (its parents must exist). Enforces the branch and tool-call quotas
        before changing anything (:meth:`check_node`); marks the node READY if its parents
        are done."""
        program = self.programs.get(program_id)
        if program is None:
            raise UnknownProgram(program_id)
        opens_branch = self._check_node(program, node)
        kind = node.kind
        node.program_id = program_id
        node.created_at = now
        dag.insert_node(program, node, opens_branch)
        if kind is _TOOL:
            program.tool_calls += 1
        elif kind is _LLM and not node.expected_output_tokens:
            node.expected_output_tokens = self.expected_output_tokens(program)
        # _emit inlined (this runs for every queued call); ``_value_`` is what ``.value``
        # returns, without the enum property's Python-level call
        data: dict[str, Scalar] = {
            "kind": kind._value_,
            "parents": ",".join(node.parents),
            "branch": node.branch._value_,
        }
        if node.tool is not None:
            data.update(node.tool.fields())
        emit = self.sink.emit
        attempt = len(node.attempts)
        emit(Event(now, _NODE_ADDED, program_id, node.node_id, attempt, program.tenant, data))
        if dag.parents_done(program, node):
            node.state = _READY
            node.ready_at = now
            emit(Event(now, _NODE_READY, program_id, node.node_id, attempt, program.tenant, {}))
        return node

    def _mark_ready(self, program: Program, node: Node, now: float) -> None:
        # (``add_node`` does the same inline)
        node.state = _READY
        node.ready_at = now
        self._emit(now, _NODE_READY, program, node)

    def ticket(
        self,
        program_id: str,
        node_id: str,
        now: float,
        *,
        prompt_tokens: int,
        cached_tokens: int = 0,
        restore_cost_s: float = 0.0,
        queued_behind: int = 0,
        max_output_tokens: int | None = None,
    ) -> CallTicket:
        """Issue the ticket for queueing LLM node ``node_id`` now (changes no program's
        standing; the backlog takes the program's remaining calls in, and the node notes that
        its call is queued from ``now``: :meth:`start_node` counts its queue time from here).
        ``queued_behind``: calls wait in the engines' queue while they run this many, so the
        ticket carries the drain (0: no call waits; ``backlog.py`` says why).
        ``max_output_tokens``: the most the call may generate (its ``max_tokens``; None: not
        known); the ticket never expects more, whatever its kind's calls produced."""
        program = self.programs.get(program_id)
        if program is None:
            raise UnknownProgram(program_id)
        node = program.nodes[node_id]
        node.queued_at = now
        expected = node.expected_output_tokens or self.output_lengths.predict(program.tenant)
        if max_output_tokens is not None:
            node.max_output_tokens = max_output_tokens
            if expected > max_output_tokens:
                # a verifier asking for 40 tokens is not a 250-token call of its kind: the
                # cap is the one thing known for sure about this call's length
                expected = float(max_output_tokens)
        node.ticket_output_tokens = expected
        uncached = prompt_tokens - cached_tokens
        if uncached < 0:
            uncached = 0
        service = self.service_model.call_seconds(uncached, expected)
        completed = program.completed_calls
        remaining_calls = self.remaining_work.remaining_calls(
            program.tenant, program.labels.get("workload", ""), completed
        )
        after_this = remaining_calls - 1.0
        if after_this < 0.0:  # max(remaining_calls - 1.0, 0.0), without the builtin's call
            after_this = 0.0
        tenant = program.tenant
        mean_call_s = self._mean_call_s.get(tenant, self._mean_call_prior_s)
        mean_tool_s = self._mean_tool_s.get(tenant, self._mean_tool_prior_s)
        remaining_cp = service + restore_cost_s + after_this * (mean_call_s + mean_tool_s)
        backlog = self.backlog
        backlog.expect(program_id, remaining_calls)
        cp_before = node.cp_before_s = self._cp_before(program, node)
        estimates = self._estimates[program_id]
        estimates.completed.append(completed)
        estimates.predicted.append(remaining_calls)
        unlock = dag.unlock_value(program, node_id)
        attempt = len(node.attempts) + 1
        # positional, in field order (``tests/scheduler`` checks every field): a 20-keyword
        # call costs several times as much as the same call by position
        return CallTicket(
            # fixed-width attempt: SGLang aborts by rid *prefix*, so no id may prefix another
            f"{program_id}/{node_id}/{attempt:04d}",  # call_id
            program_id,
            node_id,
            program.tenant,
            now,  # arrival
            attempt,
            prompt_tokens,
            cached_tokens,
            expected,  # expected_output_tokens
            service,  # service_estimate_s
            restore_cost_s,
            program.attained_service_s,  # program_service_s
            cp_before,  # cp_service_s
            program.wait_s,  # program_wait_s
            completed,  # completed_calls
            remaining_cp,  # remaining_cp_s
            float(unlock if unlock > 1 else 1),  # unlock_value: max(unlock, 1)
            program.deadline,
            program.boost,
            backlog.drain_s(self._mean_latency_s, queued_behind),  # drain_s
        )

    @staticmethod
    def _cp_before(program: Program, node: Node) -> float:
        """ATLAS signal: the heaviest GPU service along any path into ``node``. Parents are
        done when a node runs, so their own values are already final."""
        parents = node.parents
        if not parents:
            return 0.0
        nodes = program.nodes
        if len(parents) == 1:
            parent = nodes[parents[0]]
            return parent.cp_before_s + parent.service_s
        return max(nodes[p].cp_before_s + nodes[p].service_s for p in parents)

    def start_node(self, program_id: str, node_id: str, now: float) -> Node:
        """The node's call (LLM) or tool began running: opens an attempt. An LLM call's wait
        since it was queued (:meth:`ticket`, or its preemption) is its node's and program's
        queue time; a node ticketed never (only a caller that drives the controller by hand)
        counts from when it became ready."""
        program = self.programs.get(program_id)
        if program is None:
            raise UnknownProgram(program_id)
        node = program.nodes[node_id]
        node.state = _RUNNING
        if node.started_at is None:
            node.started_at = now
        attempts = node.attempts
        attempts.append(Attempt(len(attempts) + 1, now))
        node.cp_before_s = self._cp_before(program, node)
        kind = node.kind
        if kind is _LLM:
            _count_queue_wait(program, node, now)
        if kind is _TOOL and node.tool is not None:
            self._emit(
                now,
                EventKind.TOOL_STARTED,
                program,
                node,
                data={
                    "tool": node.tool.name,
                    "tool_kind": node.tool.kind.value,
                    "side_effect": node.tool.side_effect,
                },
            )
        return node

    def close_attempt(self, program_id: str, node_id: str, now: float, outcome: str) -> bool:
        """Close the node's open attempt with ``outcome`` and leave its state alone (a run that
        died with an earlier process, before the node starts again); emits nothing. False if
        no attempt was open."""
        attempts = self.get(program_id).nodes[node_id].attempts
        if not attempts or attempts[-1].finished_at is not None:
            return False
        attempts[-1].finished_at, attempts[-1].outcome = now, outcome
        return True

    def first_token(self, program_id: str, node_id: str, now: float) -> None:
        program = self.get(program_id)
        node = program.nodes[node_id]
        if node.first_token_at is None:
            node.first_token_at = now
        attempts = node.attempts
        if attempts and attempts[-1].first_token_at is None:
            attempts[-1].first_token_at = now
        if program.first_progress_at is None:
            program.first_progress_at = now

    def requeue_node(self, program_id: str, node_id: str, now: float) -> None:
        """A running LLM call was preempted: it waits again (its attempt stays open), queued
        from ``now``."""
        node = self.get(program_id).nodes[node_id]
        node.state = NodeState.READY
        node.ready_at = node.queued_at = now

    def resume_node(self, program_id: str, node_id: str, now: float | None = None) -> None:
        """A preempted LLM call runs again (its attempt was kept open, no new one opens): its
        node is running. Its wait since the preemption is the runtime's queue measure at the
        call's end (serve), or, given ``now``, counted here as :meth:`start_node` counts a
        call's wait (the simulator, whose calls report none)."""
        program = self.get(program_id)
        node = program.nodes[node_id]
        node.state = _RUNNING
        if now is not None:
            _count_queue_wait(program, node, now)

    def charge(self, program_id: str, node_id: str, usage: CallUsage) -> None:
        """Count what a call that will not finish (aborted, cut off) already cost: its tokens
        and GPU time go to the program's usage and attained service, so quotas, fairness and
        PLAS/ATLAS see every token a program caused. Raises :class:`QuotaExceeded` after
        counting, like :meth:`finish_llm`; the node's state is the caller's to close."""
        program = self.get(program_id)
        node = program.nodes[node_id]
        # the node shows its latest call, as a finished one does (prompt, cached, output);
        # its times are totals over its attempts (an aborted one's wait was dropped)
        node.prompt_tokens, node.cached_tokens = usage.prompt_tokens, usage.cached_tokens
        node.output_tokens = usage.output_tokens
        node.service_s += usage.service_s
        node.kv_restore_s += usage.kv_restore_s
        node.queue_s += usage.runtime_queue_s
        program.wait_s += usage.runtime_queue_s
        program.attained_service_s += usage.service_s
        program.tokens_used += usage.prompt_tokens - usage.cached_tokens + usage.output_tokens
        quota = program.quotas.tokens
        if quota is not None and program.tokens_used > quota:
            raise QuotaExceeded(program_id, "tokens", quota, program.tokens_used)

    def finish_llm(self, program_id: str, node_id: str, now: float, usage: CallUsage) -> list[Node]:
        """An LLM call finished: account service and tokens, learn, unlock children.

        Returns the nodes that became ready. Raises :class:`QuotaExceeded` (after recording
        the usage) if the program went over its token quota; the caller cancels it.
        """
        program = self.get(program_id)
        node = program.nodes[node_id]
        node.state = NodeState.DONE
        node.finished_at = now
        node.attempts[-1].finished_at = now
        node.attempts[-1].outcome = "ok"
        node.prompt_tokens, node.cached_tokens = usage.prompt_tokens, usage.cached_tokens
        node.output_tokens = usage.output_tokens
        node.service_s += usage.service_s
        node.kv_restore_s += usage.kv_restore_s
        node.queue_s += usage.runtime_queue_s
        program.wait_s += usage.runtime_queue_s
        program.attained_service_s += usage.service_s
        program.completed_calls += 1
        program.tokens_used += usage.prompt_tokens - usage.cached_tokens + usage.output_tokens
        model = program.labels.get("model", "")
        self.output_lengths.observe(
            program.tenant, model, usage.output_tokens, expected=node.ticket_output_tokens
        )
        mean_call_s = self._mean_call_s.get(program.tenant, self._mean_call_prior_s)
        self._mean_call_s[program.tenant] = mean_call_s + _MEAN_RATE * (
            usage.service_s - mean_call_s
        )
        latency = node.queue_s + usage.service_s  # its queueing over every attempt, its run
        self._mean_latency_s += _MEAN_RATE * (latency - self._mean_latency_s)
        self.backlog.served(program_id)
        quota = program.quotas.tokens
        if quota is not None and program.tokens_used > quota:
            raise QuotaExceeded(program_id, "tokens", quota, program.tokens_used)
        return self._unlock(program, node, now)

    def finish_tool(
        self,
        program_id: str,
        node_id: str,
        now: float,
        *,
        outcome: str,
        latency_s: float,
        final: bool = False,
        result_bytes: int = 0,
    ) -> tuple[list[Node], bool]:
        """A tool attempt ended with ``outcome`` (``ok``, ``fail`` or ``timeout``).

        Returns (nodes now ready, retry?). ``ok`` completes the node. Otherwise, if ``final``
        the agent takes the error as the tool's result (the node completes, its children run:
        e.g. a failing test opens a repair branch); else the node is retried when its retry
        policy allows and a retry cannot repeat a side effect, and fails when not (the caller
        then fails or cancels the program: a side effect with no key is never re-run).
        """
        program = self.get(program_id)
        node = program.nodes[node_id]
        attempt = node.attempts[-1]
        attempt.finished_at, attempt.outcome = now, outcome
        node.tool_s += latency_s
        spec = node.tool
        if spec is not None:
            # str(): a StrEnum's value at C speed (`.value` is enum's Python property)
            self.tool_latency.observe(program.tenant, spec.name, str(spec.kind), latency_s)
        self._learn_tool_mean(program.tenant, latency_s)
        retry_safe = spec is None or spec.auto_retry_safe
        if outcome == "ok" or final:
            node.state, node.finished_at = NodeState.DONE, now
        elif retry_safe and node.attempt < node.retry.max_attempts:
            node.state, node.ready_at = NodeState.READY, now
        else:
            node.state, node.finished_at = NodeState.FAILED, now
        data = _tool_end_data(node, outcome, latency_s, final, result_bytes)
        self._emit(now, EventKind.TOOL_FINISHED, program, node, data=data)
        if node.state is NodeState.DONE:
            return self._unlock(program, node, now), False
        return [], node.state is NodeState.READY

    def finish_tool_after_cancel(
        self,
        program_id: str,
        node_id: str,
        now: float,
        *,
        outcome: str,
        latency_s: float,
        result_bytes: int = 0,
    ) -> bool:
        """A tool its node's cancel left running ended with ``outcome`` (a side effect
        committed or failed; an agent's own tool reported its end). The node was cancelled by
        its program's cancel, by its own node cancel (``withdrawn``: the program runs on) or
        by the agent's finish of its program (its attempt closed ``abandoned``: the finish
        did not know how the tool would end). The node stays cancelled (nothing runs after
        it), but keeps what happened, so its DAG does not say the effect never ended: its
        attempt closes with ``outcome``, its tool time counts ``latency_s``, it ends ``now``,
        and ``tool.finished`` records it with ``after_cancel`` (``after_finish`` after a
        finish; a restart replays it as any tool end). Returns False, changing nothing,
        unless the node's attempt ran until that end and its end is not recorded yet (a
        second report of the same end is no second end)."""
        program = self.get(program_id)
        node = program.nodes[node_id]
        attempts = node.attempts
        finished = program.state is ProgramState.FINISHED or program.state is ProgramState.FAILED
        cancelled = program.state is ProgramState.CANCELLED or node.withdrawn
        if node.state is not NodeState.CANCELLED or not attempts or not (cancelled or finished):
            return False
        attempt = attempts[-1]
        if attempt.finished_at is not None and not (finished and attempt.outcome == ABANDONED):
            return False
        attempt.finished_at, attempt.outcome = now, outcome
        node.tool_s += latency_s
        node.finished_at = now  # the tool ran until now: the node's timeline ends here
        spec = node.tool
        if spec is not None:  # a real run of the tool: its latency teaches as any other
            self.tool_latency.observe(program.tenant, spec.name, str(spec.kind), latency_s)
        self._learn_tool_mean(program.tenant, latency_s)
        data = _tool_end_data(node, outcome, latency_s, True, result_bytes)
        data[AFTER_CANCEL if cancelled else AFTER_FINISH] = True
        self._emit(now, EventKind.TOOL_FINISHED, program, node, data=data)
        return True

    def _learn_tool_mean(self, tenant: str, latency_s: float) -> None:
        mean = self._mean_tool_s.get(tenant, self._mean_tool_prior_s)
        self._mean_tool_s[tenant] = mean + _MEAN_RATE * (latency_s - mean)

    def tool_distribution(self, tenant: str, tool: str, kind: str) -> LogNormal:
        """The latency ``tenant``'s ``tool`` (of ``kind``) is expected to take: learned from
        its own tools' ends only (tool names are the client's)."""
        return self.tool_latency.distribution(tenant, tool, kind)

    def _unlock(self, program: Program, node: Node, now: float) -> list[Node]:
        ready = dag.unlocked_by(program, node.node_id)
        for child in ready:
            self._mark_ready(program, child, now)
        return ready

    def _emit(
        self,
        now: float,
        kind: EventKind,
        program: Program,
        node: Node | None = None,
        data: Mapping[str, Scalar] | None = None,
    ) -> None:
        self.sink.emit(
            Event(
                now,
                kind,
                program.program_id,
                node.node_id if node else "",
                len(node.attempts) if node else 0,
                program.tenant,
                data or {},
            )
        )


#: The ``tool.finished`` data key of a tool that ended after its node was cancelled (its
#: program's cancel or its own node cancel: :meth:`ProgramController.finish_tool_after_cancel`)
#: and of one that ended after the agent finished its program: its node stays ``cancelled``.
AFTER_CANCEL = "after_cancel"
AFTER_FINISH = "after_finish"
#: the outcome of a tool attempt the program's finish closed, not knowing how it would end
ABANDONED = "abandoned"
#: what a node cancelled on request (:meth:`ProgramController.cancel_node`) says: its
#: ``node.cancelled`` reason and its open LLM attempt's outcome, one value as for every
#: ``node.cancelled`` (the event tail rebuilds the attempt's outcome from the reason)
CANCELLED_ON_REQUEST = "cancelled"
#: the ``node.cancelled`` data key saying the node was cancelled on request (``Node.withdrawn``)
WITHDRAWN = "withdrawn"


def _count_queue_wait(program: Program, node: Node, now: float) -> None:
    """An LLM call of ``node`` starts (or resumes) at ``now``: its wait since it was queued
    (its ticket, or its preemption) is its node's and program's queue time. Not from
    ``ready_at`` when it was queued: a node declared ahead of its call (``serve``) is ready
    while its agent still works, and a retry would count again from its first readiness."""
    queued_at = node.queued_at if node.queued_at is not None else node.ready_at
    if queued_at is None:
        return
    waited = now - queued_at
    if waited < 0.0:  # max(waited, 0.0), without the builtin's call
        waited = 0.0
    node.queue_s += waited
    program.wait_s += waited


def _close_llm_attempt(node: Node, now: float, outcome: str) -> None:
    """A cancelled LLM node's open attempt closes with ``outcome`` (its abort is the caller's,
    and nothing closes a cancelled node's attempt later); a tool's stays open for its end
    after the cancel (:meth:`ProgramController.finish_tool_after_cancel`)."""
    attempts = node.attempts
    if node.kind is _LLM and attempts and attempts[-1].finished_at is None:
        attempts[-1].finished_at, attempts[-1].outcome = now, outcome


def _tool_end_data(
    node: Node, outcome: str, latency_s: float, final: bool, result_bytes: int
) -> dict[str, Scalar]:
    """The data of a tool attempt's ``tool.finished`` event, its node's state already set."""
    spec = node.tool
    return {
        "outcome": outcome,
        "latency_s": latency_s,
        learned.TOOL: spec.name if spec else "",
        learned.TOOL_KIND: str(spec.kind) if spec else "",
        "final": final,
        "result_bytes": result_bytes,
        "node_state": str(node.state),  # what a restart replays (no retry rule)
    }


# Members as module globals: an enum class attribute (``NodeState.READY``) is a slow lookup,
# a global a dict hit, and these sit on every decision.
_LLM, _TOOL = NodeKind.LLM, NodeKind.TOOL
_READY, _RUNNING = NodeState.READY, NodeState.RUNNING
_PROGRAM_RUNNING = ProgramState.RUNNING
_NODE_ADDED, _NODE_READY = EventKind.NODE_ADDED, EventKind.NODE_READY
#: weight of a new call's or tool's time in the mean call and tool times (remaining paths)
_MEAN_RATE = 0.02

"""The tool gateway's port into the program service (``gateway.ports.ReportPort``).

The gateway runs tools; the program service owns programs. Through this port the gateway
makes sure a tool node exists (a gateway tool call creates its program on first sight; an
agent's report of its own tool needs a program the tenant has), asks whether a tenant may act
on a program, and reports a tool's start and end to the program driver, which knows then that
the program waits on a tool and decides what happens to its KV meanwhile.

The port also knows which running tools the gateway's executors run on this server (a start
without ``repeat``: the agent's report always says whether it repeats a start), so a cancel
tells those (interrupted, or left to commit) from the agent's own, which nothing here stops.
A tool the cancel left running still ends on its node: a side effect's commit or failure, an
agent's own tool's finish report (:meth:`ToolPort.tool_finished`; the program stays
cancelled). So does one whose own node was cancelled (a node cancel: the program runs on) and
a gateway run that ends after the agent finished its program. A node cancelled on request
(``withdrawn``) starts no tool again.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from agentconsole.scheduler.program import (
    Node,
    NodeKind,
    NodeState,
    Program,
    ProgramState,
    ToolSpec,
)
from agentconsole.server.live.errors import Conflict, NodeWithdrawn, NotFound
from agentconsole.server.live.eventtail import INTERRUPTED

if TYPE_CHECKING:
    from agentconsole.server.live.service import ProgramService


class ToolPort:
    """See the module docstring; every method runs on the service's event loop."""

    def __init__(self, service: ProgramService) -> None:
        self.service = service
        #: (program, node the agent names) -> the inferred tool node it reports
        self._alias: dict[tuple[str, str], str] = {}
        #: (program, node) of the tool runs the gateway's executors carry out here (their
        #: latest start was the gateway's, not an agent's report)
        self._executed: set[tuple[str, str]] = set()
        #: (program, node) of the starts awaiting their own actions (:meth:`tool_started`):
        #: nothing of their tools runs yet, and a cancel meanwhile has them refused
        self._starting: set[tuple[str, str]] = set()

    async def ensure_tool_node(
        self, tenant: str, program_id: str, node_id: str, tool: str | ToolSpec
    ) -> None:
        """Make sure the program (created on first sight for ``tenant``) has a tool node
        ``node_id``; NotFound for another tenant's program, QuotaError (429) when the
        tool-call or branch quota is used up, Conflict when the program has ended."""
        svc = self.service
        await svc.check_new_id(tenant, program_id, explicit=False)
        program = svc.controller.programs.get(program_id)
        if program is None:
            program = svc.open_program(tenant, program_id)
        elif program.tenant != tenant:
            raise NotFound(f"program {program_id!r} not found", field="program_id")
        svc.require_running(program)
        await svc.check_quotas(program, time.time())
        spec = tool if isinstance(tool, ToolSpec) else ToolSpec(tool)
        aliased = self._alias.get((program_id, node_id))
        if aliased is not None:
            # a retry of the model's call it adopted: that node (refused once cancelled),
            # never a second node under the agent's id
            node_id = aliased
        elif node_id not in program.nodes:
            asked = svc.tool_calls.asked_node(program, node_id)
            if asked is not None and asked.withdrawn:
                # the model's call of that id, whose node a node cancel took (its pending
                # entry withdrawn): it runs on no node of its own either
                raise NodeWithdrawn(program_id, asked.node_id)
            if asked is not None and asked.node_id not in svc.tool_calls.pending(program_id):
                inferred: str | None = asked.node_id  # adopted before: a retry after its end
            else:
                inferred = svc.tool_calls.adopt(program_id, spec.name, node_id)
            if inferred is not None:  # the model asked for it: that node is this tool
                self._alias[(program_id, node_id)] = inferred
                # the registered spec, not the bare name the model's ask gave it: a side
                # effect must stay one (a cancel reports it as let run, not interrupted)
                program.nodes[inferred].tool = spec
                return
        svc.nodes.tool_node(program, node_id, spec, None, time.time())

    def forget(self, program_id: str) -> None:
        """Drop what the port knows of an ended program, its orphaned tools too (a start that
        failed, a run a restart found open: an ended program starts no tool again, and one
        rebuilt later finds its orphans again, ``ProgramService.reopen``)."""
        for key in [k for k in self._alias if k[0] == program_id]:
            del self._alias[key]
        self._executed -= {k for k in self._executed if k[0] == program_id}
        orphaned = self.service.orphaned_tools
        orphaned.difference_update([k for k in orphaned if k[0] == program_id])

    def _note_runner(self, program_id: str, node_id: str, repeat: bool | None) -> None:
        """Who runs the node's tool from this start on: the gateway's executor (no ``repeat``)
        or the agent (its report)."""
        if repeat is None:
            self._executed.add((program_id, node_id))
        else:
            self._executed.discard((program_id, node_id))

    def executes(self, program_id: str, node_id: str) -> bool:
        """Whether the running tool of ``node_id`` is one the gateway's executor runs here
        (else the agent runs it: reported, or asked for by the model; or a run a restart
        left open)."""
        return (program_id, node_id) in self._executed

    def starting(self, program_id: str, node_id: str) -> bool:
        """Whether the tool of ``node_id`` is still starting (:meth:`tool_started` awaits its
        actions): nothing of it runs yet (the gateway's executor has not begun, an agent's
        report is not answered), and a cancel now (its program's or its node's) has the start
        refused and its attempt closed ``interrupted`` (no end of it is to come)."""
        return (program_id, node_id) in self._starting

    async def check_program(
        self, tenant: str, program_id: str, *, must_exist: bool = False
    ) -> None:
        """May ``tenant`` act on ``program_id``? Unknown ids pass (created on first sight)
        unless ``must_exist``; another tenant's (in memory or in the store) is NotFound, and
        so is an unknown id that must exist, with the same answer (no existence oracle); a
        stopped one its stop reason or 409. The tenant's own stored program is reopened.
        ``must_exist`` is an agent's tool report's: a cancelled program passes, since the
        finish of a tool the cancel left running is still recorded (:meth:`tool_finished`
        refuses any other node); a start is refused by :meth:`ensure_tool_node`."""
        svc = self.service
        await svc.check_new_id(tenant, program_id, explicit=False)
        program = svc.controller.programs.get(program_id)
        if program is None and not must_exist:
            return
        if program is None or program.tenant != tenant:
            raise NotFound(f"program {program_id!r} not found", field="program_id")
        if must_exist and program.state is ProgramState.CANCELLED:
            return
        svc.require_running(program)

    def _tool(self, program_id: str, node_id: str) -> tuple[Program, Node]:
        node_id = self._alias.get((program_id, node_id), node_id)
        program = self.service.controller.programs.get(program_id)
        node = program.nodes.get(node_id) if program is not None else None
        if program is None or node is None or node.kind is not NodeKind.TOOL:
            raise NotFound(f"tool node {node_id!r} of {program_id!r} not found", field="node_id")
        return program, node

    async def tool_started(
        self, program_id: str, node_id: str, *, repeat: bool | None = None
    ) -> str:
        """The tool of ``node_id`` began running (NotFound for an unknown tool node, Conflict
        when the program has stopped, when the node was cancelled on request
        (:class:`NodeWithdrawn`), or when it runs already, unless ``repeat``: the retry of a
        start that took effect and was answered 503). When the program then waits
        on tools only, the tool-wait policy decides what happens to its KV. ``repeat`` is
        given by the agent's report of its own tool only (``gateway/reports.py``, True or
        False); without it the gateway's executor runs the tool here (:meth:`executes`).
        Returns the node's id here: the model's tool call's node when ``node_id`` is the
        agent's id of that call, which a node cancel names (``runner.cancel_nodes``). When
        the start's own actions fail, their error is raised and nothing of the tool runs: its
        attempt is closed ``interrupted`` and a retry of the start may run it
        (:meth:`_start_failed`); so too when the start is cancelled while it waits on them
        (its caller gone, the server shutting down)."""
        svc = self.service
        program, node = self._tool(program_id, node_id)
        svc.require_running(program)
        if node.withdrawn:  # a dropped branch runs nothing again, whoever reports it
            raise NodeWithdrawn(program_id, node.node_id)
        if (program_id, node_id) in self._alias and node.state is NodeState.RUNNING:
            # inferred: it has been running since the model asked for it, and whoever
            # reports its start now runs it
            self._note_runner(program_id, node.node_id, repeat)
            return node.node_id
        now = time.time()
        if node.state is NodeState.RUNNING and repeat:
            return node.node_id  # its own refused start put it there: answered, not refused
        if node.state is NodeState.RUNNING:
            if (program_id, node.node_id) not in svc.orphaned_tools:
                raise Conflict(f"tool node {node_id!r} is already running", field="node_id")
            # its run died with the process before a restart: this start is its retry
            svc.orphaned_tools.discard((program_id, node.node_id))
            svc.controller.close_attempt(program_id, node.node_id, now, INTERRUPTED)
        self._note_runner(program_id, node.node_id, repeat)
        svc.driver.tool_started(program_id, node.node_id, now)
        starting = (program_id, node.node_id)
        self._starting.add(starting)
        try:
            await svc.settled()
        except BaseException:
            # the start's own wait ended in an error (the driver's decision raised; the
            # actions swallow their own failures) or was cancelled (its client gone, the
            # server shutting down): the caller runs nothing, so the attempt closes as an
            # overtaken one does, and the node does not stay in flight for a retry's 409
            self._start_failed(program, node.node_id)
            raise
        finally:
            self._starting.discard(starting)
        # a cancel while the start's actions ran (a cache hint to another engine awaits)
        # found no running tool to interrupt (the gateway had none to stop: it listed the
        # tool nowhere, :meth:`starting`): the tool must not run now, on a program stopped
        # meanwhile nor on a node cancelled meanwhile, and its attempt, open for an end that
        # will not come, closes: nothing of it ran (read again: the await may have changed
        # both)
        if program.state.terminal or program.nodes[node.node_id].withdrawn:
            self._close_unrun(program_id, node.node_id)
            svc.require_running(program)
            raise NodeWithdrawn(program_id, node.node_id)
        return node.node_id

    def _close_unrun(self, program_id: str, node_id: str) -> None:
        """Close the attempt of a start that ran nothing (``interrupted``: no end of it is to
        come) and forget who was to run it."""
        self._executed.discard((program_id, node_id))
        self.service.controller.close_attempt(program_id, node_id, time.time(), INTERRUPTED)

    def _start_failed(self, program: Program, node_id: str) -> None:
        """The wait of the start of ``node_id``'s tool on its actions failed or was
        cancelled: nothing of it runs. Its attempt closes (:meth:`_close_unrun`). On a
        program and node still running, the node is left as a restart leaves a tool whose run
        died (running, an orphan, until its retry or its program's :meth:`forget`): the retry
        of this start (the gateway releases the call's key for it) is its next attempt, not a
        409 for a tool already running; and the program waits on it no more, its tool wait
        decided again at the driver's next settle (the next event's, or the sweeper's)."""
        svc, program_id = self.service, program.program_id
        self._close_unrun(program_id, node_id)
        if program.state.terminal or program.nodes[node_id].withdrawn:
            return  # a cancel came too: the node is cancelled, and starts nothing again
        svc.orphaned_tools.add((program_id, node_id))
        svc.driver.no_longer_waits_on(program_id, node_id)

    async def tool_finished(
        self,
        program_id: str,
        node_id: str,
        outcome: str,
        latency_s: float | None = None,
        result_bytes: int = 0,
    ) -> None:
        """The tool ended (``ok``, ``fail`` or ``timeout``); the agent takes the result either
        way. A node of a running program that never started (its start was lost in a crash:
        the gateway's retry recreated it, or the restart rebuilt it, as declared) is started
        and ended now, one attempt of ``latency_s``: the tool did run. A tool its node's
        cancel left running (its program's or its own; a side effect let commit, an agent's
        own tool), or one still running when the agent finished the program, ends on its
        cancelled node (:meth:`_ended_late`), its program rebuilt from the store if it left
        memory meanwhile. A no-op for a node that ended otherwise (a committed result
        replayed again) or that never started in a program that ended; NotFound for a node
        the program does not have."""
        svc = self.service
        node_id = self._alias.pop((program_id, node_id), node_id)
        self._executed.discard((program_id, node_id))
        program = svc.controller.programs.get(program_id)
        if program is None:  # ended and left memory while the tool ran (else: unknown)
            try:
                program = await svc.program_of(None, program_id)
            except NotFound:
                return
        node = program.nodes.get(node_id)
        if node is None:  # the model's call by the agent's id, no longer aliased (a replay)
            node = svc.tool_calls.asked_node(program, node_id)
        if node is None or node.kind is not NodeKind.TOOL:
            raise NotFound(f"tool node {node_id!r} of {program_id!r} not found", field="node_id")
        node_id = node.node_id
        now = time.time()
        if node.state is NodeState.CANCELLED and (program.state.terminal or node.withdrawn):
            if program.state is ProgramState.CANCELLED or node.withdrawn:
                self._require_ran_until_cancelled(program, node)
            # else the agent finished its program while this ran: its end is still recorded
            self._ended_late(program, node, now, outcome, latency_s, result_bytes)
            return
        if node.state.terminal:
            return
        if node.state is not NodeState.RUNNING:
            if program.state.terminal:
                return  # an ended program starts nothing, not even to close it
            # not before the node existed: a node recreated by the retry is younger than the
            # run its stored latency measured
            started = max(now - (latency_s or 0.0), node.created_at)
            svc.driver.tool_started(program_id, node_id, started)
        # a node rebuilt running after a restart ends here when its committed result is
        # replayed: it is no longer an orphan whose next start would be taken for its retry
        svc.orphaned_tools.discard((program_id, node_id))
        if latency_s is None:
            latency_s = now - node.attempts[-1].started_at if node.attempts else 0.0
        svc.driver.tool_finished(
            program_id,
            node_id,
            now,
            outcome=outcome,
            latency_s=latency_s,
            final=True,
            result_bytes=result_bytes,
        )

    def _require_ran_until_cancelled(self, program: Program, node: Node) -> None:
        """Refuse the end of a tool whose node did not run at its cancel (the program's or its
        own): nothing of it ran to end. The program's stop reason (409, or its quota's error)
        for a cancelled program; :class:`NodeWithdrawn` for a node cancel."""
        if not node.attempts or not _ran_until_cancelled(node):
            self.service.require_running(program)  # raises: the program is cancelled
            raise NodeWithdrawn(program.program_id, node.node_id)

    def _ended_late(
        self,
        program: Program,
        node: Node,
        now: float,
        outcome: str,
        latency_s: float | None,
        result_bytes: int,
    ) -> None:
        """The end of a tool that ran on past its node's cancel (its program's, its own, or
        its program's finish): recorded on the node if that run's end is not recorded yet
        (``ProgramController.finish_tool_after_cancel`` decides; a no-op if it is, after a
        replay or a repeated report, or if the cancel interrupted it, closing its attempt)."""
        svc = self.service
        attempts = node.attempts
        if not attempts:
            return
        if latency_s is None:
            latency_s = now - attempts[-1].started_at
        key = (program.program_id, node.node_id)
        svc.orphaned_tools.discard(key)
        svc.controller.finish_tool_after_cancel(
            program.program_id,
            node.node_id,
            now,
            outcome=outcome,
            latency_s=latency_s,
            result_bytes=result_bytes,
        )


def _ran_until_cancelled(node: Node) -> bool:
    """Whether the node's last attempt ran until its node was cancelled, or on after it: open,
    or closed no sooner than the node ended (an interruption closes it at the cancel, an end
    after the cancel moves the node's end to its own); not an attempt closed before (a
    failed try waiting for its retry)."""
    last = node.attempts[-1]
    if last.finished_at is None:
        return True
    return node.finished_at is not None and last.finished_at >= node.finished_at

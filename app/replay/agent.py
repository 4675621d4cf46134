"""One trace program played as an agent over HTTP: open it, run each node once its parents
are done (LLM nodes as chat calls, tool nodes through the gateway or reported), honour the
recorded cancel, and finish it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import httpx

from agentconsole.client import AsyncAgentConsole, ToolFailedError, program_headers
from agentconsole.httpclient import error_for
from agentconsole.replay.results import ProgramOutcome, ReplayOptions
from agentconsole.replay.text import chat_body
from agentconsole.sample_traces import Branch, LLMNode, Outcome, ToolNode, TraceProgram

#: Gateway tools the replayer registers, by (side_effect, idempotent) of the trace's tool.
GATEWAY_TOOLS = {
    (False, True): "replay.sleep",
    (False, False): "replay.sleep",
    (True, True): "replay.sleep_keyed",
    (True, False): "replay.sleep_effect",
}


@dataclass(slots=True)
class ProgramAgent:
    """Plays ``program`` for the tenant of ``key``; see the module docstring."""

    http: httpx.AsyncClient
    base_url: str
    key: str
    program: TraceProgram
    options: ReplayOptions
    llm_calls: int = 0
    tool_calls: int = 0

    @property
    def program_id(self) -> str:
        return self.options.id_prefix + self.program.id

    def _console(self) -> AsyncAgentConsole:
        return AsyncAgentConsole(self.base_url, self.key, http=self.http)

    async def run(self) -> ProgramOutcome:
        """Play the program from now on (its arrival); never raises but for cancellation of
        the replay itself, which cancels the program on the server first."""
        started = time.monotonic()
        console = self._console()
        try:
            # the deadline as recorded, not divided by the speed: the program's LLM calls run
            # at the server's own pace, so a divided one made every program late (and a trace
            # recorded from the replay kept the shrunken deadline)
            await console.create_program(
                self.program_id,
                deadline_s=self.program.deadline_s,
                labels={"workload": self.program.workload, "shape": self.program.shape,
                        **dict(self.options.labels)},
            )  # fmt: skip
            state = await self._nodes(console, started)
        except asyncio.CancelledError:
            await self._cancel_quietly(console)
            raise
        except Exception as error:  # one program's failure never stops the replay
            with contextlib.suppress(Exception):
                await console.finish_program(self.program_id, success=False)
            return self._outcome("failed", started, f"{type(error).__name__}: {error}"[:300])
        return self._outcome(state, started)

    def _outcome(self, state: str, started: float, error: str | None = None) -> ProgramOutcome:
        return ProgramOutcome(
            self.program_id,
            self.program.tenant,
            "finished"
            if state == "finished"
            else "cancelled"
            if state == "cancelled"
            else "failed",
            time.monotonic() - started,
            self.llm_calls,
            self.tool_calls,
            error,
        )

    async def _cancel_quietly(self, console: AsyncAgentConsole) -> None:
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.wait_for(console.cancel_program(self.program_id), 5))

    async def _nodes(self, console: AsyncAgentConsole, started: float) -> str:
        """Run the DAG; ``finished`` or ``cancelled`` (raises on a failed request)."""
        cancel_at = self.program.cancel_at_s
        cancel_deadline = None if cancel_at is None else started + cancel_at / self.options.speed
        required = {n.id for n in self.program.nodes if n.branch is not Branch.DISCARDED}
        done: set[str] = set()
        running: dict[asyncio.Task[None], str] = {}
        waiting = list(self.program.nodes)
        try:
            while not required <= done:
                for node in [n for n in waiting if set(n.parents) <= done]:
                    waiting.remove(node)
                    running[asyncio.create_task(self._node(console, node))] = node.id
                timeout = None if cancel_deadline is None else cancel_deadline - time.monotonic()
                if timeout is not None and timeout <= 0:
                    await console.cancel_program(self.program_id)
                    return "cancelled"
                finished, _ = await asyncio.wait(
                    running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for task in finished:
                    node_id = running.pop(task)
                    task.result()  # a failed request fails the program
                    done.add(node_id)
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        await console.finish_program(self.program_id, success=True)
        return "finished"

    async def _node(self, console: AsyncAgentConsole, node: LLMNode | ToolNode) -> None:
        parents = list(node.parents)
        if isinstance(node, LLMNode):
            await console.add_node(self.program_id, node.id, kind="llm", parents=parents,
                                   branch=node.branch.value)  # fmt: skip
            await self._chat(node)
            return
        await console.add_node(self.program_id, node.id, kind="tool", parents=parents,
                               tool=node.tool, branch=node.branch.value)  # fmt: skip
        if self.options.tools == "gateway":
            await self._gateway_tool(console, node)
        else:
            await self._agent_tool(console, node)

    async def _chat(self, node: LLMNode) -> None:
        body = chat_body(
            self.program,
            node,
            model=self.options.model,
            token_scale=self.options.token_scale,
            max_output_tokens=self.options.max_output_tokens,
        )
        headers = {
            "Authorization": f"Bearer {self.key}",
            **program_headers(self.program_id, node.id, node.parents),
        }
        self.llm_calls += 1
        response = await self.http.post(
            f"{self.base_url}/v1/chat/completions", json=body, headers=headers
        )
        if response.status_code >= 400:
            raise error_for(response)

    async def _gateway_tool(self, console: AsyncAgentConsole, node: ToolNode) -> None:
        """One gateway call per recorded attempt (the same node, attempt 1, 2, ...); a
        failed or timed-out attempt is the gateway's 424, the next attempt is a retry."""
        name = GATEWAY_TOOLS[(node.side_effect, node.idempotent)]
        for number, attempt in enumerate(node.attempts, start=1):
            arguments = {
                "seconds": attempt.latency_s / self.options.speed,
                "fail": attempt.outcome is not Outcome.OK,
            }
            self.tool_calls += 1
            with contextlib.suppress(ToolFailedError):
                await console.call_tool(name, self.program_id, node.id, arguments, attempt=number)

    async def _agent_tool(self, console: AsyncAgentConsole, node: ToolNode) -> None:
        """The agent runs the tool itself: report start, wait the recorded time, report end."""
        self.tool_calls += 1
        await console.tool_started(self.program_id, node.id, node.tool)
        latency = node.duration_s / self.options.speed
        await asyncio.sleep(latency)
        await console.tool_finished(self.program_id, node.id, node.outcome.value, latency_s=latency)

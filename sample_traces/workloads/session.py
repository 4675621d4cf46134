"""One ``long-coding`` session as a DAG: the main agent's steps, its compactions and subagents.

A :class:`Thread` is one agent's chain of calls (the session's main agent or a subagent) with
the size of the context its next call inherits, tracked by the trace's context rule, so the
session knows when a compaction is due and can keep every call inside the window: a call's
context plus its output never exceeds ``window_tokens`` (tool results, user prompts and
subagent reports are capped to leave ``HEADROOM`` for a compaction).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.sample_traces.format import Branch, LLMNode, Outcome, ToolKind
from agentconsole.sample_traces.workloads.builder import Faults, ProgramBuilder, Sizes
from agentconsole.sample_traces.workloads.coding_tools import (
    CALLS_PER_STEP,
    SESSION_TOOLS,
    SUBAGENT_TOOLS,
    CodingTool,
    coding_tool_node,
    pick_tool,
)
from agentconsole.sample_traces.workloads.sampling import Draw

#: What a compaction needs on top of the history it summarizes: its instruction (<= 2K) and
#: the summary (<= 20K, Claude Code's MAX_OUTPUT_TOKENS_FOR_SUMMARY).
HEADROOM = 22_000
#: P(1, 2, 3, 4 subagents launched together); agent teams of 4 are the top (Dynamo blog).
SUBAGENTS_PER_SPAWN = (0.55, 0.25, 0.12, 0.08)


@dataclass(frozen=True, slots=True)
class Knobs:
    """The session parameters :class:`Session` needs (see ``long_coding`` for their sources)."""

    window_tokens: int
    compact_at: int
    prefix_tokens: int
    p_user_turn: float
    subagent_steps_median: float
    p_timeout: float


@dataclass(slots=True)
class Thread:
    """One agent's chain: the parents of its next call and the context that call inherits."""

    frontier: list[str]
    context: int


class Session(ProgramBuilder):
    """Builds one session's nodes; use once per program, then :meth:`finish`."""

    def __init__(self, draw: Draw, sizes: Sizes, faults: Faults, knobs: Knobs) -> None:
        super().__init__(draw, sizes, faults)
        self.knobs = knobs

    def run(self, steps: int, spawns: int) -> None:
        """The main agent's ``steps`` calls; ``spawns`` of the transitions launch subagents."""
        main = Thread([], self.knobs.prefix_tokens)
        spawn_at = {self.draw.integer(1, steps - 1) for _ in range(spawns)}
        prev = self._call(main, self.tokens(800, 1.0, 20, 30_000))
        for k in range(1, steps):
            branch = Branch.MAIN
            if k in spawn_at:
                self._spawn(main, prev)
                prompt = self._turn_prompt()
            elif self.draw.chance(self.knobs.p_user_turn):
                main.frontier = [prev]
                prompt = min(self.tokens(250, 1.2, 5, 30_000), max(1, self._room(main)))
            else:
                if self._tools(main, prev, SESSION_TOOLS) and k < steps - 1:
                    branch = Branch.REPAIR  # the call that reads a failing test run
                prompt = self._turn_prompt()
            prev = self._call(main, prompt, branch=branch)

    def _room(self, thread: Thread) -> int:
        return max(0, self.knobs.window_tokens - HEADROOM - thread.context)

    def _turn_prompt(self) -> int:
        return self.tokens(30, 0.8, 1, 2_000)

    def _output(self) -> int:
        return self.tokens(265, 1.1, 8, 16_000)

    def _llm(
        self,
        parents: list[str],
        prompt: int,
        output: int,
        *,
        compact: bool = False,
        branch: Branch = Branch.MAIN,
    ) -> LLMNode:
        node = LLMNode(
            id=f"n{len(self.nodes)}",
            parents=tuple(parents),
            branch=branch,
            prompt_tokens=prompt,
            output_tokens=output,
            compact=compact,
        )
        self.nodes.append(node)
        return node

    def _call(
        self,
        thread: Thread,
        prompt: int,
        *,
        output: int | None = None,
        branch: Branch = Branch.MAIN,
        fresh: bool = False,
    ) -> str:
        """The thread's next call; when its context would reach ``compact_at``, a summary call
        and a ``compact`` call that continues from it instead. ``fresh``: the first call of a
        subagent (``compact``, it starts from the prefix and its parent's Task call)."""
        k = self.knobs
        out = self._output() if output is None else output
        if fresh or thread.context + prompt < k.compact_at:
            out = max(1, min(out, k.window_tokens - HEADROOM - thread.context - prompt))
            node = self._llm(thread.frontier, prompt, out, compact=fresh, branch=branch)
            thread.context += prompt + out
        else:
            instruction = self.tokens(1_200, 0.2, 800, 2_000)
            summary = self.tokens(6_000, 0.5, 1_000, 20_000)
            summary = max(1, min(summary, k.window_tokens - thread.context - instruction))
            summarize = self._llm(thread.frontier, instruction, summary)
            restored = self.tokens(12_000, 0.5, 1_000, 50_000) + prompt
            node = self._llm([summarize.id], restored, out, compact=True, branch=branch)
            thread.context = k.prefix_tokens + summary + restored + out
        thread.frontier = [node.id]
        return node.id

    def _tools(self, thread: Thread, prev: str, table: tuple[CodingTool, ...]) -> bool:
        """1-4 parallel tool calls after ``prev``; True if a test run failed."""
        calls = 1 + self.draw.pick(CALLS_PER_STEP)
        cap = self._room(thread) // calls
        thread.frontier = []
        failed = False
        for _ in range(calls):
            tool = pick_tool(self.draw, table)
            node = coding_tool_node(
                self.draw,
                tool,
                node_id=f"n{len(self.nodes)}",
                parents=[prev],
                p_timeout=self.knobs.p_timeout,
                result_cap=cap,
            )
            self.nodes.append(node)
            thread.frontier.append(node.id)
            thread.context += node.result_tokens
            failed |= tool.spec.kind is ToolKind.TEST_RUN and node.outcome is Outcome.FAIL
        return failed

    def _spawn(self, parent: Thread, prev: str) -> None:
        """1-4 subagents launched by call ``prev``; their reports join the parent's next call."""
        task_call = self.nodes[int(prev[1:])]
        assert isinstance(task_call, LLMNode)
        width = 1 + self.draw.pick(SUBAGENTS_PER_SPAWN)
        cap = max(1, self._room(parent) // width)
        reports: list[str] = []
        for _ in range(width):
            sub = Thread([prev], self.knobs.prefix_tokens + task_call.output_tokens)
            steps = round(self.draw.lognormal(self.knobs.subagent_steps_median, 0.8, 2, 100))
            last = self._call(sub, self.tokens(2_000, 0.5, 200, 20_000), fresh=True)
            for k in range(1, steps):
                self._tools(sub, last, SUBAGENT_TOOLS)
                final = k == steps - 1
                report = min(self.tokens(1_200, 0.6, 100, 8_000), cap) if final else None
                last = self._call(sub, self._turn_prompt(), output=report)
            reports.append(last)
            report_node = self.nodes[int(last[1:])]
            assert isinstance(report_node, LLMNode)
            parent.context += report_node.output_tokens
        parent.frontier = [prev, *reports]

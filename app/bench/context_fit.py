"""``bench``'s context check: every LLM call must fit the context window of a model it may run
on, because ``serve`` refuses one that does not (``server/live/intake.py`` ``fit_context``: 400
``context_length_exceeded``) while the simulator, which never reads a window, would run it.

Checked in the main process before any run, so a workload or trace ``serve`` could not take is
a one-line usage error naming a model that would hold it, not a table of what no one can run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import click

from agentconsole.sample_traces.format import LLMNode, ToolNode, TraceProgram, context_tokens
from agentconsole.scheduler.models.doorcredit import likely_models
from agentconsole.server.runtime.sim.hardware import MODELS

#: a model's context window in tokens (prompt plus output); None: unstated, no limit
Window = int | None


def call_contexts(program: TraceProgram) -> Iterator[tuple[LLMNode, int]]:
    """Each LLM call of ``program`` with the tokens it takes of a model's window: the prompt
    the simulator prefills for it (``sim/programs.py`` ``build_contexts``) plus its output,
    which is what ``fit_context`` checks (prompt plus ``max_tokens``). Changes nothing.

    Token counts only, in one pass over the DAG: ``build_contexts`` also builds every prompt's
    block list and prices its prefill, half a minute for a 3,000-session long-coding trace.
    The counts follow its rule: a call after one parent (an LLM call, or a tool whose own
    context is known) extends that parent's context by its prompt (its chain case); any
    other call takes the trace's rule, ``context_tokens``, as ``build_contexts`` does, except
    two shapes whose count that rule gives in O(parents) (walking every ancestor of each
    would take seconds): a compaction (a fresh context: the prefix, its parents' last
    segments, its prompt) and a call joining tools started by one node (that node's context
    and output, then the tools' results: all in the call's scope, so all enter whole).
    ``tests/app/test_bench_cli_checks.py`` holds the counts equal to ``build_contexts``'s."""
    walk = _Walk(program)
    for node in program.nodes:
        if isinstance(node, ToolNode):
            walk.tool(node)
        else:
            yield node, walk.call(node)


class _Walk:
    """What :func:`call_contexts` keeps of the nodes it passed, to count the next ones."""

    def __init__(self, program: TraceProgram) -> None:
        self.program = program
        self.prefix = sum(p.tokens for p in program.prefix)
        #: node -> its last segment (output or result): what crosses into a fresh context
        self.last: dict[str, int] = {}
        #: node -> the context its children inherit (as ``build_contexts``'s ``through``)
        self.through: dict[str, int] = {}
        #: tool -> (the node it follows, its result)
        self.started_by: dict[str, tuple[str, int]] = {}

    def tool(self, node: ToolNode) -> None:
        """Records a tool's result (and what its children inherit after one parent)."""
        self.last[node.id] = node.result_tokens
        parents = node.parents
        if len(parents) == 1 and parents[0] in self.through:
            self.through[node.id] = self.through[parents[0]] + node.result_tokens
            self.started_by[node.id] = (parents[0], node.result_tokens)

    def call(self, node: LLMNode) -> int:
        """An LLM call's context (prompt plus output); records what its children inherit."""
        prompt = self._prompt(node)
        self.last[node.id] = node.output_tokens
        self.through[node.id] = prompt + node.output_tokens
        return prompt + node.output_tokens

    def _prompt(self, node: LLMNode) -> int:
        parents, through, started_by = node.parents, self.through, self.started_by
        if node.insert is not None:
            return context_tokens(self.program, node.id)
        if node.compact:
            return self.prefix + sum(self.last[p] for p in parents) + node.prompt_tokens
        if len(parents) == 1 and parents[0] in through:
            return through[parents[0]] + node.prompt_tokens
        joined = [started_by[p] for p in parents if p in started_by]  # tools that one node began
        if len(joined) == len(parents) and len({starter for starter, _ in joined}) == 1:
            return through[joined[0][0]] + sum(r for _, r in joined) + node.prompt_tokens
        return context_tokens(self.program, node.id)


def candidates_of(node: LLMNode) -> tuple[str, ...]:
    """The models a trace's LLM call may run on, as the simulator reads them
    (``simulation.py`` ``_candidates_of``): its candidates, else the one model it names, else
    none (every served model)."""
    return node.candidates or ((node.model,) if node.model else ())


@dataclass(frozen=True, slots=True)
class Overflow:
    """The calls that fit no model they may run on: how many, the longest one's context
    (prompt plus output), the models it may run on and the largest window among them."""

    calls: int
    longest: int
    models: tuple[str, ...]
    window: int


def overflow(programs: Iterable[TraceProgram], windows: Mapping[str, Window]) -> Overflow | None:
    """The calls of ``programs`` no model they may run on holds (None when every call fits).
    ``windows`` maps each served model to its window; with one model every call runs on it
    (a one-model run ignores the calls' candidates), with several on the ones
    ``likely_models`` gives it, as the simulator places it; ``serve`` refuses a call only when
    none of them holds it (``CallIntake._prompts``). Changes nothing."""
    served = list(windows)
    best: dict[tuple[str, ...], tuple[tuple[str, ...], Window]] = {}
    calls = longest = 0
    longest_models: tuple[str, ...] = ()
    for program in programs:
        for node, tokens in call_contexts(program):
            candidates = candidates_of(node) if len(served) > 1 else ()
            if candidates not in best:  # a few candidate lists recur in every call
                models = tuple(likely_models(candidates, served))
                best[candidates] = (models, _largest(windows[m] for m in models))
            models, window = best[candidates]
            if window is not None and tokens > window:
                calls += 1
                if tokens > longest:
                    longest, longest_models = tokens, models
    if not calls:
        return None
    window = _largest(windows[m] for m in longest_models)
    assert window is not None  # the longest call did not fit, so its models have windows
    return Overflow(calls, longest, longest_models, window)


def holding_model(tokens: int) -> str | None:
    """The model preset with the smallest window that holds ``tokens`` (one with no stated
    window last; ties: the smaller model, then the name), None when none does."""
    holding = [
        (spec.context_window is None, spec.context_window or 0, spec.params, name)
        for name, spec in MODELS.items()
        if spec.context_window is None or spec.context_window >= tokens
    ]
    return min(holding)[-1] if holding else None


def refuse_overflow(
    programs: Iterable[TraceProgram], windows: Mapping[str, Window], way_out: str
) -> None:
    """Raise a one-line ``click.UsageError`` when a call of ``programs`` fits no model it may
    run on (:func:`overflow`): how many, the longest, the window it overflows, that serve
    refuses them, and ``way_out`` formatted with a model preset that would hold the longest
    (``"--model {}"``). Changes nothing."""
    found = overflow(programs, windows)
    if found is None:
        return
    calls = f"{found.calls:,} LLM call{'s' if found.calls != 1 else ''}"
    if len(found.models) == 1:
        fit = "do not fit the model they run on"
        window = f"{found.models[0]}'s context window of {found.window:,} tokens"
    else:
        fit = "fit no model they may run on"
        window = f"the largest context window of {', '.join(found.models)}, {found.window:,}"
    holding = holding_model(found.longest)
    raise click.UsageError(
        f"{calls} {fit} (the longest: {found.longest:,} tokens, prompt plus output, past"
        f" {window}), and serve refuses such a call (400 context_length_exceeded); "
        + (
            f"run them on a model that holds them, e.g. {way_out.format(holding)}"
            if holding is not None
            else "no model preset holds them"
        )
    )


def _largest(windows: Iterable[Window]) -> Window:
    """The largest of ``windows`` (None, no limit, when any is None)."""
    values = list(windows)
    return None if any(w is None for w in values) else max(w for w in values if w is not None)

"""What the simulated engine runs next: one *block* of GPU work, and its length in seconds.

A block is a chunked-prefill step (prefill chunks in policy order, decode tokens riding along
as with SGLang's mixed chunks), a fused run of stall-free mixed steps (one prompt's chunks
beside the decoders), or a fused run of decode steps. Runs have closed-form lengths
(``CostModel.decode_steps_seconds`` / ``mixed_steps_seconds``), so a run of k steps costs one
event, and it can be cut at any step boundary when outside work arrives.

:class:`BlockPlanner` only composes and times blocks; it never changes a call or the KV. The
engine (``engine.py``) decides what is admitted and applies a block's tokens when it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from agentconsole.server.runtime.sim.calls import EngineConfig, SimCall
from agentconsole.server.runtime.sim.costmodel import CostModel, attention_pairs

StepsSeconds = Callable[[int], float]  # k -> seconds for the first k steps of a run


@dataclass(slots=True)
class StepBlock:
    """GPU work from ``start`` to ``end``: prompt chunks and ``decode_steps`` decode steps."""

    start: float
    end: float
    duration: float
    prefill: list[tuple[SimCall, int]] = field(default_factory=list)
    decode: list[SimCall] = field(default_factory=list)
    decode_steps: int = 0
    decode_context: int = 0  # KV tokens the block's decoders attend to at its first step
    chunk: int = 0  # a fused run of mixed steps: prefill tokens per step (0: not such a run)
    prefill_done: int = 0  # its prompt's computed tokens before the first step

    @property
    def tokens(self) -> int:
        """Tokens the block processes (prompt chunks plus one per decoder per step)."""
        decoded = len(self.decode) * self.decode_steps
        if not self.prefill:
            return decoded
        return sum(chunk for _, chunk in self.prefill) + decoded


def steps_within(seconds: StepsSeconds, steps: int, span: float) -> int:
    """The largest k in [1, steps] with ``seconds(k) <= span`` (1 if even one step is longer:
    a step is atomic)."""
    if seconds(steps) <= span:
        return steps
    lo, hi = 1, steps
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if seconds(mid) <= span:
            lo = mid
        else:
            hi = mid - 1
    return lo


def first_step_ending_by(seconds: StepsSeconds, steps: int, span: float) -> int:
    """The smallest k in [1, steps] with ``seconds(k) >= span``: the step in flight ``span``
    seconds into a run (``steps`` if the run ends sooner)."""
    lo, hi = 1, steps
    while lo < hi:
        mid = (lo + hi) // 2
        if seconds(mid) >= span:
            hi = mid
        else:
            lo = mid + 1
    return lo


class BlockPlanner:
    """Composes and times the engine's blocks under a cost model and engine configuration.

    Stateless toward the engine: it reads the calls it is given and returns a new
    :class:`StepBlock` (or shortens one in :meth:`cut`); its only state is a memo of
    stall-free chunk budgets per decode-batch shape."""

    def __init__(self, cost: CostModel, config: EngineConfig) -> None:
        self.cost = cost
        self.config = config
        self._budgets: dict[tuple[int, int], int] = {}

    def prefill_step(
        self,
        now: float,
        prefilling: Collection[SimCall],
        decoding: Collection[SimCall],
        decode_context: int,
        budget: int,
    ) -> StepBlock:
        """One step: prefill chunks in rank order (the policy's order, not admission order,
        so a short urgent prompt is not stuck behind a long one) within ``budget`` tokens,
        plus, with mixed chunks, one token for every decoding call."""
        items: list[tuple[SimCall, int]] = []
        tokens = pairs = context = context_sq = 0
        for call in sorted(prefilling, key=lambda c: c.rank):
            if budget <= 0:
                break
            chunk = min(call.prefill_left, budget)
            budget -= chunk
            items.append((call, chunk))
            tokens += chunk
            pairs += attention_pairs(chunk, call.context_done)
            context += call.context_done
            context_sq += call.context_done * call.context_done
        decode = list(decoding) if self.config.mixed_chunk else []
        duration = self.cost.step_seconds(
            tokens, pairs, len(decode), decode_context, context, context_sq
        )
        return StepBlock(
            now, now + duration, duration, items, decode, decode_steps=1 if decode else 0
        )

    def stall_free_run(
        self,
        now: float,
        until: float,
        prefilling: Collection[SimCall],
        decoding: Collection[SimCall],
        decode_context: int,
    ) -> StepBlock:
        """Stall-free steps while better-ranked calls decode: each step prefills a token budget
        of the best-ranked prompt (see :meth:`_stall_free_budget`). While that
        prompt alone fills the budget and no decoder finishes, the steps are fused into one
        block, cut at ``until`` (the next outside event)."""
        budget = self._stall_free_budget(len(decoding), decode_context)
        head = min(prefilling, key=lambda c: c.rank)
        decode = list(decoding)
        steps = min(
            head.prefill_left // budget,
            min(c.output_tokens - c.generated for c in decode),  # their remaining tokens
            self.config.max_fused_decode_steps,
        )
        if steps < 2:
            return self.prefill_step(now, prefilling, decoding, decode_context, budget)
        seconds = self._mixed_run_seconds(budget, head.context_done, len(decode), decode_context)
        steps = steps_within(seconds, steps, until - now)
        total = seconds(steps)
        return StepBlock(
            now,
            now + total,
            total,
            [(head, budget * steps)],
            decode,
            decode_steps=steps,
            decode_context=decode_context,
            chunk=budget,
            prefill_done=head.context_done,
        )

    def decode_run(
        self,
        now: float,
        until: float,
        calls: list[SimCall],
        context: int,
        *,
        max_steps: int | None = None,
    ) -> StepBlock:
        """A run of decode steps for ``calls`` (attending to ``context`` KV tokens), cut at the
        first call to finish, at ``max_fused_decode_steps``, at ``max_steps`` and at
        ``until``."""
        left = min(c.output_tokens - c.generated for c in calls)  # their remaining tokens
        steps = min(left, self.config.max_fused_decode_steps, max_steps or left)
        seconds = self._decode_run_seconds(len(calls), context)
        steps = steps_within(seconds, steps, until - now)
        duration = seconds(steps)
        return StepBlock(
            now, now + duration, duration, decode=calls, decode_steps=steps, decode_context=context
        )

    def cut(self, block: StepBlock, now: float) -> bool:
        """Shorten a fused run in place to end at the first step boundary at or after ``now``
        (a single step is atomic, as on a GPU); returns whether the block changed."""
        if block.decode_steps <= 1 or now >= block.end:
            return False
        if block.chunk:
            seconds = self._mixed_run_seconds(
                block.chunk, block.prefill_done, len(block.decode), block.decode_context
            )
        elif block.prefill:
            return False  # a single mixed step
        else:
            seconds = self._decode_run_seconds(len(block.decode), block.decode_context)
        steps = first_step_ending_by(seconds, block.decode_steps, now - block.start)
        if steps >= block.decode_steps:
            return False
        if block.chunk:
            call, _ = block.prefill[0]
            block.prefill = [(call, block.chunk * steps)]
        block.decode_steps = steps
        block.duration = seconds(steps)
        block.end = block.start + block.duration
        return True

    # -- timing -------------------------------------------------------------------------------
    def _stall_free_budget(self, batch: int, context: int) -> int:
        """A Sarathi-style token budget: the largest fresh prefill chunk that lengthens a
        decode step by at most 10% beyond a one-token chunk (at least 1 token, so prefill
        always progresses), memoised on the batch shape. It ignores the prompt's already
        computed context, so a chunk deep into a long prompt lengthens the step more; a budget
        solved for that context was measured (docs/BENCHMARKS.md) to cost 15-20% more GPU time
        per program for no TBT gain, as its chunks shrink to a few hundred tokens."""
        key = (batch, context >> 11)
        budget = self._budgets.get(key)
        if budget is None:
            budget = self._budgets[key] = self._solve_budget(batch, context)
        return budget

    def _solve_budget(self, batch: int, context: int) -> int:
        # the fixed cost of any prefill in a step (launch, sampling setup) is paid by the first
        # token; the budget bounds what the chunk adds on top. Counting it in the 10% would,
        # where it exceeds a tenth of a decode step (CPU engines), collapse the budget to one
        # token per step and stretch a prompt's prefill a thousandfold.
        limit = self.cost.step_seconds(1, 1, batch, context)
        limit += 0.1 * self.cost.decode_step_seconds(batch, context)
        lo, hi = 1, self.config.chunked_prefill_size
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.cost.step_seconds(mid, mid * mid // 2, batch, context) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _mixed_run_seconds(self, chunk: int, done: int, batch: int, context: int) -> StepsSeconds:
        mixed = self.cost.mixed_steps_seconds
        return lambda k: mixed(chunk, done, batch, context, k)

    def _decode_run_seconds(self, batch: int, context: int) -> StepsSeconds:
        decode = self.cost.decode_steps_seconds
        return lambda k: decode(batch, context, k)

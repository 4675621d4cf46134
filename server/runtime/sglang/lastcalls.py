"""The context each program's last call left on the engine, as the adapter saw the call end:
what ``context_of`` answers for a program until the plugin's placement sweep covers it again.

The sweep writes ``placement.json`` about once a second, in slices, and later under load
(seconds with a few hundred programs tracked). A program that reports a tool right after its
call ends is decided on at once (the driver's tool-wait decision): reading a placement from
before the call's end, it found nothing resident, kept nothing, and was never decided again,
so under load its context was evicted while it waited (a review measured the next call
recomputing 1,051 of 1,133 tokens, with ``keep`` the policy in force).

``contexts.ProgramContexts`` keeps each program's last token ids (for probes); this keeps the
split of its last call's context the driver's decision needs. The estimate is a lower bound of
the program's own part: what the call computed itself (its prompt past the cached prefix, and
its output); the cached prefix counts as shared, though some of it may be the program's own
earlier turns. The next sweep replaces it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentconsole.scheduler.runtime import ProgramContext

#: programs whose last call is remembered (the oldest forgotten first: a sweep covers them)
MAX_PROGRAMS = 4096


@dataclass(frozen=True, slots=True)
class EndedCall:
    ended_at: float  # wall clock, as ``Placement.written_at``
    context: ProgramContext


class LastCalls:
    """The last call's context of each recent program (event loop only)."""

    def __init__(self, limit: int = MAX_PROGRAMS) -> None:
        self._limit = limit
        self._ended: OrderedDict[str, EndedCall] = OrderedDict()

    def ended(
        self, program_id: str, meta: Mapping[str, Any], output_tokens: int, now: float
    ) -> None:
        """A call of ``program_id`` ended at ``now`` with SGLang's ``meta`` (its
        ``prompt_tokens`` and ``cached_tokens``) and ``output_tokens``."""
        prompt = int(meta.get("prompt_tokens") or 0)
        cached = min(int(meta.get("cached_tokens") or 0), prompt)
        context = ProgramContext(
            private_tokens=prompt - cached + max(output_tokens, 0), shared_tokens=cached
        )
        self._ended.pop(program_id, None)
        self._ended[program_id] = EndedCall(now, context)
        while len(self._ended) > self._limit:
            self._ended.popitem(last=False)

    def since(self, program_id: str, placement_at: float) -> ProgramContext | None:
        """The program's context as its last call left it, when that call ended after the
        placement written at ``placement_at`` was (the placement cannot know it yet); None
        when the placement is newer (it says what stayed resident) or no call is known."""
        ended = self._ended.get(program_id)
        if ended is None or ended.ended_at < placement_at:
            return None
        return ended.context

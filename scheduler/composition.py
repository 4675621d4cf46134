"""Step composition: when an engine pass runs its decoders instead of the next prefill.

An engine without mixed chunks (SGLang's default) runs either a prefill chunk or a decode step
per pass, and SGLang runs the prefill whenever one is pending. So a nearly done program whose
last call is decoding stops for every chunk of a fresh 100K-token prompt admitted beside it,
however the queue was ordered (the overview's section 4). :class:`PrefillDeferral` is the rule
both the simulator's engine and the SGLang plugin (around ``Scheduler._should_defer_prefill``)
apply: a pass decodes instead while some decoder outranks every pending prefill, at most
``max_decode_passes`` passes in a row, so a stream of well-ranked decoders slows a prefill but
never stops it (the same cadence as SGLang's ``prefill_decode_interval``, decided by rank).

Ranks are the policy's effective queue keys (smaller runs first), compared as they are; the
rule never looks at which policy made them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: decode passes in a row a prefill may be deferred for: a few dozen tokens of a short
#: verifier or summary (the calls section 4 is about), a small share of a long generation
DEFAULT_MAX_DECODE_PASSES = 8


@dataclass(frozen=True, slots=True)
class PrefillDeferral:
    """Defer a pending prefill while a better-ranked call decodes, a bounded streak at a time."""

    #: decode-only passes in a row before a pending prefill runs anyway (0: never defer, as
    #: stock SGLang)
    max_decode_passes: int = DEFAULT_MAX_DECODE_PASSES

    @property
    def enabled(self) -> bool:
        return self.max_decode_passes > 0

    def passes_left(self, decode_streak: int) -> int:
        """How many more passes may decode before the prefill must run."""
        return max(self.max_decode_passes - decode_streak, 0)

    def defers(self, decoder_keys: Iterable[Any], prefill_key: Any, decode_streak: int) -> bool:
        """True when this pass should decode and leave the prefill pending: some decoder's key
        is better than ``prefill_key`` (the best pending prefill's) and the decode passes
        since the last prefill (``decode_streak``) are under the cap. Changes nothing."""
        if decode_streak >= self.max_decode_passes or prefill_key is None:
            return False
        return any(key < prefill_key for key in decoder_keys)

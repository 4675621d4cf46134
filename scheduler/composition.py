"""Step composition: when an engine pass runs its decoders instead of the next prefill.

An engine without mixed chunks (SGLang's default) runs either a prefill chunk or a decode step
per pass, and SGLang runs the prefill whenever one is pending. So a nearly done program whose
last call is decoding stops for every chunk of a fresh 100K-token prompt admitted beside it,
however the queue was ordered (the overview's section 4). :class:`PrefillDeferral` is the rule
both the simulator's engine and the SGLang plugin (around ``Scheduler._should_defer_prefill``)
apply: a pass decodes instead while some decoder outranks every pending prefill (a one-pass
prefill only while the decoders outnumber the requests waiting on it), at most
``max_decode_passes`` passes in a row, so a stream of well-ranked decoders slows a prefill but
never stops it (the same cadence as SGLang's ``prefill_decode_interval``, decided by rank), and
at most ``max_deferred_share`` of the call's own predicted service in all, so no call pays
for program awareness more than a bounded share of what it costs.

Ranks are the policy's effective queue keys (smaller runs first), compared as they are; the
rule never looks at which policy made them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: decode passes in a row a prefill may be deferred for: a few dozen tokens of a short
#: verifier or summary (the calls section 4 is about), a small share of a long generation
DEFAULT_MAX_DECODE_PASSES = 8
#: the seconds a call's prefill may be deferred in all (its chunks' streaks summed), as a
#: share of the call's own predicted service: a call the ranks put behind every other (a long
#: program's, at a load with no queue to order) is not deferred chunk after chunk, which put
#: the program-aware policies' P95 behind fcfs's below saturation (docs/BENCHMARKS.md 2f);
#: beside a 100K-token prefill it still lets a short verifier finish first (section 4)
DEFAULT_MAX_DEFERRED_SHARE = 0.3


@dataclass(frozen=True, slots=True)
class PrefillDeferral:
    """Defer a pending prefill while a better-ranked call decodes, a bounded streak at a time."""

    #: decode-only passes in a row before a pending prefill runs anyway (0: never defer, as
    #: stock SGLang)
    max_decode_passes: int = DEFAULT_MAX_DECODE_PASSES
    #: the most a call's prefill is deferred in all, as a share of its predicted service
    max_deferred_share: float = DEFAULT_MAX_DEFERRED_SHARE

    @property
    def enabled(self) -> bool:
        return self.max_decode_passes > 0

    def seconds_left(self, deferred_s: float, service_s: float) -> float | None:
        """How much longer a call deferred ``deferred_s`` so far may be deferred, by its share
        of its predicted ``service_s`` (None: its service is unknown, no cap). A deferral
        that starts with some left runs whole passes: its last may pass the cap by less than
        one pass, in the simulator and the plugin alike."""
        if service_s <= 0.0:
            return None
        return max(self.max_deferred_share * service_s - deferred_s, 0.0)

    def passes_left(self, decode_streak: int) -> int:
        """How many more passes may decode before the prefill must run."""
        return max(self.max_decode_passes - decode_streak, 0)

    def defers(
        self,
        decoder_keys: Sequence[Any],
        prefill_key: Any,
        decode_streak: int,
        *,
        prefill_passes: int = 1,
        waiting_prefills: int = 1,
        deferred_s: float = 0.0,
        service_s: float = 0.0,
    ) -> bool:
        """True when this pass should decode the calls keyed ``decoder_keys`` and leave the
        best pending prefill (key ``prefill_key``, ``prefill_passes`` passes of work left) for
        later: some decoder's key is better, the decode passes since the last prefill
        (``decode_streak``) are under the cap, the seconds that call was deferred so far
        (``deferred_s``) are under its share of its predicted service (``service_s``; 0:
        unknown, no cap), and deferring pays. Changes nothing.

        It pays for a prefill of several passes: its chunks then alternate with the decode
        instead of running back to back (section 4). A one-pass prefill delays the decoders
        by its one pass whether it runs now or after the streak; deferring it pays only by
        gathering the prefills of calls admitted meanwhile into that one pass, one stall of
        the decoders instead of several, and costs the ``waiting_prefills`` requests that
        pass would start their decode meanwhile. So it is deferred only while the decoders
        outnumber them (wide-fanout's short branches beside a full batch on the simulated
        H200, docs/BENCHMARKS.md section 2f; not one decoder beside one newcomer on the CPU
        engine's 2-request batch, where waiting only delays the newcomer).
        """
        if prefill_key is None or decode_streak >= self.max_decode_passes:
            return False
        left = self.seconds_left(deferred_s, service_s)
        if left is not None and left <= 0.0:
            return False
        if prefill_passes <= 1 and len(decoder_keys) <= waiting_prefills:
            return False
        return any(key < prefill_key for key in decoder_keys)


def passes_for(tokens: float, chunk_tokens: int | None) -> int:
    """Engine passes a prefill of ``tokens`` uncached tokens takes with chunks of
    ``chunk_tokens`` (None or 0 or less: unchunked, one pass)."""
    if not chunk_tokens or chunk_tokens <= 0 or tokens <= chunk_tokens:
        return 1
    return -int(-tokens // chunk_tokens)

"""How large a program's working set will get: an online estimate per kind of program.

Agent programs grow: every step appends its tool results and its answer to the context, so a
coding session that starts at 20K tokens ends at 200K (or at its compaction threshold). A door
that sized programs by their first call admitted too many of them, whose contexts then outgrew
memory together (issue 12). This estimator learns, per kind of program (its ``workload`` or
``agent`` label, else its tenant), the peak private context programs of that kind reached
(an exponentially weighted mean over finished ones), and predicts a running program's peak as
the larger of that and what it holds now, so the prediction is corrected as the program grows.
"""

from __future__ import annotations

from collections.abc import Mapping

#: weight of a newly finished program in its kind's mean peak
LEARNING_RATE = 0.2


def program_kind(labels: Mapping[str, str], tenant: str) -> str:
    """The kind a program's growth is learned under."""
    return labels.get("workload") or labels.get("agent") or f"tenant:{tenant}"


class PeakEstimator:
    """Mean peak private tokens of finished programs, per kind."""

    def __init__(self, learning_rate: float = LEARNING_RATE) -> None:
        self.learning_rate = learning_rate
        self._peaks: dict[str, float] = {}

    def observe(self, kind: str, peak_tokens: int) -> None:
        """A program of ``kind`` ended having held at most ``peak_tokens``."""
        if peak_tokens <= 0:
            return
        known = self._peaks.get(kind)
        if known is None:
            self._peaks[kind] = float(peak_tokens)
        else:
            self._peaks[kind] = known + self.learning_rate * (peak_tokens - known)

    def predict(self, kind: str, current_tokens: int) -> int:
        """The predicted peak of a program of ``kind`` that holds ``current_tokens`` now."""
        learned = self._peaks.get(kind)
        return max(current_tokens, int(learned)) if learned is not None else current_tokens

    def known(self, kind: str) -> float | None:
        """The learned mean peak of ``kind`` (None before one finished)."""
        return self._peaks.get(kind)

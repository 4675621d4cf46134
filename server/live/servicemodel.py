"""The controller's cost model in the live server, learned from the calls that finish.

The controller estimates a call's GPU time to rank it (``ServiceModel.call_seconds``). In the
simulator that comes from the roofline cost model; a live runtime is a black box, so this model
starts from rough per-token rates and scales them towards what finished calls report.
"""

from __future__ import annotations


class OnlineServiceModel:
    """``prefill_s * uncached + decode_s * output``, both scaled by one learned factor."""

    def __init__(
        self, prefill_s: float = 1e-4, decode_s: float = 0.02, learning_rate: float = 0.05
    ) -> None:
        self._prefill_s = prefill_s
        self._decode_s = decode_s
        self._rate = learning_rate
        self.scale = 1.0

    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        """Predicted GPU time of one call running alone."""
        raw = self._prefill_s * uncached_prompt_tokens + self._decode_s * output_tokens
        return self.scale * raw

    def prefill_seconds_per_token(self) -> float:
        """Predicted prefill time per uncached prompt token (recompute cost of dropped KV)."""
        return self.scale * self._prefill_s

    def observe(self, uncached_prompt_tokens: int, output_tokens: int, service_s: float) -> None:
        """Move ``scale`` towards what a finished call took. Changes ``scale`` only; calls
        with no measured service (zero-cost runtimes) teach nothing."""
        raw = self._prefill_s * uncached_prompt_tokens + self._decode_s * output_tokens
        if raw <= 0 or service_s <= 0:
            return
        self.scale += self._rate * (service_s / raw - self.scale)

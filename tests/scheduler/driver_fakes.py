"""Stand-ins the program driver's tests share."""

from __future__ import annotations


class LinearCost:
    """A runtime's costs, linear in tokens (the driver's ``CallCost``)."""

    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return 0.001 * uncached_prompt_tokens + 0.01 * output_tokens

    def prefill_seconds(self, new_tokens: int, cached_tokens: int = 0) -> float:
        return 0.001 * new_tokens

    def reload_seconds(self, tokens: int) -> float:
        return 0.0001 * tokens

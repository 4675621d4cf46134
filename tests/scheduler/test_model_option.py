"""The one builder of a candidate model's option, shared by the simulator and ``serve``."""

from __future__ import annotations

from dataclasses import dataclass

from agentconsole.scheduler.models import (
    DEFAULT_OUTPUT,
    CallSize,
    ServedModel,
    model_option,
    output_tokens,
)


@dataclass
class _Cost:
    queue: float
    per_uncached: float
    asked: list[str]

    def queue_s(self) -> float:
        self.asked.append("queue")
        return self.queue

    def service_s(self, call: CallSize) -> float:
        self.asked.append("service")
        return (call.prompt_tokens - call.cached_tokens) * self.per_uncached


def test_option_takes_the_callers_costs_and_the_calls_tokens() -> None:
    asked: list[str] = []
    model = ServedModel("big", tier=3, price_per_mtok=0.88, load_s=20.0)
    call = CallSize(prompt_tokens=1000, cached_tokens=400, output_tokens=99.7)
    option = model_option(model, call, _Cost(2.0, 0.01, asked), loaded=False, load_s=20.0)
    assert (option.name, option.tier, option.price_per_mtok) == ("big", 3, 0.88)
    assert (option.queue_s, option.service_s) == (2.0, 6.0)
    assert (option.cached_tokens, option.tokens) == (400, 1099)  # output truncated, as billed
    assert option.finish_s == 28.0  # cold start counts when not loaded
    assert asked == ["queue", "service"]  # the order both carriers asked in before


def test_no_output_estimate_plans_for_the_default() -> None:
    assert output_tokens(0.0) == DEFAULT_OUTPUT == 256.0
    assert output_tokens(17.0) == 17.0

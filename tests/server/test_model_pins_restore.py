"""The operator's model pins replayed at a restart (``ModelDesk.restore_pins``): a pin to a
model no longer served unpins, as the pin it replaced was undone by it (skipped, the older pin
came back: verifier pinned to big, then to small2, read big after a restart without small2)."""

from __future__ import annotations

from agentconsole.scheduler.runtime import Prompt
from agentconsole.server.live.modeldesk import ModelDesk
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.live import SimLiveRuntime


def test_a_pin_to_a_model_no_longer_served_does_not_bring_back_the_one_it_replaced() -> None:
    desk = ModelDesk(SimLiveRuntime(preset()), "big")
    pins = desk.restore_pins(
        [
            {"program_id": None, "role": "verifier", "model": "big"},
            {"program_id": None, "role": "verifier", "model": "small2"},  # since removed
            {"program_id": "p-open", "role": None, "model": "big"},
            {"program_id": "p-open", "role": None, "model": "small2"},
            {"program_id": None, "role": "planner", "model": "big"},  # still served: kept
            {"program_id": "p-ended", "role": None, "model": "big"},  # its program ended
        ],
        live_programs={"p-open"},
    )
    assert dict(pins.roles) == {"planner": "big"}
    assert dict(pins.programs) == {}


def test_a_candidate_is_planned_for_at_most_the_calls_max_tokens_there() -> None:
    """``model: auto`` planned every candidate for the output estimate (256 tokens before any
    is learned) whatever the call's ``max_tokens``: a one-token verifier call was priced and
    timed as a 256-token one, and the choice flipped once the estimate had learned."""
    desk = ModelDesk(SimLiveRuntime(preset()), "big")
    prompts = {"big": Prompt("x" * 400, 100)}
    free = desk.choose("p", "t", prompts, role=None, min_tier=None, expected_output=0.0)
    capped = desk.choose(
        "p", "t", prompts, role=None, min_tier=None, expected_output=0.0, max_output={"big": 1}
    )

    assert capped.finish_s["big"] < free.finish_s["big"]

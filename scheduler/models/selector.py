"""The model selector: operator pins, tier exclusions, then the named rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentconsole.scheduler.models.choice import ModelChoice, ModelOption, ModelRequest
from agentconsole.scheduler.models.rules import SelectionRule


@dataclass(frozen=True, slots=True)
class Pins:
    """Operator pins: a program, or a role, always runs on the named model (a program pin wins
    over a role pin). A pin overrides the tier: the operator chose the model knowingly."""

    programs: Mapping[str, str] = field(default_factory=dict)
    roles: Mapping[str, str] = field(default_factory=dict)

    def of(self, request: ModelRequest) -> tuple[str, str] | None:
        """The pinned model and what pinned it, or ``None``."""
        if request.program_id in self.programs:
            return self.programs[request.program_id], f"program {request.program_id}"
        if request.role is not None and request.role in self.roles:
            return self.roles[request.role], f"role {request.role}"
        return None


class ModelSelector:
    """Chooses one of a node's candidate models with ``rule`` under ``pins``. Stateless
    between calls, so ``bench`` and ``serve`` get the same answer for the same figures."""

    def __init__(self, rule: SelectionRule, pins: Pins | None = None) -> None:
        self.rule = rule
        self.pins = pins or Pins()

    def select(self, options: Sequence[ModelOption], request: ModelRequest) -> ModelChoice:
        """The choice among ``options`` (candidate names unique, at least one) for ``request``,
        with every candidate's figures; changes nothing. Raises ``ValueError`` on no options
        or a repeated name."""
        if not options:
            raise ValueError("a node needs at least one candidate model")
        names = [o.name for o in options]
        if len(set(names)) != len(names):
            raise ValueError(f"candidate models repeat: {names}")
        excluded = {
            o.name: f"tier {o.tier} < required {request.min_tier}"
            for o in options
            if o.tier < request.min_tier
        }
        pin = self.pins.of(request)
        if pin is not None and pin[0] in names:
            return _choice(pin[0], f"pinned by {pin[1]}", options, excluded)
        eligible = [o for o in options if o.name not in excluded]
        reason_prefix = ""
        if pin is not None:  # a pin to a model this node cannot run on is reported, not obeyed
            reason_prefix = f"pin {pin[0]} ({pin[1]}) not a candidate; "
        if not eligible:
            # no candidate meets the tier: the best quality there is, said plainly
            best = min(options, key=lambda o: (-o.tier, o.finish_s, o.name))
            why = f"{reason_prefix}no candidate meets tier {request.min_tier}: top tier"
            return _choice(best.name, why, options, excluded)
        chosen, why = self.rule.pick(eligible, request)
        return _choice(chosen, reason_prefix + why, options, excluded)


def _choice(
    chosen: str, reason: str, options: Sequence[ModelOption], excluded: dict[str, str]
) -> ModelChoice:
    """The choice with every candidate's figures, so a reader sees what was weighed."""
    return ModelChoice(
        chosen,
        reason,
        finish_s={o.name: o.finish_s for o in options},
        price={o.name: o.price for o in options},
        cached_tokens={o.name: o.cached_tokens for o in options},
        excluded=excluded,
    )

"""Selection rules: small objects in a registry, chosen by name.

A rule only picks among options that already meet the request's tier; pins, exclusions and
the record of reasons are the selector's. Nothing outside this module branches on a name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from agentconsole.scheduler.models.choice import ModelOption, ModelRequest
from agentconsole.scheduler.registry import Registry


class SelectionRule(ABC):
    """Picks one of ``options`` (never empty, all eligible) and says why in a few words."""

    name: ClassVar[str]
    summary: ClassVar[str]

    @classmethod
    def configured(cls, setup: RuleSetup) -> SelectionRule:
        """The rule as a deployment sets it up; a rule takes from ``setup`` what it reads."""
        return cls()

    @abstractmethod
    def pick(self, options: Sequence[ModelOption], request: ModelRequest) -> tuple[str, str]:
        """The chosen option's name and the reason; must not mutate."""


@dataclass(frozen=True, slots=True)
class RuleSetup:
    """What a deployment gives every rule (each takes what it reads): the role -> model map
    of ``fixed-roles``, the seconds one unit of price is worth to ``finish-time``."""

    roles: Mapping[str, str] = field(default_factory=dict)
    seconds_per_price: float = 0.0


RULES: Registry[SelectionRule] = Registry("model selection rule")
register_rule = RULES.register
get_rule = RULES.create
available_rules = RULES.names


def make_rule(name: str, setup: RuleSetup) -> SelectionRule:
    """The rule registered as ``name``, set up from ``setup`` (``KeyError``: unknown name)."""
    cls = RULES.factory(name)
    if not isinstance(cls, type) or not issubclass(cls, SelectionRule):
        raise TypeError(f"{name!r} is not a selection rule class")
    return cls.configured(setup)


def _top_tier(options: Sequence[ModelOption]) -> ModelOption:
    # the least predicted finish among the top tier, then the name, so the pick is stable
    return min(options, key=lambda o: (-o.tier, o.finish_s, o.name))


@register_rule
class AllLarge(SelectionRule):
    name = "all-large"
    summary = "always the top quality tier (what a one-model deployment does)"

    def pick(self, options: Sequence[ModelOption], request: ModelRequest) -> tuple[str, str]:
        best = _top_tier(options)
        return best.name, f"all-large: top tier {best.tier}"


@register_rule
class FixedRoles(SelectionRule):
    """A static role -> model map; a role it does not map, or a model that is not an eligible
    candidate, falls back to the top tier (the safe answer for quality)."""

    name = "fixed-roles"
    summary = "a fixed role -> model map, top tier for any other role"

    def __init__(self, roles: Mapping[str, str] | None = None) -> None:
        self.roles = dict(roles or {})

    @classmethod
    def configured(cls, setup: RuleSetup) -> SelectionRule:
        return cls(setup.roles)

    def pick(self, options: Sequence[ModelOption], request: ModelRequest) -> tuple[str, str]:
        wanted = self.roles.get(request.role) if request.role is not None else None
        if wanted is not None and any(o.name == wanted for o in options):
            return wanted, f"fixed-roles: role {request.role} -> {wanted}"
        best = _top_tier(options)
        why = "unmapped" if wanted is None else f"{wanted} not eligible"
        return best.name, f"fixed-roles: role {request.role} {why}, top tier {best.tier}"


@register_rule
class FinishTime(SelectionRule):
    """The least predicted finish (cold start + queue + service), plus ``seconds_per_price``
    times the call's price: 0 makes price only a tie-break (then the lower tier, the name)."""

    name = "finish-time"
    summary = "least predicted finish time among models meeting the tier; price breaks ties"

    def __init__(self, seconds_per_price: float = 0.0) -> None:
        if seconds_per_price < 0:
            raise ValueError("seconds_per_price must be non-negative")
        self.seconds_per_price = seconds_per_price

    @classmethod
    def configured(cls, setup: RuleSetup) -> SelectionRule:
        return cls(setup.seconds_per_price)

    def pick(self, options: Sequence[ModelOption], request: ModelRequest) -> tuple[str, str]:
        weight = self.seconds_per_price
        best = min(options, key=lambda o: (o.finish_s + weight * o.price, o.price, o.tier, o.name))
        return best.name, f"finish-time: {best.finish_s:.3f} s predicted"

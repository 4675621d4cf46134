"""Model selection as scheduling: which of a node's candidate models runs its call.

A :class:`ModelSelector` applies an operator pin if one matches, excludes candidates under the
node's minimum quality tier, and lets a selection rule (a small object in a registry, chosen by
name: ``all-large``, ``fixed-roles``, ``finish-time``) pick among the rest. Pure and clock-free:
the caller supplies each candidate's predicted queue and service seconds and cached tokens;
``option.py`` builds each candidate from them the same way for the simulator and ``serve``.
"""

from agentconsole.scheduler.models.choice import ModelChoice, ModelOption, ModelRequest
from agentconsole.scheduler.models.option import (
    DEFAULT_OUTPUT,
    CallSize,
    CandidateCost,
    CandidateModel,
    model_option,
    output_tokens,
)
from agentconsole.scheduler.models.rules import (
    RuleSetup,
    SelectionRule,
    available_rules,
    get_rule,
    make_rule,
    register_rule,
)
from agentconsole.scheduler.models.selector import ModelSelector, Pins
from agentconsole.scheduler.models.served import ModelFleet, ServedModel, role_map

__all__ = [
    "DEFAULT_OUTPUT",
    "CallSize",
    "CandidateCost",
    "CandidateModel",
    "ModelChoice",
    "ModelFleet",
    "ModelOption",
    "ModelRequest",
    "ModelSelector",
    "Pins",
    "RuleSetup",
    "SelectionRule",
    "ServedModel",
    "available_rules",
    "get_rule",
    "make_rule",
    "model_option",
    "output_tokens",
    "register_rule",
    "role_map",
]

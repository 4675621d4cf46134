"""KV tiers: tenant-scoped prefix index, tier model, tool-wait policies, cache-aware routing.

Imports only :mod:`agentconsole.scheduler` (in practice nothing of the project).
"""

from agentconsole.kvtiers.eviction import (
    EvictionStrategy,
    available_strategies,
    get_strategy,
    register_strategy,
)
from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.prefix_index import PrefixIndex
from agentconsole.kvtiers.results import (
    Counters,
    EvictionResult,
    InsertResult,
    KVMove,
    Match,
    MoveResult,
)
from agentconsole.kvtiers.router import RouteWeights, WorkerState, choose_worker, route_cost
from agentconsole.kvtiers.tiers import ALL_TIERS, Tier, TierModel, TierSpec
from agentconsole.kvtiers.toolwait import (
    Decision,
    ToolWait,
    ToolWaitPolicy,
    available_tool_wait_policies,
    get_tool_wait_policy,
    register_tool_wait_policy,
)
from agentconsole.scheduler.latency import Constant, LatencyDistribution, LogNormal, expected_min

__all__ = [
    "ALL_TIERS",
    "Block",
    "Constant",
    "Counters",
    "Decision",
    "EvictionResult",
    "EvictionStrategy",
    "InsertResult",
    "KVMove",
    "LatencyDistribution",
    "LogNormal",
    "Match",
    "MoveResult",
    "Node",
    "PrefixIndex",
    "RouteWeights",
    "Tier",
    "TierModel",
    "TierSpec",
    "ToolWait",
    "ToolWaitPolicy",
    "WorkerState",
    "available_strategies",
    "available_tool_wait_policies",
    "choose_worker",
    "expected_min",
    "get_strategy",
    "get_tool_wait_policy",
    "register_strategy",
    "register_tool_wait_policy",
    "route_cost",
]

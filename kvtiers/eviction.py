"""Eviction strategies: which unlocked leaf of a tier is evicted first. Chosen by name.

A strategy only *scores* (the shape of SGLang's radix-cache ``get_priority``): ``priority(node)``
returns a number and the smallest is evicted first. Mechanism (leaf selection, locking,
demotion, capacity) lives in :mod:`agentconsole.kvtiers.prefix_index`, which keeps one lazy heap
per tier keyed by these priorities. Therefore a priority must depend only on the node's own
fields (``last_access``, ``retain_until``, ``tokens``, ``owner`` ...), never on the current time:
the index re-reads it whenever one of those fields changes. A strategy that reads outside state
must call ``PrefixIndex.refresh(nodes)`` when that state changes.

Built-in strategies:

* ``lru``: ``priority = last_access``.
* ``retention``: ``priority = max(last_access, retain_until)``. A node retained for a program in
  tool wait ranks as if it were used at its retention deadline: it outlives everything used
  before the deadline, and once the deadline has passed it ages like any other node (soft
  retention decaying to LRU, as in CacheTTL and SGLang's soft-retention proposal) without any
  heap key ever changing with time.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar

from mypy_extensions import mypyc_attr

from agentconsole.kvtiers.node import Node
from agentconsole.scheduler.registry import Registry


@mypyc_attr(allow_interpreted_subclasses=True)
class EvictionStrategy(ABC):
    """Scores nodes for eviction; smallest first. Implementations are small and stateless."""

    name: ClassVar[str]
    summary: ClassVar[str]

    @abstractmethod
    def priority(self, node: Node) -> float:
        """Eviction priority of ``node`` (smallest evicted first). Must not mutate.

        Must be a pure function of the node's fields, so that an ancestor scores at least as
        high as its descendants when every access touches the whole root path.
        """


STRATEGIES: Registry[EvictionStrategy] = Registry("eviction strategy")
register_strategy = STRATEGIES.register
get_strategy = STRATEGIES.create
available_strategies = STRATEGIES.names


class LRU(EvictionStrategy):
    """Least recently used first (SGLang's default radix eviction)."""

    name = "lru"
    summary = "least recently matched or inserted first"

    def priority(self, node: Node) -> float:
        return node.last_access


register_strategy(LRU)


class Retention(EvictionStrategy):
    """LRU where a retained node counts as used at its retention deadline (soft retention),
    and a node held by a queued call counts as used in the future (it is about to be)."""

    name = "retention"
    summary = "LRU, but retained nodes rank as if used at their deadline, held ones last"

    def priority(self, node: Node) -> float:
        if node.queued_holds:
            return math.inf
        return max(node.last_access, node.retain_until)


register_strategy(Retention)

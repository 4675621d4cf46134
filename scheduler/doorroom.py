"""The door's room: what a new program claims there, and how much memory the door may fill.

Two rules the :class:`~agentconsole.scheduler.driver.ProgramDriver` applies alike in ``bench``
and ``serve``:

* **a program's size** (:func:`door_size`): its first prompt's own tokens, less the prefix the
  engine already holds for other programs (a platform prompt, a repository's files), where the
  carrier leaves that to be learned (:func:`marks_public`);
* **the budget** (:class:`DoorBudget`): the operator's, taken as given, or a share of the
  engines' HBM + DRAM less the room the started programs' shared prefixes take
  (:func:`shared_reserve`), which no program's size counts.

Pure functions and one small record; the driver owns when they are applied (each arrival,
each program end, and a first call that finds a shared prefix or learns it larger).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from agentconsole.scheduler.runtime import HeldSegment, PrefixProbe

#: the share of HBM + DRAM the started programs' private contexts may claim at the door (the
#: rest is headroom for the shared prefixes and the calls' outputs); serve and bench alike
DOOR_MEMORY_SHARE = 0.9

#: a started program's shared prefix as the reserve reads it: its tenant, the tokens its first
#: call found cached, and those tokens in the probe's named segments (empty: none named)
SharedPrefix = tuple[str, int, tuple[HeldSegment, ...]]


def marks_public(private_tokens: int | None, prompt_tokens: int) -> bool:
    """Whether the carrier said which of a prompt's tokens are shared by marking public blocks
    (the simulator's traces): then a tenant's own prefix counts as the program's,
    conservatively. One that marks nothing (``serve``) leaves it to be learned from what the
    engine held of the program's first prompt: every hit then is another program's KV."""
    return private_tokens is not None and private_tokens < prompt_tokens


def door_size(private_tokens: int, held: PrefixProbe | None) -> int:
    """What a new program claims at the door, in ``bench`` and ``serve`` alike: its first
    prompt's own tokens (``private_tokens``), less, where the carrier marks nothing public,
    the prefix the engine holds already (``held``; a system prompt or tool schemas other
    programs computed, stored once). ``held`` None: nothing known, all of it counts."""
    if held is None or marks_public(private_tokens, held.prompt_tokens):
        return private_tokens
    return max(min(private_tokens, held.prompt_tokens - held.hit_tokens), 0)


def shared_reserve(prefixes: Iterable[SharedPrefix]) -> int:
    """The memory the started programs' shared ``prefixes`` take, which no program's size
    counts (:func:`door_size` leaves out what the engine held of a first prompt).

    Per tenant (nothing is shared across tenants: SGLang salts each tenant's keys), the union
    of the prefixes its programs found cached (a platform prompt, each repository its agents
    work on), each segment once per engine holding it (:attr:`PrefixProbe.held_segments`: a
    model's engine, a simulated replica, an SGLang data-parallel rank where the call's rank is
    known; ranks alike when SGLang places calls round robin), and at least the largest such
    prefix (a runtime that names no segments, or a prefix learned larger when its call ran:
    what was learned is not named, so two repositories learned so count as the larger). Left
    out of the budget, 4 tenants' prefixes took a third of the memory the door thought free
    and coding-agent thrashed at 3x; with one prefix per tenant kept (its two repositories
    counted as one) it still recomputed 8M tokens (docs/BENCHMARKS.md 2s, 2t)."""
    largest: dict[str, int] = {}
    segments: dict[str, dict[Hashable, int]] = {}
    for tenant, tokens, named in prefixes:
        largest[tenant] = max(largest.get(tenant, 0), tokens)
        segments.setdefault(tenant, {}).update(named)
    return sum(max(most, sum(segments[t].values())) for t, most in largest.items())


@dataclass(slots=True)
class DoorBudget:
    """How many tokens the door lets the started programs' predicted peaks claim.

    ``operator_tokens`` (``limits.admission_budget_tokens``) is taken as given; without it the
    budget is ``memory_share`` of the engines' memory as the latest arrival reported it, less
    the shared prefixes' reserve. Changes only itself (:meth:`report`)."""

    memory_share: float = DOOR_MEMORY_SHARE
    operator_tokens: int | None = None
    #: the engines' HBM + DRAM tokens and the requests they run at once, as the latest arrival
    #: reported them (0: none yet, or a runtime that reports no KV memory)
    memory_tokens: int = 0
    batch_slots: int = 0

    def report(self, memory_tokens: int, batch_slots: int) -> None:
        """An arrival reported the engines' memory and batch now."""
        self.memory_tokens, self.batch_slots = memory_tokens, batch_slots

    @property
    def reserves(self) -> bool:
        """Whether the budget keeps room for shared prefixes (an operator's does not)."""
        return self.operator_tokens is None

    @property
    def sized(self) -> bool:
        """Whether there is a budget: the operator's, or one derived from reported memory (a
        derived budget may be 0 when the shared prefixes fill it)."""
        return self.operator_tokens is not None or self.memory_tokens > 0

    def tokens(self, reserve: int) -> int:
        """The budget with ``reserve`` tokens kept for shared prefixes (ignored under an
        operator's budget)."""
        if self.operator_tokens is not None:
            return self.operator_tokens
        return max(int(self.memory_tokens * self.memory_share) - reserve, 0)

"""Which SGLang data-parallel rank runs a program's calls.

With ``dp_size > 1`` every rank is a scheduler with its own radix cache, so a program's later
calls reuse its KV only on the rank that computed it. A program's first call is placed by the
simulator's KV-aware router score (``kvtiers.router.choose_worker``: cached tokens against
prefill and decode load, the same objects ``sim.routing.ReplicaRouter`` scores replicas with);
every later call is sent with that rank in ``routed_dp_rank``. The mapping is dropped when the
program's KV is released (a cancel, or a tool wait decided for recompute), when the rank no
longer holds any of its context (the plugin's placement sweep of that rank says so: checked
at the program's next call, and for every mapped program whenever a new one is placed, which
is how a finished program's mapping goes), or when the rank is drained; the next call is then
placed by the score again. Ties go to the rank with the fewest programs mapped to it: a mapped
program is load to come.

Inputs are what the adapter knows at once, without asking the engine: its own calls in flight
(prefill load: prompts not yet answered; decode load: context of calls streaming), each
program's last context (``contexts``) and each rank's placement sweep (``placement.<rank>``).
A prompt's cached tokens on a rank are the longest prefix it shares with the last context of
its own program or of a recent program placed there (same cache salt: SGLang never shares a
prefix across salts). Pure Python; no SGLang import.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentconsole.kvtiers.router import RouteWeights, WorkerState, choose_worker
from agentconsole.kvtiers.tiers import ALL_TIERS, Tier
from agentconsole.server.runtime.sglang.contexts import ProgramContexts, as_ids
from agentconsole.server.runtime.sglang.status import Placement

_MAX_PROGRAMS = 16_384  # mapped programs kept (least recent dropped: they re-route)
_NODES_KEPT = 4096  # programs whose nodes' ranks are kept for the API
_NEIGHBOURS = 32  # recent programs per rank whose contexts a new prompt is compared with


@dataclass(frozen=True, slots=True)
class InFlight:
    """One call in flight as routing sees it: its rank, and its tokens still to prefill or
    already in context (decoding)."""

    rank: int
    prefill_tokens: int = 0
    decode_tokens: int = 0


class RankRouter:
    """See the module docstring. ``size`` ranks, numbered from 0."""

    def __init__(self, size: int, weights: RouteWeights | None = None) -> None:
        if size < 1:
            raise ValueError("RankRouter: at least one rank")
        self.size = size
        self.weights = weights or RouteWeights()
        self.drained: set[int] = set()
        self._rank_of: OrderedDict[str, int] = OrderedDict()  # program -> rank, least recent first
        self._nodes: OrderedDict[str, dict[str, int]] = OrderedDict()
        self._ran_on: dict[str, int] = {}  # program -> rank of its latest call (as _nodes)

    def rank_of(self, program_id: str) -> int | None:
        """The rank the program's calls go to now (None: not placed, or released)."""
        return self._rank_of.get(program_id)

    def route(
        self,
        program_id: str,
        salt: str,
        prompt: Sequence[int],
        prompt_tokens: int,
        calls: Iterable[InFlight],
        contexts: ProgramContexts,
        placements: Sequence[Placement | None],
    ) -> int:
        """The rank for the program's next call, placing it first if it is not placed (or its
        rank was drained or lost its context). ``prompt`` holds the call's token ids when known
        (else empty: no cached tokens are credited), ``prompt_tokens`` its size."""
        rank = self._rank_of.get(program_id)
        if rank is not None and self._keeps(program_id, rank, contexts, placements):
            self._rank_of.move_to_end(program_id)
            return rank
        load = [InFlight(r) for r in range(self.size)]
        for call in calls:
            if 0 <= call.rank < self.size:
                was = load[call.rank]
                load[call.rank] = InFlight(
                    call.rank,
                    was.prefill_tokens + call.prefill_tokens,
                    was.decode_tokens + call.decode_tokens,
                )
        self._forget_lost(contexts, placements)
        open_ranks = [r for r in range(self.size) if r not in self.drained] or list(
            range(self.size)
        )
        mapped = self.programs_per_rank()
        candidates = sorted(open_ranks, key=lambda r: mapped[r])  # ties: fewest programs
        last_rank = self._ran_on.get(program_id)
        hits = self._hits(program_id, salt, as_ids(prompt), contexts, placements, last_rank)
        workers = [
            WorkerState(
                f"rank{r}",
                [hits[r] if t is Tier.HBM else 0 for t in ALL_TIERS],
                load[r].prefill_tokens,
                load[r].decode_tokens,
            )
            for r in candidates
        ]
        chosen = candidates[choose_worker(prompt_tokens, workers, self.weights)]
        self._rank_of[program_id] = chosen
        self._rank_of.move_to_end(program_id)
        while len(self._rank_of) > _MAX_PROGRAMS:
            self._rank_of.popitem(last=False)
        return chosen

    def _keeps(
        self,
        program_id: str,
        rank: int,
        contexts: ProgramContexts,
        placements: Sequence[Placement | None],
    ) -> bool:
        """Whether the program stays on ``rank``: not drained, and (once a sweep of that rank
        ran after the program's last call) the rank still holds some of its context."""
        if rank in self.drained:
            return False
        last = contexts.get(program_id)
        placement = placements[rank] if rank < len(placements) else None
        if last is None or placement is None or placement.written_at <= last.at:
            return True
        return placement.programs.get(program_id, (0, 0))[0] > 0

    def _forget_lost(
        self, contexts: ProgramContexts, placements: Sequence[Placement | None]
    ) -> None:
        """Drop the mappings of programs whose rank no longer holds their context."""
        lost = [
            program
            for program, rank in self._rank_of.items()
            if rank not in self.drained and not self._keeps(program, rank, contexts, placements)
        ]
        for program in lost:
            del self._rank_of[program]

    def _hits(
        self,
        program_id: str,
        salt: str,
        prompt: Sequence[int],
        contexts: ProgramContexts,
        placements: Sequence[Placement | None],
        last_rank: int | None,
    ) -> list[int]:
        """Per rank, the prompt tokens its cache is expected to hold (see the module
        docstring)."""
        hits = [0] * self.size
        if not prompt:
            return hits
        neighbours: list[list[str]] = [[] for _ in range(self.size)]
        for program in reversed(self._rank_of):
            r = self._rank_of[program]
            if program != program_id and len(neighbours[r]) < _NEIGHBOURS:
                neighbours[r].append(program)
        for r in range(self.size):
            placement = placements[r] if r < len(placements) else None
            own = [program_id] if last_rank == r or placement is not None else []
            for program in own + neighbours[r]:
                last = contexts.get(program)
                if last is None:
                    continue
                reusable = contexts.reusable(program, salt, prompt)
                if placement is not None and placement.written_at > last.at:
                    reusable = min(reusable, placement.programs.get(program, (0, 0))[0])
                elif program == program_id and last_rank != r:
                    reusable = 0  # its context was computed elsewhere, and no sweep says more
                hits[r] = max(hits[r], reusable)
        return hits

    def release(self, program_id: str) -> None:
        """The program's KV was released: its next call is placed again."""
        self._rank_of.pop(program_id, None)

    def drain(self, rank: int) -> None:
        """Place nothing new on ``rank``; programs mapped there are placed again at their next
        call (calls already there finish there)."""
        if not 0 <= rank < self.size:
            raise ValueError(f"no data-parallel rank {rank} (ranks 0..{self.size - 1})")
        self.drained.add(rank)

    def undrain(self, rank: int) -> None:
        self.drained.discard(rank)

    def programs_per_rank(self) -> list[int]:
        counts = [0] * self.size
        for rank in self._rank_of.values():
            counts[rank] += 1
        return counts

    # -- which rank ran each node (for the API) ---------------------------------------------
    def note(self, program_id: str, node_id: str, rank: int) -> None:
        """The program's node ran on ``rank`` (its latest attempt)."""
        nodes = self._nodes.setdefault(program_id, {})
        nodes[node_id] = rank
        self._ran_on[program_id] = rank
        self._nodes.move_to_end(program_id)
        while len(self._nodes) > _NODES_KEPT:
            gone, _ = self._nodes.popitem(last=False)
            self._ran_on.pop(gone, None)

    def node_ranks(self, program_id: str) -> dict[str, int]:
        """Node id -> the rank its latest attempt ran on (empty when none is known)."""
        return dict(self._nodes.get(program_id, {}))

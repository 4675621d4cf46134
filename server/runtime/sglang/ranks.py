"""Which SGLang data-parallel rank runs a program's calls.

With ``dp_size > 1`` every rank is a scheduler with its own radix cache, so a program's later
calls reuse its KV only on the rank that computed it. A program's first call is placed by the
simulator's placement rule (``kvtiers.router.AffinityRouter``, scoring by ``route_cost``: cached
tokens against prefill and decode load; ``sim.routing.ReplicaRouter`` asks the same); every
later call is sent with that rank in ``routed_dp_rank``. The mapping is dropped when the program
ends (``Runtime.program_ended``, the driver's ``ProgramEnded``), when its KV is released (a
cancel, or a tool wait decided for recompute), when the rank no longer holds any of its context
(the plugin's placement sweep of that rank says so: checked at the program's next call, and for
every mapped program whenever a new one is placed; the simulator checks on a tie, which is when
it changes a choice), or when the rank is drained; the next call is then placed by the score
again. Ties go to the rank with the fewest programs mapped to it: a mapped program is load to
come.

Inputs are what the adapter knows at once, without asking the engine: its own calls in flight
(prefill load: prompts not yet answered; decode load: context of calls streaming), each
program's last context (``contexts``) and each rank's placement sweep (``placement.<rank>``). A
prompt's cached tokens on a rank are the longest prefix it shares with the last context of its
own program or of a program whose latest call ran there recently, ended ones too (same cache
salt: SGLang never shares a prefix across salts). Pure Python; no SGLang import.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentconsole.kvtiers.router import AffinityRouter, RouteWeights, WorkerState
from agentconsole.kvtiers.tiers import ALL_TIERS, Tier
from agentconsole.server.runtime.prefixcredit import likely_ranks
from agentconsole.server.runtime.sglang.contexts import ProgramContexts, as_ids
from agentconsole.server.runtime.sglang.status import Placement

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
    """See the module docstring. ``size`` ranks, numbered from 0. The placement rule is
    ``kvtiers.router.AffinityRouter``, the object the simulator's ``ReplicaRouter`` places
    replicas with; this class supplies the live view of it (loads, hits, resident contexts)."""

    def __init__(self, size: int, weights: RouteWeights | None = None) -> None:
        if size < 1:
            raise ValueError("RankRouter: at least one rank")
        self.size = size
        self.weights = weights or RouteWeights()
        self.rule = AffinityRouter(size, self.weights)
        self._nodes: OrderedDict[str, dict[str, int]] = OrderedDict()
        self._ran_on: dict[str, int] = {}  # program -> rank of its latest call (as _nodes)

    @property
    def drained(self) -> set[int]:
        return self.rule.drained

    def rank_of(self, program_id: str) -> int | None:
        """The rank the program's calls go to now (None: not placed, or released)."""
        return self.rule.rank_of(program_id)

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

        def holds(program: str, rank: int) -> bool:
            return self._keeps(program, rank, contexts, placements)

        def workers(candidates: Sequence[int]) -> list[WorkerState]:
            # mappings whose rank lost the context go now, not only on a tie, so that
            # ``rank_of`` (the API's view) does not show a rank that holds nothing of it
            self.rule.forget_lost(holds)
            return self._workers(candidates, program_id, salt, prompt, calls, contexts, placements)

        return self.rule.route(program_id, prompt_tokens, holds, workers)

    def likely_ranks(
        self,
        program_id: str,
        salt: str,
        prompt: Sequence[int],
        prompt_tokens: int,
        calls: Iterable[InFlight],
        contexts: ProgramContexts,
        placements: Sequence[Placement | None],
    ) -> list[int]:
        """The ranks :meth:`route` would choose among for the program's next call if it were
        placed now, changing nothing (a probe asks before the call is placed): its rank while
        it keeps it, else the open ranks of lowest ``route_cost``, all of them on a tie (the
        tie-break counts mapped programs, which may change before the call is placed). The
        rule is ``AffinityRouter.route``'s, asked without its side effects, through
        ``prefixcredit.likely_ranks``, which the simulator's ``ReplicaRouter`` asks too."""
        rank = self.rule.rank_of(program_id)
        kept = (
            rank is not None
            and rank not in self.drained
            and self._keeps(program_id, rank, contexts, placements)
        )

        def workers(candidates: Sequence[int]) -> list[WorkerState]:
            return self._workers(candidates, program_id, salt, prompt, calls, contexts, placements)

        pinned = rank if kept else None
        return likely_ranks(self.rule.open_ranks(), prompt_tokens, self.weights, workers, pinned)

    def ran_on(self, program_id: str) -> int | None:
        """The rank the program's latest call ran on (None: none known, or forgotten)."""
        return self._ran_on.get(program_id)

    def _workers(
        self,
        candidates: Sequence[int],
        program_id: str,
        salt: str,
        prompt: Sequence[int],
        calls: Iterable[InFlight],
        contexts: ProgramContexts,
        placements: Sequence[Placement | None],
    ) -> list[WorkerState]:
        """The candidate ranks as the placement rule scores them for the program's prompt:
        its expected cached tokens there, and the rank's load of calls in flight."""
        load = _loads(self.size, calls)
        last_rank = self._ran_on.get(program_id)
        hits = self._hits(program_id, salt, as_ids(prompt), contexts, placements, last_rank)
        return [
            WorkerState(
                f"rank{r}",
                [hits[r] if t is Tier.HBM else 0 for t in ALL_TIERS],
                load[r].prefill_tokens,
                load[r].decode_tokens,
            )
            for r in candidates
        ]

    def _keeps(
        self,
        program_id: str,
        rank: int,
        contexts: ProgramContexts,
        placements: Sequence[Placement | None],
    ) -> bool:
        """Whether the program stays on ``rank``: (once a sweep of that rank ran after the
        program's last call) the rank still holds some of its context."""
        last = contexts.get(program_id)
        placement = placements[rank] if rank < len(placements) else None
        if last is None or placement is None or placement.written_at <= last.at:
            return True
        return placement.programs.get(program_id, (0, 0))[0] > 0

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
        neighbours = self._neighbours(program_id, contexts, placements)
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

    def _neighbours(
        self,
        program_id: str,
        contexts: ProgramContexts,
        placements: Sequence[Placement | None],
    ) -> list[list[str]]:
        """Per rank, the other programs whose latest call ran there, most recent first, that
        the rank still holds (``_keeps``), at most ``_NEIGHBOURS`` each. Ended programs count:
        their contexts (a shared system prompt above all) stay cached until evicted, though
        their placement was forgotten when they ended."""
        neighbours: list[list[str]] = [[] for _ in range(self.size)]
        wanted = self.size * _NEIGHBOURS
        for program in reversed(self._nodes):
            r = self._ran_on.get(program)
            if program == program_id or r is None or not 0 <= r < self.size:
                continue
            if len(neighbours[r]) >= _NEIGHBOURS or contexts.get(program) is None:
                continue  # a program with no remembered context tells nothing of the rank
            if not self._keeps(program, r, contexts, placements):
                continue
            neighbours[r].append(program)
            wanted -= 1
            if not wanted:
                break
        return neighbours

    def release(self, program_id: str) -> None:
        """The program's KV was released, or the program ended: its next call (if any) is
        placed again."""
        self.rule.release(program_id)

    def drain(self, rank: int) -> None:
        """Place nothing new on ``rank``; programs mapped there are placed again at their next
        call (calls already there finish there)."""
        self.rule.drain(rank)

    def undrain(self, rank: int) -> None:
        self.rule.undrain(rank)

    def programs_per_rank(self) -> list[int]:
        return self.rule.programs_per_rank()

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


def _loads(size: int, calls: Iterable[InFlight]) -> list[InFlight]:
    """Per rank, the prefill and decode tokens of the adapter's calls in flight there."""
    load = [InFlight(r) for r in range(size)]
    for call in calls:
        if 0 <= call.rank < size:
            was = load[call.rank]
            load[call.rank] = InFlight(
                call.rank,
                was.prefill_tokens + call.prefill_tokens,
                was.decode_tokens + call.decode_tokens,
            )
    return load

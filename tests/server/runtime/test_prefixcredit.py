"""The one rule ``bench --replicas N`` and ``serve --dp N`` credit a new program's cached
prefix by (``server/runtime/prefixcredit.py``): the least any replica the placement rule could
choose holds. Unit tests of the rule, then both carriers asked about the same situation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentconsole.kvtiers.node import Block
from agentconsole.kvtiers.results import Match
from agentconsole.kvtiers.router import RouteWeights, WorkersOf, WorkerState
from agentconsole.kvtiers.tiers import ALL_TIERS, TierModel
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.runtime import GenerationRequest, Prompt
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.prefixcredit import credited_prefix, likely_ranks
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.contexts import ProgramContexts
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.kvview import KVView
from agentconsole.server.runtime.sglang.rank_status import RankFiles
from agentconsole.server.runtime.sglang.ranks import RankRouter
from agentconsole.server.runtime.sglang.stream import SGLangStream
from agentconsole.server.runtime.sglang.telemetry import Telemetry
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.routing import ReplicaRouter

WEIGHTS = RouteWeights()
PROMPT = 400


def _idle(hits: Sequence[int], prefill: Sequence[int] = ()) -> list[WorkerState]:
    """Workers holding ``hits[r]`` tokens of the prompt in HBM, ``prefill[r]`` tokens queued."""
    loads = list(prefill) or [0] * len(hits)
    return [
        WorkerState(f"r{r}", [h, *[0] * (len(ALL_TIERS) - 1)], loads[r]) for r, h in enumerate(hits)
    ]


def _scored(states: list[WorkerState], asked: list[Sequence[int]] | None = None) -> WorkersOf:
    """The rule's view of ``states`` by rank; the ranks asked for are noted in ``asked``."""

    def workers(ranks: Sequence[int]) -> list[WorkerState]:
        if asked is not None:
            asked.append(list(ranks))
        return [states[r] for r in ranks]

    return workers


def test_a_pinned_program_may_go_only_to_its_rank_and_no_rank_is_scored() -> None:
    asked: list[Sequence[int]] = []
    workers = _scored(_idle([0, 300, 0]), asked)
    assert likely_ranks([0, 1, 2], PROMPT, WEIGHTS, workers, pinned=2) == [2]
    assert asked == []


def test_a_rule_without_a_score_may_place_it_on_any_candidate() -> None:
    assert likely_ranks([0, 2, 3], PROMPT, WEIGHTS, None) == [0, 2, 3]


def test_a_scoring_rule_picks_the_lowest_cost_and_every_rank_of_a_tie() -> None:
    # the rank holding 300 tokens of the prompt is cheapest while idle
    assert likely_ranks([0, 1], PROMPT, WEIGHTS, _scored(_idle([0, 300]))) == [1]
    # 301 tokens waiting there outweigh the prefix; exactly 300 tie
    assert likely_ranks([0, 1], PROMPT, WEIGHTS, _scored(_idle([0, 300], [0, 301]))) == [0]
    assert likely_ranks([0, 1], PROMPT, WEIGHTS, _scored(_idle([0, 300], [0, 300]))) == [0, 1]
    # only the candidates are scored (a drained rank is none), by their own numbers
    asked: list[Sequence[int]] = []
    states = _idle([500, 0, 200])
    assert likely_ranks([1, 2], PROMPT, WEIGHTS, _scored(states, asked)) == [2]
    assert asked == [[1, 2]]


def test_the_credit_is_the_least_any_likely_rank_holds() -> None:
    held = {0: 0, 1: 300, 2: 250}
    asked: list[int] = []

    def held_on(rank: int) -> int:
        asked.append(rank)
        return held[rank]

    assert credited_prefix([1], held_on) == 300
    assert asked == [1]  # only the ranks given are asked
    assert credited_prefix([1, 2], held_on) == 250
    assert credited_prefix([0, 1, 2], held_on) == 0
    assert credited_prefix([], held_on) == 0  # nowhere to run: nothing is sure


# -- both carriers, the same situation -------------------------------------------------------
# Program A's context (its system prompt, 400 tokens) is cached on rank 1 alone; new program B's
# first prompt shares SHARED tokens of it. Rank 1 has ``load`` prompt tokens waiting.
TENANT = "t"
SALT = wire.cache_salt(TENANT, prompt_chars=1, public_prefix_chars=0)
SYSTEM = list(range(1000, 1400))
SHARED = 300
B_PROMPT = [*SYSTEM[:SHARED], *range(5000, 5100)]
LOADS = [0, SHARED - 1, SHARED, SHARED + 1, 5 * SHARED]


class _Served(KVView):
    """``serve --dp 2``'s probe with its real router, context memory and rank files (none
    written yet: no placement sweep ran), without an engine."""

    def __init__(self, state_dir: Path, pinned: bool) -> None:
        self.settings = EngineSettings(model_path=Path("m"), dp=2)
        contexts = ProgramContexts()
        self.telemetry = Telemetry(EventLog(), lambda: None, contexts)
        self.router = RankRouter(2) if pinned else None
        self.rank_files = RankFiles(state_dir, 2)
        self.engine = None
        self._calls = {}
        contexts.remember("A", SALT, SYSTEM, [7, 8])
        if self.router is not None:
            self.router.note("A", "n1", 1)  # A ran on rank 1

    def credit(self, load: int) -> int:
        ticket = CallTicket("X/n/1", "X", "n", TENANT, 0.0, prompt_tokens=0)
        call = SGLangStream(GenerationRequest(ticket, "x", 4, prompt_ids=tuple(range(load))))
        call.rank = 1
        self._calls = {call.rid: call} if load else {}
        prompt = Prompt("", len(B_PROMPT), tuple(B_PROMPT))
        return self.probe("B", prompt, TENANT).hit_tokens


@dataclass
class _Index:
    held: int

    def peek(self, tenant: str, blocks: list[Block]) -> Match:
        by_tier = [self.held, *[0] * (len(ALL_TIERS) - 1)]
        return Match([], by_tier, sum(b.tokens for b in blocks))


@dataclass
class _Replica:
    """A simulated replica as ``ReplicaRouter`` reads it."""

    name: str
    index: _Index
    prefill_load: float = 0.0
    decode_load: int = 0
    tiers: TierModel = field(
        default_factory=lambda: TierModel.build(kv_bytes_per_token=1.0, hbm_tokens=10_000)
    )


def _benched(routing: str, load: int) -> int:
    replicas = [_Replica("0", _Index(0)), _Replica("1", _Index(SHARED), prefill_load=load)]
    router = ReplicaRouter(replicas, preset("H200-141GB", "llama-3.1-8b", 1), routing)
    blocks = [Block("shared", SHARED), Block("B/own", len(B_PROMPT) - SHARED)]
    return router.held_where_placed("B", TENANT, blocks)


@pytest.mark.parametrize("load", LOADS)
def test_bench_and_serve_credit_a_new_program_alike_under_affinity(
    tmp_path: Path, load: int
) -> None:
    served = _Served(tmp_path, pinned=True).credit(load)
    assert _benched("affinity", load) == served
    assert served == (SHARED if load < SHARED else 0)  # a tie credits the least: nothing


@pytest.mark.parametrize("load", LOADS)
def test_bench_round_robin_credits_as_serve_with_unpinned_calls(tmp_path: Path, load: int) -> None:
    served = _Served(tmp_path, pinned=False).credit(load)
    assert _benched("round-robin", load) == served == 0

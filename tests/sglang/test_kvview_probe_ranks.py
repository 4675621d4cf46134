"""``KVView.probe`` of a new program with data-parallel ranks, without an engine: each rank has
its own radix cache, so a new program is credited only with the prefix the rank its call
would be routed to holds. With the affinity router that is the rank holding the prefix unless
its load outweighs the prefix; then the call goes elsewhere and nothing is credited. Unpinned
(SGLang's controller spreads calls round robin) only what every rank holds counts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.runtime import GenerationRequest, Prompt, token_segments
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.contexts import ProgramContexts
from agentconsole.server.runtime.sglang.dataparallel import routed_calls
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.kvview import KVView
from agentconsole.server.runtime.sglang.rank_status import RankFiles
from agentconsole.server.runtime.sglang.ranks import RankRouter
from agentconsole.server.runtime.sglang.status import Placement
from agentconsole.server.runtime.sglang.stream import SGLangStream
from agentconsole.server.runtime.sglang.telemetry import Telemetry

TENANT = "t"
SALT = wire.cache_salt(TENANT, prompt_chars=1, public_prefix_chars=0)
SYSTEM = list(range(1000, 1400))  # the 400 tokens A's context starts with
SHARED = 300  # of them, B's prompt starts with
B_PROMPT = [*SYSTEM[:SHARED], *range(5000, 5100)]
NO_SWEEP: list[Placement | None] = [None, None]


class _Sweeps(RankFiles):
    """Each rank's latest placement sweep, as given (no files)."""

    def __init__(self, placements: Sequence[Placement | None]) -> None:
        self.given = list(placements)

    def placements(self) -> list[Placement | None]:
        return self.given


class _View(KVView):
    """A two-rank engine's probe inputs: the adapter's context memory, the router (None:
    calls unpinned), each rank's sweep, and calls already sent to a rank."""

    def __init__(
        self,
        contexts: ProgramContexts,
        router: RankRouter | None,
        placements: Sequence[Placement | None],
    ) -> None:
        self.settings = EngineSettings(model_path=Path("m"), dp=2)
        self.telemetry = Telemetry(EventLog(), lambda: None, contexts)
        self.router = router
        self.rank_files = _Sweeps(placements)
        self.engine = None
        self._calls = {}

    def load(self, rank: int, prefill_tokens: int) -> None:
        """A call of another program sent to ``rank``, still prefilling its prompt."""
        ticket = CallTicket(f"X{rank}/n/1", f"X{rank}", "n", TENANT, 0.0, prompt_tokens=0)
        request = GenerationRequest(ticket, "x", 4, prompt_ids=tuple(range(prefill_tokens)))
        call = SGLangStream(request)
        call.rank = rank
        self._calls[call.rid] = call

    def credit(self, program: str = "B") -> int:
        """What the probe credits a program's first call with (``B_PROMPT``)."""
        prompt = Prompt("", len(B_PROMPT), tuple(B_PROMPT))
        return self.probe(program, prompt, TENANT).hit_tokens

    def routed(self, program: str = "B") -> int:
        """The rank the program's call is then sent to (``SGLangRuntime._place``'s routing)."""
        assert self.router is not None
        calls = routed_calls(self._calls.values())
        contexts, placements = self.telemetry.contexts, self.rank_files.placements()
        return self.router.route(
            program, SALT, B_PROMPT, len(B_PROMPT), calls, contexts, placements
        )


def _a_ran_on_rank_1(router: RankRouter | None = None) -> ProgramContexts:
    contexts = ProgramContexts()
    contexts.remember("A", SALT, SYSTEM, [7, 8])
    if router is not None:
        router.note("A", "n1", 1)
    return contexts


def test_the_rank_holding_the_prefix_is_the_one_the_new_program_goes_to() -> None:
    """Affinity: the prefix makes its rank the cheapest, so the credit is that rank's, and the
    call is then routed there; asking changes no placement."""
    router = RankRouter(2)
    view = _View(_a_ran_on_rank_1(router), router, NO_SWEEP)  # no sweep yet: A's rank holds it
    assert view.credit() == SHARED
    assert router.rank_of("B") is None  # the probe placed nothing
    assert view.routed() == 1
    # a sweep of each rank since A's context: the same, by the sweeps
    later = time.time() + 10
    router = RankRouter(2)
    sweeps = [Placement(later, {}), Placement(later, {"A": (402, 2)})]
    assert _View(_a_ran_on_rank_1(router), router, sweeps).credit() == SHARED


def test_a_new_program_sent_past_a_busy_prefix_rank_is_credited_with_nothing() -> None:
    """The prefix's rank is busier than the prefix is worth: the call goes to the other rank,
    whose cache holds none of it (the merged view of every rank credited it in full)."""
    router = RankRouter(2)
    view = _View(_a_ran_on_rank_1(router), router, NO_SWEEP)
    view.load(1, SHARED + 1)
    assert view.credit() == 0
    assert router.rank_of("B") is None
    assert view.routed() == 0
    # the same once both ranks swept: rank 0's sweep does not list A
    later = time.time() + 10
    router = RankRouter(2)
    swept = _View(
        _a_ran_on_rank_1(router),
        router,
        [Placement(later, {}), Placement(later, {"A": (402, 2)})],
    )
    swept.load(1, SHARED + 1)
    assert swept.credit() == 0


def test_a_tie_between_ranks_credits_the_least_either_holds() -> None:
    """At equal cost the tie-break (mapped programs) decides when the call is placed: the
    probe counts only what both ranks hold. One token less of load and the prefix wins."""
    router = RankRouter(2)
    tied = _View(_a_ran_on_rank_1(router), router, NO_SWEEP)
    tied.load(1, SHARED)
    assert tied.credit() == 0
    router = RankRouter(2)
    pulled = _View(_a_ran_on_rank_1(router), router, NO_SWEEP)
    pulled.load(1, SHARED - 1)
    assert pulled.credit() == SHARED
    assert pulled.routed() == 1


def test_a_program_already_placed_reads_its_own_rank() -> None:
    """A program mapped to a rank (its first call sent, no context yet) goes on there, however
    busy, so that rank's cache alone counts."""
    router = RankRouter(2)
    view = _View(_a_ran_on_rank_1(router), router, NO_SWEEP)
    view.load(0, 10_000)  # rank 0 is far busier, but B is placed there
    router.drain(1)
    assert view.routed() == 0
    router.undrain(1)
    assert view.credit() == 0  # stays on rank 0, which holds none of A's prefix


def test_unpinned_calls_credit_only_what_every_rank_holds() -> None:
    """Without routing SGLang's controller may send the call to any rank."""
    later = time.time() + 10
    contexts = _a_ran_on_rank_1()
    only_one = [Placement(later, {}), Placement(later, {"A": (402, 2)})]
    assert _View(contexts, None, only_one).credit() == 0
    assert _View(contexts, None, NO_SWEEP).credit() == 0  # where A ran is not known
    contexts.remember("C", SALT, [*SYSTEM, 9], [1])  # ran on rank 0
    both = [
        Placement(later, {"C": (350, 0)}),
        Placement(later, {"A": (402, 2), "C": (0, 0)}),
    ]
    assert _View(contexts, None, both).credit() == SHARED


def test_a_prefix_is_named_per_rank_where_the_call_goes_to_one() -> None:
    """The door keeps room for a shared prefix once per copy: each rank's radix cache holds
    its own, so a probe routed to one rank names its segments under that rank (two ranks'
    copies of one prefix count twice); unpinned, the rank is unknown and the names are the
    tenant's alone."""
    prompt = Prompt("", len(B_PROMPT), tuple(B_PROMPT))
    router = RankRouter(2)
    on_rank_1 = _View(_a_ran_on_rank_1(router), router, NO_SWEEP).probe("B", prompt, TENANT)
    assert on_rank_1.held_segments == token_segments(f"{SALT}@rank1", B_PROMPT, SHARED)
    assert on_rank_1.held_segments != token_segments(f"{SALT}@rank0", B_PROMPT, SHARED)
    later = time.time() + 10
    contexts = _a_ran_on_rank_1()
    contexts.remember("C", SALT, [*SYSTEM, 9], [1])
    both = [Placement(later, {"C": (350, 0)}), Placement(later, {"A": (402, 2)})]
    unpinned = _View(contexts, None, both).probe("B", prompt, TENANT)
    assert unpinned.held_segments == token_segments(SALT, B_PROMPT, SHARED)

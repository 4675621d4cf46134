"""``KVView.probe`` without an engine: a new program is credited with the prefix its prompt shares
with the remembered, still resident context of another program of its tenant (what the program
door subtracts), and a known program's probe is its own context's, as before."""

from __future__ import annotations

import time
from pathlib import Path

from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.runtime import PrefixProbe, Prompt, token_segments
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.contexts import (
    HEAD_TOKENS,
    SHARED_CANDIDATES,
    LastContext,
    ProgramContexts,
)
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.kvview import KVView
from agentconsole.server.runtime.sglang.status import Placement
from agentconsole.server.runtime.sglang.telemetry import Telemetry

TENANT = "t"
SALT = wire.cache_salt(TENANT, prompt_chars=1, public_prefix_chars=0)
SYSTEM = list(range(1000, 1400))  # 400 tokens A's prompt starts with
SHARED = 300  # of them, B's prompt starts with


class _View(KVView):
    """The probe's inputs without an engine: the adapter's context memory and a placement
    sweep (None: none written yet)."""

    def __init__(self, contexts: ProgramContexts, placement: Placement | None = None) -> None:
        self.settings = EngineSettings(model_path=Path("m"))  # one rank
        self.telemetry = Telemetry(EventLog(), lambda: None, contexts)
        self.router = None
        self.engine = None
        self.placement = placement

    def read_placement(self, program_id: str | None = None) -> Placement | None:
        return self.placement


def _remembered_a() -> ProgramContexts:
    contexts = ProgramContexts()
    contexts.remember("A", SALT, SYSTEM, [7, 8])
    return contexts


def _probe(view: KVView, program: str, ids: list[int], tenant: str = TENANT) -> PrefixProbe:
    return view.probe(program, Prompt("", len(ids), tuple(ids)), tenant)


B_PROMPT = [*SYSTEM[:SHARED], *range(5000, 5100)]


def test_a_new_program_is_credited_with_its_tenants_resident_prefix() -> None:
    view = _View(_remembered_a())  # no sweep since A's context: taken as all resident
    segments = token_segments(SALT, B_PROMPT, SHARED)  # the door's reserve counts them once
    assert _probe(view, "B", B_PROMPT) == PrefixProbe(
        len(B_PROMPT), cached_tokens=SHARED, held_segments=segments
    )
    assert _probe(view, "B", B_PROMPT).hit_tokens == SHARED
    # another tenant's cache shares nothing with A's (SGLang salts every radix key)
    assert _probe(view, "B", B_PROMPT, tenant="u").hit_tokens == 0


def test_a_known_programs_probe_is_its_own_context_only() -> None:
    contexts = _remembered_a()
    view = _View(contexts, Placement(time.time() + 10, {"A": (402, 2), "B": (50, 50)}))
    assert _probe(view, "B", B_PROMPT).hit_tokens == SHARED  # new: A's prefix counts
    contexts.remember("B", SALT, list(range(9000, 9100)), [1])
    assert _probe(view, "B", B_PROMPT) == PrefixProbe(len(B_PROMPT))  # known: no scan
    own = [*SYSTEM, 7, 8, 9]
    assert _probe(view, "A", own) == PrefixProbe(len(own), cached_tokens=401, lost_tokens=0)


def test_only_what_the_latest_sweep_holds_of_the_other_context_counts() -> None:
    contexts = _remembered_a()
    later = time.time() + 10
    evicted = _View(contexts, Placement(later, {}))
    assert _probe(evicted, "B", B_PROMPT) == PrefixProbe(len(B_PROMPT))  # nothing lost: new
    partly = _View(contexts, Placement(later, {"A": (120, 20)}))
    assert _probe(partly, "B", B_PROMPT).hit_tokens == 120
    stale = _View(contexts, Placement(0.0, {}))  # swept before A's context was remembered
    assert _probe(stale, "B", B_PROMPT).hit_tokens == SHARED


def test_the_shared_lookup_takes_the_longest_recent_prefix_and_forgets() -> None:
    contexts = ProgramContexts()
    contexts.remember("long", SALT, SYSTEM, [])
    contexts.remember("short", SALT, [*SYSTEM[:100], 1], [])  # newer, shares less
    contexts.remember("other", SALT, [*range(HEAD_TOKENS), *SYSTEM], [])  # another head

    def all_resident(program: str, last: LastContext) -> int | None:
        return None

    assert contexts.shared(SALT, B_PROMPT, all_resident) == SHARED
    assert contexts.shared(SALT, B_PROMPT[:HEAD_TOKENS], all_resident) == 0  # too short
    contexts.forget("long")
    assert contexts.shared(SALT, B_PROMPT, all_resident) == 100
    # only the most recent contexts under a head are compared
    for i in range(SHARED_CANDIDATES):
        contexts.remember(f"filler{i}", SALT, [*SYSTEM[:HEAD_TOKENS], -1], [])
    assert contexts.shared(SALT, B_PROMPT, all_resident) == HEAD_TOKENS
    # contexts dropped over the bounds leave the index too
    bounded = ProgramContexts(max_programs=1)
    bounded.remember("long", SALT, SYSTEM, [])
    bounded.remember("next", SALT, [5] * 100, [])
    assert bounded.shared(SALT, B_PROMPT, all_resident) == 0

"""The door's room for the prefixes programs share: named in segments by the runtimes'
probes, kept once per segment per tenant (``scheduler.doorroom.shared_reserve``)."""

from __future__ import annotations

from agentconsole.scheduler.actions import StartPrograms
from agentconsole.scheduler.controller import CallUsage, ProgramController
from agentconsole.scheduler.driver import ProgramDriver
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.program import Node, NodeKind
from agentconsole.scheduler.runtime import (
    SEGMENT_TOKENS,
    HeldSegment,
    PrefixProbe,
    chained_segments,
    token_segments,
)
from tests.scheduler.driver_fakes import KeepAdvisor, LinearCost


def test_a_prefix_held_in_part_shares_all_but_its_last_segment_with_the_whole() -> None:
    ids = list(range(3 * SEGMENT_TOKENS + 500))
    whole = token_segments("salt-a", ids, len(ids))
    assert [tokens for _, tokens in whole] == [SEGMENT_TOKENS] * 3 + [500]
    part = token_segments("salt-a", ids, 2 * SEGMENT_TOKENS + 10)
    assert part[:2] == whole[:2]
    assert part[2] not in whole
    # another repository after the same platform prompt: the platform's segments only
    other = token_segments("salt-a", [*ids[:SEGMENT_TOKENS], *range(-1, -2000, -1)], 2_000)
    assert other[0] == whole[0]
    assert other[1] not in whole
    assert not set(token_segments("salt-b", ids, len(ids))) & set(whole)  # another tenant
    assert token_segments("salt-a", ids, 0) == ()


def test_an_index_path_is_merged_into_segments_keyed_by_all_that_precedes_them() -> None:
    runs = [("platform", 15_000), ("repo-0", 60_000), ("c1", 400), ("c2", 700), ("c3", 16)]
    segments = chained_segments(0, runs)
    assert [tokens for _, tokens in segments] == [15_000, 60_000, 1_100, 16]
    # a block's key names the block: after another prefix, or on another engine, it is
    # another segment (a summary re-read at a new place; each engine its own copy)
    elsewhere = chained_segments(0, [("platform", 15_000), ("repo-1", 60_000), ("c1", 400)])
    assert elsewhere[0] == segments[0]
    assert elsewhere[1] != segments[1]
    assert chained_segments(0, [("c1", 400)]) != chained_segments(0, runs[:3])[2:]
    assert not set(chained_segments(1, runs)) & set(segments)
    assert chained_segments(0, []) == ()


def test_the_reserve_keeps_each_repository_of_a_tenant_and_its_platform_prompt_once() -> None:
    """coding-agent's tenants work on two repositories each, after one platform prompt: a
    reserve of the largest prefix per tenant kept room for one repository, and the door
    started too many programs (8M tokens recomputed at 3x; docs/BENCHMARKS.md 2t)."""
    controller = ProgramController(EventLog(), LinearCost())
    driver = ProgramDriver(controller, KeepAdvisor(), LinearCost(), memory_share=0.5)
    platform: HeldSegment = ("platform", 2_000)

    def start(
        pid: str, tenant: str, segments: tuple[HeldSegment, ...], now: float, shared: int = 0
    ) -> None:
        shared = shared or sum(tokens for _, tokens in segments)
        held = PrefixProbe(shared + 500, cached_tokens=shared, held_segments=segments)
        controller.open_program(pid, tenant, now, labels={"workload": "w"})
        assert driver.arrive(pid, 500, 100_000, now, held=held)
        controller.add_node(pid, Node("n0", pid, NodeKind.LLM), now)
        driver.queue_call(pid, "n0", held, now)

    def budget(now: float) -> int:
        controller.open_program(f"probe{now}", "tz", now, labels={"workload": "w"})
        driver.arrive(f"probe{now}", 100, 100_000, now)
        return driver.door.budget_tokens

    start("a1", "ta", (platform, ("ta/repo-0", 3_000)), 0.0)
    start("a2", "ta", (platform, ("ta/repo-1", 3_000)), 1.0)
    start("a3", "ta", (platform, ("ta/repo-1", 3_000)), 2.0)  # the same repository: nothing
    assert budget(3.0) == 50_000 - 2_000 - 3_000 - 3_000
    start("b1", "tb", (platform, ("tb/repo-0", 3_000)), 4.0)  # another tenant: its own copy
    assert budget(5.0) == 50_000 - 8_000 - 5_000
    start("c1", "tc", (), 6.0, shared=2_500)  # a runtime that names nothing: the prefix whole
    assert budget(7.0) == 50_000 - 8_000 - 5_000 - 2_500
    controller.open_program("big", "tz", 7.5, labels={"workload": "w"})
    assert not driver.arrive("big", 33_000, 100_000, 7.5)  # 34,500 less what the others hold
    # repo-0's programs ended: its room frees, for the program in line too
    actions = driver.finish("a1", 8.0)
    assert driver.door.budget_tokens == 50_000 - 5_000 - 5_000 - 2_500
    assert StartPrograms(("big",)) in actions


def test_a_prefix_found_at_a_first_call_takes_its_room_at_once_and_again_when_learned_larger() -> (
    None
):
    """Between arrivals the line can be let in (a program steps out on a tool): the budget
    must already keep the room of a prefix the last first call found, and of one its call
    learned larger when it ran (SGLang reports what it served from cache)."""
    controller = ProgramController(EventLog(), LinearCost())
    driver = ProgramDriver(controller, KeepAdvisor(), LinearCost(), memory_share=0.5)
    controller.open_program("a", "t", 0.0, labels={"workload": "w"})
    assert driver.arrive("a", 1_000, 100_000, 0.0)  # nothing held yet: the whole budget
    assert driver.door.budget_tokens == 50_000
    probe = PrefixProbe(9_000, cached_tokens=4_000, held_segments=(("repo", 4_000),))
    controller.add_node("a", Node("n0", "a", NodeKind.LLM), 0.0)
    ticket = driver.queue_call("a", "n0", probe, 0.0)
    assert driver.door.budget_tokens == 50_000 - 4_000  # before any other arrival
    controller.start_node("a", "n0", 0.0)
    usage = CallUsage(9_000, cached_tokens=6_000, output_tokens=10, service_s=1.0)
    driver.call_ended("a", "n0", ticket.call_id, 1.0, usage)
    assert driver.door.budget_tokens == 50_000 - 6_000  # learned larger: the larger counts

    # an operator's budget is taken as given: a first call's prefix leaves it alone
    controller = ProgramController(EventLog(), LinearCost())
    driver = ProgramDriver(controller, KeepAdvisor(), LinearCost(), budget_tokens=30_000)
    controller.open_program("b", "t", 0.0, labels={"workload": "w"})
    assert driver.arrive("b", 1_000, 100_000, 0.0)
    controller.add_node("b", Node("n0", "b", NodeKind.LLM), 0.0)
    driver.queue_call("b", "n0", probe, 0.0)
    assert (driver.door.budget_tokens, driver.reserved_tokens) == (30_000, 0)


def test_a_door_off_keeps_no_room_and_a_budget_the_prefixes_fill_is_still_sized() -> None:
    held = PrefixProbe(9_000, cached_tokens=8_000, held_segments=(("repo", 8_000),))
    for program_aware in (False, True):
        controller = ProgramController(EventLog(), LinearCost())
        driver = ProgramDriver(controller, KeepAdvisor(), LinearCost(), program_aware=program_aware)
        assert not driver.budget.sized  # no memory reported yet
        for pid in ("a", "b"):
            controller.open_program(pid, "t", 0.0, labels={"workload": "w"})
            assert driver.arrive(pid, 1_000, 100_000, 0.0, held=held)
            controller.add_node(pid, Node("n0", pid, NodeKind.LLM), 0.0)
            driver.queue_call(pid, "n0", held, 0.0)
        # a request-level policy has no door: no room kept, none shown
        assert driver.reserved_tokens == (8_000 if program_aware else 0)
        controller.open_program("c", "t", 1.0, labels={"workload": "w"})
        driver.arrive("c", 100, 8_000, 1.0)  # the engines report less memory than the room
        if program_aware:  # a budget the shared prefix fills is 0, and still a budget
            assert driver.door.budget_tokens == 0
            assert driver.budget.sized


def test_each_models_engine_names_its_own_copy_of_a_prefix() -> None:
    probe = PrefixProbe(3_000, cached_tokens=2_000, held_segments=(("p", 2_000),))
    assert probe.on_engine("small").held_segments != probe.on_engine("large").held_segments
    assert probe.on_engine("small").hit_tokens == 2_000
    unnamed = PrefixProbe(3_000, cached_tokens=2_000)
    assert unnamed.on_engine("small") is unnamed

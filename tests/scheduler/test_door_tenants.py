"""The door's line shared between tenants: a tenant below its share of what the door counts
goes ahead; a program that fits passes another tenant's waiting program only while its tenant
holds no more than that one's; one tenant's kept places do not hold another's out.

The security review's case: one tenant's large programs fill the door and more of them wait;
another tenant's tiny programs waited behind them until they got 503 (first come first served,
nobody passing for fitting, and the large ones' retries keeping their places ahead)."""

from __future__ import annotations

from agentconsole.scheduler.door import ProgramDoor
from agentconsole.scheduler.doorline import RunKey
from agentconsole.scheduler.fairness import FairnessConfig, below_share
from agentconsole.scheduler.growth import PeakEstimator, RunTimes

ALICE: RunKey = ("alice", "agent")
BOB: RunKey = ("bob", "agent")
#: serve's door in the review's repro: 0.9 of the engines' HBM + DRAM, in private tokens
REPRO_BUDGET = 2_240_000
BIG = 110_000  # a 110K-token prompt


def _review_repro() -> tuple[ProgramDoor, list[str]]:
    """Alice's 24 programs of 110K tokens: 20 start and fill the door (2.20 M of 2.24 M), 4
    wait. Nothing is learned yet (the line is first come first served). Returns the door and
    the waiting ones."""
    door = ProgramDoor(REPRO_BUDGET, expected_run_s=RunTimes().expected)
    started = [door.try_start(f"alice-{k}", BIG, 0.1 * k, kind=ALICE) for k in range(24)]
    assert started == [True] * 20 + [False] * 4
    assert door.used_tokens == 20 * BIG
    return door, [f"alice-{k}" for k in range(20, 24)]


def test_another_tenants_small_programs_start_while_one_tenant_fills_the_door() -> None:
    door, _ = _review_repro()
    # 15 s later bob's three 8-token programs: they fit in what is free, and bob holds nothing
    assert [door.try_start(f"bob-{k}", 8, 15.0, kind=BOB) for k in range(3)] == [True] * 3
    assert (door.used_tokens, door.parked) == (20 * BIG + 24, 4)
    # alice's waiting programs still come next, before any later program of hers
    assert door.finish("alice-0", 60.0) == ["alice-20"]


def test_one_tenants_retries_keep_their_places_without_holding_another_tenant_out() -> None:
    """Alice's waiting programs get 503 at 120 s and retry: their places (and waits) are kept,
    ahead of anything bob sent since, and still bob's programs go first, the small ones at once
    and a big one (no room for it yet) as soon as room frees."""
    door, waiting = _review_repro()
    for program_id in waiting:
        assert door.leave(program_id, 120.0) == []
    assert door.try_start("bob-small", 8, 121.0, kind=BOB)  # fits
    assert not door.try_start("bob-big", BIG, 125.0, kind=BOB)  # 40K free: it waits
    for program_id in waiting:  # the retries, back at their kept places ahead of bob's
        assert not door.try_start(program_id, BIG, 130.0, kind=ALICE)
        assert door.holds_place(program_id, 130.0)
    # an alice program ends: bob holds less than his share, his big one goes first
    assert door.finish("alice-0", 140.0) == ["bob-big"]
    # the next one that ends lets alice's oldest kept place in
    assert door.finish("alice-1", 150.0) == ["alice-20"]


def test_the_tenant_below_its_share_goes_first_when_room_frees() -> None:
    door = ProgramDoor(1_100, expected_run_s=RunTimes().expected)
    assert door.try_start("alice-1", 500, 0.0, kind=ALICE)
    assert door.try_start("alice-2", 500, 0.0, kind=ALICE)
    assert not door.try_start("alice-3", 600, 1.0, kind=ALICE)
    assert not door.try_start("bob-1", 600, 2.0, kind=BOB)  # came second, holds nothing
    # first come first served would start alice-3 (it fits now, 500 + 600)
    assert door.finish("alice-1", 3.0) == ["bob-1"]
    assert door.finish("bob-1", 4.0) == ["alice-3"]


def test_a_program_that_fits_passes_another_tenants_only_while_its_tenant_holds_less() -> None:
    """The bound that keeps a big waiting program from starving: another tenant's programs pass
    it (into room it cannot use) only while that tenant, with them started, holds no more than
    the big program's tenant does; its own tenant's never pass it."""
    door = ProgramDoor(1_100, expected_run_s=RunTimes().expected)
    assert door.try_start("alice-1", 500, 0.0, kind=ALICE)
    assert door.try_start("bob-1", 400, 1.0, kind=BOB)
    # both hold at least 0.75 of an even share of 900: neither goes ahead for its share
    assert not door.try_start("alice-big", 300, 2.0, kind=ALICE)  # 200 free
    assert not door.try_start("alice-small", 50, 3.0, kind=ALICE)  # behind her own big one
    assert door.try_start("bob-2", 50, 4.0, kind=BOB)  # bob holds 450 with it, alice 500
    assert door.try_start("bob-3", 50, 5.0, kind=BOB)  # 500: no more than alice's 500
    assert not door.try_start("bob-4", 50, 6.0, kind=BOB)  # 550 would be more: it waits
    # alice's only started program ends: her big one goes first, then the rest in order
    assert door.finish("alice-1", 7.0) == ["alice-big", "alice-small", "bob-4"]


def test_weights_scale_the_shares_and_the_passing() -> None:
    """The fairness guard's tenant weights count at the door too: bob weighing twice alice has
    twice her share, and his programs pass her waiting one while he holds up to twice hers."""
    fairness = FairnessConfig(tenant_weights={"bob": 2.0})
    both = frozenset({"alice", "bob"})
    assert below_share({"alice": 600, "bob": 400}, both, fairness) == {"bob"}
    assert below_share({"alice": 600, "bob": 400}, both, FairnessConfig()) == set()
    door = ProgramDoor(1_400, expected_run_s=RunTimes().expected, fairness=fairness)
    assert door.try_start("alice-1", 500, 0.0, kind=ALICE)
    assert door.try_start("bob-1", 700, 1.0, kind=BOB)
    assert not door.try_start("alice-big", 300, 2.0, kind=ALICE)  # 200 free
    assert door.try_start("bob-2", 100, 3.0, kind=BOB)  # 800 with it: up to 2 x 500
    assert door.try_start("bob-3", 100, 4.0, kind=BOB)  # 900
    assert not door.try_start("bob-4", 50, 5.0, kind=BOB)  # 950, but nothing free now
    assert door.finish("alice-1", 6.0) == ["alice-big", "bob-4"]


def test_with_the_fairness_guard_off_the_line_ignores_tenants() -> None:
    """The guard's own switch turns the door's sharing off too: first come first served, and
    nobody passes for fitting (what the door did before it knew tenants)."""
    door = ProgramDoor(
        REPRO_BUDGET, expected_run_s=RunTimes().expected, fairness=FairnessConfig(enabled=False)
    )
    assert [door.try_start(f"alice-{k}", BIG, 0.0, kind=ALICE) for k in range(21)][-1] is False
    assert not door.try_start("bob-0", 8, 15.0, kind=BOB)
    assert door.finish("alice-0", 60.0) == ["alice-20", "bob-0"]


def test_a_tenant_naming_each_program_a_new_kind_is_sized_by_its_largest_kind() -> None:
    """A kind the tenant never finished is taken for its largest kind learned: sized by its
    first prompt, a tenant that gave every program a fresh label started 8 of 8 where the
    same programs under one label started 1."""
    peaks = PeakEstimator()
    peaks.observe(("liar", "run-0"), 750.0)
    peaks.observe(("liar", "chat"), 300.0)
    assert peaks.predict(("liar", "run-1"), 100) == 750
    assert peaks.predict(("liar", "run-0"), 900) == 900  # it holds more: what it holds
    assert peaks.predict(("honest", "coding"), 100) == 100  # never another tenant's

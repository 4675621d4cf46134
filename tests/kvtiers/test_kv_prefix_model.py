"""Property test: the prefix index equals a naive model on random operation sequences.

The model is a dict from namespaced key paths (one entry per resident prefix) to
``[tokens, tier, locks]``. Lookups and inserts are recomputed naively by the model; evictions
and moves are chosen by the index and *applied* to the model from the reported moves, after
checking that no locked entry was touched. After every step the whole tree, the per-tier usage
and every invariant (``check_integrity``) must agree.
"""

from __future__ import annotations

from collections.abc import Hashable

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agentconsole.kvtiers import ALL_TIERS, Block, Node, PrefixIndex, Tier, TierModel
from agentconsole.kvtiers.results import KVMove

SIZES = {"s": 6, "a": 3, "b": 5, "c": 2, "d": 4}
TENANTS = ("A", "B")
NsPath = tuple[tuple[str | None, Hashable], ...]

blocks_st = st.lists(
    st.builds(
        lambda k, pub: Block(k, SIZES[k], pub), st.sampled_from(sorted(SIZES)), st.booleans()
    ),
    min_size=1,
    max_size=5,
)
tiers_st = st.sampled_from(ALL_TIERS)


def ns_paths(tenant: str, blocks: list[Block]) -> list[NsPath]:
    """The model's namespacing: public while this and all earlier blocks are public."""
    out: list[NsPath] = []
    prefix: NsPath = ()
    public = True
    for block in blocks:
        public = public and block.public
        prefix = (*prefix, (None if public else tenant, block.key))
        out.append(prefix)
    return out


def node_path(node: Node) -> NsPath:
    keys: list[tuple[str | None, Hashable]] = []
    n: Node | None = node
    while n is not None and n.parent is not None:
        keys.append((n.tenant, n.key))
        n = n.parent
    return tuple(reversed(keys))


class IndexVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ix: PrefixIndex
        self.model: dict[NsPath, list[int]] = {}
        self.paths: list[list[Node]] = []
        self.locked: list[list[Node]] = []
        self.now = 0.0

    @initialize(
        hbm=st.integers(0, 24),
        dram=st.integers(0, 16),
        disk=st.integers(0, 12),
        strategy=st.sampled_from(["lru", "retention"]),
        demote=st.booleans(),
    )
    def setup(self, hbm: int, dram: int, disk: int, strategy: str, demote: bool) -> None:
        model = TierModel.build(
            kv_bytes_per_token=1.0, hbm_tokens=hbm, dram_tokens=dram, disk_tokens=disk
        )
        self.ix = PrefixIndex(model, strategy, demote=demote)

    # ------------------------------------------------------------------ helpers
    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def model_free(self, tier: Tier) -> int:
        used = sum(e[0] for e in self.model.values() if e[1] == tier)
        return self.ix.capacity(tier) - used - self.ix.reserved(tier)

    def apply(self, moves: list[KVMove]) -> None:
        for move in moves:
            key = node_path(move.node)
            entry = self.model[key]
            assert entry[1] == move.src
            assert entry[0] == move.tokens
            if move.dst is None:
                assert entry[2] == 0, "a locked node was dropped"
                del self.model[key]
            else:
                if move.dst > move.src:
                    assert entry[2] == 0, "a locked node was demoted"
                entry[1] = move.dst

    # ------------------------------------------------------------------ rules
    @rule(tenant=st.sampled_from(TENANTS), blocks=blocks_st, tier=tiers_st)
    def insert(self, tenant: str, blocks: list[Block], tier: Tier) -> None:
        free = self.model_free(tier)
        new, complete, depth = 0, True, 0
        for key, block in zip(ns_paths(tenant, blocks), blocks, strict=True):
            entry = self.model.get(key)
            if entry is None or entry[1] > tier:
                if block.tokens > free:
                    complete = False
                    break
                free -= block.tokens
                new += block.tokens
                if entry is None:
                    self.model[key] = [block.tokens, tier, 0]
                else:
                    entry[1] = tier
            depth += 1
        result = self.ix.insert(tenant, blocks, self.tick(), tier, owner=tenant)
        assert (result.new_tokens, result.complete, len(result.path)) == (new, complete, depth)
        self.paths.append(result.path)

    @rule(tenant=st.sampled_from(TENANTS), blocks=blocks_st)
    def match(self, tenant: str, blocks: list[Block]) -> None:
        want = [0, 0, 0]
        for key in ns_paths(tenant, blocks):
            entry = self.model.get(key)
            if entry is None:
                break
            want[entry[1]] += entry[0]
        found = self.ix.match(tenant, blocks, self.tick())
        assert found.tokens_by_tier == want
        assert found.requested_tokens == sum(b.tokens for b in blocks)
        self.paths.append(found.path)

    @rule(tier=tiers_st, tokens=st.integers(0, 30))
    def make_room(self, tier: Tier, tokens: int) -> None:
        result = self.ix.make_room(tier, tokens, self.tick())
        assert all(m.evicted for m in result.moves)
        self.apply(result.moves)
        assert result.ok == (self.ix.free(tier) >= tokens)
        if not result.ok:  # only locked KV (or reservations) may remain on the tier
            assert self.ix.evictable(tier) == 0
            assert all(e[2] for e in self.model.values() if e[1] == tier)

    @rule(tier=tiers_st, tokens=st.integers(0, 30), gated=st.booleans())
    def make_room_all_or_nothing(self, tier: Tier, tokens: int, gated: bool) -> None:
        now = self.tick()
        gate = now if gated else None
        result = self.ix.make_room(tier, tokens, now, max_priority=gate, all_or_nothing=True)
        self.apply(result.moves)
        assert result.ok == (self.ix.free(tier) >= tokens)
        if not result.ok:
            assert not result.moves  # nothing evicted for a room it could not make
            # and evicting as far as the gate lets would not have made it either
            again = self.ix.make_room(tier, tokens, now, max_priority=gate)
            self.apply(again.moves)
            assert not again.ok
        elif gate is not None:  # the tier's own victims are all under the gate
            priority = self.ix.strategy.priority
            assert all(priority(m.node) <= gate for m in result.moves if m.src == tier)

    @precondition(lambda self: self.paths)
    @rule(data=st.data(), tier=tiers_st, room=st.integers(0, 20), gated=st.booleans())
    def promote(self, data: st.DataObject, tier: Tier, room: int, gated: bool) -> None:
        path = data.draw(st.sampled_from(self.paths))
        nodes = data.draw(st.lists(st.sampled_from(path), max_size=3)) if path else []
        now = self.tick()
        gate = now if gated else None
        result = self.ix.promote(nodes, tier, now, room=room, max_priority=gate)
        self.apply(result.moves)
        if result.ok:
            assert all(n.tier <= tier for n in nodes if not n.dead)
            assert self.ix.free(tier) >= room
        else:
            assert not result.moves

    @precondition(lambda self: self.paths)
    @rule(data=st.data(), tier=tiers_st)
    def move(self, data: st.DataObject, tier: Tier) -> None:
        path = data.draw(st.sampled_from(self.paths))
        nodes = data.draw(st.lists(st.sampled_from(path), max_size=3)) if path else []
        before = {id(n): n.tier for n in nodes if not n.dead}
        result = self.ix.move(nodes, tier, self.tick())
        self.apply(result.moves)
        one_way = all(t <= tier for t in before.values()) or all(t >= tier for t in before.values())
        if result.ok and one_way:
            assert all(n.tier == tier for n in nodes if not n.dead)

    @precondition(lambda self: self.paths)
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(self.paths))
        nodes = data.draw(st.lists(st.sampled_from(path), max_size=2)) if path else []
        result = self.ix.drop(nodes, self.tick())
        assert not any(m.evicted for m in result.moves)
        self.apply(result.moves)
        assert all(n.dead or n.lock_count for n in nodes)

    @precondition(lambda self: self.paths)
    @rule(data=st.data())
    def lock(self, data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(self.paths))
        if any(n.dead for n in path):
            return
        self.ix.lock(path)
        for node in path:
            self.model[node_path(node)][2] += 1
        self.locked.append(path)

    @precondition(lambda self: self.locked)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        path = self.locked.pop(data.draw(st.integers(0, len(self.locked) - 1)))
        self.ix.unlock(path)
        for node in path:
            self.model[node_path(node)][2] -= 1

    @precondition(lambda self: self.paths)
    @rule(data=st.data(), ttl=st.floats(0, 20))
    def retain(self, data: st.DataObject, ttl: float) -> None:
        path = data.draw(st.sampled_from(self.paths))
        self.ix.retain(path, self.now + ttl, self.now)

    @rule(tier=tiers_st, tokens=st.integers(0, 10), release=st.booleans())
    def reserve(self, tier: Tier, tokens: int, release: bool) -> None:
        if release:
            tokens = min(tokens, self.ix.reserved(tier))
            self.ix.release(tier, tokens)
        else:
            fits = tokens <= self.model_free(tier)
            assert self.ix.reserve(tier, tokens) == fits

    # ------------------------------------------------------------------ invariants
    @invariant()
    def agrees_with_model(self) -> None:
        self.ix.check_integrity()
        tree = {node_path(n): [n.tokens, int(n.tier), n.lock_count] for n in self.ix.nodes()}
        assert tree == self.model
        for tier in ALL_TIERS:
            assert self.model_free(tier) == self.ix.free(tier) >= 0
            assert self.ix.used(tier) <= self.ix.capacity(tier)


IndexVsModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestIndexVsModel = IndexVsModel.TestCase

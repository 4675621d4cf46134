"""Prefix-index micro-benchmark: µs per match / insert / make_room / full LLM-call cycle.

Run: ``.venv/bin/python benchmarks/bench_kvtiers.py [--programs N] [--rounds R]``.

* ``segments`` (the simulator's shape): one public 80K-token system prefix shared by every
  program, then one private 2K-token block per round (a tool result): ``programs x rounds``
  blocks (12,000 by default, about 10,000 resident); HBM holds about a third of them and DRAM
  half, so eviction (demotion to DRAM, dropping from DRAM) runs all the time. The call cycle
  picks programs at random, so most calls reload part of their context from DRAM.
* ``chunks`` (the live server's shape): 16-token blocks keyed by a hash chain; a match walks a
  1,000-block path (16K tokens).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from agentconsole.kvtiers import Block, PrefixIndex, Tier, TierModel

HBM = Tier.HBM


def _timeit(label: str, n: int, fn: Callable[[int], object]) -> None:
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    elapsed = time.perf_counter() - start
    print(f"{label:<44} {elapsed / n * 1e6:9.2f} µs/op  ({n} ops)")


def bench_segments(programs: int, rounds: int) -> None:
    sys_prefix = Block("system", 80_000, public=True)
    contexts = [
        [sys_prefix, *(Block((p, r), 2_000) for r in range(rounds))] for p in range(programs)
    ]
    total = 80_000 + programs * rounds * 2_000
    model = TierModel.build(
        kv_bytes_per_token=131072.0, hbm_tokens=total // 3, dram_tokens=total // 2
    )
    ix = PrefixIndex(model, "retention")
    now = 0.0
    for r in range(1, rounds + 1):  # programs advance round by round, as in a run
        for p, ctx in enumerate(contexts):
            now += 1e-3
            found = ix.match(f"t{p % 4}", ctx[: r + 1], now)
            ix.lock(found.path)  # so that making room cannot evict the call's own prefix
            ix.make_room(HBM, found.requested_tokens - found.tokens_on(HBM), now)
            ix.insert(f"t{p % 4}", ctx[: r + 1], now, owner=f"p{p}")
            ix.unlock(found.path)
    print(f"segments: {len(ix)} nodes, HBM {ix.node_count(HBM)}, DRAM {ix.node_count(Tier.DRAM)}")
    rng = random.Random(1)
    picks = [rng.randrange(programs) for _ in range(20_000)]

    def match(i: int) -> None:
        p = picks[i]
        ix.match(f"t{p % 4}", contexts[p], now + i * 1e-6)

    _timeit(f"match ({rounds + 1}-block path)", len(picks), match)
    _timeit(
        f"peek ({rounds + 1}-block path)",
        len(picks),
        lambda i: ix.peek(f"t{picks[i] % 4}", contexts[picks[i]]),
    )

    extra = [Block(("extra", i), 500) for i in range(len(picks))]

    def make_room(i: int) -> None:
        ix.make_room(HBM, ix.free(HBM) + 500, now + 1 + i * 1e-6)

    _timeit("make_room (evicts ~1 node, cascades)", 5_000, make_room)

    def insert(i: int) -> None:
        p = picks[i]
        ix.insert(f"t{p % 4}", [*contexts[p], extra[i]], now + 2 + i * 1e-6, owner=f"p{p}")

    _timeit("insert (path + 1 new block, no eviction)", 5_000, insert)

    def call(i: int) -> None:
        p = picks[i]
        tenant, t = f"t{p % 4}", now + 3 + i * 1e-6
        found = ix.match(tenant, contexts[p], t)
        ix.lock(found.path)
        ix.move(found.path, HBM, t)  # reload DRAM hits
        ix.make_room(HBM, 2_500, t)
        ix.reserve(HBM, 2_500)
        ix.release(HBM, 2_500)
        ix.insert(tenant, [*contexts[p], extra[i]], t, owner=f"p{p}")
        ix.unlock(found.path)

    before = sum(ix.counters.promoted_tokens) + sum(ix.counters.evicted_tokens)
    _timeit("call cycle (match+lock+move+room+insert)", 10_000, call)
    moved = sum(ix.counters.promoted_tokens) + sum(ix.counters.evicted_tokens) - before
    print(f"  (each call reloaded or evicted {moved / 10_000 / 2_000:.1f} blocks on average)")
    ix.check_integrity()


def bench_chunks(paths: int, length: int) -> None:
    model = TierModel.build(kv_bytes_per_token=131072.0, hbm_tokens=paths * length * 16)
    ix = PrefixIndex(model)
    seqs = []
    for p in range(paths):
        shared = [Block(("sys", i), 16, public=True) for i in range(length // 2)]
        seqs.append(shared + [Block((p, i), 16) for i in range(length // 2)])
    for p, s in enumerate(seqs):
        ix.insert(f"t{p}", s, float(p))
    print(f"chunks: {len(ix)} nodes")
    _timeit(
        f"match ({length}-block path of 16-token chunks)",
        2_000,
        lambda i: ix.match(f"t{i % paths}", seqs[i % paths], 1e3 + i),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--programs", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    bench_segments(args.programs, args.rounds)
    bench_chunks(10, 1_000)


if __name__ == "__main__":
    main()

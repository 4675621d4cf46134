"""The durable tool-call state machine: one execution per key, replay, fencing, recovery."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agentconsole.server.store import (
    Claim,
    ClaimStatus,
    CommitOutcome,
    IntentState,
    Store,
    make_tool_call_id,
    params_hash,
)
from agentconsole.server.store.jsonutil import storable


def _claim(
    store: Store,
    key: str,
    phash: str = "h",
    *,
    side_effect: bool = True,
    idempotent: bool = False,
    lease_s: float = 300.0,
) -> Claim:
    return store.intents.claim(
        key,
        phash,
        "prog",
        "node",
        "tool",
        side_effect=side_effect,
        idempotent=idempotent,
        lease_s=lease_s,
    ).result(timeout=10)


def test_100_keys_x_10_concurrent_claims_give_exactly_one_new_per_key(store: Store) -> None:
    keys = [f"key-{k}" for k in range(100)]
    start = threading.Barrier(10)

    def claimant(worker: int) -> list[tuple[str, ClaimStatus]]:
        start.wait()
        order = keys[worker * 10 :] + keys[: worker * 10]  # every worker in another order
        futures = [
            (key, store.intents.claim(key, "h", "p", "n", "t", side_effect=True, idempotent=False))
            for key in order
        ]
        return [(key, f.result(timeout=30).status) for key, f in futures]

    with ThreadPoolExecutor(10) as pool:
        results = [r for rs in pool.map(claimant, range(10)) for r in rs]
    news = Counter(key for key, status in results if status is ClaimStatus.NEW)
    assert news == dict.fromkeys(keys, 1)
    assert Counter(status for _, status in results) == {
        ClaimStatus.NEW: 100,
        ClaimStatus.IN_PROGRESS: 900,
    }
    with store.cursor() as cur:
        rows = cur.execute("SELECT count(*), count(DISTINCT tool_call_id) FROM tool_intents")
        assert rows.fetchone() == (100, 100)


def test_different_params_under_the_same_key_is_a_mismatch(store: Store) -> None:
    assert _claim(store, "k", "h1").status is ClaimStatus.NEW
    assert _claim(store, "k", "h2").status is ClaimStatus.MISMATCH
    intent = store.repo.get_intent("k")
    assert intent is not None
    assert (intent.params_hash, intent.epoch) == ("h1", 1)
    store.intents.commit("k", "{}", 1).result(timeout=10)
    assert _claim(store, "k", "h2").status is ClaimStatus.MISMATCH  # also after commit


def test_committed_result_is_replayed_and_attach_waits_for_it(store: Store) -> None:
    claim = _claim(store, "k")
    waiter = store.intents.attach("k")
    time.sleep(0.05)
    assert not waiter.done()
    assert store.intents.commit("k", '{"v": 1}', claim.epoch).result(timeout=10) is (
        CommitOutcome.ACCEPTED
    )
    attached = waiter.result(timeout=10)
    assert attached is not None
    assert (attached.status, attached.result_json) == (ClaimStatus.COMMITTED, '{"v": 1}')
    replay = _claim(store, "k")
    assert (replay.status, replay.result_json, replay.execute) == (
        ClaimStatus.COMMITTED,
        '{"v": 1}',
        False,
    )
    assert store.intents.commit("k", '{"v": 2}', claim.epoch).result(timeout=10) is (
        CommitOutcome.WRONG_STATE
    )
    assert store.intents.attach("missing").result(timeout=10) is None


def test_a_result_cut_mid_character_commits_with_a_replacement_character(store: Store) -> None:
    """A tool's answer cut inside a surrogate pair (a cut emoji) is JSON to Python's ``json``
    but not to DuckDB's JSON column: it commits with U+FFFD in its place (before, the commit
    failed and the intent stayed in progress though the tool had run)."""
    claim = _claim(store, "cut")
    cut = json.dumps({"result": json.loads('{"text": "ok \\ud83d"}')})  # as executors do
    committed = store.intents.commit("cut", cut, claim.epoch).result(timeout=10)
    assert committed is CommitOutcome.ACCEPTED
    replay = _claim(store, "cut")
    assert replay.status is ClaimStatus.COMMITTED
    assert json.loads(replay.result_json or "") == {"result": {"text": "ok \ufffd"}}
    whole = json.dumps({"text": "ok \U0001f600"})  # a whole pair, escaped: kept as it is
    assert json.loads(storable(whole)) == {"text": "ok \U0001f600"}


def test_epoch_fencing_rejects_a_stale_executor(store: Store) -> None:
    first = _claim(store, "k", idempotent=True, lease_s=0.0)
    time.sleep(0.01)
    takeover = _claim(store, "k", idempotent=True)  # lease ran out: a new executor
    assert (first.epoch, takeover.status, takeover.epoch) == (1, ClaimStatus.NEW, 2)
    assert store.intents.commit("k", '"old"', first.epoch).result(timeout=10) is (
        CommitOutcome.STALE_EPOCH
    )
    assert store.intents.commit("k", '"new"', takeover.epoch).result(timeout=10) is (
        CommitOutcome.ACCEPTED
    )
    assert _claim(store, "k", idempotent=True).result_json == '"new"'
    assert store.intents.commit("nope", "1", 1).result(timeout=10) is CommitOutcome.UNKNOWN_CALL


def test_expired_lease_of_a_non_idempotent_side_effect_is_never_taken_over(store: Store) -> None:
    _claim(store, "k", lease_s=0.0)
    time.sleep(0.01)
    assert _claim(store, "k").status is ClaimStatus.IN_PROGRESS


def test_failures_retryable_and_terminal(store: Store) -> None:
    first = _claim(store, "r")
    assert store.intents.fail("r", "timeout", first.epoch, retryable=True).result(10) is (
        CommitOutcome.ACCEPTED
    )
    again = _claim(store, "r")
    assert (again.status, again.epoch) == (ClaimStatus.NEW, 2)
    assert store.intents.fail("r", "old", first.epoch, retryable=False).result(10) is (
        CommitOutcome.STALE_EPOCH
    )
    store.intents.fail("r", "denied", again.epoch, retryable=False).result(10)
    final = _claim(store, "r")
    assert (final.status, final.error, final.retryable) == (ClaimStatus.FAILED, "denied", False)


def test_recover_flags_only_non_idempotent_side_effects(db_path: Path) -> None:
    with Store.open(db_path) as store:  # left in progress, as a crash would leave them
        _claim(store, "mail", side_effect=True, idempotent=False)
        _claim(store, "put", side_effect=True, idempotent=True)
        _claim(store, "read", side_effect=False, idempotent=False)
        done = _claim(store, "done")
        store.intents.commit("done", "1", done.epoch).result(10)
    with Store.open(db_path) as store:
        assert store.intents.recovery.needs_reconcile == ("mail",)
        assert store.intents.recovery.retryable == ("put", "read")
        assert _claim(store, "mail").status is ClaimStatus.NEEDS_RECONCILE
        assert _claim(store, "put", idempotent=True).status is ClaimStatus.NEW
        assert _claim(store, "read", side_effect=False).status is ClaimStatus.NEW
        assert _claim(store, "done").status is ClaimStatus.COMMITTED
        pending = store.repo.list_intents(state=IntentState.NEEDS_RECONCILE)
        assert [i.tool_call_id for i in pending] == ["mail"]
        # An operator settles it; the executor that was in doubt stays fenced off.
        assert store.intents.reconcile("mail", '{"sent": true}').result(10) is (
            CommitOutcome.ACCEPTED
        )
        assert store.intents.commit("mail", "1", 1).result(10) is CommitOutcome.STALE_EPOCH
        assert _claim(store, "mail").result_json == '{"sent": true}'
        assert store.intents.reconcile("mail").result(10) is CommitOutcome.WRONG_STATE


def test_keys_and_hashes_are_stable_and_unambiguous() -> None:
    assert make_tool_call_id("ab", "c", 1) != make_tool_call_id("a", "bc", 1)
    assert make_tool_call_id("p", "n", 1) == make_tool_call_id("p", "n", 1)
    assert make_tool_call_id("p", "n", 1) != make_tool_call_id("p", "n", 2)
    assert params_hash({"a": 1, "b": [1, 2]}) == params_hash({"b": [1, 2], "a": 1})
    assert params_hash({"a": 1}) != params_hash({"a": "1"})


class IntentMachine(RuleBasedStateMachine):
    """Random claims, commits and failures from stale and current executors on few keys.

    Invariants: a key is executed (``NEW``) only when no execution is outstanding, a
    committed result never changes, and only the current epoch's commit is accepted.
    """

    def __init__(self) -> None:
        super().__init__()
        self.store = IntentMachine.store
        IntentMachine.round += 1
        self.prefix = f"r{IntentMachine.round}-"
        self.epoch: dict[str, int] = {}
        self.outstanding: dict[str, bool] = {}
        self.results: dict[str, str] = {}
        self.terminal: set[str] = set()

    store: Store
    round = 0

    @rule(key=st.sampled_from("abc"))
    def claim(self, key: str) -> None:
        claim = _claim(self.store, self.prefix + key, side_effect=False)
        if claim.status is ClaimStatus.NEW:
            assert not self.outstanding.get(key)
            assert key not in self.results
            assert key not in self.terminal
            assert claim.epoch == self.epoch.get(key, 0) + 1
            self.epoch[key], self.outstanding[key] = claim.epoch, True
        elif claim.status is ClaimStatus.COMMITTED:
            assert claim.result_json == self.results[key]
        else:
            assert claim.status in (ClaimStatus.IN_PROGRESS, ClaimStatus.FAILED)

    @rule(key=st.sampled_from("abc"), stale=st.booleans(), value=st.integers(0, 9))
    def commit(self, key: str, stale: bool, value: int) -> None:
        epoch = self.epoch.get(key, 0) - (1 if stale else 0)
        outcome = self.store.intents.commit(self.prefix + key, str(value), epoch).result(10)
        if outcome is CommitOutcome.ACCEPTED:
            assert self.outstanding.get(key)
            assert not stale
            self.results[key], self.outstanding[key] = str(value), False

    @rule(key=st.sampled_from("abc"), retryable=st.booleans())
    def fail(self, key: str, retryable: bool) -> None:
        epoch = self.epoch.get(key, 0)
        out = self.store.intents.fail(self.prefix + key, "x", epoch, retryable=retryable)
        if out.result(10) is CommitOutcome.ACCEPTED:
            assert self.outstanding.get(key)
            self.outstanding[key] = False
            if not retryable:
                self.terminal.add(key)

    @invariant()
    def stored_results_match(self) -> None:
        for key, value in self.results.items():
            assert _claim(self.store, self.prefix + key, side_effect=False).result_json == value


def test_intent_state_machine(store: Store) -> None:
    IntentMachine.store = store
    run = settings(
        max_examples=15,
        stateful_step_count=12,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    IntentMachine.TestCase.settings = run
    IntentMachine.TestCase().runTest()


def test_claim_and_commit_in_one_batch(store: Store) -> None:
    gate, entered = threading.Event(), threading.Event()

    def hold(_: object) -> None:  # keeps the writer busy so the next three share a batch
        entered.set()
        gate.wait(10)

    store.writer.call(hold)
    assert entered.wait(10)
    claim = store.intents.claim("k", "h", "p", "n", "t", side_effect=True, idempotent=False)
    commit = store.intents.commit("k", '"done"', 1)
    replay = store.intents.claim("k", "h", "p", "n", "t", side_effect=True, idempotent=False)
    gate.set()
    assert claim.result(10).status is ClaimStatus.NEW
    assert commit.result(10) is CommitOutcome.ACCEPTED
    assert replay.result(10).result_json == '"done"'
    batches = store.writer.stats.batches
    assert batches == 2  # the gate's batch, then everything else together

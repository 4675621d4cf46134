"""kill -9 of a writer process: reopen succeeds and every acknowledged write is there."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.store import LATEST_VERSION, ClaimStatus, IntentState, Store
from agentconsole.server.store.crash import ENV_VAR, CrashPoints
from agentconsole.server.store.event_log import EVENTS
from tests.server.store.store_helpers import spawn, v1_store_with_events


def _run_to_death(db: Path, mode: str, crash_at: str, *args: str) -> list[list[str]]:
    """Run the child with a crash point; return its output lines, split. It must die by -9."""
    child = spawn(mode, db, *args, env={**os.environ, ENV_VAR: crash_at})
    out, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err
    return _complete_lines(out)


def _complete_lines(out: str) -> list[list[str]]:
    """Output lines the child finished writing (a kill can cut the last one short)."""
    return [line.split() for line in out.split("\n")[:-1]]


def _acked(lines: list[list[str]]) -> list[int]:
    return [int(parts[1]) for parts in lines if parts[0] == "ACK"]


def _assert_acked_events_present(db: Path, acked: list[int]) -> None:
    with Store.open(db) as store:
        assert store.info.wal_bytes > 0  # the data came back through WAL replay
        with store.cursor() as cur:
            seqs = [r[0] for r in cur.execute(f"SELECT seq FROM {EVENTS} ORDER BY seq").fetchall()]
        # Every acknowledged event survived, numbering has no gap and no duplicate, and the
        # writer continues right after the last committed number.
        assert set(acked) <= set(seqs)
        assert seqs == list(range(1, len(seqs) + 1))
        nxt = store.writer.append(Event(t=0.0, kind=EventKind.CALL_QUEUED)).result(timeout=10)
        assert nxt == len(seqs) + 1


@pytest.mark.parametrize("crash_at", ["mid_batch_commit:7", "mid_batch_commit:40"])
def test_crash_mid_batch_keeps_every_acknowledged_event(db_path: Path, crash_at: str) -> None:
    acked = _acked(_run_to_death(db_path, "events", crash_at, "100000"))
    assert acked, "the child should have acknowledged some events before dying"
    _assert_acked_events_present(db_path, acked)


def test_plain_sigkill_after_acks_keeps_every_acknowledged_event(db_path: Path) -> None:
    child = spawn("events", db_path, "1000000")
    assert child.stdout is not None
    acked: list[int] = []
    for line in child.stdout:
        if line.startswith("ACK"):
            acked.append(int(line.split()[1]))
            if len(acked) >= 1500:
                break
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert child.returncode == -signal.SIGKILL
    _assert_acked_events_present(db_path, acked)


def test_repeated_random_kills_accumulate_without_loss(db_path: Path) -> None:
    rng = random.Random(20261129)
    acked: list[int] = []
    for _ in range(6):
        child = spawn("events", db_path, "1000000")
        assert child.stdout is not None
        # from its first acknowledgement on (opening and migrating take longer on a loaded
        # machine than the random delay), then at a random moment, wherever the writer is
        first = child.stdout.readline()
        time.sleep(rng.uniform(0.3, 1.0))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=10)
        acked += _acked(_complete_lines(first + out))
    assert acked
    _assert_acked_events_present(db_path, acked)


def test_crash_during_shutdown_checkpoint_loses_nothing(db_path: Path) -> None:
    lines = _run_to_death(db_path, "events", "during_checkpoint:1", "500")
    acked = _acked(lines)
    assert len(acked) == 500
    assert ["CLOSED"] not in lines
    _assert_acked_events_present(db_path, acked)


def _reopen_intents(db: Path) -> tuple[Store, dict[str, IntentState]]:
    store = Store.open(db)
    states = {i.tool_call_id: i.state for i in store.repo.list_intents()}
    return store, states


def _claim(store: Store, key: str, idempotent: bool) -> ClaimStatus:
    claim = store.intents.claim(
        key, "h", "prog", key, "tool", side_effect=True, idempotent=idempotent
    ).result(timeout=10)
    return claim.status


def test_crash_before_intent_commit_leaves_no_intent(db_path: Path) -> None:
    lines = _run_to_death(db_path, "intents", "before_intent_commit:1")
    assert not any(parts[0] == "CLAIMED" for parts in lines)
    store, states = _reopen_intents(db_path)
    with store:
        assert states == {}
        assert _claim(store, "A", False) is ClaimStatus.NEW


def test_crash_after_intent_commit_flags_side_effect_for_reconcile(db_path: Path) -> None:
    _run_to_death(db_path, "intents", "after_intent_commit:2")  # A and B durable, not acked B
    store, states = _reopen_intents(db_path)
    with store:
        assert states == {"A": IntentState.NEEDS_RECONCILE, "B": IntentState.RETRYABLE}
        assert store.intents.recovery.needs_reconcile == ("A",)
        assert store.intents.recovery.retryable == ("B",)
        assert _claim(store, "A", False) is ClaimStatus.NEEDS_RECONCILE  # never re-run
        rearmed = store.intents.claim(
            "B", "h", "prog", "B", "tool", side_effect=True, idempotent=True
        ).result(timeout=10)
        assert (rearmed.status, rearmed.epoch) == (ClaimStatus.NEW, 2)


def test_crash_before_result_commit_keeps_intent_in_doubt(db_path: Path) -> None:
    lines = _run_to_death(db_path, "intents", "before_result_commit:1")
    assert ["CLAIMED", "A", "new", "1"] in lines
    store, states = _reopen_intents(db_path)
    with store:
        assert states == {"A": IntentState.NEEDS_RECONCILE, "B": IntentState.RETRYABLE}
        assert store.repo.get_intent("A") is not None


def test_crash_after_result_commit_before_ack_replays_the_result(db_path: Path) -> None:
    lines = _run_to_death(db_path, "intents", "after_result_commit_before_ack:1")
    assert not any(parts[0] == "COMMITTED" for parts in lines)  # never acknowledged ...
    store, states = _reopen_intents(db_path)
    with store:
        assert states["A"] is IntentState.COMMITTED  # ... but durable
        claim = store.intents.claim(
            "A", "h", "prog", "A", "tool", side_effect=True, idempotent=False
        ).result(timeout=10)
        assert claim.status is ClaimStatus.COMMITTED
        assert claim.result_json == '{"key": "A"}'


def test_crash_points_are_read_from_the_environment() -> None:
    points = CrashPoints.from_env({ENV_VAR: "mid_batch_commit:3, during_checkpoint"})
    assert points.armed
    assert not CrashPoints.from_env({}).armed
    with pytest.raises(ValueError, match=">= 1"):
        CrashPoints.from_env({ENV_VAR: "x:0"})
    script = (
        "from agentconsole.server.store.crash import CrashPoints\n"
        "p = CrashPoints({'x': 3})\n"
        "p.hit('x'); p.hit('y'); p.hit('x'); print('alive', flush=True)\n"
        "p.hit('x'); print('unreachable', flush=True)\n"
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL
    assert child.stdout.split() == ["alive"]


@pytest.mark.parametrize("events", [0, 3000], ids=["new-store", "v1-store"])
def test_kill_after_any_migration_commit_loses_nothing(tmp_path: Path, events: int) -> None:
    """The v2 move spans two files and so several transactions: a kill -9 after each one,
    then a clean start, ends at the latest schema with every event once and the numbering
    continuing."""
    for commit in range(1, 6):
        db = tmp_path / f"{events}-{commit}" / "store.duckdb"
        db.parent.mkdir()
        if events:
            v1_store_with_events(db, events)
        child = spawn("open", db, env={**os.environ, ENV_VAR: f"after_migration_commit:{commit}"})
        _, err = child.communicate(timeout=60)
        assert child.returncode in (-signal.SIGKILL, 0), err  # 0: fewer commits than that
        with Store.open(db) as store:
            assert store.migration.after == LATEST_VERSION
            with store.cursor() as cur:
                seqs = [
                    r[0] for r in cur.execute(f"SELECT seq FROM {EVENTS} ORDER BY seq").fetchall()
                ]
            assert seqs == list(range(1, events + 1)), commit
            nxt = store.writer.append(Event(t=0.0, kind=EventKind.CALL_QUEUED)).result(timeout=10)
            assert nxt == events + 1

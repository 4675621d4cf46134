"""A corrupt block (its checksum does not match): met while opening, a one-line refusal that
names the file and what to do; met by a read while serving, a :class:`StoreDamagedError`
(which the API answers without a traceback) while the rest of the store keeps serving. The
open does not read every block to look for one: stores can be large."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentconsole.server.store import Store, StoreDamagedError, StoreError, StoreOpenError
from agentconsole.server.store.prompt_blocks import SECRET_TABLE, PromptBlocksRecord
from tests.server.store.store_helpers import corrupt_a_block_of, digest, make_event, store_files


def _store_with_prompt_blocks(db: Path, rows: int = 3000) -> None:
    """A closed store whose ``prompt_blocks`` fills several blocks of its own."""
    generator = random.Random(7)
    with Store.open(db) as store:
        for i in range(rows):
            hashes = tuple(generator.getrandbits(63) for _ in range(40))
            store.writer.put(
                PromptBlocksRecord("p", f"n{i}", 0, f"c{i}", "t", float(i), 2560, 0, blocks=hashes)
            )
        store.writer.append(make_event(1)).result(timeout=10)


def test_a_corrupt_block_met_by_a_read_is_a_store_error_and_the_rest_still_serves(
    db_path: Path,
) -> None:
    _store_with_prompt_blocks(db_path)
    corrupt_a_block_of(db_path, "prompt_blocks")
    with Store.open(db_path) as store:  # no scan of every block at open
        with pytest.raises(StoreDamagedError) as caught, store.cursor() as cur:
            cur.execute("SELECT sum(len(blocks)) FROM prompt_blocks").fetchall()
        damage = caught.value
        assert isinstance(damage, StoreError)  # what the API answers without a traceback
        assert damage.path == db_path
        assert str(db_path) in str(damage)
        assert "Corrupt database file" in str(damage)
        assert "restore from a backup" in str(damage)
        assert store.repo.last_seq() == 1  # other tables still answer
        assert store.writer.append(make_event(2)).result(timeout=10) == 2
        assert store.writer.alive


def test_a_corrupt_block_met_while_opening_is_refused_in_one_line(db_path: Path) -> None:
    """The open reads the prompt-hashing secret: its block is corrupt."""
    _store_with_prompt_blocks(db_path, rows=10)
    corrupt_a_block_of(db_path, SECRET_TABLE)
    before = digest(*store_files(db_path))
    with pytest.raises(StoreOpenError) as caught:
        Store.open(db_path)
    message = str(caught.value)
    assert "\n" not in message
    assert f"cannot open store {db_path}: a block of the database or its event log is corrupt" in (
        message
    )
    assert "restore from a backup or the last Parquet export" in message
    assert digest(*store_files(db_path)) == before

"""Prompt structure in the store: salted block hashes per LLM call, bounded, redacted, textless."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from agentconsole.server.live.promptblocks import PromptBlockRecorder, token_blocks
from agentconsole.server.store import Store
from agentconsole.server.store.prompt_blocks import BLOCK_TOKENS, MAX_BLOCKS, PromptBlocksRecord
from tests.server.api.harness import LiveServer, make_config

SYSTEM = "You are a careful agent. " * 120  # ~3,000 characters: several 256-character blocks


def _rows(store: Store) -> list[PromptBlocksRecord]:
    store.writer.flush().result(10)
    names = ", ".join(name for name, _ in PromptBlocksRecord.SPEC.columns)
    with store.cursor() as cur:
        rows = cur.execute(f"SELECT {names} FROM prompt_blocks ORDER BY ts").fetchall()
    return [PromptBlocksRecord.from_row(row) for row in rows]


def _record(recorder: PromptBlockRecorder, tenant: str, text: str, call: str) -> None:
    recorder.record(
        program_id="p1", node_id=call, attempt=1, call_id=call, tenant=tenant, ts=1.0,
        prompt=(None, text), prompt_tokens=len(text) // 4, cached_tokens=0,
    )  # fmt: skip


def test_hashes_are_per_block_salted_per_tenant_and_survive_a_restart(db_path: Path) -> None:
    with Store.open(db_path) as store:
        recorder = PromptBlockRecorder(store.prompt_secret, store.writer.put)
        _record(recorder, "a", SYSTEM + "first question", "c1")
        _record(recorder, "a", SYSTEM + "a different question entirely", "c2")
        _record(recorder, "b", SYSTEM + "first question", "c3")
        rows = _rows(store)
        secret = store.prompt_secret
    a1, a2, b1 = rows
    shared = len(SYSTEM) // (BLOCK_TOKENS * 4)
    assert len(a1.blocks) == (len(SYSTEM) + 14) // (BLOCK_TOKENS * 4)
    assert a1.blocks[:shared] == a2.blocks[:shared]
    assert not set(a1.blocks) & set(b1.blocks)  # the same text, another tenant: nothing shared
    assert a1.block_tokens == BLOCK_TOKENS
    with Store.open(db_path) as store:
        assert store.prompt_secret == secret
        assert len(secret) == 32
        again = PromptBlockRecorder(store.prompt_secret, store.writer.put)
        _record(again, "a", SYSTEM + "first question", "c4")
        assert _rows(store)[-1].blocks == a1.blocks


def test_blocks_are_capped_and_token_ids_are_hashed_when_known(store: Store) -> None:
    recorder = PromptBlockRecorder(store.prompt_secret, store.writer.put)
    ids = list(range(BLOCK_TOKENS * (MAX_BLOCKS + 10)))
    row = recorder.record(
        program_id="p", node_id="n", attempt=1, call_id="big", tenant="a", ts=1.0,
        prompt=(ids, ""), prompt_tokens=len(ids), cached_tokens=64,
    )  # fmt: skip
    assert len(row.blocks) == MAX_BLOCKS
    assert len(list(token_blocks(ids[: BLOCK_TOKENS * 2 - 1], ""))) == 1  # partial: not hashed
    assert _rows(store)[0].blocks == row.blocks


def test_served_calls_are_recorded_without_text_and_redaction_none_keeps_no_hashes(
    tmp_path: Path,
) -> None:
    gateway = GatewayExtension(GatewayConfig(tenant_redaction={"tenant-b": "none"}))
    config = make_config(tmp_path / "p.duckdb")
    secret_word = "zanzibar-quokka-7731"
    with LiveServer(config, extensions=[gateway]) as server:
        server.wait_ready()
        for key in ("sk-a", "sk-b"):
            with server.client(key) as client:
                for turn in range(2):
                    body = {
                        "model": "sim",
                        "max_tokens": 8,
                        "messages": [
                            {"role": "system", "content": SYSTEM},
                            {"role": "user", "content": f"{secret_word} question {turn}"},
                        ],
                    }
                    answer = client.post(
                        "/v1/chat/completions", json=body, headers={"X-Program-Id": f"pb-{key}"}
                    )
                    assert answer.status_code == 200, answer.text
        store = server.live.store
        rows = server.run(asyncio.to_thread(_rows, store))
        with store.cursor() as cur:
            dumped = cur.execute("SELECT * FROM prompt_blocks").fetchall()
    by_tenant = {t: [r for r in rows if r.tenant == t] for t in ("tenant-a", "tenant-b")}
    first, second = by_tenant["tenant-a"]
    assert first.program_id == second.program_id == "pb-sk-a"
    assert first.prompt_tokens > 0
    assert len(first.blocks) >= len(SYSTEM) // 256
    assert first.blocks[: len(SYSTEM) // 256] == second.blocks[: len(SYSTEM) // 256]
    assert all(r.blocks == () and r.redacted == "none" for r in by_tenant["tenant-b"])
    assert len(by_tenant["tenant-b"]) == 2
    text = repr(dumped)
    assert secret_word not in text
    assert "careful agent" not in text

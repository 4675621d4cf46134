"""Mid-prompt insertions over HTTP (sim runtime): a program that puts tool results between its
fixed system prompt and its history tail shows the insertion and the prefix reuse it lost in
its detail, the overview, its tenant's row, Prometheus and the response header; a program
that appends shows none; the store holds no prompt text."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from agentconsole.server.api.openai_format import LOST_REUSE_HEADER
from agentconsole.server.live.insertions import MIN_PREFIX_TOKENS, MIN_REUSED_TOKENS
from agentconsole.server.store import Store
from tests.server.api.harness import LiveServer

SECRET = "quokka-marmalade"  # appears in every prompt; must appear in no stored row
SYSTEM = f"You are a careful coding agent ({SECRET}). " * 60  # ~2,500 characters
HISTORY = "".join(f"Step {i}: read the file, changed line {i}, ran the tests. " for i in range(40))
#: 601 characters: not a multiple of a token (4) nor of a cache block (256)
TOOL_RESULT = ("grep result: src/main.py:12 " * 30)[:601]


def _messages(*contents: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": text} for role, text in contents]


def _call(client: httpx.Client, program: str, messages: list[dict[str, str]]) -> httpx.Response:
    body: dict[str, Any] = {"model": "sim", "messages": messages, "max_tokens": 8}
    answer = client.post("/v1/chat/completions", json=body, headers={"X-Program-Id": program})
    assert answer.status_code == 200, answer.text
    return answer


@pytest.fixture(scope="module")
def answers(server: LiveServer) -> dict[str, httpx.Response]:
    """Two programs of tenant a (on the package's shared server), two calls each: one
    inserts, one appends."""
    first = _messages(("system", SYSTEM), ("user", HISTORY))
    with server.client("sk-a") as c:
        out = {
            "ins-1": _call(c, "ins-prog", first),
            "app-1": _call(c, "app-prog", first),
        }
        inserted = _messages(("system", SYSTEM), ("user", TOOL_RESULT), ("user", HISTORY))
        out["ins-2"] = _call(c, "ins-prog", inserted)
        appended = [*first, *_messages(("assistant", "ok"), ("user", TOOL_RESULT))]
        out["app-2"] = _call(c, "app-prog", appended)
    return out


def test_an_inserting_program_shows_the_insertion_and_its_lost_reuse(
    server: LiveServer, answers: dict[str, httpx.Response]
) -> None:
    with server.client("sk-a") as c:
        program = c.get("/v1/programs/ins-prog").json()
    figures = program["prompt_insertions"]
    assert figures["count"] == 1
    # the inserted message (its ChatML markup included) in tokens of four characters
    assert len(TOOL_RESULT) // 4 <= figures["inserted_tokens"] <= len(TOOL_RESULT) // 4 + 10
    # the history tail was prefilled again: its ~2,300 characters, bar the ChatML closing
    assert figures["lost_reuse_tokens"] >= len(HISTORY) // 4 - 16
    first, second = sorted(
        (n for n in program["nodes"] if n["kind"] == "llm"), key=lambda n: n["created_at"]
    )
    assert first["prompt_insertion"] is None
    where = second["prompt_insertion"]
    assert where["at_token"] >= len(SYSTEM) // 4 >= MIN_PREFIX_TOKENS
    assert where["lost_reuse_tokens"] == figures["lost_reuse_tokens"]
    assert figures["lost_reuse_tokens"] >= MIN_REUSED_TOKENS
    # appending instead would have saved these tokens: the agent is told (non-streamed)
    assert answers["ins-2"].headers[LOST_REUSE_HEADER] == str(figures["lost_reuse_tokens"])
    assert LOST_REUSE_HEADER not in answers["ins-1"].headers


def test_an_appending_program_shows_none(
    server: LiveServer, answers: dict[str, httpx.Response]
) -> None:
    with server.client("sk-a") as c:
        program = c.get("/v1/programs/app-prog").json()
    assert program["prompt_insertions"] == {
        "count": 0,
        "inserted_tokens": 0,
        "lost_reuse_tokens": 0,
    }
    assert all(n["prompt_insertion"] is None for n in program["nodes"])
    assert LOST_REUSE_HEADER not in answers["app-2"].headers


def test_totals_in_overview_tenants_and_prometheus(
    server: LiveServer, answers: dict[str, httpx.Response]
) -> None:
    lost = int(answers["ins-2"].headers[LOST_REUSE_HEADER])
    with server.client("sk-a") as c:
        overview = c.get("/v1/overview").json()
        tenants = c.get("/v1/tenants").json()["tenants"]
    with server.client(None) as c:
        metrics = c.get("/metrics").text
    # the package's server is shared: other tests' calls may add to the totals
    assert overview["prompt_insertions"]["count"] >= 1
    assert overview["prompt_insertions"]["lost_reuse_tokens"] >= lost
    (row,) = [t for t in tenants if t["tenant"] == "tenant-a"]
    assert row["prompt_insertions"]["lost_reuse_tokens"] >= lost
    assert _counter(metrics, "prompt_insertions_total") >= 1
    assert _counter(metrics, "lost_reuse_tokens_total") >= lost


def _counter(metrics: str, name: str) -> float:
    found = re.search(rf"^agentconsole_{name} (\S+)$", metrics, re.M)
    assert found is not None, name
    return float(found.group(1))


def _every_row(store: Store) -> str:
    """Every row of every table of both store files, as text."""
    store.writer.flush().result(10)
    out = []
    with store.cursor() as cur:
        tables = cur.execute(
            "SELECT table_catalog, table_schema, table_name FROM information_schema.tables"
        ).fetchall()
        for catalog, schema, name in tables:
            out.append(
                repr(cur.execute(f'SELECT * FROM "{catalog}"."{schema}"."{name}"').fetchall())
            )
    return "\n".join(out)


def test_no_prompt_text_is_stored(server: LiveServer, answers: dict[str, httpx.Response]) -> None:
    del answers
    server.run(server.live.queries.projector.sync())
    dumped = server.run(asyncio.to_thread(_every_row, server.live.store))
    assert "ins-prog" in dumped  # the rows are there (programs, nodes, events, blocks)
    assert "prompt_insertions" in dumped  # the program's figures went into its row
    for text in (SECRET, "grep result", "ran the tests"):
        assert text not in dumped

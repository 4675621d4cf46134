"""T10 over real HTTP: a corpus of a few hundred malicious tool calls. Every one is refused
with a 4xx before execution (the ledger executor behind every tool records nothing), no
answer is a 5xx, and every refusal the gateway answers is in the audit table. A burst ten
times a tool's bucket executes at most the bucket (plus what the rate refills meanwhile)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from agentconsole.server.gateway.builtin_tools import read_ledger
from agentconsole.server.refusals import RefusalBudget
from agentconsole.server.store import Store
from tests.server.gateway.helpers import obj
from tests.server.gateway.spawn import ServerProcess, served

pytestmark = pytest.mark.e2e
OPERATOR = {"Authorization": "Bearer sk-operator"}
TENANT_A = {"Authorization": "Bearer sk-tenant-a"}
TENANT_B = {"Authorization": "Bearer sk-tenant-b"}
LEDGER = {"type": "builtin", "name": "ledger"}
TOOLS: dict[str, dict[str, Any]] = {
    "files.read": obj(
        ("path",), path={"type": "string", "maxLength": 256}, encoding={"enum": ["utf-8"]}
    ),
    "web.fetch": obj(("url",), url={"type": "string", "maxLength": 2048}),
    "notes.write": obj(
        ("title", "body"),
        title={"type": "string", "maxLength": 100},
        body={"type": "string", "maxLength": 2000},
        tags={"type": "array", "maxItems": 5, "items": {"type": "string", "maxLength": 30}},
        meta=obj(source={"type": "string", "maxLength": 50}),
    ),
}
GOOD: dict[str, dict[str, Any]] = {
    "files.read": {"path": "docs/readme.txt"},
    "web.fetch": {"url": "https://example.com/a"},
    "notes.write": {"title": "t", "body": "b"},
}
UNKNOWN_KEYS = ("extra", "__proto__", "constructor", "PATH", "path ", "admin", "x" * 200)
CONFUSED: tuple[Any, ...] = (1, 1.5, True, None, [], {}, ["docs/a"], {"p": "docs/a"})
TRAVERSALS = (
    "../etc/passwd", "../../../../etc/shadow", "docs/../../secret", "..", "docs/..",
    "/etc/passwd", "/", "\\\\server\\share", "..\\..\\windows\\win.ini", "~/.ssh/id_rsa",
    "~root/.bashrc", "C:\\Windows\\system32", "c:/boot.ini", "%2e%2e/etc/passwd",
    "%2e%2e%2fetc%2fpasswd", "docs/%2e%2e/%2e%2e/x", "..%2fsecret", "docs%2f..%2f..%2fx",
    "%252e%252e/x", "docs/..;/x/../..", "a/b/../../../c", "..%5c..%5cwin.ini",
)  # fmt: skip
SSRF_URLS = (
    "http://127.0.0.1/", "http://127.0.0.1:8080/admin", "http://localhost/",
    "http://LOCALHOST:9000", "http://169.254.169.254/latest/meta-data/", "http://[::1]/",
    "http://[::ffff:127.0.0.1]/", "http://[fd00::1]/", "http://[fe80::1]/",
    "http://0x7f000001/", "http://2130706433/", "http://0177.0.0.1/", "http://127.1/",
    "http://0/", "http://0.0.0.0/", "http://10.0.0.1/", "http://10.255.255.255/",
    "http://172.16.0.1/", "http://172.31.255.1/", "http://192.168.1.1/", "http://100.64.0.1/",
    "http://224.0.0.1/", "http://255.255.255.255/", "http://metadata.google.internal/",
    "http://metadata/", "http://foo.localhost/", "http://printer.local/", "http://intranet/",
    "http://evil.com@127.0.0.1/", "http://user:pw@10.0.0.1/", "https://127.0.0.1.",
    "file:///etc/passwd", "gopher://127.0.0.1:70/_x", "ftp://example.com/x",
    "dict://127.0.0.1:11211/", "ldap://example.com", "http://exa mple.com/",
    "http://example.com\\@127.0.0.1/", "example.com", "javascript:alert(1)",
)  # fmt: skip
CONTROL_CHARS = (
    "\u202e", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200f", "\u061c", "\x00",
    "\x1b", "\x07", "\x08", "\x7f", "\x85", "\x9b", "\u200b", "\ufeff",
)  # fmt: skip
BAD_JSON = (
    b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe", b'{"program_id": NaN}',
    b'{"program_id":"mine","node_id":"n1","arguments":{"path":"a"},"program_id":"x"}',
    b'{"program_id":"mine","node_id":"n1","arguments":{"path":1e999}}',
    b'{"program_id":"mine","node_id":"n1","arguments":{"path":"a","path":"../x"}}',
    b"[" * 100000, b'{"program_id":"mine","node_id":"n1","arguments":' + b"[" * 5000,
)  # fmt: skip
BAD_ENVELOPES: tuple[dict[str, Any], ...] = (
    {"program_id": "../x", "node_id": "n1"}, {"program_id": "mine", "node_id": "n/1"},
    {"program_id": "", "node_id": "n1"}, {"program_id": "mine"},
    {"program_id": "mine", "node_id": "n1", "attempt": 0},
    {"program_id": "mine", "node_id": "n1", "attempt": True},
    {"program_id": "mine", "node_id": "n1", "attempt": -1},
    {"program_id": "mine", "node_id": "n1", "attempt": "1"},
    {"program_id": "mine", "node_id": "n1", "tool_call_id": "forged"},
    {"program_id": ["mine"], "node_id": "n1"}, {"program_id": "m\u202eine", "node_id": "n1"},
)  # fmt: skip
UNKNOWN_TOOLS = (
    "nope", "FILES.READ", "files.read.", "files", "files.read%00", "files.read%20",
    "restricted-x", "ledger", "echo", "web.fetch2", "a" * 300, "burst2",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Case:
    """One malicious request and the refusal statuses acceptable for it."""

    category: str
    tool: str
    body: bytes
    statuses: frozenset[int]


def _case(category: str, tool: str, arguments: Any, *statuses: int, program: str = "mine") -> Case:
    body = {"program_id": program, "node_id": "n1", "arguments": arguments}
    return Case(category, tool, json.dumps(body).encode(), frozenset(statuses or (422,)))


def _argument_cases() -> list[Case]:
    cases: list[Case] = []
    for tool, good in GOOD.items():
        cases += [_case("unknown-property", tool, {**good, key: 1}) for key in UNKNOWN_KEYS]
    nested = {"title": "t", "body": "b", "meta": {"source": "s", "x": 1}}
    cases.append(_case("unknown-property", "notes.write", nested))
    for value in CONFUSED:
        cases.append(_case("type-confusion", "files.read", {"path": value}))
        cases.append(_case("type-confusion", "web.fetch", {"url": value}))
        cases.append(_case("type-confusion", "notes.write", {"title": value, "body": "b"}))
        if not isinstance(value, list):  # [] and ["docs/a"] are valid tags
            tags = {**GOOD["notes.write"], "tags": value}
            cases.append(_case("type-confusion", "notes.write", tags))
    cases.append(_case("type-confusion", "files.read", {"path": "a", "encoding": "utf-16"}))
    cases.append(_case("type-confusion", "files.read", []))
    cases.append(_case("type-confusion", "files.read", "path=a"))
    for size in (257, 1000, 60000):
        cases.append(_case("oversize", "files.read", {"path": "a" * size}, 413, 422))
    for size in (101, 5000):
        cases.append(_case("oversize", "notes.write", {"title": "t" * size, "body": "b"}))
    cases.append(_case("oversize", "notes.write", {"title": "t", "body": "b" * 2001}))
    for n in (6, 100, 10000):
        tags = {**GOOD["notes.write"], "tags": ["x"] * n}
        cases.append(_case("oversize", "notes.write", tags, 413, 422))
    cases.append(_case("oversize", "notes.write", {**GOOD["notes.write"], "tags": ["y" * 31]}))
    for path in TRAVERSALS:
        cases.append(_case("path-traversal", "files.read", {"path": path}))
        if ".." in unquote(unquote(path)):
            cases.append(_case("path-traversal", "notes.write", {"title": "t", "body": path}))
    for url in SSRF_URLS:
        cases.append(_case("ssrf", "web.fetch", {"url": url}))
        if "://" in url and " " not in url:
            cases.append(_case("ssrf", "notes.write", {"title": "t", "body": url}))
    for ch in CONTROL_CHARS:
        cases.append(_case("control-chars", "notes.write", {"title": f"a{ch}b", "body": "b"}))
        cases.append(_case("control-chars", "files.read", {"path": f"docs/{ch}a.txt"}))
        cases.append(_case("control-chars", "web.fetch", {"url": f"https://example.com/{ch}"}))
        cases.append(_case("control-chars", "notes.write", {**GOOD["notes.write"], "tags": [ch]}))
        meta = {**GOOD["notes.write"], "meta": {"source": f"s{ch}"}}
        cases.append(_case("control-chars", "notes.write", meta))
    return cases


def corpus() -> list[Case]:
    """Every category of research §5 T10 (the burst is its own test)."""
    cases = _argument_cases()
    for program in ("theirs", "theirs-2"):
        cases += [_case("cross-tenant", t, g, 404, program=program) for t, g in GOOD.items()]
    cases += [_case("unknown-tool", name, {"path": "a"}, 404) for name in UNKNOWN_TOOLS]
    # a tool not open to the tenant is unknown to it (no 403 that would tell it exists)
    cases.append(_case("forbidden-tool", "restricted", GOOD["files.read"], 404))
    cases += [Case("malformed", "files.read", raw, frozenset({400, 413, 422})) for raw in BAD_JSON]
    for envelope in BAD_ENVELOPES:
        body = json.dumps({**envelope, "arguments": GOOD["files.read"]}).encode()
        cases.append(Case("bad-envelope", "files.read", body, frozenset({422})))
    big = b'{"program_id":"mine","node_id":"n1","arguments":{"path":"' + b"a" * 70000 + b'"}}'
    cases.append(Case("oversize", "files.read", big, frozenset({413})))
    return cases


@pytest.fixture(scope="module", params=["mini", "real"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The gateway in the minimal test app, then in the real app (simulated runtime), with
    the corpus' tools (all run by the ledger) and two programs of tenant B."""
    tools = [
        {"name": name, "parameters": params, "executor": LEDGER, "side_effect": True}
        for name, params in TOOLS.items()
    ]
    tools.append(
        {"name": "restricted", "parameters": TOOLS["files.read"], "executor": LEDGER,
         "allowed_tenants": ["tenant-b"]}
    )  # fmt: skip
    tools.append(
        {"name": "burst", "parameters": obj(), "executor": LEDGER, "rate_limit_per_s": 1.0,
         "burst": 5}
    )  # fmt: skip
    for proc in served(request, tmp_path_factory, tools):
        for program in ("theirs", "theirs-2"):
            url = f"{proc.base_url}/v1/programs"
            response = httpx.post(url, json={"program_id": program}, headers=TENANT_B)
            assert response.status_code == 201
        yield proc


def _audited_call_refusals(server: ServerProcess) -> int:
    server.stop()  # the store is closed cleanly: every queued audit row is committed
    try:
        with Store.open(server.db) as store:
            rows = store.repo.audit_log(limit=100_000)
    finally:
        server.start()
    return sum(1 for r in rows if r.action.action == "tool.call" and r.action.result != "ok")


def test_the_abuse_corpus_is_refused_before_execution_and_audited(server: ServerProcess) -> None:
    cases = corpus()
    assert len(cases) >= 300
    by_category: Counter[str] = Counter(c.category for c in cases)
    assert len(by_category) == 11
    statuses: Counter[int] = Counter()
    gateway_answers = 0
    wrong: list[str] = []
    with httpx.Client(base_url=server.base_url, headers=TENANT_A, timeout=30) as client:
        for case in cases:
            response = client.post(f"/v1/tools/{case.tool}/call", content=case.body)
            statuses[response.status_code] += 1
            if response.status_code not in case.statuses:
                wrong.append(
                    f"{case.category} {case.tool[:30]} {case.body[:80]!r}:"
                    f" {response.status_code} {response.text[:120]}"
                )
                continue
            error = response.json().get("error")
            if error is not None:  # answered by the gateway, not the router
                gateway_answers += 1
                assert error["type"]
                assert error["message"]
    assert not wrong, "\n".join(wrong)
    assert all(400 <= s < 500 for s in statuses), statuses
    assert gateway_answers >= len(cases) - 2
    assert read_ledger(server.ledger) == []  # the executor saw 0 calls
    # audited up to one caller's share of the minute's budget (the rest counted in the log)
    assert _audited_call_refusals(server) == min(gateway_answers, RefusalBudget().per_actor)


def test_a_burst_ten_times_the_bucket_executes_at_most_the_bucket(server: ServerProcess) -> None:
    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=server.base_url, headers=TENANT_A) as client:
            calls = [
                client.post(
                    "/v1/tools/burst/call",
                    json={"program_id": "burst", "node_id": f"b{i}", "arguments": {}},
                )
                for i in range(50)
            ]
            return [r.status_code for r in await asyncio.gather(*calls)]

    before = len(read_ledger(server.ledger))
    started = time.monotonic()
    codes = Counter(asyncio.run(burst()))
    elapsed = time.monotonic() - started
    executed = len(read_ledger(server.ledger)) - before
    assert set(codes) <= {200, 429}
    assert codes[200] == executed
    assert executed <= 5 + int(elapsed) + 1
    assert codes[429] == 50 - executed

"""The program admission door over real HTTP: a new program's first call waits while the
started programs fill the (here: one-token) budget, and gets through when one of them ends."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.server.api.harness import OPERATOR, LiveServer, chat_body, make_config, wait_until


def _call(client: httpx.Client, program_id: str) -> httpx.Response:
    # a task of its own: a prompt another program computed already would be shared, size 0
    task = f"hello, this is the task of {program_id}"
    body = {**chat_body(task, max_tokens=4), "agentconsole": {"program_id": program_id}}
    return client.post("/v1/chat/completions", json=body)


def _door_server(db: Path, **changes: Any) -> LiveServer:
    config = make_config(db, program_admission=True, admission_budget_tokens=1, **changes)
    return LiveServer(config)


def _call_in_background(
    server: LiveServer, program_id: str
) -> tuple[threading.Thread, dict[str, Any]]:
    """``program_id``'s call on a thread of its own; the dict gets its response and when."""
    result: dict[str, Any] = {}

    def call() -> None:
        with server.client() as c2:
            result["response"] = _call(c2, program_id)
            result["at"] = time.monotonic()

    thread = threading.Thread(target=call)
    thread.start()
    return thread, result


def _wait_until_waiting(server: LiveServer, count: int) -> None:
    """Until ``count`` programs' calls wait at the door (5 s at most), then assert it."""
    door = server.live.service.door
    deadline = time.monotonic() + 5
    while door.waiting < count and time.monotonic() < deadline:
        time.sleep(0.005)
    assert door.waiting == count


@contextlib.contextmanager
def _one_waiting(
    db: Path, prefix: str
) -> Iterator[tuple[LiveServer, httpx.Client, threading.Thread, dict[str, Any]]]:
    """A door server where ``{prefix}-a`` started and ``{prefix}-b``'s first call waits at the
    door (30 s wait bound): the server, a client, the waiting call's thread and result."""
    with _door_server(db, admission_wait_s=30.0) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, f"{prefix}-a").status_code == 200
            waiter, result = _call_in_background(server, f"{prefix}-b")
            _wait_until_waiting(server, 1)
            yield server, c, waiter, result


def test_a_new_program_waits_at_the_door_until_a_started_one_ends(tmp_path: Path) -> None:
    with _door_server(tmp_path / "door.duckdb") as server, server.client() as c:
        server.wait_ready()
        assert _call(c, "door-a").status_code == 200  # alone: it starts whatever its size
        waiter, result = _call_in_background(server, "door-b")
        _wait_until_waiting(server, 1)  # door-b waits: door-a still counts (idle grace)
        door = server.live.service.door
        with server.client(None) as ops:
            assert "agentconsole_programs_at_door 1.0" in ops.get("/metrics").text
        time.sleep(0.3)
        assert "response" not in result
        finished_at = time.monotonic()
        assert c.post("/v1/programs/door-a/finish", json={}).status_code == 200
        waiter.join(10)
        assert result["response"].status_code == 200, result["response"].text
        # the finish opened the door, not the idle grace running out
        assert result["at"] - finished_at < server.live.service.driver.idle_grace_s
        assert door.waiting == 0


def test_a_wait_at_the_door_counts_as_the_programs_queueing(tmp_path: Path) -> None:
    """serve's door records the wait as bench's does (``program.door_waited``, from the
    driver both share): the tenant's max queue wait sees it."""
    with _one_waiting(tmp_path / "door.duckdb", "wait") as (server, c, waiter, result):
        time.sleep(0.3)
        assert c.post("/v1/programs/wait-a/finish", json={}).status_code == 200
        waiter.join(10)
        assert result["response"].status_code == 200, result["response"].text
        metrics = server.live.metrics
        wait_until(lambda: metrics.tenants()["tenant-a"].max_queue_wait_s >= 0.3)


def test_a_first_call_that_waits_too_long_gets_503_and_leaves_the_queue(tmp_path: Path) -> None:
    with _door_server(tmp_path / "door.duckdb", admission_wait_s=0.3) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "slow-a").status_code == 200
            refused = _call(c, "slow-b")
            assert refused.status_code == 503, refused.text
            assert refused.headers["Retry-After"] == "10"
            assert refused.json()["error"]["type"] == "unavailable"
            assert "admission door" in refused.json()["error"]["message"]
            assert server.live.service.door.waiting == 0
            # a started program's later calls never wait at the door
            assert _call(c, "slow-a").status_code == 200


def test_a_refused_programs_retry_keeps_its_place_in_line(tmp_path: Path) -> None:
    with _door_server(tmp_path / "door.duckdb", admission_wait_s=2.0) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "line-a").status_code == 200
            assert _call(c, "line-b").status_code == 503  # waited its second; told to retry
            later, c_result = _call_in_background(server, "line-c")  # after b first did
            _wait_until_waiting(server, 1)
            retry, b_result = _call_in_background(server, "line-b")  # b's retry, after c
            _wait_until_waiting(server, 2)
            assert c.post("/v1/programs/line-a/finish", json={}).status_code == 200
            retry.join(10)
            later.join(10)
        assert b_result["response"].status_code == 200, b_result["response"].text
        # c waited behind b's kept place, b still counts: c's wait ran out
        assert c_result["response"].status_code == 503


def test_a_program_waiting_at_the_door_is_not_idle(tmp_path: Path) -> None:
    """The sweeper ends programs idle past ``program_idle_s``; one whose first call waits at
    the door is not idle (it used to be finished there, its call left waiting for nothing)."""
    waits = _door_server(tmp_path / "door.duckdb", admission_wait_s=10.0, program_idle_s=0.6)
    with waits as server:
        server.wait_ready()
        result: dict[str, httpx.Response] = {}

        def second() -> None:
            with server.client() as c2:
                result["waiter"] = _call(c2, "idle-b")

        with server.client() as c:
            assert _call(c, "idle-a").status_code == 200
            waiter = threading.Thread(target=second)
            waiter.start()
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:  # a stays busy; b waits past the idle limit
                assert _call(c, "idle-a").status_code == 200
                time.sleep(0.2)
            assert c.post("/v1/programs/idle-a/finish", json={}).status_code == 200
            waiter.join(10)
            assert result["waiter"].status_code == 200, result["waiter"].text
            assert c.get("/v1/programs/idle-b").json()["state"] == "running"


def test_a_program_cancelled_at_the_door_answers_its_waiting_call_at_once(
    tmp_path: Path,
) -> None:
    """A cancel wakes the program's call waiting at the door with 409 (it used to wait out
    the whole admission wait and get a 503 telling it to retry)."""
    with _one_waiting(tmp_path / "door.duckdb", "gone") as (server, c, waiter, result):
        door = server.live.service.door
        cancelled_at = time.monotonic()
        assert c.post("/v1/programs/gone-b/cancel", json={}).status_code == 200
        waiter.join(10)
        response = result["response"]
        assert response.status_code == 409, response.text
        assert "cancelled" in response.json()["error"]["message"]
        assert result["at"] - cancelled_at < 5.0  # woken, not timed out (30 s)
        assert door.waiting == 0
        assert not server.live.service.driver.door.holds_place("gone-b", time.time())


def test_request_level_policies_have_no_door(tmp_path: Path) -> None:
    with _door_server(tmp_path / "door.duckdb", policy="fcfs") as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "fcfs-a").status_code == 200
            assert _call(c, "fcfs-b").status_code == 200
            assert server.live.service.door.waiting == 0


def _labelled_call(client: httpx.Client, program_id: str, kind: str) -> httpx.Response:
    task = f"hello, this is the task of {program_id}"
    extras = {"program_id": program_id, "labels": {"workload": kind}}
    return client.post(
        "/v1/chat/completions", json={**chat_body(task, max_tokens=4), "agentconsole": extras}
    )


def _learn_a_short_and_a_long_kind(server: LiveServer, c: httpx.Client) -> None:
    for program_id, kind, run_s in (("learn-short", "short", 0.0), ("learn-long", "long", 1.0)):
        assert _labelled_call(c, program_id, kind).status_code == 200
        time.sleep(run_s)
        assert c.post(f"/v1/programs/{program_id}/finish", json={}).status_code == 200


def _assert_the_short_kind_goes_first(server: LiveServer, c: httpx.Client) -> None:
    """A long kind's program waits at the door, then a short kind's: the short one starts
    first when the blocker ends."""
    assert _labelled_call(c, "blocker", "long").status_code == 200  # fills the budget
    results: dict[str, httpx.Response] = {}

    def call(program_id: str, kind: str) -> threading.Thread:
        def run() -> None:
            with server.client() as own:
                results[program_id] = _labelled_call(own, program_id, kind)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    long_waiter = call("long-1", "long")
    _wait_until_waiting(server, 1)
    short_waiter = call("short-1", "short")  # came second
    _wait_until_waiting(server, 2)
    time.sleep(0.3)
    assert c.post("/v1/programs/blocker/finish", json={}).status_code == 200
    short_waiter.join(10)
    assert results["short-1"].status_code == 200, results["short-1"].text
    assert "long-1" not in results  # one program at a time fits the one-token budget
    assert c.post("/v1/programs/short-1/finish", json={}).status_code == 200
    long_waiter.join(10)
    assert results["long-1"].status_code == 200, results["long-1"].text


def test_the_door_starts_a_short_kind_of_agent_before_a_long_one_that_came_first(
    tmp_path: Path,
) -> None:
    """The line goes by response ratio of each kind's run, learned from finished programs."""
    with _door_server(tmp_path / "door.duckdb") as server, server.client() as c:
        server.wait_ready()
        _learn_a_short_and_a_long_kind(server, c)
        _assert_the_short_kind_goes_first(server, c)


def test_a_restarted_server_orders_and_sizes_by_what_it_learned_before(tmp_path: Path) -> None:
    """What finished programs taught the door (each kind's run and peak) and the policies
    (each workload's calls) is learned again from the store at start-up: the line goes by
    it before any program finished in the new process."""
    db = tmp_path / "relearn.duckdb"
    with _door_server(db) as first, first.client() as c:
        first.wait_ready()
        _learn_a_short_and_a_long_kind(first, c)
        before = first.live.service.driver
        runs = [before.run_times.expected(("tenant-a", k)) for k in ("short", "long")]
        peaks = [before.growth.known(("tenant-a", k)) for k in ("short", "long")]
    short_run, long_run = runs
    assert short_run is not None
    assert long_run is not None
    assert short_run < long_run
    assert None not in peaks
    with _door_server(db) as second, second.client() as c:
        second.wait_ready()
        after = second.live.service.driver
        assert [after.run_times.expected(("tenant-a", k)) for k in ("short", "long")] == runs
        assert [after.growth.known(("tenant-a", k)) for k in ("short", "long")] == peaks
        with second.client(OPERATOR) as op:  # what the operator sees of it
            door = op.get("/v1/operator/door").json()
        assert (door["enabled"], door["order"], door["waiting"]) == (True, "shortest-first", 0)
        assert door["budget_tokens"] == 1  # as configured
        shown = {(r["tenant"], r["kind"]): r["expected_run_s"] for r in door["runs"]}
        assert shown == {("tenant-a", "long"): runs[1], ("tenant-a", "short"): runs[0]}
        shown_peaks = {(p["tenant"], p["kind"]): p["peak_private_tokens"] for p in door["peaks"]}
        assert shown_peaks == {("tenant-a", "short"): peaks[0], ("tenant-a", "long"): peaks[1]}
        _assert_the_short_kind_goes_first(second, c)


def _alphas_peak(door: dict[str, Any]) -> float:
    """Tenant a's unlabelled programs' learned peak, as the operator's door view shows it."""
    peaks = {(p["tenant"], p["kind"]): p["peak_private_tokens"] for p in door["peaks"]}
    return float(peaks[("tenant-a", "tenant:tenant-a")])


def test_a_tenant_cannot_make_another_tenants_programs_look_huge_at_the_door(
    tmp_path: Path,
) -> None:
    """The security review's case: tenant b labels its programs with tenant a's unlabelled
    kind (``tenant:tenant-a``), fills each with a 400,000-character prompt and finishes it.
    Kinds are per tenant: a's next small program is counted at the door by a's own history
    (it was counted at tens of thousands of predicted tokens, and under load waited and got
    503), and what b taught shows under b."""
    config = make_config(
        tmp_path / "poison.duckdb", program_admission=True, admission_budget_tokens=10_000_000
    )
    with LiveServer(config) as server, server.client("sk-a") as a, server.client("sk-b") as b:
        server.wait_ready()
        for k in range(2):  # a's own history: small unlabelled programs
            assert _call(a, f"alpha-{k}").status_code == 200
            assert a.post(f"/v1/programs/alpha-{k}/finish", json={}).status_code == 200
        with server.client(OPERATOR) as op:
            own = _alphas_peak(op.get("/v1/operator/door").json())
        assert own < 1_000
        for k in range(3):
            program_id = f"bravo-poison-{k}"
            labels = {"workload": "tenant:tenant-a"}
            made = b.post("/v1/programs", json={"program_id": program_id, "labels": labels})
            assert made.status_code == 201, made.text
            body = {
                **chat_body("x" * 400_000, max_tokens=4),
                "agentconsole": {"program_id": program_id},
            }
            assert b.post("/v1/chat/completions", json=body).status_code == 200
            assert b.post(f"/v1/programs/{program_id}/finish", json={}).status_code == 200
        assert _call(a, "alpha-next").status_code == 200  # counted for its idle grace now
        with server.client(OPERATOR) as op:
            door = op.get("/v1/operator/door").json()
        assert _alphas_peak(door) == own
        assert door["predicted_tokens"] <= 2 * own  # alpha-next alone, by a's own history
        bravos = [p for p in door["peaks"] if p["tenant"] == "tenant-b"]
        assert [p["kind"] for p in bravos] == ["tenant:tenant-a"]  # b's own, in b's namespace
        assert bravos[0]["peak_private_tokens"] > 10_000


def _inferred_call(client: httpx.Client, task: str) -> httpx.Response:
    """A call of an unmodified agent: no program id, the program is inferred from its chat."""
    return client.post("/v1/chat/completions", json=chat_body(task, max_tokens=4))


def _inferred_programs(client: httpx.Client) -> int:
    listed = client.get("/v1/programs", params={"label": "inferred:true", "limit": 100})
    total: int = listed.json()["total"]
    return total


def test_an_unnamed_programs_retry_finds_its_program_and_place(tmp_path: Path) -> None:
    """An agent that names no program and is told 503 at the door retries the same chat: it
    is the same (inferred) program, keeping its place, not a second program per retry."""
    with _door_server(tmp_path / "door.duckdb", admission_wait_s=0.3) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "named-a").status_code == 200
            task = "an agent that names no program, with a task of its own"
            for _ in range(3):
                assert _inferred_call(c, task).status_code == 503
            assert _inferred_programs(c) == 1
            listed = c.get("/v1/programs", params={"label": "inferred:true"}).json()
            inferred = listed["programs"][0]["program_id"]
            assert server.live.service.driver.door.holds_place(inferred, time.time())
            assert c.post("/v1/programs/named-a/finish", json={}).status_code == 200
            admitted = _inferred_call(c, task)
            assert admitted.status_code == 200, admitted.text
            assert _inferred_programs(c) == 1


def test_switching_to_a_request_level_policy_lets_the_waiting_calls_in(tmp_path: Path) -> None:
    with (
        _one_waiting(tmp_path / "door.duckdb", "switch") as (server, _, waiter, result),
        server.client(OPERATOR) as ops,
    ):
        switched_at = time.monotonic()
        assert ops.post("/v1/operator/policy", json={"policy": "fcfs"}).status_code == 200
        waiter.join(10)
        assert result["response"].status_code == 200, result["response"].text
        assert result["at"] - switched_at < 5.0  # let in, not timed out (30 s)
        assert server.live.service.door.waiting == 0
        gate = server.live.service.driver.door
        assert (gate.parked, gate.is_started("switch-b")) == (0, True)  # its books too


def test_a_shutdown_answers_the_calls_waiting_at_the_door(tmp_path: Path) -> None:
    with _one_waiting(tmp_path / "door.duckdb", "closing") as (server, _, waiter, result):

        async def shut_down() -> None:
            server.live.service.shut_down()

        server.run(shut_down())
        waiter.join(10)
        response = result["response"]
        assert response.status_code == 503, response.text
        assert "shutting down" in response.json()["error"]["message"]


def test_a_program_that_ran_tools_first_comes_to_the_door_with_its_first_call(
    tmp_path: Path,
) -> None:
    """The door counts a program from its first LLM call, whatever ran before it (a program
    whose first node was a tool used to pass the door uncounted)."""
    with _door_server(tmp_path / "door.duckdb", admission_wait_s=0.3) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "tools-a").status_code == 200
            assert c.post("/v1/programs", json={"program_id": "tools-b"}).status_code == 201
            tool = {"node_id": "fetch", "kind": "tool", "tool": "web"}
            assert c.post("/v1/programs/tools-b/nodes", json=tool).status_code == 201
            assert _call(c, "tools-b").status_code == 503  # waited at the door like any other


def test_a_client_that_leaves_while_waiting_at_the_door_is_noticed(tmp_path: Path) -> None:
    """Its call leaves the door at once (it used to wait out the whole bound, 120 s, then be
    let in and prefilled for nobody), keeping its program's place for a retry."""
    with _door_server(tmp_path / "door.duckdb", admission_wait_s=30.0) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "left-a").status_code == 200
        with server.client(timeout=0.5) as impatient, contextlib.suppress(httpx.ReadTimeout):
            _call(impatient, "left-b")  # gives up after half a second, closing its connection
        door = server.live.service.door
        wait_until(lambda: door.waiting == 0, timeout=5)
        assert server.live.service.driver.door.holds_place("left-b", time.time())
        with server.client() as c:
            assert c.get("/v1/programs/left-b").json()["nodes_done"] == 0


def test_a_program_that_declared_its_llm_node_first_comes_to_the_door(tmp_path: Path) -> None:
    """Declaring a node (``POST /nodes``, as the replay agent does before each call) is not
    running one: the program's first call still comes to the door."""
    with _door_server(tmp_path / "door.duckdb", admission_wait_s=0.3) as server:
        server.wait_ready()
        with server.client() as c:
            assert _call(c, "declared-a").status_code == 200
            assert c.post("/v1/programs", json={"program_id": "declared-b"}).status_code == 201
            node = {"node_id": "plan", "kind": "llm"}
            assert c.post("/v1/programs/declared-b/nodes", json=node).status_code == 201
            body = chat_body("hello, this is the task of declared-b", max_tokens=4)
            body["agentconsole"] = {"program_id": "declared-b", "node_id": "plan"}
            assert c.post("/v1/chat/completions", json=body).status_code == 503


def _sized_call(client: httpx.Client, program_id: str, words: int) -> httpx.Response:
    """``program_id``'s first call with a prompt of its own of ``words`` words (about 1.5
    tokens each; its id first: no other program's prompt shares more than the chat template
    with it)."""
    task = f"{program_id}: " + "lorem " * words
    body = {**chat_body(task, max_tokens=4), "agentconsole": {"program_id": program_id}}
    return client.post("/v1/chat/completions", json=body)


def test_one_tenants_large_programs_do_not_keep_another_tenants_small_ones_out(
    tmp_path: Path,
) -> None:
    """The security review's case, small: tenant a's large program fills most of the door and
    another of a's waits for room; tenant b's tiny programs fit in what is left. They start at
    once (they waited behind a's, first come first served, until a's wait ran out or theirs
    did: 503), and a's gets in when room frees."""
    config = make_config(
        tmp_path / "door.duckdb",
        program_admission=True,
        admission_budget_tokens=5_000,
        admission_wait_s=3.0,
    )
    with LiveServer(config) as server, server.client("sk-a") as a, server.client("sk-b") as b:
        server.wait_ready()
        assert _sized_call(a, "alpha-1", 2_000).status_code == 200  # ~3,000 tokens counted
        waited: dict[str, httpx.Response] = {}

        def second_of_a() -> None:  # no room for it
            with server.client("sk-a") as own:
                waited["response"] = _sized_call(own, "alpha-2", 2_000)

        waiter = threading.Thread(target=second_of_a)
        waiter.start()
        _wait_until_waiting(server, 1)
        for k in range(3):
            started_at = time.monotonic()
            answer = _sized_call(b, f"bravo-{k}", 2)
            assert answer.status_code == 200, answer.text
            assert time.monotonic() - started_at < 1.5  # let in, not waited out
        assert server.live.service.door.waiting == 1  # a's second still waits for room
        assert a.post("/v1/programs/alpha-1/finish", json={}).status_code == 200
        waiter.join(10)
        assert waited["response"].status_code == 200, waited["response"].text  # room now

"""The ``sglang-router`` runtime's pure parts: the completions body and stream reader, the
node endpoint's files and header, the launch commands. No SGLang process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.cluster import completions, launch, node_api
from agentconsole.server.runtime.sglang.cluster.workers import PushedControl, Workers
from agentconsole.server.runtime.sglang.control import ControlState, read_json
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.status import SchedulerStatus


def _request(**kw: Any) -> GenerationRequest:
    ticket = CallTicket("p1/n1/0001", "p1", "n1", "t1", arrival=0.0, boost=3.0)
    return GenerationRequest(ticket, "hello", max_tokens=8, cache_namespace="t1", **kw)


def test_body_carries_the_fields_that_survive_the_router() -> None:
    body = completions.completion_body(_request(stop=("x",)), model="m", clock_offset=0.5)
    assert body["prompt"] == "hello"
    assert body["rid"] == "p1/n1/0001"
    assert body["priority"] == 3
    assert body["cache_salt"] == "t:t1"
    assert body["max_tokens"] == 8
    assert "max_new_tokens" not in body
    decoded = wire.decode(body["custom_params"])
    assert decoded is not None
    assert decoded.ticket.call_id == "p1/n1/0001"
    assert decoded.clock_offset == 0.5
    assert completions.routing_headers(_request()) == {"X-SMG-Routing-Key": "p1"}


def test_forced_output_tokens_become_max_tokens_and_ignore_eos() -> None:
    body = completions.completion_body(_request(forced_output_tokens=5), model="m", clock_offset=0)
    assert body["max_tokens"] == 5
    assert body["ignore_eos"] is True


def _read(stream: bytes, chunk_size: int) -> list[dict[str, Any]]:
    """The chunks :class:`ChunkReader` makes of ``stream`` arriving ``chunk_size`` bytes at
    a time."""

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(stream), chunk_size):
            yield stream[start : start + chunk_size]

    async def read() -> list[dict[str, Any]]:
        reader = completions.ChunkReader()
        out = []
        async for event in completions.sse_events(chunks()):
            chunk = reader.read(event)
            if chunk is not None:
                out.append(chunk)
        return out

    return asyncio.run(read())


def test_reader_accumulates_text_and_takes_the_usage() -> None:
    stream = (
        b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n'
        b'data: {"choices":[{"text":"bc","finish_reason":"length"}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,'
        b'"prompt_tokens_details":{"cached_tokens":4}}}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"choices":[{"text":"never"}]}\n\n'
    )
    chunks = _read(stream, len(stream))
    assert [c["text"] for c in chunks] == ["a", "abc", "abc"]
    assert chunks[1]["meta_info"]["finish_reason"] == {"type": "length"}
    last = chunks[-1]["meta_info"]
    assert (last["prompt_tokens"], last["completion_tokens"], last["cached_tokens"]) == (9, 3, 4)


def test_reader_splits_lines_only_where_sse_ends_them() -> None:
    # generated text may hold U+2028, U+2029 and U+0085 raw in the JSON (str.splitlines would
    # end a line at each); CRLF and CR end lines too, even split across chunks
    texts = ["a\u2028b", "\x85", "c\u2029", "\u00e9\u4e2d"]
    frames = [json.dumps({"choices": [{"text": t}]}, ensure_ascii=False) for t in texts]
    ends = ["\r\n\r\n", "\n\n", "\r\r", "\r\n\r\n"]
    stream = "".join(f"data: {f}{end}" for f, end in zip(frames, ends, strict=True)).encode()
    for chunk_size in (1, 2, 3, 7, len(stream)):
        chunks = _read(stream, chunk_size)
        assert [c["text"] for c in chunks] == [
            "a\u2028b",
            "a\u2028b\x85",
            "a\u2028b\x85c\u2029",
            "a\u2028b\x85c\u2029\u00e9\u4e2d",
        ]


def test_node_report_lists_each_ranks_files_in_rank_order(tmp_path: Path) -> None:
    for rank in (1, 0, 10):
        (tmp_path / f"status.rank{rank}.json").write_text(f'{{"rank": {rank}}}')
    report = node_api.node_report(tmp_path, "n")
    assert [s["rank"] for s in report["statuses"]] == [0, 1, 10]
    assert report["placements"] == [None]
    assert report["node"] == "n"


def test_control_is_written_where_the_schedulers_read_it(tmp_path: Path) -> None:
    state = ControlState(version=7, policy="fcfs", paused=True)
    assert node_api.apply_control(tmp_path, state.to_json()) == 7
    written = read_json(tmp_path / "control.json")
    assert written is not None
    read = ControlState.from_json(written)
    assert read.written_at > 0  # stamped by the node, which plans its own ranks' pass
    read.written_at = 0.0
    assert read == state


def test_node_header_is_added_to_http_responses_only() -> None:
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {}

    tagged = node_api.NodeHeader(app, "host:1")
    asyncio.run(tagged({"type": "http"}, receive, send))
    assert sent[0]["headers"] == [(b"x-agentconsole-node", b"host:1")]


def test_worker_command_is_the_adapters_engine_arguments(tmp_path: Path) -> None:
    settings = EngineSettings(model_path=tmp_path, dp=2, max_total_tokens=4096)
    cmd = launch.worker_command(settings, host="127.0.0.1", port=31000)
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    assert cmd[cmd.index("--dp-size") + 1] == "2"
    assert cmd[cmd.index("--radix-eviction-policy") + 1] == "agentconsole"
    assert "--enable-cache-report" in cmd
    assert "--custom-sigquit-handler" not in cmd
    env = launch.worker_env(settings, tmp_path)
    assert env[node_api.NODE_API_ENV] == "1"
    assert env["AGENTCONSOLE_SGLANG_STATE_DIR"] == str(tmp_path)


def test_router_command_is_manual_and_dp_aware(tmp_path: Path) -> None:
    cmd = launch.router_command(
        host="127.0.0.1", port=1, workers=["http://a", "http://b"], tokenizer=tmp_path
    )
    assert cmd[cmd.index("--policy") + 1] == "manual"
    assert cmd[cmd.index("--worker-urls") + 1 : cmd.index("--worker-urls") + 3] == [
        "http://a",
        "http://b",
    ]
    assert "--dp-aware" in cmd


def test_workers_resend_control_only_to_a_worker_that_lost_or_missed_it() -> None:
    """A worker's status that only lags behind the accepted control (the plugin shows a
    version nobody waits for at its next periodic write) is not resent; a status whose
    version went back (a restarted worker) or a push the worker did not accept is."""
    shown: dict[str, Any] = {"version": 3, "node": "host:10"}

    def answer(request: httpx.Request) -> httpx.Response:
        status = SchedulerStatus(control_version=shown["version"]).to_json()
        body = {"node": shown["node"], "statuses": [status], "placements": []}
        return httpx.Response(200, json=body)

    async def scenario() -> list[bool]:
        workers = Workers(["http://w0"])
        workers._client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
        view = workers.views[0]
        workers._pending = ControlState(version=5)

        async def poll(status_shows: int, accepted: int, node: str = "host:10") -> bool:
            shown["version"], shown["node"] = status_shows, node
            view.control_version = accepted  # what the worker answered the last push
            workers._wake.clear()
            await workers.poll()
            return workers._wake.is_set()

        try:
            return [
                await poll(3, accepted=5),  # the status lags
                await poll(4, accepted=5),  # still lags
                await poll(2, accepted=5),  # went back: the worker restarted
                await poll(4, accepted=4),  # a push the worker did not accept
                await poll(5, accepted=5),  # caught up
                await poll(5, accepted=5, node="host:11"),  # a new process, same version
            ]
        finally:
            await workers._client.aclose()

    assert asyncio.run(scenario()) == [False, False, True, True, False, True]


def test_pushed_control_marks_the_versions_it_waits_for() -> None:
    workers = Workers(["http://w0"])
    control = PushedControl(workers, ControlState())
    control.write()
    awaited = control.write(ack=True)
    control.write()
    pending = workers._pending
    assert pending is not None
    assert (pending.version, pending.ack_version) == (awaited + 1, awaited)
    asyncio.run(workers._client.aclose())


def test_upstream_lines_end_at_the_streams_end_too() -> None:
    def lines(*stream: bytes) -> list[str]:
        async def chunks() -> AsyncIterator[bytes]:
            for chunk in stream:
                yield chunk

        async def read() -> list[str]:
            return [line async for line in completions.sse_lines(chunks())]

        return asyncio.run(read())

    # a CR that ends a chunk waits for the next (CRLF or not); at the stream's end it ends
    # its line, and a last line needs no line end at all
    assert lines(b"data: 1\r", b"\ndata: 2\r", b"data: 3\r") == ["data: 1", "data: 2", "data: 3"]
    assert lines(b"data: 1\n", b"data: 2") == ["data: 1", "data: 2"]


def test_print_goes_before_or_after_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DEPLOY.md adds ``--print`` after the worker's arguments: it was refused there."""
    worker = ["worker", "--model", str(tmp_path), "--state-dir", str(tmp_path / "s")]
    router = ["router", "--worker-urls", "http://w:1", "--tokenizer", str(tmp_path)]
    for argv in (["--print", *worker], [*worker, "--print"], [*router, "--print"]):
        launch.main(argv)  # printed, nothing started
        assert "-m sglang" in capsys.readouterr().out

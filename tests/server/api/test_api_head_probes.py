"""``HEAD`` on ``/health``, ``/ready`` and ``/metrics`` answers as ``GET`` does, without the
body: load balancers probe with ``HEAD``, and these routes answered it 405 (``Allow: OPTIONS,
GET``). ``/ready``'s ``HEAD`` runs the same probe, so it is 503 whenever ``GET`` is."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.server.api.harness import LiveServer, make_config, wait_until

PROBES = ("/health", "/ready", "/metrics")
#: headers a GET and a HEAD of the same probe share (the date may tick between them;
#: ``/metrics`` may count the GET itself, so its length may grow)
SHARED_HEADERS = ("content-type",)


def raw_head(server: LiveServer, path: str) -> bytes:
    """What the server sends to ``HEAD path``, byte for byte, until it closes."""
    url = urlsplit(server.url)
    assert url.hostname is not None
    assert url.port is not None
    with socket.create_connection((url.hostname, url.port), timeout=10) as connection:
        request = f"HEAD {path} HTTP/1.1\r\nHost: {url.hostname}\r\nConnection: close\r\n\r\n"
        connection.sendall(request.encode("ascii"))
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    return received


def assert_head_answers_as_get(anon: httpx.Client, path: str) -> httpx.Response:
    """``HEAD path`` has ``GET path``'s status and headers, and no content; the GET."""
    got = anon.get(path)
    headed = anon.head(path)
    assert headed.status_code == got.status_code, (path, headed.status_code, headed.text)
    assert headed.content == b""
    for name in SHARED_HEADERS:
        assert headed.headers[name] == got.headers[name], (path, name)
    if path != "/metrics":
        assert headed.headers["content-length"] == str(len(got.content))
    return got


@pytest.mark.parametrize("path", PROBES)
def test_head_answers_each_probe_as_get_does_without_a_body(server: LiveServer, path: str) -> None:
    with server.client(None) as anon:
        assert assert_head_answers_as_get(anon, path).status_code == 200
        assert "HEAD" in anon.options(path).headers["allow"]
    # on the wire: the head of the answer and nothing after it
    answer = raw_head(server, path)
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 200 OK"
    assert rest.endswith(b"\r\n\r\n")  # the blank line that ends the head comes last
    assert rest.count(b"\r\n\r\n") == 1


def test_head_of_ready_is_503_whenever_get_is(tmp_path: Path) -> None:
    config = make_config(tmp_path / "head.duckdb", runtime_extra={"start_delay_s": 1.0})
    with LiveServer(config) as server, server.client(None) as anon:
        starting = assert_head_answers_as_get(anon, "/ready")
        assert starting.status_code == 503
        assert starting.json() == {"runtime": False, "store": True, "draining": False}
        assert anon.head("/health").status_code == 200  # alive while not ready
        wait_until(lambda: anon.head("/ready").status_code == 200, 5)
        assert assert_head_answers_as_get(anon, "/ready").status_code == 200
        server.live.store.writer.stop(5)  # the writer thread ends: the store is unusable
        stopped = assert_head_answers_as_get(anon, "/ready")
        assert stopped.status_code == 503
        assert stopped.json() == {"runtime": True, "store": False, "draining": False}


def test_the_contract_publishes_the_probes_get_operations_only(server: LiveServer) -> None:
    with server.client(None) as anon:
        paths = anon.get("/schema/openapi.json").json()["paths"]
    for path in PROBES:
        assert set(paths[path]) == {"get"}, path

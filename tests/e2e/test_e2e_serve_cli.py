"""``serve`` settings precedence (flags > env > TOML > defaults), dev keys, graceful stop with
an open SSE feed, and ``export`` (refused while serve holds the file, Parquet once stopped)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from agentconsole.settings import load_settings
from tests.e2e.conftest import CLI, start_serve

pytestmark = pytest.mark.e2e


def test_settings_precedence_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(None).keys() == ({"sk-dev": "default"}, ["sk-operator"])
    assert "sk-tenant-a" in load_settings(None, {"demo": True}).keys()[0]
    config = tmp_path / "agentconsole.toml"
    config.write_text('[runtime]\npolicy = "sjf"\nkv_policy = "offload"\nname = "sim"\n')
    monkeypatch.setenv("AGENTCONSOLE_RUNTIME__KV_POLICY", "keep")
    monkeypatch.setenv("AGENTCONSOLE_AUTH__TENANT_KEYS", '{"sk-x": "tx"}')
    settings = load_settings(config, {"runtime": {"policy": "fcfs", "model": None}})
    assert settings.runtime.policy == "fcfs"  # flag over file
    assert settings.runtime.kv_policy == "keep"  # env over file
    assert settings.runtime.name == "sim"  # file over default
    assert settings.server.port == 8000  # default
    tenants, operators = settings.keys()
    assert tenants == {"sk-x": "tx"}
    assert operators == []  # a configured key leaves no public development key live


def test_serve_prints_keys_stops_cleanly_and_exports(tmp_path: Path) -> None:
    db = tmp_path / "cli.duckdb"
    config = tmp_path / "serve.toml"
    config.write_text('[runtime]\npolicy = "sjf"\ntime_scale = 0.05\n')
    env = {"AGENTCONSOLE_RUNTIME__KV_POLICY": "keep"}
    served = start_serve(
        ["--runtime", "sim", "--db", str(db), "--config", str(config), "--policy", "fcfs"], env
    )
    auth = {"Authorization": "Bearer sk-operator"}
    overview = httpx.get(served.url + "/v1/overview", headers=auth).json()
    assert (overview["policy"], overview["kv_policy"]) == ("fcfs", "keep")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    dev = {"Authorization": "Bearer sk-dev"}
    assert httpx.post(served.url + "/v1/chat/completions", json=body, headers=dev).is_success
    out = tmp_path / "out"
    refused = subprocess.run(
        [CLI, "export", str(out), "--db", str(db)], capture_output=True, text=True, check=False
    )
    assert refused.returncode != 0
    assert "cannot open store" in refused.stderr
    feed_open = threading.Event()

    def follow() -> None:  # an infinite SSE feed must not keep the server from stopping
        with httpx.stream("GET", served.url + "/v1/events", headers=auth, timeout=30) as r:
            for _ in r.iter_lines():
                feed_open.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert feed_open.wait(10)
    assert served.stop(timeout=20) == 0
    reader.join(10)
    assert not reader.is_alive()
    text = "".join(served.output)
    assert "tenant key:   sk-dev  (tenant default)" in text
    assert "operator key: sk-operator" in text
    exported = subprocess.run(
        [CLI, "export", str(out), "--db", str(db)], capture_output=True, text=True, check=True
    )
    assert "programs.parquet" in exported.stdout
    programs = pq.read_table(out / "programs.parquet")
    assert programs.num_rows >= 1
    events = pq.read_table(out / "events.parquet").to_pydict()
    assert "call.finished" in events["kind"]
    assert sorted(events["seq"]) == list(range(1, len(events["seq"]) + 1))


def test_a_second_serve_on_the_same_store_is_refused_in_one_line(tmp_path: Path) -> None:
    """The first serve says where its console and OpenAI API are once it has a port; a second
    one on the same store stops before its banner: the store's own message, exit 2, no
    traceback."""
    db = tmp_path / "twice.duckdb"
    first = start_serve(["--runtime", "sim", "--db", str(db)])
    try:
        said = "".join(first.output)
        assert f"console: {first.url}/  (browser)" in said
        assert f"OpenAI base_url: {first.url}/v1" in said
        second = subprocess.run(
            [CLI, "serve", "--runtime", "sim", "--port", "0", "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        assert first.stop() == 0
    assert second.returncode == 2, second.stderr
    assert second.stderr.startswith(f"Error: cannot open store {db}: it is locked by another")
    assert f"(PID {first.proc.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    assert len(second.stderr.splitlines()) == 1

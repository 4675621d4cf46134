"""``/metrics`` names Prometheus's text format once, with one charset (GET and HEAD)."""

from __future__ import annotations

from tests.server.api.harness import LiveServer


def test_metrics_content_type_is_prometheus_text_with_one_charset(server: LiveServer) -> None:
    with server.client(None) as anon:
        for answer in (anon.get("/metrics"), anon.head("/metrics")):
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"

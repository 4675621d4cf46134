"""A streamed chat call read in a thread, for end-to-end tests that act on a call while it
streams (cancel it, place another beside it)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import httpx


class StreamedChat:
    """``POST /v1/chat/completions`` with ``body`` (a streamed one), read in a thread:
    ``started`` is set once the first content came (or the stream ended without any),
    ``done`` once it ended. ``error`` is the message of an error frame, ``failure`` what
    reading the stream raised (a frame that does not parse), kept apart so that a test
    waiting for the server's error frame is not satisfied by a broken stream."""

    def __init__(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> None:
        self.started = threading.Event()
        self.done = threading.Event()
        self.text = ""
        self.finish: str | None = None
        self.error: str | None = None
        self.failure: str | None = None
        args = (url, dict(body), dict(headers))
        threading.Thread(target=self._run, args=args, daemon=True).start()

    def _run(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        try:
            with (
                httpx.Client(base_url=url, timeout=120, headers=headers) as client,
                client.stream("POST", "/v1/chat/completions", json=body) as r,
            ):
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    frame = json.loads(line[6:])
                    if "error" in frame:
                        self.error = str(frame["error"].get("message"))
                        continue
                    choice = frame["choices"][0]
                    self.text += choice["delta"].get("content") or ""
                    self.finish = choice.get("finish_reason") or self.finish
                    if self.text:
                        self.started.set()
        except Exception as err:  # the test fails on it, named
            self.failure = repr(err)
        finally:
            self.started.set()
            self.done.set()

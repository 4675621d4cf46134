"""``agentconsole serve --runtime sglang`` over real HTTP (the real engine on CPU, tiny model):
the door keeps room for each prefix one program computed and another read from the engine's
cache (``GET /v1/operator/door`` ``reserved_tokens``), from the segments SGLang's probe names
(chained digests of the token ids under the tenant's ``cache_salt``). The server is the e2e
package's shared ``sglang_serve``: the room is read as a lower bound (other modules'
programs may hold room of their own), and this module's prefixes are random text no other
program shares."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServeProcess, random_words

pytestmark = [pytest.mark.e2e, pytest.mark.sglang]
TENANT = {"Authorization": "Bearer sk-dev"}
OPERATOR = {"Authorization": "Bearer sk-operator"}


def _first_call(http: httpx.Client, program: str, content: str) -> int:
    """``program``'s first call; the prompt tokens the engine served from cache."""
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    response = http.post("/v1/chat/completions", json=body, headers={"X-Program-Id": program})
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


def _reserved(http: httpx.Client) -> int:
    door = http.get("/v1/operator/door", headers=OPERATOR).json()
    assert door["enabled"] is True  # serve's default: the door on under cp-cache
    reserved = door["reserved_tokens"]
    assert isinstance(reserved, int)
    return reserved


def test_the_door_keeps_room_for_each_prefix_programs_share(sglang_serve: ServeProcess) -> None:
    """Two repositories, each read by two programs of one tenant: the room for both (the
    rule before kept the larger one only)."""
    http = httpx.Client(base_url=sglang_serve.url, headers=TENANT, timeout=120)
    shared = []
    for seed in (23, 24):  # about 960 tokens each: the 2,048-token pool holds one at a time
        repository = random_words(150, seed)
        # what the first program computes is its own, counted in its size
        assert _first_call(http, f"reserve-{seed}-a", f"{repository}\nthe first task") < 100
        shared.append(_first_call(http, f"reserve-{seed}-b", f"{repository}\nthe second task"))
    assert min(shared) > 800  # each second program read the first one's KV
    # their sizes leave the repositories out; the door's budget keeps room for both instead
    # (absolute: other modules' programs only add room of their own)
    assert _reserved(http) >= sum(shared) - 128

"""The real SGLang engine (CPU) refuses a request before queueing it (its
``SamplingParams.verify`` raises ``ValueError`` from ``generate_request``): the call ends as
SGLang's 400 abort of it with SGLang's own message, and the engine serves the next call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentconsole.scheduler.runtime import GenerationRequest
from tests.sglang.helpers import consume, ticket

pytestmark = pytest.mark.sglang


def test_a_request_sglang_refuses_ends_refused_with_its_message(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    # a sampling entry SGLang's verify refuses (min_p is in [0, 1]); what the chat format
    # adds to a request travels in ``sampling``, past the API's validation
    t = ticket("refused")
    bad = GenerationRequest(t, "hello there", max_tokens=4, cache_namespace="ta",
                            sampling={"min_p": 1.5})  # fmt: skip
    outcome = run(consume(rt, bad))
    result = outcome.result
    assert result.finish_reason == "abort"
    assert result.engine_abort_status == 400
    assert "min_p must be in [0, 1]" in result.engine_abort_message
    assert outcome.tokens == 0
    assert result.prefilled_tokens == 0
    assert t.call_id not in rt._calls
    good = GenerationRequest(ticket("after"), "hello there", max_tokens=4, cache_namespace="ta")
    assert run(consume(rt, good)).result.finish_reason in ("stop", "length")

"""``serve --runtime sim``: a call's answer is cached after its prompt, as SGLang's radix cache
holds a finished request's prompt and output, so an agent's next prompt (the same text, the
answer as its assistant turn, then the tool result) reads the answer from cache. Before, the
answer was cached under a key no prompt could match, and every next call prefilled it again."""

from __future__ import annotations

import asyncio
import time

from agentconsole.scheduler.runtime import GenerationRequest, Prompt
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.registry import RuntimeOptions, create_runtime
from agentconsole.server.runtime.sim.live import SimLiveRuntime
from agentconsole.server.runtime.sim.live_text import (
    BLOCK_CHARS,
    answered_blocks,
    count_tokens,
    output_pieces,
    prompt_blocks,
)


def test_an_answer_of_n_tokens_counts_n_tokens_in_the_next_prompt() -> None:
    """The answer was a lorem word a token (6.5 characters), the tokenizer 4 characters a
    token: an answer of 5,000 tokens counted 8,100 in its program's KV and next prompt."""
    for prompt in ("hello", "tell me more " * 40, "x"):
        for tokens in (1, 7, 64, 5000):
            text = "".join(output_pieces(prompt, tokens, allow_tool_call=False))
            assert count_tokens(text) == tokens


def test_answered_blocks_are_the_blocks_of_prompt_and_answer() -> None:
    for prompt_chars in (0, 100, BLOCK_CHARS, 3 * BLOCK_CHARS + 17):
        prompt = "".join(chr(97 + i % 26) for i in range(prompt_chars))
        answer = "lorem ipsum " * 60
        blocks = prompt_blocks(prompt, "t", public_chars=BLOCK_CHARS)
        assert answered_blocks(blocks, prompt, answer, "t", BLOCK_CHARS) == prompt_blocks(
            prompt + answer, "t", public_chars=BLOCK_CHARS
        )


def _request(call_id: str, prompt: str) -> GenerationRequest:
    pid, node, attempt = call_id.split("/")
    ticket = CallTicket(call_id, pid, node, "t", time.time(), int(attempt))
    return GenerationRequest(ticket, prompt, max_tokens=200, cache_namespace="t")


def test_the_next_prompt_reads_the_previous_answer_from_cache() -> None:
    async def scenario() -> tuple[int, int, int]:
        runtime = create_runtime("sim", RuntimeOptions(extra={"time_scale": 0.0}))
        assert isinstance(runtime, SimLiveRuntime)
        await runtime.start()
        prompt = "system: you are an agent. " * 80 + "user: fix the bug\nassistant: "
        first = await runtime.submit(_request("p/n1/1", prompt)).result()
        answer = first.text
        follow = prompt + answer + "\ntool: the tests pass\nassistant: "
        probe = runtime.probe("p", Prompt(follow, len(follow) // 4), "t")
        await runtime.stop()
        return len(prompt + answer), probe.cached_tokens, probe.prompt_tokens

    answered_chars, cached, total = asyncio.run(scenario())
    # every whole block of the prompt and its answer is cached (4 characters a token)
    assert cached >= (answered_chars // BLOCK_CHARS) * BLOCK_CHARS // 4
    assert cached < total

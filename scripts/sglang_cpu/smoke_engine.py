"""Smoke test of SGLang 0.5.23's in-process Engine on CPU with agentconsole's tiny model.

Run after scripts/install_sglang_cpu.sh:  .venv/bin/python scripts/sglang_cpu/smoke_engine.py
Makes a tiny model in a temp dir, starts ``sglang.Engine`` on CPU, runs a batch, a single stream,
a prefix-cache hit, concurrent ``async_generate`` calls with ``rid``/``priority``/``custom_params``,
an abort by rid, and one OpenAI chat completion through SGLang's own chat serving code; prints
timings; checks that no placeholder ``sgl_kernel`` function was called. Exits non-zero on failure.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# SGLang spawns its schedulers, which re-import this file as __mp_main__: no side effects at
# module level beyond these idempotent defaults (they must be set before sglang is imported).
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]

ENGINE_ARGS: dict[str, Any] = {
    "device": "cpu",
    "attention_backend": "torch_native",
    "disable_cuda_graph": True,
    "disable_overlap_schedule": True,
    "max_total_tokens": 4096,  # always bound the KV pool on CPU (else it sizes it from RAM)
    "dtype": "float32",  # the tiny model is fp32; "auto" would downcast fp32 to float16
    "enable_priority_scheduling": True,
    "default_priority_value": 0,  # else requests without a priority get None (and "None" labels)
    "schedule_policy": "fcfs",
    "log_level": "warning",
}


def load_make_tiny_model() -> Any:
    try:
        return importlib.import_module(
            "agentconsole.server.runtime.sglang.tiny_model"
        ).make_tiny_model
    except ImportError:  # package mapping not installed: load the file directly
        path = ROOT / "server" / "runtime" / "sglang" / "tiny_model.py"
        spec = importlib.util.spec_from_file_location("agentconsole_tiny_model", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.make_tiny_model


def show(label: str, meta: dict[str, Any]) -> None:
    keys = (
        "id",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "cached_tokens_details",
        "num_retractions",
        "e2e_latency",
    )
    print(label, json.dumps({k: meta.get(k) for k in keys}, default=str))


async def async_checks(engine: Any) -> None:
    prompt = "<|im_start|>user\nWhat does the scheduler do?<|im_end|>\n<|im_start|>assistant\n"
    calls = [
        engine.async_generate(
            prompt=prompt,
            rid=f"prog{i}/node{i}/0",
            priority=p,
            sampling_params={
                "max_new_tokens": 16,
                "temperature": 0.0,
                "ignore_eos": True,
                "custom_params": {"program": f"prog{i}", "node": f"node{i}"},
            },
        )
        for i, p in enumerate((1, 5, 3))
    ]
    for out in await asyncio.gather(*calls):
        show("ASYNC", out["meta_info"])
        assert out["meta_info"]["completion_tokens"] == 16

    victim = "progX/nodeX/0"
    stream = await engine.async_generate(
        prompt=prompt,
        rid=victim,
        priority=0,
        stream=True,
        sampling_params={"max_new_tokens": 1500, "temperature": 0.0, "ignore_eos": True},
    )
    last: dict[str, Any] = {}
    async for chunk in stream:
        last = chunk
        meta = chunk["meta_info"]
        if meta["completion_tokens"] >= 4 and not meta.get("finish_reason"):
            engine.tokenizer_manager.abort_request(victim)
    show("ABORT", last["meta_info"])
    reason = last["meta_info"]["finish_reason"]
    assert reason, last
    assert reason["type"] == "abort", reason
    assert last["meta_info"]["completion_tokens"] < 1500


async def chat_check(engine: Any) -> None:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat

    Request = importlib.import_module("starlette.requests").Request

    serving = OpenAIServingChat(engine.tokenizer_manager, engine.template_manager)
    request = ChatCompletionRequest(
        model="tiny",
        max_tokens=8,
        temperature=0.0,
        rid="chat/node/0",
        priority=2,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    )
    raw = Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []})
    response = await serving.handle_request(request, raw)
    body = response.model_dump() if hasattr(response, "model_dump") else response
    print("CHAT", json.dumps(body, default=str)[:400])
    assert body["choices"][0]["message"]["content"] is not None, body


def placeholder_log_works(work: Path) -> bool:
    """Check the call log itself: a placeholder called here must raise and log its name."""
    probe = work / "probe.log"
    os.environ["AGENTCONSOLE_SGL_KERNEL_CALL_LOG"] = str(probe)
    try:
        importlib.import_module("sgl_kernel").copy_all_layer_kv_cache_cpu()
    except NotImplementedError:
        return probe.read_text() == "copy_all_layer_kv_cache_cpu\n"
    return False


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="agentconsole-sglang-smoke-") as tmp:
        return run(Path(tmp))


def run(work: Path) -> int:
    call_log = work / "sgl_kernel_calls.log"
    os.environ["AGENTCONSOLE_SGL_KERNEL_CALL_LOG"] = str(call_log)  # inherited by schedulers
    t = time.perf_counter()
    model_dir = load_make_tiny_model()(work / "tiny-llama")
    print(f"MODEL_CREATE {time.perf_counter() - t:.1f}s -> {model_dir}")
    t = time.perf_counter()
    model_dir = load_make_tiny_model()(work / "tiny-llama")
    print(f"MODEL_CREATE_AGAIN {time.perf_counter() - t:.3f}s")

    t = time.perf_counter()
    import sglang

    print(f"IMPORT_SGLANG {time.perf_counter() - t:.1f}s")
    t = time.perf_counter()
    engine = sglang.Engine(model_path=str(model_dir), **ENGINE_ARGS)
    print(f"ENGINE_START {time.perf_counter() - t:.1f}s")
    try:
        tok = engine.tokenizer_manager.tokenizer
        text = tok.apply_chat_template(
            [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
        )
        print("CHAT_TEMPLATE", repr(text), "eos", tok.eos_token_id)

        prompts = [f"Program {i} calls a tool and waits for the result." for i in range(64)]
        sp = {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True}
        engine.generate(prompt=prompts[:2], sampling_params=sp)  # warm-up
        for size in (8, 64):
            rates = []
            for _ in range(3):
                t = time.perf_counter()
                outs = engine.generate(prompt=prompts[:size], sampling_params=sp)
                dt = time.perf_counter() - t
                rates.append(sum(o["meta_info"]["completion_tokens"] for o in outs) / dt)
            print(f"BATCH {size}x32 tokens: best {max(rates):.0f} tok/s, worst {min(rates):.0f}")

        long_prompt = "The scheduler orders requests by program, node and priority. " * 8
        sp1 = {"max_new_tokens": 128, "temperature": 0.0, "ignore_eos": True}
        rates = []
        for _ in range(3):
            t = time.perf_counter()
            out = engine.generate(prompt=long_prompt, sampling_params=sp1)
            rates.append(out["meta_info"]["completion_tokens"] / (time.perf_counter() - t))
        print(f"SINGLE 128 tokens: best {max(rates):.0f} tok/s, worst {min(rates):.0f}")
        show("META", out["meta_info"])
        assert out["meta_info"]["cached_tokens"] > 0, "expected a radix-cache hit"

        engine.loop.run_until_complete(async_checks(engine))
        engine.loop.run_until_complete(chat_check(engine))
        print("FLUSH", engine.flush_cache())
    finally:
        t = time.perf_counter()
        engine.shutdown()
        print(f"SHUTDOWN {time.perf_counter() - t:.1f}s")

    calls = call_log.read_text() if call_log.exists() else ""
    print("SGL_KERNEL_CALLS", repr(calls))
    if calls:
        print("FAIL: placeholder sgl_kernel functions were called", file=sys.stderr)
        return 1
    if not placeholder_log_works(work):
        print("FAIL: the placeholder call log does not work", file=sys.stderr)
        return 1
    print("SMOKE OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

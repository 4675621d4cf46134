"""The GPU lane: calibrate the simulator on a real-size model, then program-aware vs stock SGLang.

Run on a machine with a CUDA GPU and the GPU install profile (``pip install '.[sglang]'``):
``python benchmarks/gpu_lane.py --out OUT [--quick]``. Nothing is downloaded:

1. a model folder at Llama-3.1-8B size is written locally (``config.json`` with the published
   8B architecture, plus the tiny model's byte-level tokenizer, whose ids all fall inside the
   8B vocabulary) and served with ``--load-format dummy`` (random bf16 weights, real shapes,
   real kernels, real KV sizes);
2. with the agentconsole plugin on, engine steps are measured over a grid of batch sizes x
   context lengths (fresh and cached prefixes; decode step = interval between step starts, as
   SGLang's overlap scheduler hides CPU work), the cost model is fitted and
   ``OUT/<gpu>__llama-3.1-8b__tp1.calibrated.json`` written;
3. seed-mix, scaled (1/10 of the tokens: the 80K prefix becomes 8K; tools 5x faster), is
   replayed in wall-clock time on that engine (policy ``cp-cache``), then on stock SGLang with
   ``fcfs`` and with ``lpm`` (plugin disabled), each engine started fresh with the same KV pool;
4. the same workload runs in the simulator with the fitted profile, for the program-E2E error.

Everything lands in ``OUT/gpu_lane.json`` (and is printed). ``--quick`` shrinks the grid and the
workload to fit a short lease. ``--hicache-gb N`` gives the plugin's engine a HiCache host tier
(not yet run on a GPU: the first lease should try it once). ``tests/gpu/test_gpu_lane.py``
runs the lane (skipped without a GPU).

It needs SGLang's CUDA stack on the machine (torch 2.14.1, ``sglang-kernel`` 0.4.10: about
1.2 GB of wheels). Where that cannot be brought (the first lease had torch 2.11, no registry
and 64 MiB a call), ``benchmarks/gpu_kernels.py`` measures the cost model's roofline with
PyTorch alone (docs/BENCHMARKS.md section 9).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agentconsole.calibrate import sim_config_of
from agentconsole.replay.served import replay_as_served
from agentconsole.sample_traces.format import TraceProgram
from agentconsole.scheduler.metrics import outcome_summary
from agentconsole.scheduler.policies import DEFAULT_POLICY
from agentconsole.server.runtime.sglang.adapter import SGLangRuntime
from agentconsole.server.runtime.sglang.calibration import (
    GridPoint,
    fit_profile,
    measure_call_overhead,
    measure_grid,
    step_errors,
    with_call_overhead,
)
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.replay import LiveReplay
from agentconsole.server.runtime.sglang.textbook import TextBook
from agentconsole.server.runtime.sglang.tiny_model import make_tiny_model
from agentconsole.server.runtime.sglang.workload_scale import scaled_workload
from agentconsole.server.runtime.sim.costmodel import CostModel
from agentconsole.server.runtime.sim.profile import Profile, save_profile
from agentconsole.server.runtime.sim.simulation import CostServiceModel, Simulation

MODEL = "llama-3.1-8b"
#: the published Llama-3.1-8B architecture (no weights: served with --load-format dummy)
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "bfloat16",
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
GRID = tuple(GridPoint(b, c, 64) for b in (1, 8, 32) for c in (512, 2048, 8192))
QUICK_GRID = tuple(GridPoint(b, c, 32) for b in (1, 16) for c in (1024, 4096))
TOKEN_FACTOR, TIME_FACTOR, MAX_CONTEXT = 0.1, 0.2, 30000
ARMS = (
    ("agentconsole", True, "fcfs"),
    ("sglang-fcfs", False, "fcfs"),
    ("sglang-lpm", False, "lpm"),
)


def gpu_preset() -> str:
    """The simulator's GPU preset for this machine's GPU (H200 unless it is an H100)."""
    import torch

    name = torch.cuda.get_device_name(0)
    return "H100-80GB" if "H100" in name else "H200-141GB"


def write_model_dir(out: Path) -> Path:
    """A served-with-dummy-weights Llama-3.1-8B folder with the tiny model's tokenizer."""
    tiny = make_tiny_model(Path(tempfile.mkdtemp(prefix="agentconsole-tok-")) / "tiny")
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (tiny / name).exists():
            shutil.copy(tiny / name, out / name)
    tiny_cfg = json.loads((tiny / "config.json").read_text())
    config = {**LLAMA_8B, **{k: tiny_cfg[k] for k in ("bos_token_id", "eos_token_id")}}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    generation = json.loads((tiny / "generation_config.json").read_text())
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    return out


def settings(model: Path, plugin: bool, policy: str, args: argparse.Namespace) -> EngineSettings:
    return EngineSettings(
        model_path=model,
        device="cuda",
        plugin=plugin,
        schedule_policy=policy,
        max_total_tokens=args.max_total_tokens,
        max_running_requests=args.max_running,
        enable_metrics=False,  # SGLang's metrics cannot be registered twice in one process
        hicache_size_gb=args.hicache_gb if plugin and args.hicache_gb > 0 else None,
        overrides={"load_format": "dummy", "context_length": 32768, "cuda_graph_max_bs_decode": 64},
    )


async def replay(runtime: SGLangRuntime, trace: list[TraceProgram], plugin: bool) -> Any:
    """Stock SGLang: the trace's agents calling it. Ours: serve's own program glue (driver,
    tool-wait advisor, door on, as serve's default), as the CPU lane measures it."""
    book = TextBook(runtime.engine.tokenizer_manager.tokenizer, seed=0)
    if plugin:
        return (
            await replay_as_served(runtime, trace, book, policy=DEFAULT_POLICY, door=True)
        ).outcomes
    service = CostServiceModel(CostModel.from_profile(f"{gpu_preset()}__{MODEL}__tp1"))
    return await LiveReplay(runtime, trace, book, service).run()


def simulate(trace: list[TraceProgram], profile: Profile, server_args: Any) -> dict[str, float]:
    """The same trace in the simulator, configured as the engine ran (its KV pool, batch and
    chunk sizes: ``calibrate``'s rule) and costed by ``profile``."""
    result = Simulation(trace, CostModel.from_profile(profile), sim_config_of(server_args)).run()
    return {
        pid: p.finished_at - p.created_at
        for pid, p in result.controller.programs.items()
        if p.finished_at is not None
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = write_model_dir(out / "llama-3.1-8b-dummy")
    preset = (gpu_preset(), MODEL)
    trace = scaled_workload(
        "seed-mix",
        args.programs,
        args.rate,
        args.seed,
        token_factor=TOKEN_FACTOR,
        time_factor=TIME_FACTOR,
        max_context=MAX_CONTEXT,
    )
    report: dict[str, Any] = {"gpu": preset[0], "model": MODEL, "programs": len(trace), "arms": {}}
    profile: Profile | None = None
    server_args: Any = None
    for name, plugin, policy in ARMS:
        started = time.perf_counter()
        runtime = SGLangRuntime(settings(model, plugin, policy, args), policy=DEFAULT_POLICY)
        await runtime.start()
        try:
            if plugin:  # calibrate on the plugin's engine first (it records the steps)
                book = TextBook(runtime.engine.tokenizer_manager.tokenizer, seed=1)
                grid = QUICK_GRID if args.quick else GRID
                points = await measure_grid(runtime, book, grid, repeats=1, decode_by_interval=True)
                profile = with_call_overhead(
                    fit_profile(
                        points,
                        preset=preset,
                        status="measured by benchmarks/gpu_lane.py (dummy weights)",
                    ),
                    await measure_call_overhead(runtime, book),
                )
                path = out / f"{preset[0]}__{MODEL}__tp1.calibrated.json"
                save_profile(profile, path)
                errors = [abs(e) for _, e in step_errors(profile, points)]
                report["profile"] = str(path)
                report["efficiency"] = profile.to_json()["efficiency"]
                report["step_mean_abs_error"] = statistics.fmean(errors)
                report["step_max_abs_error"] = max(errors)
                await runtime.flush_cache()
                server_args = runtime.engine.server_args
            outcomes = await replay(runtime, trace, plugin)
        finally:
            await runtime.stop()
        summary = outcome_summary(outcomes)
        summary["wall_s"] = time.perf_counter() - started
        report["arms"][name] = summary
        if plugin and profile is not None:
            real = {o.program_id: o.e2e_s for o in outcomes if o.success}
            sim = simulate(trace, profile, server_args)
            common = [p for p in real if p in sim and real[p] > 0]
            report["e2e_mean_abs_error"] = statistics.fmean(
                abs(sim[p] / real[p] - 1.0) for p in common
            )
        print(f"{name}: {json.dumps(summary)}", flush=True)
    ours = report["arms"]["agentconsole"]["e2e_p95_s"]
    report["p95_ratio"] = {
        name: ours / arm["e2e_p95_s"] if arm["e2e_p95_s"] else None
        for name, arm in report["arms"].items()
    }
    (out / "gpu_lane.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quick", action="store_true", help="small grid and workload")
    p.add_argument("--programs", type=int, default=None)
    p.add_argument("--rate", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-running", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=196608)
    p.add_argument(
        "--hicache-gb",
        type=int,
        default=0,
        help="HiCache host KV tier per rank for the plugin's engine (0: off); offload decisions "
        "then demote to host memory",
    )
    args = p.parse_args(argv)
    if args.programs is None:
        args.programs = 16 if args.quick else 48
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))

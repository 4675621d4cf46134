"""The commands that start one SGLang worker (with the plugin and its endpoint) and
sglang-router in front of several, as docs/DEPLOY.md describes and the tests run them.

A worker is ``python -m sglang.launch_server`` with the server arguments the in-process adapter
gives ``sglang.Engine`` (``engine_config.engine_kwargs``: the plugin's priority scheduling and
eviction strategy, the CPU engine's settings) and the same process environment
(``engine_config.engine_env``: the plugin's state folder, local to the node), plus
``--enable-cache-report`` (cached tokens in the usage) and ``AGENTCONSOLE_SGLANG_NODE_API=1``
(``node_api``). The router runs ``--policy manual`` (a program's calls go where its routing key
was first assigned) with ``--assignment-mode min_load`` (a new key goes to the worker with the
fewest requests in flight; ``min_group`` counts keys per candidate pair, which with two workers
is always a tie, so every new key went to the first worker) and, with ``dp_aware``, treats each
data-parallel rank of a worker as its own target.

``python -m agentconsole.server.runtime.sglang.cluster.launch worker|router ...`` replaces
itself with the command (``--print`` shows it instead).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from agentconsole.server.runtime.sglang.cluster.node_api import NODE_API_ENV
from agentconsole.server.runtime.sglang.engine_config import (
    EngineSettings,
    engine_env,
    engine_kwargs,
)

_NOT_FLAGS = {"custom_sigquit_handler"}  # in-process only (a callable)


def worker_command(settings: EngineSettings, *, host: str, port: int) -> list[str]:
    """``python -m sglang.launch_server ...`` for one worker of ``settings``."""
    cmd = [sys.executable, "-m", "sglang.launch_server"]
    for name, value in engine_kwargs(settings).items():
        if name in _NOT_FLAGS or value is None or value is False:
            continue
        cmd.append("--" + name.replace("_", "-"))
        if value is not True:
            cmd.append(str(value))
    return [*cmd, "--enable-cache-report", "--host", host, "--port", str(port)]


def worker_env(settings: EngineSettings, state_dir: Path) -> dict[str, str]:
    """The worker's whole environment: this one, with the engine's and the endpoint's."""
    env = dict(os.environ)
    for name, value in engine_env(settings, state_dir).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env[NODE_API_ENV] = "1"
    if settings.is_cpu:
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    return env


def router_command(
    *, host: str, port: int, workers: Sequence[str], tokenizer: Path, dp_aware: bool = True
) -> list[str]:
    """``python -m sglang_router.launch_router ...`` in front of ``workers``; ``tokenizer``: a
    local model folder (else the router tries to download one)."""
    cmd = [sys.executable, "-m", "sglang_router.launch_router", "--host", host]
    cmd += ["--port", str(port), "--worker-urls", *workers]
    cmd += ["--policy", "manual", "--assignment-mode", "min_load"]
    cmd += ["--model-path", str(tokenizer), "--tokenizer-path", str(tokenizer)]
    cmd += ["--log-level", "warn"]
    return [*cmd, "--dp-aware"] if dp_aware else cmd


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    # ``--print`` before or after the subcommand (the docs give it after)
    printing = argparse.ArgumentParser(add_help=False)
    printing.add_argument(
        "--print",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the command, do not run it",
    )
    parser = argparse.ArgumentParser(prog="agentconsole-cluster", parents=[printing])
    sub = parser.add_subparsers(dest="what", required=True)
    worker = sub.add_parser(
        "worker", parents=[printing], help="one SGLang server with the agentconsole plugin"
    )
    worker.add_argument("--model", type=Path, required=True)
    worker.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    worker.add_argument("--dp", type=int, default=1, help="data-parallel ranks (GPUs)")
    worker.add_argument("--max-total-tokens", type=int, default=None)
    worker.add_argument("--state-dir", type=Path, required=True, help="local to this node")
    worker.add_argument("--host", default="0.0.0.0")
    worker.add_argument("--port", type=int, default=30000)
    router = sub.add_parser(
        "router", parents=[printing], help="sglang-router in front of the workers"
    )
    router.add_argument("--worker-urls", nargs="+", required=True)
    router.add_argument("--tokenizer", type=Path, required=True, help="local model folder")
    router.add_argument("--host", default="0.0.0.0")
    router.add_argument("--port", type=int, default=30000)
    router.add_argument("--no-dp-aware", action="store_true")
    args = parser.parse_args(argv)
    args.print = getattr(args, "print", False)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    if args.what == "worker":
        settings = EngineSettings(
            model_path=args.model,
            device=args.device,
            dp=args.dp,
            max_total_tokens=args.max_total_tokens,
        )
        args.state_dir.mkdir(parents=True, exist_ok=True)
        cmd = worker_command(settings, host=args.host, port=args.port)
        env = worker_env(settings, args.state_dir)
    else:
        cmd = router_command(
            host=args.host,
            port=args.port,
            workers=args.worker_urls,
            tokenizer=args.tokenizer,
            dp_aware=not args.no_dp_aware,
        )
    if args.print:
        print(shlex.join(cmd))
        return
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()

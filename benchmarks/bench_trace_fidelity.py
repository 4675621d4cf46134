"""What-if replay fidelity: a live session, exported as a trace, replayed by ``bench``.

1. ``agentconsole serve --runtime sim`` (real time, four tenant keys, a fresh store);
2. agents play a generated ``seed-mix`` trace against it over HTTP (``agentconsole.replay``:
   chat calls with program headers, tools through the gateway);
3. the server stops; ``agentconsole trace export`` rebuilds the session from the store;
4. ``agentconsole bench --trace`` replays it in virtual time with the server's settings
   (same policy, tool-wait policy, GPU and model; the program door as ``serve``'s default,
   ``limits.program_admission``: on since 2026-12-03).

With no flags both sides run serve's defaults (scheduling policy, tool-wait policy, door), read
from the project rather than copied, so the session measured is the one ``serve`` runs.

Prints the live P50/P95 program E2E (from the store: a program's creation to its finish) and
the replayed ones, with their ratios; exits 1 when a ratio is off by more than ``--tolerance``.

    .venv/bin/python benchmarks/bench_trace_fidelity.py [--programs 24] [--rate 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb
import httpx

from agentconsole.kvtiers.toolwait import DEFAULT_TOOL_WAIT_POLICY
from agentconsole.replay import ReplayOptions, run_replay
from agentconsole.sample_traces import dump_trace, generate
from agentconsole.scheduler.metrics import percentile
from agentconsole.scheduler.policies import DEFAULT_POLICY
from agentconsole.server.whatif import export_trace
from agentconsole.settings import LimitsSection

CLI = str(Path(sys.executable).with_name("agentconsole"))
TENANTS = ("tenant-a", "tenant-b", "tenant-c", "tenant-d")
#: seed-mix made shorter (fewer rounds, 10K-token contexts) so a session takes about a minute
WORKLOAD = {
    "serial_rounds": 4,
    "fanout_stages": 1,
    "task_context_tokens": 6000,
    "shared_prefix_tokens": 3000,
    "tenant_prefix_tokens": 1000,
    "p_cancel": 0.0,
}


def _serve(
    db: Path, config: Path, policy: str, kv_policy: str
) -> tuple[subprocess.Popen[str], str]:
    args = [CLI, "serve", "--config", str(config), "--runtime", "sim", "--db", str(db),
            "--port", "0", "--no-tui", "--policy", policy, "--kv-policy", kv_policy]  # fmt: skip
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "agentconsole serving on " in line:
                found.append(line.rsplit(" ", 1)[-1].strip())
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60):
        proc.kill()
        raise RuntimeError("serve did not start")
    url = found[0]
    deadline = time.monotonic() + 60
    while httpx.get(url + "/ready", timeout=10).status_code != 200:
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("serve never became ready")
        time.sleep(0.1)
    return proc, url


def _live_e2e(db: Path) -> list[float]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT finished_at - created_at FROM programs WHERE state = 'finished'"
        ).fetchall()
    finally:
        con.close()
    return [float(r[0]) for r in rows]


def replay_command(trace: Path, out: Path, policy: str, kv_policy: str) -> list[str]:
    """``bench`` on the exported session with the server's settings: its policies, and its
    door as the served config leaves it (the default, since the config sets no limits)."""
    door = "--admission" if LimitsSection().program_admission else "--no-admission"
    return [CLI, "bench", "--trace", str(trace), "--policies", policy, "--kv-policy", kv_policy,
            door, "--jobs", "1", "--json", str(out)]  # fmt: skip


def _replayed(trace: Path, out: Path, policy: str, kv_policy: str) -> dict[str, float]:
    command = replay_command(trace, out, policy, kv_policy)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    run = json.loads(out.read_text())["policies"][policy]
    return {"p50": float(run["e2e_p50_s"]), "p95": float(run["e2e_p95_s"])}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; with no flags, the session is serve's as it runs by default."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=24)
    parser.add_argument("--rate", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    # serve's own defaults, read rather than copied, so the session measured is serve's
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--kv-policy", default=DEFAULT_TOOL_WAIT_POLICY)
    parser.add_argument("--tolerance", type=float, default=0.10)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="trace-fidelity-"))
    keys = {tenant: f"sk-{tenant}" for tenant in TENANTS}
    config = work / "serve.toml"
    pairs = ", ".join(f'"{key}" = "{tenant}"' for tenant, key in keys.items())
    config.write_text(f'[auth]\ntenant_keys = {{{pairs}}}\noperator_keys = ["sk-op"]\n')
    programs = generate("seed-mix", n_programs=args.programs, rate=args.rate, seed=args.seed,
                        **WORKLOAD)  # fmt: skip
    dump_trace(programs, work / "input.jsonl")
    db = work / "session.duckdb"
    proc, url = _serve(db, config, args.policy, args.kv_policy)
    try:
        summary = asyncio.run(run_replay(url, keys, programs, options=ReplayOptions()))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    exported = work / "exported.jsonl"
    rebuilt = export_trace(db, exported)
    live = _live_e2e(db)
    replayed = _replayed(exported, work / "bench.json", args.policy, args.kv_policy)
    print(f"session: {summary.count('finished')}/{len(programs)} programs finished live, "
          f"{len(rebuilt)} exported, wall {summary.wall_s:.1f} s ({work})")  # fmt: skip
    ok = True
    print(f"{'':6}{'live (s)':>10}{'replayed (s)':>14}{'ratio':>8}")
    for name, q in (("p50", 50), ("p95", 95)):
        assert live, "no program finished live"
        measured = percentile(live, q)
        ratio = replayed[name] / measured
        ok &= abs(ratio - 1) <= args.tolerance
        print(f"{name:6}{measured:>10.2f}{replayed[name]:>14.2f}{ratio:>8.3f}")
    print(("within" if ok else "NOT within") + f" {args.tolerance:.0%}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

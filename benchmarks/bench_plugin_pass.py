"""The plugin's Python on each SGLang scheduler pass: ranking the waiting queue and planning a
preemption, with the key memo (serve's default) against without it, side by side; and what
writing its status costs (every queued request, ranked for the report).

With priority preemption on, SGLang orders its waiting queue on every pass, each decode step
(``get_new_batch_prefill``), and tries to preempt for the head when the batch is full. The
plugin's hooks for both run in the scheduler process between forward passes; on a GPU a
decode step of an 8B model at batch 128 takes 14-30 ms (section 9's H200 measurements), so a
pass's Python is paid against that. This drives two ``PluginState`` objects, one with the
key memo and one with it off (``KeyMemo(horizon_s=0)``), through the same passes of a queue
that changes as a busy engine's does: every pass the clock moves one decode step, calls
arrive and the head is admitted, the tenants' shares move with the service credited, and
time carries calls into the urgency band and into starvation. Each pass both orders must be
the same (checked); each hook call is timed on its own, the two states alternating; every
fifth pass each writes its status file. "status every" is how often the plugin then writes it
at most (``STATUS_TIME_SHARE`` of the scheduler's time; never more often than every
``STATUS_INTERVAL_S`` unless a control change is waiting to be acknowledged). The line below
the table times the accounting of one decode step of the running batch (``on_step``, its
forward and result phases: the tenants' credit, each program's last context). "status share"
drives one state with a control version written on every pass (serve writes one on each
tool-wait hint) and gives the share of the passes' time spent writing the status when every
version is acknowledged at once (the plugin until 2026-12-05) and when only the versions a
caller waits for are (an operator's action; none here).

No SGLang is needed: requests are duck-typed as the plugin reads them, with tickets like
``seed-mix``'s calls (a third with a deadline, a third with a drain). The live cache match
(at most 128 head requests every 8 passes) is left out: it reads SGLang's tree and the memo
does not change it. Run: ``.venv/bin/python benchmarks/bench_plugin_pass.py``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rich.console import Console
from rich.table import Table

from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.control import (
    CONTROL_FILE,
    ControlState,
    ControlWriter,
    write_json_atomic,
)
from agentconsole.server.runtime.sglang.keymemo import KeyMemo
from agentconsole.server.runtime.sglang.lockstep import Layout
from agentconsole.server.runtime.sglang.plugin_state import (
    STATUS_INTERVAL_S,
    STATUS_TIME_SHARE,
    PluginState,
)

TENANTS = ("t0", "t1", "t2", "t3")
DECODE_STEP_S = 0.02  # the clock's move per pass


def _request(n: int, sent: float, rnd: random.Random) -> Any:
    """A request as SGLang holds it, carrying a ticket queued at ``sent``."""
    ticket = CallTicket(
        f"p{n}/n/1",
        f"p{n}",
        "n",
        rnd.choice(TENANTS),
        arrival=sent,
        prompt_tokens=rnd.randint(1_000, 90_000),
        cached_tokens=rnd.randint(0, 1_000),
        expected_output_tokens=rnd.uniform(50, 800),
        service_estimate_s=rnd.uniform(0.05, 4),
        restore_cost_s=rnd.uniform(0, 0.5),
        program_service_s=rnd.uniform(0, 20),
        program_wait_s=rnd.uniform(0, 5),
        remaining_cp_s=rnd.uniform(0, 120),
        unlock_value=rnd.randint(0, 3),
        deadline=sent + rnd.uniform(10, 120) if rnd.random() < 1 / 3 else None,
        drain_s=rnd.uniform(5, 60) if rnd.random() < 1 / 3 else 0.0,
    )
    params = wire.encode(ticket, clock_offset=0.0)
    params[wire.PARAMS_KEY]["sent"] = sent
    return SimpleNamespace(
        rid=ticket.call_id,
        sampling_params=SimpleNamespace(custom_params=params),
        origin_input_ids=[0] * 8,
        output_ids=[0] * rnd.randint(0, 400),
        extra_key=None,
        cache_salt=f"t:{ticket.tenant}",
        priority=0,
        finished=lambda: False,
    )


def _state(memo: bool) -> PluginState:
    folder = Path(tempfile.mkdtemp(prefix="bench-plugin-pass-"))
    write_json_atomic(folder / CONTROL_FILE, ControlState(version=1).to_json())
    state = PluginState(folder, Layout(tp_size=1, tp_rank=0))
    if not memo:
        state.key_memo = KeyMemo(horizon_s=0.0)
    return state


def _timed(call: Callable[[], object]) -> float:
    """Milliseconds ``call`` took."""
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1e3


def step_ms(running_n: int, passes: int, seed: int) -> float:
    """Median milliseconds of the plugin's accounting of one decode step of ``running_n``
    requests (``on_step``: its forward phase, then its result's). Apart from the compared
    states: ``on_step`` credits the tenants at the wall clock, not this benchmark's."""
    rnd = random.Random(seed)
    state = _state(memo=True)
    running = [_request(n, 1_000_000.0, rnd) for n in range(running_n)]
    batch = SimpleNamespace(
        reqs=running, forward_mode=SimpleNamespace(is_extend=lambda: False), extend_lens=None
    )

    def step() -> None:
        state.on_step(batch, 0.0, DECODE_STEP_S, forward=True)
        state.on_step(batch, 0.0, DECODE_STEP_S, forward=False)

    return statistics.median(_timed(step) for _ in range(passes))


def run(waiting_n: int, running_n: int, passes: int, seed: int) -> dict[str, Any]:
    """Per-pass milliseconds of each hook for both states, and the memo's reuse."""
    rnd = random.Random(seed)
    wall = 1_000_000.0
    # the queue as a busy engine holds it: calls queued over the last minute
    waiting = [_request(n, wall - rnd.uniform(0, 60), rnd) for n in range(waiting_n)]
    running = [_request(10**7 + n, wall - rnd.uniform(0, 30), rnd) for n in range(running_n)]
    states = {"off": _state(False), "on": _state(True)}
    queues = {name: list(waiting) for name in states}
    hooks = ("sort", "plan", "status")
    scheduler = {
        name: SimpleNamespace(
            waiting_queue=queues[name],
            running_batch=SimpleNamespace(reqs=running),
            tree_cache=None,
            last_batch=None,
            chunked_req=None,
        )
        for name in states
    }
    times: dict[tuple[str, str], list[float]] = {(s, h): [] for s in states for h in hooks}
    arrivals = waiting_n
    for step in range(passes):
        wall += DECODE_STEP_S
        fresh = [_request(arrivals + k, wall, rnd) for k in range(rnd.choice([0, 1, 1, 2]))]
        arrivals += len(fresh)
        admit = rnd.choice([0, 1, 1, 2])
        order: dict[str, list[str]] = {}
        names = list(states) if step % 2 else list(reversed(states))
        for name in names:
            st, queue = states[name], queues[name]
            queue.extend(fresh)
            if step % 10 == 0:  # a step credited to a tenant moves the shares
                st.guard.record_service(TENANTS[step % len(TENANTS)], 1.0, wall)
            times[(name, "sort")].append(_timed(partial(st.sort_waiting, queue, wall)))
            plan = partial(st.plan_preemption, queue[0], running, 10)
            times[(name, "plan")].append(_timed(plan))
            if step % 5 == 0:  # the status file, ranked for the report and written
                write = partial(st.publish, scheduler[name], wall)
                times[(name, "status")].append(_timed(write))
            order[name] = [r.rid for r in queue]
            del queue[:admit]
        if order["on"] != order["off"]:
            raise AssertionError(f"pass {step}: the memo changed the order")
    memo = states["on"].key_memo
    out: dict[str, Any] = {"reused": memo.reused / max(memo.reused + memo.computed, 1)}
    for (name, hook), values in times.items():
        out[f"{name}_{hook}"] = statistics.median(values)
        out[f"{name}_{hook}_p90"] = statistics.quantiles(values, n=10)[-1]
    return out


def status_share(waiting_n: int, running_n: int, passes: int, seed: int, ack_all: bool) -> float:
    """The share of the passes' time the plugin spends writing its status when a control
    version arrives on every pass (the tool-wait hints and re-ranks serve writes on every
    call): ``ack_all`` acknowledges each at once, as the plugin did until 2026-12-05; else
    only the versions a caller waits for are (``ControlState.ack_version``), here none."""
    rnd = random.Random(seed)
    wall = 1_000_000.0
    state = _state(memo=True)
    writer = ControlWriter(state.state_dir, ControlState(version=1))
    queue = [_request(n, wall - rnd.uniform(0, 60), rnd) for n in range(waiting_n)]
    running = [_request(10**7 + n, wall - rnd.uniform(0, 30), rnd) for n in range(running_n)]
    scheduler = SimpleNamespace(
        waiting_queue=queue,
        running_batch=SimpleNamespace(reqs=running),
        tree_cache=None,
        last_batch=None,
        chunked_req=None,
    )
    spent = 0.0
    for step in range(passes):
        wall += DECODE_STEP_S
        queue.append(_request(waiting_n + step, wall, rnd))
        del queue[:1]
        writer.write(ack=ack_all)
        state.refresh(wall, force=True)
        state.sort_waiting(queue, wall)
        spent += _timed(partial(state.write_status_if_due, scheduler, wall)) / 1e3
    return spent / (passes * DECODE_STEP_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiting", default="64,256,1000,4000", help="queue lengths to run")
    parser.add_argument("--running", type=int, default=256, help="requests in the batch")
    parser.add_argument("--passes", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    table = Table(
        title=f"plugin Python per scheduler pass, {args.running} running: median ms (p90)"
    )
    for column in ("waiting", "order off", "order on", "on/off", "plan off", "plan on", "on/off"):
        table.add_column(column, justify="right")
    for column in ("status off", "status on", "status every", "reused"):
        table.add_column(column, justify="right")
    for column in ("status share, ack all", "ack awaited"):
        table.add_column(column, justify="right")
    for n in (int(x) for x in args.waiting.split(",")):
        passes = max(args.passes * 256 // max(n, 256), 30)
        r = run(n, args.running, passes, args.seed)
        cells = [str(n)]
        for hook in ("sort", "plan"):
            off, on = r[f"off_{hook}"], r[f"on_{hook}"]
            cells += [
                f"{off:.2f} ({r[f'off_{hook}_p90']:.2f})",
                f"{on:.2f} ({r[f'on_{hook}_p90']:.2f})",
                f"{on / off:.2f}x",
            ]
        status = r["on_status"]
        every = max(STATUS_INTERVAL_S, status / 1e3 / STATUS_TIME_SHARE)
        cells += [f"{r['off_status']:.2f}", f"{status:.2f}", f"{every:.2f} s"]
        cells.append(f"{r['reused']:.0%}")
        churn = max(passes // 2, 30)
        for ack_all in (True, False):
            share = status_share(n, args.running, churn, args.seed, ack_all)
            cells.append(f"{share:.1%}")
        table.add_row(*cells)
    console = Console(width=160)
    console.print(table)
    step = step_ms(args.running, args.passes, args.seed)
    console.print(f"decode step accounting, {args.running} running: {step:.2f} ms (median)")


if __name__ == "__main__":
    main()

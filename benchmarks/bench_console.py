"""Console benchmark: update cost of the terminal dashboard and the browser page under load.

Run: ``.venv/bin/python benchmarks/bench_console.py [--programs 1000] [--seconds 15]
[--url URL --key KEY]``. Without ``--url`` it starts the test stub (``python -m
tests.ui.stub_server``, in its own process)
with N live programs that advance continuously (``--steps`` program steps every 100 ms, a few
hundred events a second, an overview every second), then a burst of ``--burst`` steps at once.
Goal (issue "Consoles"): median terminal update cost <= 50 ms.

* terminal: the Textual app headless at 160x50 on the programs view (all states), fed by the
  real HTTP client and SSE feed; "update" is one handler applying a message to the state and
  the visible widgets (feed batch, program list, overview), "lag" how late a 50 ms timer fires
  (what the operator feels: rendering and everything else on the UI thread included).
* browser: Debian's headless Chromium on the programs view; "update" is one coalesced render
  pass (JS time), "long tasks" the main-thread tasks over 50 ms seen by a PerformanceObserver.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package

from agentconsole.ui.client.http import HttpConsoleClient
from agentconsole.ui.tui.app import DashboardApp
from tests.ui.chromium import ARGS, CHROMIUM


def auth(key: str) -> dict[str, str]:
    """The bearer header for ``key``."""
    return {"Authorization": f"Bearer {key}"}


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the result table (times in milliseconds)."""

    name: str
    n: int
    p50: float
    p95: float
    worst: float


def row(name: str, seconds: Sequence[float]) -> Row:
    """Summarise durations given in seconds."""
    if not seconds:
        return Row(name, 0, float("nan"), float("nan"), float("nan"))
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[max(0, math.ceil(0.95 * len(ms)) - 1)]  # nearest rank
    return Row(name, len(ms), statistics.median(ms), p95, ms[-1])


@contextlib.contextmanager
def target(args: argparse.Namespace) -> Iterator[tuple[str, str, bool]]:
    """The server to measure: ``--url`` as given, else the live stub in its own process
    (in this process it would compete with the dashboard for the GIL and skew the lag)."""
    if args.url:
        yield args.url, args.key, False
        return
    command = [sys.executable, "-m", "tests.ui.stub_server", "--all-running"]
    command += ["--programs", str(args.programs), "--steps", str(args.steps)]
    root = Path(__file__).resolve().parents[1]
    stub = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert stub.stdout is not None
        line = stub.stdout.readline()
        if "serving on" not in line:
            raise RuntimeError(f"the stub did not start: {line!r}")
        yield line.split("serving on ", 1)[1].strip(), "sk-operator", True
    finally:
        stub.send_signal(signal.SIGINT)
        try:
            stub.wait(timeout=15)
        except subprocess.TimeoutExpired:
            stub.kill()


async def terminal(url: str, key: str, stub: bool, args: argparse.Namespace) -> list[Row]:
    """Run the dashboard headless and collect its handler costs and timer lag."""
    client = HttpConsoleClient(url, key)
    app = DashboardApp(client, url=url, poll_s=1.0)
    lag: list[float] = []
    async with app.run_test(size=(160, 50)) as pilot:
        expected = time.perf_counter() + 0.05

        def probe() -> None:
            nonlocal expected
            now = time.perf_counter()
            lag.append(max(0.0, now - expected))
            expected = now + 0.05

        app.set_interval(0.05, probe)
        await pilot.press("2", "a")
        deadline = time.monotonic() + 30
        while len(app.state.programs) < min(args.programs, 1000) and time.monotonic() < deadline:
            await pilot.pause(0.1)
        app.update_costs.clear()
        lag.clear()
        await pilot.pause(args.seconds)
        steady = list(app.update_costs)
        steady_lag = list(lag)
        app.update_costs.clear()
        lag.clear()
        if stub:
            ticks = {"steps": args.burst // 10, "times": 10}
            httpx.post(f"{url}/stub/tick", json=ticks, headers=auth(key), timeout=60)
        await pilot.pause(3.0)
        burst = list(app.update_costs)
        burst_lag = list(lag)
        shown = len(app.state.programs)
    client.close()
    rows = [
        row(f"tui {kind}", [c for k, c in steady if k == kind])
        for kind in ("feed", "programs", "overview")
    ]
    rows.append(row("tui all updates", [c for _, c in steady]))
    rows.append(row("tui timer lag", steady_lag))
    rows.append(row("tui burst updates", [c for _, c in burst]))
    rows.append(row("tui burst lag", burst_lag))
    print(f"terminal: {shown} programs listed, {len(steady)} updates in {args.seconds:.0f} s")
    return rows


OBSERVER = """
window.__longTasks = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longTasks.push(e.duration);
}).observe({ entryTypes: ["longtask"] });
"""


def browser(url: str, key: str, args: argparse.Namespace) -> list[Row]:
    """Drive the page in headless Chromium and collect its render passes and long tasks."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = chromium.new_page(viewport={"width": 1600, "height": 1000})
        page.add_init_script(OBSERVER)
        page.goto(f"{url}/#key={key}")
        page.goto(f"{url}/#/programs")
        page.select_option("#scope", "all")
        deadline = time.monotonic() + 30
        while page.evaluate("AC.state.programs.size") < min(args.programs, 1000):
            if time.monotonic() > deadline:
                break
            page.wait_for_timeout(200)
        page.evaluate("AC.state.stats.updates.length = 0; window.__longTasks.length = 0")
        page.wait_for_timeout(args.seconds * 1000)
        updates = page.evaluate("AC.state.stats.updates.slice()")
        tasks = page.evaluate("window.__longTasks.slice()")
        rows_shown = page.evaluate("document.querySelectorAll('#programs tbody tr').length")
        chromium.close()
    print(f"browser: {rows_shown} rows on the page, {len(updates)} render passes")
    return [
        row("web render pass", [u / 1000 for u in updates]),
        row("web long tasks (>50 ms)", [t / 1000 for t in tasks]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--steps", type=int, default=40, help="program steps per 100 ms (stub)")
    parser.add_argument("--burst", type=int, default=5000, help="program steps at once (stub)")
    parser.add_argument("--url", default=None)
    parser.add_argument("--key", default="sk-operator")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    with target(args) as (url, key, stub):
        rows = asyncio.run(terminal(url, key, stub, args))
        if not args.no_browser:
            rows += browser(url, key, args)
    print(f"\n{'measure':<26}{'n':>7}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
    for r in rows:
        print(f"{r.name:<26}{r.n:>7}{r.p50:>10.2f}{r.p95:>10.2f}{r.worst:>10.2f}")
    all_updates = next(r for r in rows if r.name == "tui all updates")
    verdict = "PASS" if all_updates.p50 <= 50 else "FAIL"
    print(f"\ngoal: median terminal update <= 50 ms: {verdict} ({all_updates.p50:.2f} ms)")


if __name__ == "__main__":
    main()

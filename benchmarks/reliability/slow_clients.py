"""slow-clients: idle and trickling connections are closed on time, and a normal client is
served meanwhile (the ``server`` timeouts of docs/API.md, ``server/api/connections.py``).

Three kinds of attacker, ``--per-kind`` connections each, opened at once: *idle* (connects,
sends nothing: closed silently after ``timeout_headers_s``), *slow head* (a request line and
headers a byte every ``--trickle`` seconds, never finished: 408 after ``timeout_headers_s``)
and *slow body* (a whole head announcing a body that arrives a byte at a time: 408 after
``timeout_body_s``). The server runs with ``--timeout`` for both (10 s and 60 s by default;
the same code path, only faster). Meanwhile a normal client makes a chat call every
``--probe-every`` seconds; its latency is compared with the same calls before the attack.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .report import Report, ms, percentile
from .serve import TENANT, ServeProcess, start_serve

KINDS = ("idle", "slow head", "slow body")
_HEAD = b"GET /v1/models HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer sk-a\r\nX-Pad: "
_BODY_HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer sk-a\r\n"
    b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--per-kind", type=int, default=300, help="connections of each kind")
    parser.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        help="the server's timeout_headers_s and timeout_body_s",
    )
    parser.add_argument("--trickle", type=float, default=0.5, help="seconds between bytes")
    parser.add_argument("--probe-every", type=float, default=0.1, help="normal calls' period")
    parser.add_argument(
        "--baseline", type=float, default=3.0, help="seconds of normal calls before the attack"
    )
    parser.add_argument(
        "--slack", type=float, default=2.0, help="seconds past the timeout a close may take"
    )


@dataclass(frozen=True, slots=True)
class Closed:
    """How one attacker's connection ended: after how long, with what answer."""

    kind: str
    after_s: float
    status: int | None  # None: closed without an answer


async def _attacker(host: str, port: int, kind: str, trickle: float, give_up: float) -> Closed:
    since = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    received = b""

    async def read() -> None:
        nonlocal received
        while chunk := await reader.read(4096):
            received += chunk

    reading = asyncio.ensure_future(read())
    try:
        if kind == "slow body":
            writer.write(_BODY_HEAD)
        # a header value (or a body) that never ends
        source = itertools.chain(_HEAD if kind == "slow head" else b"", itertools.repeat(49))
        while not reading.done() and time.monotonic() - since < give_up:
            if kind != "idle":
                writer.write(bytes([next(source)]))
            await asyncio.wait({reading}, timeout=trickle)
    except (ConnectionError, OSError):
        pass  # closed by the server while writing
    finally:
        await asyncio.wait({reading}, timeout=1.0)
        reading.cancel()
        writer.close()
    after = time.monotonic() - since
    status = int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else None
    return Closed(kind, after, status)


@dataclass(slots=True)
class Probes:
    """A normal client's chat calls: when each was sent (monotonic) and its latency."""

    sent: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    failures: int = 0

    def slowest_at(self, origin: float) -> float:
        """When the slowest call was sent, in seconds after ``origin``."""
        if not self.latencies:
            return float("nan")
        return self.sent[self.latencies.index(max(self.latencies))] - origin


async def _probe(url: str, until: asyncio.Event, every: float) -> Probes:
    """Chat calls until ``until`` is set."""
    probes = Probes()
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    async with httpx.AsyncClient(base_url=url, headers=TENANT, timeout=30) as client:
        while not until.is_set():
            sent, since = time.monotonic(), time.perf_counter()
            try:
                ok = (await client.post("/v1/chat/completions", json=body)).status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                probes.sent.append(sent)
                probes.latencies.append(time.perf_counter() - since)
            probes.failures += 0 if ok else 1
            await asyncio.sleep(every)
    return probes


@dataclass(frozen=True, slots=True)
class Attack:
    """What the attack saw: the attackers' ends, the normal calls before and during, and the
    server's open file descriptors before, during and after."""

    closed: list[Closed]
    baseline: Probes
    during: Probes
    started: float
    fds: tuple[int, int, int]


async def _attack(server: ServeProcess, args: argparse.Namespace) -> Attack:
    host, port = server.url.removeprefix("http://").split(":")
    calm = asyncio.Event()
    base = asyncio.ensure_future(_probe(server.url, calm, args.probe_every))
    await asyncio.sleep(args.baseline)
    calm.set()
    baseline = await base
    fds_before = server.open_fds()
    over = asyncio.Event()
    probing = asyncio.ensure_future(_probe(server.url, over, args.probe_every))
    give_up = args.timeout * 3 + args.slack + 5
    attackers = [
        _attacker(host, int(port), kind, args.trickle, give_up)
        for kind in KINDS
        for _ in range(args.per_kind)
    ]
    started = time.monotonic()
    gathered = asyncio.gather(*attackers)
    await asyncio.sleep(1.0)
    fds_peak = server.open_fds()
    closed = await gathered
    over.set()
    during = await probing
    await asyncio.sleep(0.5)
    return Attack(closed, baseline, during, started, (fds_before, fds_peak, server.open_fds()))


def run(args: argparse.Namespace, command: str) -> Report:
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="reliability-slow-"))
    timeouts = {"timeout_headers_s": args.timeout, "timeout_body_s": args.timeout}
    server = start_serve(workdir / "slow.duckdb", {"server": timeouts})
    try:
        seen = asyncio.run(_attack(server, args))
    finally:
        server.stop()
    closed, baseline, during, fds = seen.closed, seen.baseline, seen.during, seen.fds
    report = Report("slow-clients", command)
    f = report.figures
    f["attackers"] = (
        f"{len(closed)} ({args.per_kind} x {', '.join(KINDS)}), byte every {args.trickle:g} s"
    )
    f["server timeouts (head / body)"] = f"{args.timeout:g} s / {args.timeout:g} s"
    limit = args.timeout + args.slack
    for kind in KINDS:
        mine = [c for c in closed if c.kind == kind]
        times = [c.after_s for c in mine]
        answers = sorted({str(c.status) for c in mine})
        f[f"{kind}: closed after p50 / max (s); answers"] = (
            f"{percentile(times, 50):.2f} / {max(times):.2f}; {', '.join(answers)}"
        )
        expected = None if kind == "idle" else 408
        late = [round(t, 2) for t in times if t > limit]
        report.check(
            f"{kind}: closed within timeout + {args.slack:g} s", not late, late[:5] or "all"
        )
        wrong = [c.status for c in mine if c.status != expected]
        report.check(
            f"{kind}: answer {expected or 'none (silent close)'}", not wrong, wrong[:5] or "all"
        )
    calm, busy = baseline.latencies, during.latencies
    f["normal calls before: p50 / p99 (ms)"] = (
        f"{ms(percentile(calm, 50))} / {ms(percentile(calm, 99))}"
    )
    f["normal calls during: n, p50 / p99 / max (ms)"] = (
        f"{len(busy)}, {ms(percentile(busy, 50))} / {ms(percentile(busy, 99))} / "
        f"{ms(max(busy, default=float('nan')))}"
    )
    f["slowest normal call sent at (s into the attack)"] = round(during.slowest_at(seen.started), 2)
    f["server fds before / during / after"] = " / ".join(map(str, fds))
    report.check(
        "normal calls all answered during the attack",
        during.failures == 0 and bool(busy),
        f"{during.failures} failed, {len(busy)} answered",
    )
    p99 = percentile(busy, 99)
    report.check("normal calls p99 during the attack <= 1 s", p99 <= 1.0, f"{ms(p99)} ms")
    report.check("server fds back to the baseline (+10)", fds[2] <= fds[0] + 10, fds)
    return report

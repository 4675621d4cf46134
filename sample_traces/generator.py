"""Command line and entry points of the trace generator.

``python -m agentconsole.sample_traces.generator --workload seed-mix --programs 20 --rate 1
--seed 0 --out sample_traces/seed-mix.small.jsonl`` writes one program per line; ``--list``
shows the workloads and their parameters; ``--set key=value`` (value parsed as JSON when it
can be) overrides a workload parameter.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from agentconsole.sample_traces.codec import dump_trace, dumps_program
from agentconsole.sample_traces.registry import (
    WORKLOADS,
    Workload,
    available_workloads,
    generate,
)

__all__ = ["WORKLOADS", "Workload", "available_workloads", "generate", "main"]


def _override(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def _at_least_one(text: str) -> int:
    """A count of programs: an empty trace is one ``bench --trace`` refuses."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agentconsole.sample_traces.generator",
        description="Generate a synthetic agent trace (JSONL, one program per line).",
    )
    p.add_argument("--workload", choices=available_workloads(), default="seed-mix")
    p.add_argument("--programs", type=_at_least_one, default=20, help="number of programs")
    p.add_argument("--rate", type=float, default=1.0, help="mean arrivals per second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="-", help="output path, '-' for stdout")
    p.add_argument("--set", type=_override, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--list", action="store_true", help="list workloads and parameters")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (2 for bad parameters)."""
    args = _parser().parse_args(argv)
    if args.list:
        for w in WORKLOADS.values():
            print(f"{w.name}: {w.summary}")
            for key, default in w.parameters().items():
                print(f"    {key} = {default!r}")
        return 0
    try:
        programs = generate(args.workload, args.programs, args.rate, args.seed, **dict(args.set))
    except (TypeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.out == "-":
        sys.stdout.writelines(dumps_program(p) + "\n" for p in programs)
    else:
        dump_trace(programs, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

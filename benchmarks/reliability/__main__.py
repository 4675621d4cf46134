"""``python -m benchmarks.reliability SCENARIO [options]``: run one scenario, print its
figures and criteria, exit 1 if a criterion is missed (see the package docstring)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from . import crash_loop, fuzz, quota_bypass, slow_clients, soak
from .report import Report

Run = Callable[[argparse.Namespace, str], Report]
SCENARIOS: dict[str, ModuleType] = {
    "crash-loop": crash_loop,
    "soak": soak,
    "fuzz": fuzz,
    "slow-clients": slow_clients,
    "quota-bypass": quota_bypass,
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m benchmarks.reliability", description=__doc__)
    scenarios = top.add_subparsers(dest="scenario", required=True)
    for name, module in SCENARIOS.items():
        doc = (module.__doc__ or name).strip()
        sub = scenarios.add_parser(
            name,
            help=doc.splitlines()[0],
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        sub.add_argument("--json", type=Path, help="also write the report as JSON here")
        sub.add_argument(
            "--workdir", type=Path, help="where the DuckDB files go (default: a temp dir)"
        )
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "benchmarks.reliability", *argv])
    run: Run = SCENARIOS[args.scenario].run
    report = run(args, command)
    print(report.table(), flush=True)
    if args.json is not None:
        report.write_json(args.json)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())

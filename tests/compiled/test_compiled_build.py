"""The compiled build (``scripts/compile.sh``: the simulator's and scheduler's modules through
mypyc, for ``bench``'s speed) is the same program: the modules it should compile are
compiled, every simulator configuration gives the same events and metrics to the last bit, and
the simulator's and scheduler's own suites pass on it.

Slow (the build takes a minute or two on two cores; it is reused while no source changed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPILED = ROOT / "build" / "compiled"
# folders whose modules the build compiles (setup.py's COMPILED_FOLDERS) and what stays Python
COMPILED_FOLDERS = ("scheduler", "kvtiers", "server/runtime/sim")
INTERPRETED = {"__init__", "errors"}
# tests that instrument a class by replacing its methods or subclassing it: compiled classes
# refuse both (their attributes are read-only, interpreted subclasses need the base's consent),
# so these run on the interpreted package only
INSTRUMENTING = [
    "tests/server/sim/test_long_coding_sim.py::test_ideal_prefill_of_a_compaction_rereads_the_summary",
    "tests/server/sim/test_simulation.py::test_an_ended_program_leaves_its_replica",
    "tests/server/test_driver_parity.py::test_bench_and_serve_ask_the_driver_the_same_questions_and_get_the_same_answers",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def compiled() -> dict[str, str]:
    """Build (or reuse) the compiled tree; the environment that puts it first on the path."""
    subprocess.run([str(ROOT / "scripts" / "compile.sh")], cwd=ROOT, check=True, timeout=1200)
    return {**os.environ, "PYTHONPATH": str(COMPILED)}


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in the project root; its output."""
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


def _python(args: list[str], env: dict[str, str] | None = None) -> str:
    done = _run(args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_hot_modules_are_compiled_and_the_plug_ins_are_not(compiled: dict[str, str]) -> None:
    modules = [
        f"agentconsole.{folder.replace('/', '.')}.{path.stem}"
        for folder in COMPILED_FOLDERS
        for path in sorted((ROOT / folder).glob("*.py"))
        if path.stem not in INTERPRETED
    ]
    assert len(modules) > 40
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    print(name, importlib.import_module(name).__file__)\n"
    )
    out = _python(["-c", code, *modules, "agentconsole.scheduler.policies.critical_path"], compiled)
    files = dict(line.split(" ", 1) for line in out.splitlines())
    interpreted = [m for m in modules if files[m].endswith(".py")]
    assert not interpreted, f"not compiled: {interpreted}"
    assert all(files[m].startswith(str(COMPILED)) for m in modules)
    # the policies stay Python: they are the plug-in point
    assert files["agentconsole.scheduler.policies.critical_path"].endswith(".py")


def test_compiled_simulations_give_the_same_events_and_metrics(compiled: dict[str, str]) -> None:
    digest = str(ROOT / "tests" / "compiled" / "digest.py")
    interpreted_out = _python([digest])
    compiled_out = _python([digest], compiled)
    assert interpreted_out.splitlines()[0] == "build: interpreted"
    assert compiled_out.splitlines()[0] == "build: compiled"
    assert len(compiled_out.splitlines()) > 15
    assert compiled_out.splitlines()[1:] == interpreted_out.splitlines()[1:]


def test_the_simulator_and_scheduler_suites_pass_compiled(compiled: dict[str, str]) -> None:
    suites = [
        "tests/kvtiers",
        "tests/scheduler",
        "tests/server/sim",
        "tests/server/test_driver_parity.py",
        "tests/server/test_routing_parity.py",
    ]
    deselect = [arg for test in INSTRUMENTING for arg in ("--deselect", test)]
    done = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", *suites, *deselect], compiled)
    assert done.returncode == 0, done.stdout[-5000:]
    assert " passed" in done.stdout.splitlines()[-1]

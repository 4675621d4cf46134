"""The compiled build (``scripts/compile.sh``: the simulator's and scheduler's modules through
mypyc, for ``bench``'s speed) is the same program: the modules it should compile are
compiled, every simulator configuration gives the same events and metrics to the last bit, and
the simulator's and scheduler's own suites pass on it.

Slow: the build takes about 90 s on two cores (reused while nothing it is built from changed).
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.compiled.digest import CONFIGS

ROOT = Path(__file__).resolve().parents[2]
COMPILED = ROOT / "build" / "compiled"
# tests that instrument a class by replacing its methods or subclassing it: compiled classes
# refuse both (their attributes are read-only, interpreted subclasses need the base's consent),
# so these run on the interpreted package only
INSTRUMENTING = [
    "tests/server/sim/test_long_coding_sim.py::test_ideal_prefill_of_a_compaction_rereads_the_summary",
    "tests/server/sim/test_simulation.py::test_an_ended_program_leaves_its_replica",
    "tests/server/sim/test_sim_max_tokens.py::test_a_declared_max_tokens_caps_the_tickets_expectation_and_none_reads_the_output",
    "tests/server/sim/test_simulation.py::test_a_deferring_block_ends_at_the_first_step_past_the_cap",
    "tests/server/test_driver_parity.py::test_bench_and_serve_ask_the_driver_the_same_questions_and_get_the_same_answers",
    "tests/server/sim/test_sim_models_routers.py::test_a_new_program_is_credited_with_what_the_least_of_its_candidates_holds",
    "tests/server/sim/test_sim_models_routers.py::test_a_new_program_with_one_candidate_is_credited_with_that_models_cache",
]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def _setup_constant(name: str) -> Any:
    """A literal assigned at the top of setup.py (the build's own lists, read not copied)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError(name)


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """``args`` in the project root in a process group of their own (killed whole on a
    timeout: pip's compiler processes too); their output, or the test fails with it."""
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{args[:3]} ran past {timeout} s")
    if proc.returncode != 0:
        pytest.fail(f"{args[:3]} exited {proc.returncode}:\n{out[-5000:]}")
    return out


@pytest.fixture(scope="module")
def compiled() -> dict[str, str]:
    """Build (or reuse) the compiled tree; the environment that puts it first on the path."""
    env = {**os.environ, "PYTHON": sys.executable}
    _run([str(ROOT / "scripts" / "compile.sh")], env, timeout=1200)
    return {**os.environ, "PYTHONPATH": str(COMPILED)}


def test_the_hot_modules_are_compiled_and_the_rest_is_not(compiled: dict[str, str]) -> None:
    interpreted_paths = set(_setup_constant("INTERPRETED"))
    expected = {
        f"agentconsole.{folder.replace('/', '.')}.{path.stem}": f"{folder}/{path.name}"
        for folder in _setup_constant("COMPILED_FOLDERS")
        for path in sorted((ROOT / folder).glob("*.py"))
    }
    plug_in = "agentconsole.scheduler.policies.critical_path"
    code = (
        "import importlib, sys\n"
        "for n in sys.argv[1:]: print(n, importlib.import_module(n).__file__)"
    )
    out = _run([sys.executable, "-c", code, *expected, plug_in], compiled)
    files = dict(line.split(" ", 1) for line in out.splitlines())
    assert all(files[name].startswith(str(COMPILED)) for name in files)
    for name, path in expected.items():
        python = path in interpreted_paths or path.endswith("__init__.py")
        assert files[name].endswith(".py") == python, (name, files[name])
    assert files["agentconsole.scheduler.errors"].endswith(".py")
    # the policies stay Python: they are the plug-in point
    assert files[plug_in].endswith(".py")


def test_compiled_simulations_give_the_same_events_and_metrics(compiled: dict[str, str]) -> None:
    digest = [sys.executable, str(ROOT / "tests" / "compiled" / "digest.py")]
    interpreted_lines = _run(digest).splitlines()
    compiled_lines = _run(digest, compiled).splitlines()
    assert interpreted_lines[0] == "build: interpreted"
    assert compiled_lines[0] == "build: compiled"
    assert len(compiled_lines) == len(CONFIGS) + 1
    assert compiled_lines[1:] == interpreted_lines[1:]


def test_the_simulator_and_scheduler_suites_pass_compiled(compiled: dict[str, str]) -> None:
    suites = [
        "tests/kvtiers",
        "tests/scheduler",
        "tests/server/sim",
        "tests/server/test_driver_parity.py",
        "tests/server/test_routing_parity.py",
        "tests/server/runtime/test_sim_door_credit.py",
    ]
    deselect = [arg for test in INSTRUMENTING for arg in ("--deselect", test)]
    pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *suites, *deselect]
    out = _run([sys.executable, *pytest_args], compiled, timeout=900)
    summary = out.strip().splitlines()[-1]
    assert " passed" in summary, summary  # (a failure already failed _run)

"""Map the design card's folders into one import namespace, ``agentconsole.*``, and optionally
compile the simulator's and scheduler's hot modules with mypyc.

``pyproject.toml`` holds all metadata; this file computes the package list, because
setuptools' ``packages.find`` cannot map several roots into one namespace, and the compiled
extension modules when ``AGENTCONSOLE_COMPILE=1`` (``scripts/compile.sh``; a plain or editable
install stays pure Python, so what a developer edits is what runs).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
# folder on disk -> import name; "app" is the composition root and becomes the top package.
FOLDERS = {
    "app": "agentconsole",
    "scheduler": "agentconsole.scheduler",
    "kvtiers": "agentconsole.kvtiers",
    "server": "agentconsole.server",
    "ui": "agentconsole.ui",
    "httpclient": "agentconsole.httpclient",
    "sample_traces": "agentconsole.sample_traces",
}
# Compiled with AGENTCONSOLE_COMPILE=1: every module directly in these folders (the simulator's
# loop, the KV index, the controller and driver: one simulated hour is ~230,000 events through
# them), except scheduler/errors.py (mypyc cannot compile a subclass of KeyError). The policies
# (scheduler/policies/) stay interpreted: they are the plug-in point.
COMPILED_FOLDERS = ("scheduler", "kvtiers", "server/runtime/sim")
INTERPRETED = {"__init__.py", "scheduler/errors.py"}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for folder, name in FOLDERS.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_packages(where=str(ROOT / folder)):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages, package_dir


def _compiled_extensions(package_dir: dict[str, str]) -> list[Any]:
    """mypyc extension modules, built from a staged copy of the package laid out by import
    name (mypyc names a module after its path, and ours live under the card's folders)."""
    from mypyc.build import mypycify

    stage = ROOT / "build" / "mypyc" / "src"
    shutil.rmtree(stage, ignore_errors=True)
    for name, folder in package_dir.items():
        target = stage.joinpath(*name.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for source in (ROOT / folder).glob("*.py"):
            shutil.copy2(source, target / source.name)
    paths = [
        str(stage / "agentconsole" / folder / source.name)
        for folder in COMPILED_FOLDERS
        for source in sorted((ROOT / folder).glob("*.py"))
        if source.name not in INTERPRETED and f"{folder}/{source.name}" not in INTERPRETED
    ]
    target = str(ROOT / "build" / "mypyc" / "c")
    return list(mypycify(paths, opt_level="3", group_name="agentconsole", target_dir=target))


PACKAGES, PACKAGE_DIR = _packages()
# only a command that builds extensions compiles (pip runs setup.py for metadata first, and
# mypyc's whole-program analysis takes a minute); an editable install never does
COMPILE = os.environ.get("AGENTCONSOLE_COMPILE") == "1" and bool(
    {"bdist_wheel", "build_ext", "build"} & set(sys.argv[1:])
)
setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    ext_modules=_compiled_extensions(PACKAGE_DIR) if COMPILE else [],
)

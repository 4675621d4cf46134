"""Map the design card's folders into one import namespace, ``agentconsole.*``.

``pyproject.toml`` holds all metadata; this file only computes the package list, because
setuptools' ``packages.find`` cannot map several roots into one namespace.
"""

from __future__ import annotations

from pathlib import Path

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


PACKAGES, PACKAGE_DIR = _packages()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR)

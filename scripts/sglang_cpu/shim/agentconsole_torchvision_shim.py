"""Lets the PyPI ``torchvision`` wheel import on top of a CPU-only ``torch`` build.

Loaded in every interpreter of the venv by ``agentconsole_torchvision_shim.pth`` (so also in the
scheduler processes SGLang spawns). It costs nothing at start-up: it only puts a finder on
``sys.meta_path``. The first time ``torchvision`` is imported, the finder removes itself, imports
torch and tries to load ``torchvision/_C.so`` as torchvision would. The PyPI wheel is linked
against the CUDA torch libraries, so on the CPU torch that load fails, and then
``torchvision/_meta_registrations.py`` dies at import on its unconditional
``register_fake("torchvision::nms")`` / ``("torchvision::qnms")`` with
"operator torchvision::nms does not exist". In that case the finder defines those two operator
schemas (no kernels), which is all the import needs; sglang never runs torchvision ops on the
paths agentconsole uses. When the extension loads, nothing is changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_keep_alive: list[object] = []


def _ensure_schemas(package_dir: Path) -> None:
    torch: Any = importlib.import_module("torch")
    for lib in sorted(package_dir.glob("_C*.so")):
        with contextlib.suppress(OSError):
            ctypes.CDLL(str(lib))  # registers the real operators when it links
    missing = [name for name in _SCHEMAS if not _schema_exists(torch, name)]
    if not missing:
        return
    lib_fragment = torch.library.Library("torchvision", "FRAGMENT")
    for name in missing:
        lib_fragment.define(_SCHEMAS[name])
    _keep_alive.append(lib_fragment)


def _schema_exists(torch: Any, name: str) -> bool:
    try:
        torch._C._get_schema(f"torchvision::{name}", "")
    except RuntimeError:
        return False
    return True


class _TorchvisionShimFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torchvision":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.origin:
            try:
                _ensure_schemas(Path(spec.origin).parent)
            except Exception as exc:  # never break an unrelated import
                print(f"agentconsole torchvision shim: {exc!r}", file=sys.stderr)
        return None  # let the normal finders import torchvision


def install() -> None:
    """Put the finder first on ``sys.meta_path`` unless torchvision is already imported."""
    if "torchvision" in sys.modules:
        return
    if not any(isinstance(f, _TorchvisionShimFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionShimFinder())


install()

"""A model derived from another: its embeddings and first ``keep_layers`` layers kept
bit-identical, every other weight re-randomised, as a fine-tune of the upper layers leaves
them (PrefillShare's frozen prefill module, DroidSpeak's shared lower layers).

The variant is a normal model directory (config, tokenizer, chat template and generation
config copied from the base, ``model.safetensors`` rewritten), so SGLang loads it like the
base; with a tiny base (``tiny_model.make_tiny_model``) it carries the tiny-model marker, so
the engine runs it in float32 too. The compatibility matrix (``server/modelcompat``) then finds
the pair compatible for ``keep_layers`` layers: the positive case of issue 14's matrix.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentconsole.server.runtime.sglang.tiny_model import MARKER, check_own_folder

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EMBEDDINGS = re.compile(r"embed_tokens\.")


def _module(name: str) -> Any:
    """Import a heavy optional dependency (only present with the SGLang install profile)."""
    return importlib.import_module(name)


def _kept(name: str, keep_layers: int) -> bool:
    """Whether a tensor stays the base's: the embeddings and layers below ``keep_layers``."""
    match = _LAYER.search(name)
    if match is not None:
        return int(match.group(1)) < keep_layers
    return bool(_EMBEDDINGS.search(name))


def _rewrite_weights(base: Path, out: Path, keep_layers: int, seed: int) -> int:
    """Write ``out/model.safetensors``: the base's tensors, those not kept drawn anew with
    each tensor's own mean and spread (norm weights, all ones, stay ones). Returns how many
    tensors were re-randomised."""
    torch = _module("torch")
    st = _module("safetensors.torch")
    tensors: dict[str, Any] = {}
    for path in sorted(base.glob("*.safetensors")):
        tensors.update(st.load_file(str(path)))
    generator = torch.Generator().manual_seed(seed)
    changed = 0
    for name in sorted(tensors):
        if _kept(name, keep_layers):
            continue
        old = tensors[name]
        fresh = torch.randn(old.shape, generator=generator, dtype=torch.float32)
        spread, mean = old.float().std(), old.float().mean()
        tensors[name] = (fresh * spread + mean).to(old.dtype).contiguous()
        changed += 1
    st.save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return changed


def derive_variant(base: Path, out_dir: Path, *, keep_layers: int, seed: int = 1) -> Path:
    """Write into ``out_dir`` a model whose embeddings and layers ``0..keep_layers-1`` are the
    ``base`` directory's, bit for bit, and whose other weights (upper layers, final norm,
    output head) are random from ``seed``; every other file is copied. The marker file
    (written last, with the base's marker, ``keep_layers`` and ``seed``) makes a second call
    with the same arguments write nothing. Built in a temporary sibling and moved in, like
    ``make_tiny_model``; the base's weights are loaded whole (meant for small models).
    Raises ``ValueError`` when ``keep_layers`` is not in ``[0, layers]`` of the base.
    Returns ``out_dir``."""
    base, out_dir = Path(base), Path(out_dir)
    config = json.loads((base / "config.json").read_text(encoding="utf-8"))
    layers = int(config["num_hidden_layers"])
    if not 0 <= keep_layers <= layers:
        raise ValueError(f"keep_layers must be in [0, {layers}] (got {keep_layers})")
    base_marker = (base / MARKER).read_text(encoding="utf-8") if (base / MARKER).is_file() else ""
    want = {"variant_of": str(base.resolve()), "keep_layers": keep_layers, "seed": seed}
    if base_marker:
        want["base"] = json.loads(base_marker)
    marker = json.dumps(want, sort_keys=True)
    if (out_dir / MARKER).is_file() and (out_dir / MARKER).read_text(encoding="utf-8") == marker:
        return out_dir
    check_own_folder(out_dir)  # its files go below (rmtree): never a folder of the user's
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for path in base.iterdir():
            if path.is_file() and path.name != MARKER and not path.name.endswith(".safetensors"):
                shutil.copy2(path, tmp / path.name)
        (tmp / "model.safetensors.index.json").unlink(missing_ok=True)  # one file now
        _rewrite_weights(base, tmp, keep_layers, seed)
        # without a tiny base, no marker: the engine must not take a real model for fp32
        if base_marker:
            (tmp / MARKER).write_text(marker, encoding="utf-8")
        shutil.rmtree(out_dir, ignore_errors=True)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir

"""What one model directory is, as far as KV compatibility goes: its architecture (the
``config.json`` settings that shape a layer's K/V), its tokenizer (what text becomes which ids)
and its weights' per-layer digests (:mod:`.weights`).

Hashing a real model reads every byte of its shards, so :func:`model_digest` caches each
directory's digest under a fingerprint of its files (name, size, mtime): a model is read once
per process, at the first request that needs it, and again only when its files change.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentconsole.server.modelcompat.weights import WeightDigest, weight_digest

#: config.json keys that decide a layer's shape and what its K/V are for the same tokens
ARCH_KEYS = (
    "model_type",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "num_hidden_layers",
    "intermediate_size",
    "vocab_size",
    "hidden_act",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "partial_rotary_factor",
    "attention_bias",
    "sliding_window",
    "torch_dtype",
    "dtype",
)
#: tokenizer.json parts that decide the ids of a text (the decoder only maps ids back)
TOKENIZER_KEYS = ("normalizer", "pre_tokenizer", "model", "post_processor", "added_tokens")
#: tokenizers without a tokenizer.json: the files that hold their vocabulary
VOCAB_FILES = ("tokenizer.model", "vocab.json", "merges.txt", "vocab.txt")
CACHE_SIZE = 32


@dataclass(frozen=True, slots=True)
class ModelDigest:
    """One model directory: its ``architecture`` (the :data:`ARCH_KEYS` it sets), a digest
    of its ``tokenizer`` (None: none found) and of its ``weights``."""

    directory: Path
    architecture: dict[str, Any]
    tokenizer: str | None
    weights: WeightDigest

    @property
    def layers(self) -> int:
        return len(self.weights.layers)


def architecture(directory: Path) -> dict[str, Any]:
    """The :data:`ARCH_KEYS` of ``config.json`` (a multimodal model's ``text_config``
    first). Raises ``ValueError`` without a readable config."""
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"no readable config.json in {directory}: {error}") from None
    config = {**config, **config.get("text_config", {})}
    return {key: config[key] for key in ARCH_KEYS if key in config}


def tokenizer_digest(directory: Path) -> str | None:
    """A digest of what the tokenizer makes of text: tokenizer.json's normalizer,
    pre-tokenizer, model (vocabulary, merges), post-processor and added tokens as canonical
    JSON (so formatting, the decoder and the chat template do not count); else the contents
    of its vocabulary files; None when there is no tokenizer."""
    digest = hashlib.blake2b(digest_size=16)
    path = directory / "tokenizer.json"
    if path.is_file():
        spec = json.loads(path.read_text(encoding="utf-8"))
        parts = {key: spec.get(key) for key in TOKENIZER_KEYS}
        digest.update(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode())
        return digest.hexdigest()
    found = [directory / name for name in VOCAB_FILES if (directory / name).is_file()]
    for file in found:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())  # vocabulary files are megabytes, not gigabytes
    return digest.hexdigest() if found else None


def fingerprint(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, size, mtime ns) of every file in the directory: changes when a file does."""
    stats = ((p.name, p.stat()) for p in sorted(directory.iterdir()) if p.is_file())
    return tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats)


_cache: OrderedDict[tuple[str, tuple[tuple[str, int, int], ...]], ModelDigest] = OrderedDict()
_lock = threading.Lock()
#: directory -> the lock its one read at a time holds (concurrent misses wait for it and
#: take its result: each read every weight byte, twelve requests twelve times over)
_reading: dict[str, threading.Lock] = {}


def model_digest(directory: Path) -> ModelDigest:
    """The directory's digest, from the cache when its files are unchanged, else read (and
    cached, the least recently used of more than :data:`CACHE_SIZE` dropped). Raises
    ``ValueError`` for a directory that is not a model with safetensors weights."""
    directory = Path(directory).resolve()
    if not directory.is_dir():
        raise ValueError(f"not a directory: {directory}")
    key = (str(directory), fingerprint(directory))
    with _lock:
        reading = _reading.setdefault(str(directory), threading.Lock())
    with reading:
        with _lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]
        found = ModelDigest(
            directory,
            architecture(directory),
            tokenizer_digest(directory),
            weight_digest(directory),
        )
        with _lock:
            _cache[key] = found
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
        return found


def clear_cache() -> None:
    """Forget every cached digest (tests; a fresh read follows)."""
    with _lock:
        _cache.clear()

"""Per-layer digests of a model directory's safetensors weights, read tensor by tensor.

A real model's shards are gigabytes, so nothing here loads a tensor: each file's JSON header
(8-byte little-endian length, then ``{name: {dtype, shape, data_offsets}}``) says where every
tensor's bytes lie, and each tensor is hashed from its byte range in chunks of at most
:data:`CHUNK_BYTES`. Memory stays bounded by one chunk whatever the model's size.

Tensors are grouped by what they feed. For layer ``i``, the K and V depend on the tokens'
embeddings, on every weight of layers ``0..i-1`` and, in layer ``i`` itself, on the tensors
before the K/V projections (the input norm, ``k_proj``/``v_proj``, a ``k_norm``); the query,
output and MLP weights of layer ``i`` only change what layer ``i + 1`` sees. So a layer has
two digests: ``kv`` (its tensors that feed its own K/V: every tensor not known to act after
them, unknown names counted in, to stay on the safe side) and ``full`` (all its tensors).
Outside the layers, the output head and final norm act after every layer; every other tensor
(embeddings, learned positions) counts as ``input``.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

#: the largest read of a tensor's bytes (bounds memory on multi-gigabyte shards)
CHUNK_BYTES = 1 << 20
#: a header larger than this is not a safetensors header (the format caps it at 100 MB)
MAX_HEADER_BYTES = 100_000_000
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(\d+)\.")
# in a layer: tensors that act only after its own K/V were computed
_AFTER_KV = re.compile(
    r"(q_proj|o_proj|q_norm|post_attention_layernorm|pre_feedforward_layernorm|"
    r"post_feedforward_layernorm|mlp\.|experts|gate_proj|up_proj|down_proj|c_proj|"
    r"dense|ln_2|feed_forward|ffn)"
)
# outside the layers: tensors that act after every layer
_OUTPUT = re.compile(r"^(lm_head\.|model\.norm\.|norm\.|transformer\.ln_f\.|ln_f\.|output\.)")


@dataclass(frozen=True, slots=True)
class TensorRef:
    """Where one tensor's bytes lie in a safetensors file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


@dataclass(slots=True)
class LayerDigest:
    """The digests of one decoder layer: ``kv`` over the tensors feeding its own K/V,
    ``full`` over all of them."""

    kv: str
    full: str


@dataclass(slots=True)
class WeightDigest:
    """A model's weights as digests: ``input`` (embeddings and every non-layer tensor that
    feeds the first layer), one :class:`LayerDigest` per layer, in order, and how many
    tensors and bytes were read."""

    input: str
    layers: list[LayerDigest] = field(default_factory=list)
    tensors: int = 0
    bytes_read: int = 0


def weight_files(directory: Path) -> list[Path]:
    """The directory's safetensors files: those the shard index names if there is one
    (``model.safetensors.index.json``), else every ``*.safetensors``, sorted."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        return [directory / name for name in sorted(set(weight_map.values()))]
    return sorted(directory.glob("*.safetensors"))


def read_header(fh: BinaryIO) -> tuple[list[TensorRef], int]:
    """The tensors of an open safetensors file, in file order, and where its data starts.
    Raises ``ValueError`` for a file that is not safetensors."""
    raw = fh.read(8)
    if len(raw) != 8:
        raise ValueError("not a safetensors file (too short)")
    (size,) = struct.unpack("<Q", raw)
    if size > MAX_HEADER_BYTES:
        raise ValueError("not a safetensors file (header too large)")
    header = json.loads(fh.read(size))
    refs = [
        TensorRef(name, str(meta["dtype"]), tuple(meta["shape"]), *meta["data_offsets"])
        for name, meta in header.items()
        if name != "__metadata__"
    ]
    return sorted(refs, key=lambda ref: ref.start), 8 + size


def tensor_digest(fh: BinaryIO, base: int, ref: TensorRef, chunk_bytes: int) -> str:
    """The digest of one tensor (dtype, shape, bytes), read in chunks of ``chunk_bytes``."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{ref.dtype}{ref.shape}".encode())
    fh.seek(base + ref.start)
    left = ref.end - ref.start
    while left > 0:
        chunk = fh.read(min(chunk_bytes, left))
        if not chunk:
            raise ValueError(f"{ref.name}: file ends inside the tensor")
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def iter_tensor_digests(
    directory: Path, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[str, str, int]]:
    """(name, digest, bytes) of every tensor of the directory's weights, one at a time."""
    for path in weight_files(directory):
        with open(path, "rb", buffering=0) as fh:
            refs, base = read_header(fh)
            for ref in refs:
                yield ref.name, tensor_digest(fh, base, ref, chunk_bytes), ref.end - ref.start


def _combine(items: list[tuple[str, str]]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for name, value in sorted(items):
        digest.update(f"{name}={value};".encode())
    return digest.hexdigest()


def weight_digest(directory: Path, chunk_bytes: int = CHUNK_BYTES) -> WeightDigest:
    """Hash the directory's weights tensor by tensor into input and per-layer digests
    (reads the files; changes nothing). Raises ``ValueError`` when there are no safetensors
    weights or a file is not safetensors."""
    inputs: list[tuple[str, str]] = []
    layers: dict[int, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = {}
    tensors = read = 0
    for name, value, size in iter_tensor_digests(directory, chunk_bytes):
        tensors, read = tensors + 1, read + size
        match = _LAYER.search(name)
        if match is None:
            if not _OUTPUT.match(name):
                inputs.append((name, value))
            continue
        # the name inside the layer, so layer i of one model meets layer i of the other
        local = name[match.end() :]
        kv, full = layers.setdefault(int(match.group(1)), ([], []))
        full.append((local, value))
        if not _AFTER_KV.search(local):
            kv.append((local, value))
    if tensors == 0:
        raise ValueError(f"no safetensors weights in {directory}")
    ordered = [
        LayerDigest(_combine(kv), _combine(full)) for _, (kv, full) in sorted(layers.items())
    ]
    return WeightDigest(_combine(inputs), ordered, tensors, read)

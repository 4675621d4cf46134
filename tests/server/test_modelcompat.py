"""The compatibility matrix from model directories (issue 14, item 3): tiny local models of
two sizes, a variant sharing the large one's lower layers, one differing only in tokenizer;
weights hashed tensor by tensor in bounded reads, sharded or not; digests cached by the
directory's fingerprint."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agentconsole.server.modelcompat import (
    clear_cache,
    compatibility_matrix,
    model_digest,
    weights,
)
from agentconsole.server.modelcompat import digest as digest_module
from tests.server.compat_models import KEPT, compat_models


@pytest.fixture(scope="module")
def models() -> dict[str, Path]:
    return compat_models()


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def pair(models: dict[str, Path], a: str, b: str) -> Any:
    (found,) = compatibility_matrix([(a, models[a]), (b, models[b])]).pairs
    return found


def test_two_sizes_are_incompatible_by_architecture(models: dict[str, Path]) -> None:
    found = pair(models, "large", "small")
    assert (found.compatible, found.shared_kv_layers) == (False, 0)
    assert found.reasons[0].startswith("different architecture:")
    assert "hidden_size 64 vs 32" in found.reasons[0]
    assert "num_hidden_layers 4 vs 2" in found.reasons[0]
    assert not any("tokenizer" in reason for reason in found.reasons)  # same trained BPE


def test_a_variant_shares_its_kept_layers(models: dict[str, Path]) -> None:
    found = pair(models, "large", "variant")
    assert found.compatible
    assert (found.shared_kv_layers, found.layers) == (KEPT, 4)
    text = " ".join(found.reasons)
    assert "same architecture and tokenizer" in text
    assert "embeddings and layers 0-1 identical" in text
    assert "the KV of layers 0-1 is identical for the same tokens" in text
    assert "layers 2-3 differ (a fine-tune of the upper layers)" in text


def test_a_variant_is_a_loadable_model(models: dict[str, Path]) -> None:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    base = transformers.AutoModelForCausalLM.from_pretrained(str(models["large"]))
    variant = transformers.AutoModelForCausalLM.from_pretrained(str(models["variant"]))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        kv_base = base(ids, use_cache=True).past_key_values
        kv_variant = variant(ids, use_cache=True).past_key_values
    layers = [(base_l, variant_l) for base_l, variant_l in zip(kv_base, kv_variant, strict=True)]
    # the matrix's claim, checked on the KV itself: the kept layers' K and V are equal
    for i, ((k_a, v_a, *_), (k_b, v_b, *_)) in enumerate(layers):
        same = torch.equal(k_a, k_b) and torch.equal(v_a, v_b)
        assert same == (i < KEPT), i


def test_a_tokenizer_alone_makes_a_pair_incompatible(models: dict[str, Path]) -> None:
    found = pair(models, "large", "llama3")
    assert (found.compatible, found.shared_kv_layers) == (False, 0)
    assert found.reasons[0] == "different tokenizer: the same text becomes other token ids"
    assert not any("architecture" in reason for reason in found.reasons)
    # the weights are the same (same seed and size): only the tokenizer keeps them apart
    same = model_digest(models["large"]).weights, model_digest(models["llama3"]).weights
    assert same[0].layers == same[1].layers


def test_one_model_served_twice_shares_every_layer(models: dict[str, Path]) -> None:
    (found,) = compatibility_matrix([("x", models["large"]), ("y", models["large"])]).pairs
    assert (found.compatible, found.shared_kv_layers, found.layers) == (True, 4, 4)


def test_models_without_a_directory_are_listed_with_their_error(models: dict[str, Path]) -> None:
    matrix = compatibility_matrix(
        [("large", models["large"]), ("preset", "llama-3.1-8b"), ("default", None)]
    )
    assert not matrix.enabled
    assert [m.error is None for m in matrix.models] == [True, False, False]
    assert matrix.models[0].layers == 4
    assert all(not p.compatible and p.shared_kv_layers == 0 for p in matrix.pairs)
    assert "not a model directory" in matrix.pairs[0].reasons[0]


def test_tensors_are_read_one_bounded_chunk_at_a_time(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []

    class Spy:
        def __init__(self, path: str, mode: str, buffering: int) -> None:
            self.file = open(path, mode, buffering=buffering)  # noqa: SIM115

        def read(self, size: int) -> bytes:
            reads.append(size)
            data: bytes = self.file.read(size)
            return data

        def seek(self, offset: int) -> int:
            return self.file.seek(offset)

        def __enter__(self) -> Spy:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

    monkeypatch.setattr(weights, "open", Spy, raising=False)
    whole = weights.weight_digest(models["large"])
    reads.clear()
    chunked = weights.weight_digest(models["large"], chunk_bytes=4096)
    assert chunked.layers == whole.layers
    assert chunked.input == whole.input
    data_reads = reads[2:]  # one file: its header's length, then its header
    assert max(data_reads) <= 4096
    assert len(data_reads) > chunked.tensors  # the large tensors took several reads each
    assert sum(data_reads) == chunked.bytes_read


def test_a_sharded_model_has_the_digest_of_the_whole(
    models: dict[str, Path], tmp_path: Path
) -> None:
    st = pytest.importorskip("safetensors.torch")
    sharded = tmp_path / "sharded"
    shutil.copytree(models["large"], sharded)
    tensors = st.load_file(str(sharded / "model.safetensors"))
    (sharded / "model.safetensors").unlink()
    names = sorted(tensors)
    halves = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for file, part in halves.items():
        st.save_file({name: tensors[name] for name in part}, str(sharded / file))
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {}, "weight_map": weight_map}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    assert weights.weight_files(sharded) == [sharded / name for name in sorted(halves)]
    (found,) = compatibility_matrix([("whole", models["large"]), ("sharded", sharded)]).pairs
    assert (found.compatible, found.shared_kv_layers) == (True, 4)


def test_digests_are_cached_until_a_file_changes(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, calls = _counted_copy(models, tmp_path, monkeypatch)
    first = model_digest(copy)
    assert model_digest(copy) is first
    assert len(calls) == 1
    config = json.loads((copy / "config.json").read_text())
    config["rope_theta"] = 500000.0
    (copy / "config.json").write_text(json.dumps(config))
    assert model_digest(copy).architecture["rope_theta"] == 500000.0
    assert len(calls) == 2


def test_make_model_like_a_base_writes_the_positive_case(
    models: dict[str, Path], tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from agentconsole.cli import main

    out = tmp_path / "tuned"
    argv = ["make-model", str(out), "--like", str(models["large"]), "--keep-layers", "1"]
    done = CliRunner().invoke(main, [*argv, "--seed", "7"])
    assert done.exit_code == 0, done.output
    (found,) = compatibility_matrix([("large", models["large"]), ("tuned", out)]).pairs
    assert (found.compatible, found.shared_kv_layers, found.layers) == (True, 1, 4)
    alone = CliRunner().invoke(main, ["make-model", str(tmp_path / "x"), "--keep-layers", "1"])
    assert alone.exit_code != 0
    assert "--like and --keep-layers go together" in alone.output
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    argv = ["make-model", str(tmp_path / "y"), "--like", str(empty), "--keep-layers", "1"]
    unlike = CliRunner().invoke(main, argv)
    assert unlike.exit_code == 2, unlike.output  # a usage error, no traceback
    assert "is not a model folder" in unlike.output
    # a variant has its base's shape: --layers/--hidden beside --like were ignored silently
    argv = ["make-model", str(tmp_path / "z"), "--like", str(models["large"]), "--keep-layers"]
    shaped = CliRunner().invoke(main, [*argv, "1", "--layers", "4", "--hidden", "128"])
    assert shaped.exit_code == 2, shaped.output
    assert "a --like variant has its base's" in shaped.output
    # a folder of someone else's files is never written over (a variant removed it whole)
    mine = tmp_path / "my-model"
    mine.mkdir()
    (mine / "config.json").write_text("{}")
    for argv in (
        ["make-model", str(mine), "--like", str(models["large"]), "--keep-layers", "1"],
        ["make-model", str(mine)],
    ):
        refused = CliRunner().invoke(main, argv)
        assert refused.exit_code == 2, refused.output
        assert "holds files make-model did not write" in refused.output
        assert (mine / "config.json").read_text() == "{}"


def test_concurrent_misses_read_a_directory_once(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests arriving together for a model not read yet wait for one read: each read every
    weight byte before, twelve requests twelve times over (a tenant's way to keep the server's
    disk and threads busy)."""
    copy, calls = _counted_copy(models, tmp_path, monkeypatch, read_s=0.2)  # a large shard
    with ThreadPoolExecutor(max_workers=6) as pool:
        found = list(pool.map(lambda _: model_digest(copy), range(6)))
    assert len(calls) == 1
    assert all(digest is found[0] for digest in found)


def _counted_copy(
    models: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    read_s: float = 0.0,
) -> tuple[Path, list[Path]]:
    """A copy of the small model, and the list of weight reads made from here on (each taking
    ``read_s`` more)."""
    copy = tmp_path / "copy"
    shutil.copytree(models["small"], copy)
    calls: list[Path] = []
    real = weights.weight_digest

    def counting(directory: Path, chunk_bytes: int = weights.CHUNK_BYTES) -> Any:
        calls.append(directory)
        time.sleep(read_s)
        return real(directory, chunk_bytes)

    monkeypatch.setattr(digest_module, "weight_digest", counting)
    return copy, calls

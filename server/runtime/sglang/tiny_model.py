"""A tiny random Llama-style model that SGLang's CPU engine can serve, made locally in seconds.

Nothing is downloaded: weights are random, the byte-level BPE tokenizer is trained on the spot
on a built-in corpus, and ``HF_HUB_OFFLINE=1`` is set before transformers is imported.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

MARKER = ".agentconsole-tiny-model.json"
FORMAT_VERSION = 1
VOCAB_SIZE = 512
BOS, EOS, IM_START, IM_END, PAD = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|pad|>",
)
# ChatML; ends each turn with <|im_end|>, which is also the tokenizer's EOS.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_CORPUS = """\
An agent is a program that calls a language model, then a tool, then the model again.
The scheduler orders requests by program, node and priority; the cache keeps shared prefixes.
A program waits while its tool runs: search, read a file, run the tests, call an API.
System: You are a helpful assistant. User: What is the weather today? Assistant: Sunny.
def add(a: int, b: int) -> int:
    return a + b
{"program": "p1", "node": "n7", "priority": 5, "tokens": [1, 2, 3], "ok": true}
The quick brown fox jumps over the lazy dog. 0123456789 +-*/=<>()[]{}.,;:!?'"
Time to first token, time between tokens, end to end latency, goodput and throughput.
Prefill reads the prompt; decode writes one token at a time; the KV cache holds both.
"""


def _module(name: str) -> Any:
    """Import a heavy optional dependency (only present with the SGLang install profile)."""
    return importlib.import_module(name)


def _marker_content(seed: int) -> dict[str, object]:
    return {"format": FORMAT_VERSION, "seed": seed, "vocab_size": VOCAB_SIZE}


def _train_tokenizer(out_dir: Path) -> None:
    tk, tf = _module("tokenizers"), _module("transformers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    trainer = tk.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS, IM_START, IM_END, PAD],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = _CORPUS.splitlines(keepends=True)
    tok.train_from_iterator(lines * 20, trainer=trainer)
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=IM_END,
        pad_token=PAD,
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))


def _write_model(out_dir: Path, seed: int, vocab_size: int, special: dict[str, int]) -> None:
    torch, tf = _module("torch"), _module("transformers")
    hf_logging = _module("transformers.utils.logging")
    config = tf.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=special[BOS],
        eos_token_id=special[IM_END],
        pad_token_id=special[PAD],
        tie_word_embeddings=False,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG state alone
        torch.manual_seed(seed)
        model = tf.LlamaForCausalLM(config).to(torch.float32)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(str(out_dir))
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tf.GenerationConfig(
        bos_token_id=special[BOS],
        eos_token_id=[special[IM_END], special[EOS]],
        pad_token_id=special[PAD],
    ).save_pretrained(str(out_dir))


def _is_complete(out_dir: Path, want: dict[str, object]) -> bool:
    try:
        return bool(json.loads((out_dir / MARKER).read_text(encoding="utf-8")) == want)
    except (OSError, ValueError):
        return False


def make_tiny_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Write a tiny random Llama model with tokenizer and chat template into ``out_dir``.

    Writes ``config.json``, ``generation_config.json``, ``model.safetensors`` (2 layers, hidden
    64, 4 attention heads / 2 KV heads, vocab 512, float32, random weights from ``seed``),
    ``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.jinja`` (byte-level BPE
    trained here, ChatML template, EOS ``<|im_end|>``), and last a marker file
    ``.agentconsole-tiny-model.json``. If that marker is there with the same seed, nothing is
    written. Files are built in a temporary sibling directory and moved in, so concurrent
    callers never see a half-written model. Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    want = _marker_content(seed)
    if _is_complete(out_dir, want):
        return out_dir
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _train_tokenizer(tmp)
        tok = _module("tokenizers").Tokenizer.from_file(str(tmp / "tokenizer.json"))
        special = {name: int(tok.token_to_id(name)) for name in (BOS, EOS, IM_START, IM_END, PAD)}
        _write_model(tmp, seed, int(tok.get_vocab_size()), special)
        (tmp / MARKER).write_text(json.dumps(want), encoding="utf-8")
        try:
            tmp.rename(out_dir)  # atomic when out_dir does not exist yet
        except OSError:
            if not _is_complete(out_dir, want):  # stale or partial: replace file by file
                (out_dir / MARKER).unlink(missing_ok=True)
                for path in sorted(tmp.iterdir(), key=lambda p: p.name == MARKER):
                    os.replace(path, out_dir / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir

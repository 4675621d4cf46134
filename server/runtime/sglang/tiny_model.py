"""A tiny random Llama-style model that SGLang's CPU engine can serve, made locally in seconds.

Nothing is downloaded: weights are random, the byte-level BPE tokenizer is trained on the spot
on a built-in corpus, and ``HF_HUB_OFFLINE=1`` is set before transformers is imported.

``chat_style`` picks the chat template written into the tokenizer: ``chatml`` (the default
model: ChatML, tools ignored), ``llama3`` (a Llama-3.1-style template with JSON tool calls after
``<|python_tag|>``, its markers added as special tokens, EOS ``<|eot_id|>``), or ``none`` (no
template: the server then falls back to its built-in ChatML). Tests use the other styles to
check that a model is served with its own template and tool-call format.
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
#: the default size: decoder layers and hidden width (``make-model --layers/--hidden``)
LAYERS, HIDDEN = 2, 64
_HEADS, _KV_HEADS = 4, 2
BOS, EOS, IM_START, IM_END, PAD = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|pad|>",
)
#: the llama3 style's extra special tokens (header markers, end of turn, tool-call tag)
HEADER_START, HEADER_END, EOT, PYTHON_TAG = (
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
)
CHAT_STYLES = ("chatml", "llama3", "none")
# ChatML; ends each turn with <|im_end|>, which is also the tokenizer's EOS.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Llama 3.1's shape, shortened: tools as JSON in the system turn ("Environment: ipython"), an
# assistant tool call as <|python_tag|>{"name", "parameters"}, a tool result as an ipython turn.
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- set system = '' %}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{%- set system = messages[0]['content'] %}{%- set messages = messages[1:] %}"
    "{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{%- if tools %}"
    "{{- 'Environment: ipython\\nYou may call these functions. To call one, answer '"
    ' + \'<|python_tag|>{"name": function name, "parameters": arguments}.\\n\\n\' }}'
    "{%- for t in tools %}{{- t | tojson }}{{- '\\n\\n' }}{%- endfor %}"
    "{%- endif %}"
    "{{- system + '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{%- elif message.get('tool_calls') %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- for call in message['tool_calls'] %}"
    "{{- '<|python_tag|>{\"name\": \"' + call['function']['name'] + '\", \"parameters\": ' }}"
    "{{- call['function']['arguments'] | tojson }}{{- '}' }}"
    "{%- endfor %}"
    "{{- '<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] + '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
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


def _marker_content(
    seed: int, chat_style: str = "chatml", layers: int = LAYERS, hidden: int = HIDDEN
) -> dict[str, object]:
    marker: dict[str, object] = {"format": FORMAT_VERSION, "seed": seed, "vocab_size": VOCAB_SIZE}
    # the default model's marker stays what it always was: only what differs is written
    if chat_style != "chatml":
        marker["chat_style"] = chat_style
    if layers != LAYERS:
        marker["layers"] = layers
    if hidden != HIDDEN:
        marker["hidden"] = hidden
    return marker


def _style(chat_style: str) -> tuple[tuple[str, ...], str, str | None]:
    """(extra special tokens, EOS token, chat template) of a chat style."""
    if chat_style == "llama3":
        return (HEADER_START, HEADER_END, EOT, PYTHON_TAG), EOT, LLAMA3_TEMPLATE
    if chat_style == "none":
        return (), IM_END, None
    if chat_style == "chatml":
        return (), IM_END, CHAT_TEMPLATE
    raise ValueError(f"unknown chat style {chat_style!r}; choose from {', '.join(CHAT_STYLES)}")


def _train_tokenizer(out_dir: Path, chat_style: str) -> None:
    extra, eos, template = _style(chat_style)
    tk, tf = _module("tokenizers"), _module("transformers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    trainer = tk.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS, IM_START, IM_END, PAD, *extra],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = _CORPUS.splitlines(keepends=True)
    tok.train_from_iterator(lines * 20, trainer=trainer)
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=eos,
        pad_token=PAD,
        model_max_length=2048,
    )
    if template is not None:
        fast.chat_template = template
    fast.save_pretrained(str(out_dir))


def _write_model(
    out_dir: Path,
    seed: int,
    vocab_size: int,
    special: dict[str, int],
    eos: str,
    size: tuple[int, int] = (LAYERS, HIDDEN),
) -> None:
    layers, hidden = size
    torch, tf = _module("torch"), _module("transformers")
    hf_logging = _module("transformers.utils.logging")
    config = tf.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=_HEADS,
        num_key_value_heads=_KV_HEADS,
        max_position_embeddings=2048,
        bos_token_id=special[BOS],
        eos_token_id=special[eos],
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
        eos_token_id=[special[eos], special[EOS]],
        pad_token_id=special[PAD],
    ).save_pretrained(str(out_dir))


def _is_complete(out_dir: Path, want: dict[str, object]) -> bool:
    try:
        return bool(json.loads((out_dir / MARKER).read_text(encoding="utf-8")) == want)
    except (OSError, ValueError):
        return False


class ForeignFolder(FileExistsError):
    """The output folder holds files ``make-model`` did not write."""


def check_own_folder(out_dir: Path) -> None:
    """Refuse an ``out_dir`` that exists and holds files without ``make-model``'s marker (a
    model of the user's, anything else): writing the model there replaced them."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ForeignFolder(f"{out_dir} is a file, not a folder")
    if out_dir.is_dir() and not (out_dir / MARKER).is_file() and any(out_dir.iterdir()):
        raise ForeignFolder(
            f"{out_dir} holds files make-model did not write (no {MARKER}): name a new or"
            " empty folder"
        )


def make_tiny_model(
    out_dir: Path,
    *,
    seed: int = 0,
    chat_style: str = "chatml",
    layers: int = LAYERS,
    hidden: int = HIDDEN,
) -> Path:
    """Write a tiny random Llama model with tokenizer and chat template into ``out_dir``.

    Writes ``config.json``, ``generation_config.json``, ``model.safetensors`` (``layers``
    decoder layers of width ``hidden``, by default 2 and 64, the MLP twice as wide, 4 attention
    heads / 2 KV heads, vocab 512, float32, random weights from ``seed``),
    ``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.jinja`` (byte-level BPE
    trained here; by default a ChatML template, EOS ``<|im_end|>``; see the module docstring
    for ``chat_style``), and last a marker file ``.agentconsole-tiny-model.json``. If that
    marker is there with the same seed, style and size, nothing is written. Files are built in a
    temporary sibling directory and moved in, so concurrent callers never see a half-written
    model. Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    extra, eos, _ = _style(chat_style)
    if layers < 1 or hidden < _HEADS * 2 or hidden % (_HEADS * 2):
        raise ValueError(f"layers >= 1 and hidden a multiple of {_HEADS * 2} (got {hidden})")
    want = _marker_content(seed, chat_style, layers, hidden)
    if _is_complete(out_dir, want):
        return out_dir
    check_own_folder(out_dir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _train_tokenizer(tmp, chat_style)
        tok = _module("tokenizers").Tokenizer.from_file(str(tmp / "tokenizer.json"))
        names = (BOS, EOS, IM_START, IM_END, PAD, *extra)
        special = {name: int(tok.token_to_id(name)) for name in names}
        _write_model(tmp, seed, int(tok.get_vocab_size()), special, eos, (layers, hidden))
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

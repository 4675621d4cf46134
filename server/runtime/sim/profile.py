"""Calibration profiles: the efficiency knobs of the cost model, measured steps, JSON files.

Owns ``Efficiency`` (what calibration fits), ``MeasuredStep`` (one measured engine iteration),
``Profile`` with its JSON format, and the bundled ``profiles/*.json`` (one per GPU x model x
tensor-parallel preset), found by name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

#: The format this build writes. 2 added the efficiency fields ``prefill_context_sq_s`` and
#: ``call_overhead_s`` (and the point field ``prefill_context_sq``): a build that reads only
#: format 1 then refuses a new profile by its format, not with a TypeError on a field.
PROFILE_FORMAT = 2
#: The formats this build reads; a format-1 profile lacks only fields that default to 0.
READABLE_FORMATS = (1, 2)
_PROFILES_PACKAGE = "agentconsole.server.runtime.sim.profiles"


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Calibration knobs of a ``CostModel``; defaults are leads for an H100/H200 under SGLang.

    - ``mfu`` 0.6: fraction of datasheet dense bf16 FLOP/s reached. A large bf16 GEMM measured
      788 TFLOP/s (0.80) on this workplace's H200 (device KINDS.md); attention kernels, norms
      and smaller GEMMs lose more, so 0.6 is an estimate until calibrated.
    - ``bw_eff`` 0.8: fraction of datasheet HBM bandwidth; a device copy measured 4.3 of
      4.8 TB/s (0.90, KINDS.md), and weight-streaming GEMVs reach less.
    - ``step_overhead_s`` 0.5 ms: scheduler and launch time per iteration not hidden by CUDA
      graphs and SGLang's overlap scheduler (estimate).
    - ``allreduce_latency_s`` 10 µs: small-message all-reduce over NVLink (estimate).
    - ``allreduce_bw_eff`` 0.5: ring bus bandwidth ≈ one direction of the 900 GB/s NVLink.
    - ``per_seq_overhead_s`` 0: CPU time per decode request; hidden on a GPU by the overlap
      scheduler, dominant on the CPU engine.
    """

    mfu: float = 0.6
    bw_eff: float = 0.8
    step_overhead_s: float = 5e-4
    allreduce_latency_s: float = 1e-5
    allreduce_bw_eff: float = 0.5
    per_seq_overhead_s: float = 0.0
    #: efficiency of the attention FLOPs when it differs from the GEMMs' (None: ``mfu``); CPU
    #: attention kernels run far from their matrix multiplies' rate
    attention_mfu: float | None = None
    #: extra fixed time of a step that prefills (CPU backends: ~3 ms against ~1 ms for decode)
    prefill_overhead_s: float = 0.0
    #: time per cached context token a prefill step reads (attention over the prefix outside
    #: the roofline's reach, e.g. the CPU's torch-native attention)
    prefill_context_token_s: float = 0.0
    #: time per squared cached context token of each request a prefill step extends: a cost
    #: convex in one request's context (the CPU's torch-native attention gathers each
    #: request's KV; 16 new tokens over 256 cached cost ~1.1 ms, over 1,024 ~7 ms)
    prefill_context_sq_s: float = 0.0
    #: time each call spends outside engine steps on its way in and out (tokenising, the
    #: scheduler's receive loop, detokenising, streaming back); on the call's critical path
    #: but not on the engine's, so it delays the program without occupying the batch
    call_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.attention_mfu is not None and not 0.0 < self.attention_mfu <= 1.0:
            raise ValueError(f"attention_mfu must be in (0, 1], got {self.attention_mfu}")
        for name in ("mfu", "bw_eff", "allreduce_bw_eff"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        for name in (
            "step_overhead_s",
            "allreduce_latency_s",
            "per_seq_overhead_s",
            "prefill_overhead_s",
            "prefill_context_token_s",
            "prefill_context_sq_s",
            "call_overhead_s",
        ):
            if getattr(self, name) < 0.0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class MeasuredStep:
    """One measured engine iteration: the ``step_seconds`` arguments and the time it took."""

    seconds: float
    prefill_tokens: int = 0
    prefill_attn_pairs: int = 0
    decode_batch: int = 0
    decode_context: int = 0
    prefill_context_tokens: int = 0
    #: sum over the requests the step prefills of their cached context squared
    prefill_context_sq: int = 0


@dataclass(frozen=True, slots=True)
class Profile:
    """A calibration profile: which preset it is for, its efficiency, sources and measurements."""

    gpu: str
    model: str
    tp: int
    efficiency: Efficiency = field(default_factory=Efficiency)
    sources: Mapping[str, str] = field(default_factory=dict)
    points: tuple[MeasuredStep, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-ready dict that ``profile_from_json`` reads back."""
        return {
            "format": PROFILE_FORMAT,
            "gpu": self.gpu,
            "model": self.model,
            "tp": self.tp,
            "efficiency": asdict(self.efficiency),
            "sources": dict(self.sources),
            "points": [asdict(p) for p in self.points],
        }


def profile_from_json(data: Mapping[str, Any]) -> Profile:
    """Build a ``Profile`` from its JSON dict; raises ``ValueError`` on a format this build
    cannot read (:data:`READABLE_FORMATS`).

    Missing efficiency fields and point fields take their defaults; unknown keys raise
    ``TypeError`` so that a typo in a hand-edited profile is not silently ignored.
    """
    if data.get("format") not in READABLE_FORMATS:
        raise ValueError(
            f"profile format {data.get('format')!r}, this build reads formats {READABLE_FORMATS}"
        )
    return Profile(
        gpu=str(data["gpu"]),
        model=str(data["model"]),
        tp=int(data["tp"]),
        efficiency=Efficiency(**data.get("efficiency", {})),
        sources={str(k): str(v) for k, v in data.get("sources", {}).items()},
        points=tuple(MeasuredStep(**p) for p in data.get("points", [])),
    )


def profile_name(gpu_name: str, model_name: str, tp: int) -> str:
    """Name of the bundled profile for a preset, e.g. ``H200-141GB__llama-3.1-8b__tp1``."""
    return f"{gpu_name}__{model_name}__tp{tp}"


def profile_names() -> list[str]:
    """Names of the bundled profiles (file stems under ``profiles/``), sorted."""
    files = resources.files(_PROFILES_PACKAGE).iterdir()
    return sorted(f.name.removesuffix(".json") for f in files if f.name.endswith(".json"))


def load_profile(path_or_name: str | Path) -> Profile:
    """Load a profile from a JSON file path, or else by bundled name (see ``profile_names``).

    A ``Path``, a string ending in ``.json``, naming a folder or an existing file is read as a
    file (a calibration written as ``my.profile`` was taken for a bundled name); raises
    ``FileNotFoundError`` when it is missing and ``KeyError`` for an unknown bundled name.
    """
    as_file = isinstance(path_or_name, Path) or path_or_name.endswith(".json")
    if as_file or "/" in str(path_or_name) or Path(path_or_name).is_file():
        text = Path(path_or_name).read_text(encoding="utf-8")
    else:
        resource = resources.files(_PROFILES_PACKAGE) / f"{path_or_name}.json"
        if not resource.is_file():
            raise KeyError(f"no bundled profile {path_or_name!r}; known: {profile_names()}")
        text = resource.read_text(encoding="utf-8")
    return profile_from_json(json.loads(text))


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write ``profile`` as indented JSON to ``path`` (overwriting it)."""
    text = json.dumps(profile.to_json(), indent=2) + "\n"
    Path(path).write_text(text, encoding="utf-8")

"""Hardware and model specifications for the simulated runtime, with named presets.

Owns two frozen value types, ``GpuSpec`` (one accelerator and what hangs off it) and
``ModelSpec`` (a dense decoder-only transformer), and the registries ``GPUS`` / ``MODELS``.
All sizes are bytes, all rates bytes or FLOPs per second, and every per-host resource (host
DRAM, disk) is given *per GPU*, because SGLang sizes its host KV pool per tensor-parallel rank
(``--hicache-size`` is GB per rank) and every rank moves its own KV shard over its own link.
Numbers are datasheet leads unless a comment says measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: memory, peak rates and the links the simulator charges transfers to.

    ``nvlink_bw`` is the datasheet aggregate (both directions); the cost model applies
    ``Efficiency.allreduce_bw_eff`` to it. ``nvlink_bw == 0`` means no GPU interconnect, which
    only allows tensor parallel degree 1. ``disk_bw is None`` means no disk KV tier.
    """

    name: str
    hbm_bytes: int
    peak_flops: float
    hbm_bw: float
    host_link_bw: float
    nvlink_bw: float
    host_dram_bytes: int
    disk_bw: float | None = None

    def __post_init__(self) -> None:
        if self.hbm_bytes <= 0 or self.peak_flops <= 0 or self.hbm_bw <= 0:
            raise ValueError(f"{self.name}: memory, FLOP/s and bandwidth must be positive")
        if self.host_link_bw <= 0 or self.nvlink_bw < 0 or self.host_dram_bytes < 0:
            raise ValueError(f"{self.name}: link rates and host DRAM must be non-negative")
        if self.disk_bw is not None and self.disk_bw <= 0:
            raise ValueError(f"{self.name}: disk_bw must be positive or None")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A dense Llama-style decoder: grouped-query attention, gated MLP, untied LM head.

    ``params`` is the published total (embedding and LM head included) and sizes the weights in
    HBM; the per-token FLOPs come from the architecture fields (``layer_params``).
    ``context_window`` is the longest context (prompt plus output) the model serves, ``None``
    where unstated; the simulator does not enforce it call by call: ``bench`` refuses a run
    with a call past it before it starts (``app/bench/context_fit.py``), as serve refuses
    the call.
    """

    name: str
    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    dtype_bytes: int = 2
    context_window: int | None = None
    #: a fine-tune: the preset it was trained from (same architecture and tokenizer), and how
    #: many of its leading layers kept the base's weights (frozen in training; the adapters or
    #: trained layers sit above). For the same tokens those layers' KV is the base's, so the
    #: simulator's ``shared-prefill`` mode can reuse it (``shared_kv_layers``)
    base: str | None = None
    frozen_layers: int = 0

    def __post_init__(self) -> None:
        dims = (self.params, self.layers, self.hidden, self.heads, self.kv_heads, self.head_dim)
        if min(dims) <= 0 or self.intermediate <= 0 or self.vocab <= 0 or self.dtype_bytes <= 0:
            raise ValueError(f"{self.name}: every dimension must be positive")
        if self.context_window is not None and self.context_window <= 0:
            raise ValueError(f"{self.name}: context_window must be positive or None")
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.name}: heads must be a multiple of kv_heads")
        if not 0 <= self.frozen_layers <= self.layers or (self.frozen_layers and not self.base):
            raise ValueError(f"{self.name}: frozen_layers needs a base and must be <= layers")

    @property
    def layer_params(self) -> int:
        """Matrix parameters of all decoder layers (Q, K, V, O, gated MLP; norms left out)."""
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (q_o + k_v + mlp)

    @property
    def lm_head_params(self) -> int:
        """Parameters of the output projection (hidden x vocab), read once per step."""
        return self.hidden * self.vocab


GPUS: dict[str, GpuSpec] = {
    spec.name: spec
    for spec in (
        # H100 SXM5 datasheet: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3, NVLink 4 900 GB/s.
        # HBM as nvidia-smi reports it (81559 MiB). PCIe Gen5 x16 ~55 GB/s effective (64 GB/s
        # raw). Host DRAM: a DGX/HGX H100 has 2 TB for 8 GPUs; 192 GiB per GPU is left for KV.
        # Disk: one Gen4 NVMe per GPU (DGX H100 ships 8 x 3.84 TB), ~6 GB/s sequential read.
        GpuSpec(
            name="H100-80GB",
            hbm_bytes=81559 * MIB,
            peak_flops=989e12,
            hbm_bw=3.35e12,
            host_link_bw=55e9,
            nvlink_bw=900e9,
            host_dram_bytes=192 * GIB,
            disk_bw=6e9,
        ),
        # H200 SXM datasheet: H100 compute, 141 GB HBM3e at 4.8 TB/s. HBM 143771 MiB as
        # nvidia-smi reported on this workplace's H200 (/work/.library/device/KINDS.md).
        GpuSpec(
            name="H200-141GB",
            hbm_bytes=143771 * MIB,
            peak_flops=989e12,
            hbm_bw=4.8e12,
            host_link_bw=55e9,
            nvlink_bw=900e9,
            host_dram_bytes=192 * GIB,
            disk_bw=6e9,
        ),
        # The CI / embedded default: SGLang on 2 CPU cores serving tiny-llama. "HBM" is the RAM
        # SGLang may use, the "peak" is 2 AVX2 cores in fp32 (~2 x 3 GHz x 32 FLOP/cycle), and
        # there is no host tier (HiCache needs a GPU) and no interconnect. Rough leads only:
        # step time on this device is overhead-bound (see its calibration profile).
        GpuSpec(
            name="cpu-2core",
            hbm_bytes=4 * GIB,
            peak_flops=190e9,
            hbm_bw=20e9,
            host_link_bw=20e9,
            nvlink_bw=0.0,
            host_dram_bytes=0,
            disk_bw=None,
        ),
    )
}

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        # Hugging Face config.json of meta-llama/Llama-3.1-8B and -70B; params as published.
        ModelSpec(
            name="llama-3.1-8b",
            params=8_030_261_248,
            layers=32,
            hidden=4096,
            heads=32,
            kv_heads=8,
            head_dim=128,
            intermediate=14336,
            vocab=128256,
            context_window=131_072,
        ),
        ModelSpec(
            name="llama-3.1-70b",
            params=70_553_706_496,
            layers=80,
            hidden=8192,
            heads=64,
            kv_heads=8,
            head_dim=128,
            intermediate=28672,
            vocab=128256,
            context_window=131_072,
        ),
        # The long-context preset (the long-coding workload's default): Hugging Face config.json
        # of Qwen/Qwen2.5-7B-Instruct-1M (max_position_embeddings 1,010,000, dual-chunk
        # attention over 262,144-token chunks; Qwen2.5-1M technical report, arXiv 2501.15383).
        # KV is 28 x 4 x 128 x 2 x 2 B = 56 KiB per token, so a 150K-token context is 8.6 GB.
        # params = the published 7.62B counted from that config (q/k/v biases and norms in).
        ModelSpec(
            name="qwen2.5-7b-1m",
            params=7_615_616_512,
            layers=28,
            hidden=3584,
            heads=28,
            kv_heads=4,
            head_dim=128,
            intermediate=18944,
            vocab=152064,
            context_window=1_010_000,
        ),
        # The project's locally generated CPU model (server/runtime/sglang/tiny_model.py, whose
        # LlamaConfig sets intermediate_size=128); params counted from that config, norms in.
        ModelSpec(
            name="tiny-llama",
            params=139_584,
            layers=2,
            hidden=64,
            heads=4,
            kv_heads=2,
            head_dim=16,
            intermediate=128,
            vocab=512,
            context_window=2048,
        ),
    )
}


# A hypothetical fine-tune of Llama-3.1-8B (a verifier/schema checker) that trained only its
# upper 16 of 32 layers, so its lower 16 layers' KV equals the base's for the same tokens: the
# partial sharing DroidSpeak (NSDI '26, arXiv 2411.02820) exploits by recomputing the rest. The
# split is an assumption, not a published model; a PrefillShare decoder (arXiv 2602.12029: a
# frozen prefill module) would be frozen_layers = layers.
MODELS["llama-3.1-8b-verify"] = replace(
    MODELS["llama-3.1-8b"], name="llama-3.1-8b-verify", base="llama-3.1-8b", frozen_layers=16
)


def shared_kv_layers(a: ModelSpec, b: ModelSpec) -> int:
    """How many leading layers of ``a`` and ``b`` produce identical KV for the same tokens:
    all of them for the same preset, the fine-tune's frozen layers for a fine-tune and its
    base, the fewer frozen layers for two fine-tunes of one base, 0 otherwise (different
    lineage or architecture)."""
    if a.name == b.name:
        return a.layers
    shape = (a.layers, a.hidden, a.kv_heads, a.head_dim, a.vocab)
    if shape != (b.layers, b.hidden, b.kv_heads, b.head_dim, b.vocab):
        return 0
    if a.base == b.name:
        return a.frozen_layers
    if b.base == a.name:
        return b.frozen_layers
    if a.base is not None and a.base == b.base:
        return min(a.frozen_layers, b.frozen_layers)
    return 0


def gpu(name: str) -> GpuSpec:
    """Return the GPU preset ``name``; raises ``KeyError`` naming the known presets."""
    try:
        return GPUS[name]
    except KeyError:
        raise KeyError(f"unknown GPU {name!r}; known: {sorted(GPUS)}") from None


def model(name: str) -> ModelSpec:
    """Return the model preset ``name``; raises ``KeyError`` naming the known presets."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {sorted(MODELS)}") from None

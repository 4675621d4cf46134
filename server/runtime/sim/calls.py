"""One LLM call inside the simulated engine, and the engine's configuration."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from enum import Enum, auto

from agentconsole.kvtiers.node import Block, Node
from agentconsole.kvtiers.tiers import HOST_WRITE_POLICIES, WRITE_THROUGH
from agentconsole.scheduler.composition import DEFAULT_MAX_DECODE_PASSES
from agentconsole.scheduler.events import Scalar
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sim.crossmodel import (
    NO_USE,
    NONE,
    CrossModelKv,
    CrossModelUse,
    ForeignKv,
)
from agentconsole.server.runtime.sim.prefixcache import ORDINARY, PrefixCacheMode


class Phase(Enum):
    QUEUED = auto()
    LOADING = auto()  # admitted; waiting for its host-memory prefix to reload over PCIe
    PREFILL = auto()
    DECODE = auto()
    DONE = auto()
    ABORTED = auto()


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """SGLang-like engine knobs (names follow SGLang's server arguments)."""

    max_running_requests: int = 256
    chunked_prefill_size: int = 8192
    #: decode tokens ride along with prefill chunks in one step (SGLang --enable-mixed-chunk,
    #: vLLM v1's default); without it decoding stalls while any prefill is pending. Off by
    #: default, as SGLang ships and ``serve --runtime sglang`` runs it
    mixed_chunk: bool = False
    #: while calls ranked better than every pending prefill are decoding, prefill only a
    #: stall-free chunk mixed into their steps, whatever ``mixed_chunk`` says (the policy
    #: orders the step's work, not only
    #: admission). Off by default: SGLang with the plugin composes steps by admission order
    #: (the plugin orders its queue, not its batches), and the simulator runs what serve runs
    rank_aware_steps: bool = False
    #: decode-only steps in a row a pending prefill may wait while a better-ranked call decodes
    #: (``scheduler.composition.PrefillDeferral``, what the SGLang plugin does around
    #: ``_should_defer_prefill``); 0: never, as stock SGLang
    defer_prefill_steps: int = DEFAULT_MAX_DECODE_PASSES
    mem_fraction_static: float = 0.9
    #: the GPU KV pool in tokens (SGLang's ``--max-total-tokens``); None: what the GPU preset
    #: leaves after the weights at ``mem_fraction_static``
    hbm_kv_tokens: int | None = None
    #: host DRAM tier for demoted/offloaded KV (HiCache); 0 disables the tier
    host_kv_tokens: int | None = None
    #: when HBM's KV is copied to the host tier (``kvtiers.tiers.HOST_WRITE_POLICIES``)
    host_write_policy: str = WRITE_THROUGH
    eviction: str = "retention"
    #: under a program-aware policy, hold a queued call's cached context until it is admitted
    #: (``EngineKv.hold_queued``; request-level policies never do). Off by default: with the
    #: simulator's program admission gate it only over-protects (docs/BENCHMARKS.md, 2b);
    #: alone it stops thrash at 1.5x capacity, not at 3x
    hold_queued_context: bool = False
    #: what the prefix cache does with the suffix after a mid-prompt insertion
    #: (``prefixcache.py``: ``ordinary``, as real engines, or ``relative``, CacheSlide-style)
    prefix_cache: PrefixCacheMode = ORDINARY
    #: what a call makes of another model's KV of its prompt (``crossmodel.py``: ``none``,
    #: or ``shared-prefill``; only calls given ``SimCall.foreign``, in multi-model runs)
    cross_model: CrossModelKv = NONE
    #: block keys remembered as computed, to count recomputes (``recentkeys.py``); None keeps
    #: every key (a bench run is finite), serve bounds it (it runs for weeks)
    computed_keys_kept: int | None = None
    #: longest run of fused decode steps (bounds the error of the closed form's averaging)
    max_fused_decode_steps: int = 64
    stats_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if self.host_write_policy not in HOST_WRITE_POLICIES:
            raise ValueError(
                f"host_write_policy must be one of {', '.join(HOST_WRITE_POLICIES)}, "
                f"not {self.host_write_policy!r}"
            )


@dataclass(slots=True, eq=False)
class SimCall:
    """A call's request and its progress through the engine.

    ``blocks`` is the whole prompt context (prefix first). ``output_tokens`` is how many tokens
    the call will generate: the engine needs it to know when to stop, the *policy* never sees it
    (tickets carry the controller's estimate). ``insert_at`` is the position in ``blocks`` of
    the tokens this call inserted mid-prompt (-1: it appended only); the insertion's
    accounting (``lost_reuse_tokens``, ``suffix_reused_tokens``, ``correction_tokens``) is
    :meth:`EngineKv.admit`'s.
    """

    ticket: CallTicket
    blocks: list[Block]
    output_tokens: int
    output_key: Hashable
    insert_at: int = -1
    #: extra fields of its queued and finished events (the model chosen and why); empty for a
    #: one-model run, whose event streams stay as they were
    labels: dict[str, Scalar] = field(default_factory=dict)
    #: what other models held of its prompt when it was placed (multi-model runs; None: one
    #: model, nothing to count); ``cross_model`` is what its last admission made of it
    foreign: ForeignKv | None = None
    cross_model: CrossModelUse = NO_USE
    phase: Phase = Phase.QUEUED
    prompt_tokens: int = 0
    path: list[Node] = field(default_factory=list)  # locked matched prefix
    held: list[Node] = field(default_factory=list)  # cached prefix soft-held while queued
    reserved: int = 0
    prefill_left: int = 0
    context_done: int = 0  # tokens of KV present for attention
    generated: int = 0
    #: seconds its prefill was deferred for better-ranked decoders (``PrefillDeferral``)
    deferred_s: float = 0.0
    submitted_at: float = 0.0
    queued_at: float = 0.0
    admitted_at: float = 0.0
    ready_at: float = 0.0
    first_token_at: float | None = None
    last_token_at: float = 0.0
    hit_tokens: int = 0
    recompute_tokens: int = 0
    #: at its last admission: the tokens it must recompute then, and its service and computed
    #: tokens so far (its prefill's share of restore time is of that admission's work alone)
    admitted_recompute: int = 0
    admitted_service_s: float = 0.0
    admitted_computed: int = 0
    #: prefill chunks thrown away by a preemption before its prefill ended, counted as
    #: recomputed at its next admission: those of a block it had not finished (SGLang 0.5.23
    #: keeps each finished chunk in its tree, ``cache_unfinished_req``; the simulator's
    #: blocks are whole segments, so it keeps the blocks finished, BENCHMARKS 2q)
    discarded_tokens: int = 0
    #: prompt tokens its own cut-short prefills left in the tree (whole blocks): found at its
    #: next admission, they are its own work again, not prefix hits
    checkpointed_tokens: int = 0
    #: the recompute its last admission was cut short before reaching: still to do at the
    #: next (its time is restore time there; its tokens were counted at that admission)
    carried_recompute: int = 0
    service_s: float = 0.0
    queue_s: float = 0.0
    restore_s: float = 0.0
    computed_tokens: int = 0
    retractions: int = 0
    lost_reuse_tokens: int = 0
    suffix_reused_tokens: int = 0
    correction_tokens: int = 0
    suffix_path: list[Node] = field(default_factory=list)  # locked old path a reused suffix is on
    rank: tuple[int, float, int] = (0, 0.0, 0)  # effective queue key when admitted
    queued_demand: float = 0.0  # what its enqueue added to the engine's ``queued_demand``
    #: what the engine caches when the call finishes: by default its prompt's blocks and one
    #: block of its output (``output_key``); serve's runtime gives the blocks of its prompt and
    #: output text (cached besides the prompt as sent), so a next prompt that repeats the
    #: answer reads it from cache, as on SGLang
    finished_blocks: list[Block] | None = None

    def __post_init__(self) -> None:
        self.prompt_tokens = sum(b.tokens for b in self.blocks)

    @property
    def call_id(self) -> str:
        return self.ticket.call_id

    @property
    def remaining_tokens(self) -> int:
        return self.output_tokens - self.generated

"""The runtime protocol: what the server needs from an LLM engine.

Two implementations live in ``agentconsole.server.runtime``: the SGLang adapter (the real engine,
with the program-aware policy running inside SGLang's scheduler process) and the simulated
engine (a discrete-event model of an SGLang-like engine, in wall-clock time under ``serve``).
The protocol is defined here, beside the controller that feeds it, so the scheduler package
stays free of server imports.

Identity: every call is submitted with its :class:`CallTicket`; ``ticket.call_id``
(``program/node/attempt``) is the engine's request id, so abort and reprioritise go by exact id.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import AsyncIterator, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from agentconsole.scheduler.ticket import CallTicket

if TYPE_CHECKING:
    from agentconsole.scheduler.tokenstream import StreamListener

#: How many programs' last contexts a runtime remembers (for lost reuse, probes and tool-wait
#: hints), least recent dropped: a program that ended never asks again, and the runtime is not
#: told when one does, so the bound is what keeps a server that runs for weeks flat.
MAX_REMEMBERED_PROGRAMS = 4096


class CacheAction(StrEnum):
    """What to do with a program's private KV: the tool-wait decision, and a cancel's.

    The simulator carries each out now (``sim/kvstate.py``, ``EngineKv.apply_cache_action``).
    SGLang cannot move or free a context on request: it marks the program's radix path for its
    eviction strategy (``sglang/retention.py``), so ``offload`` and ``recompute`` both mean
    "evicted first", and an offload reaches host memory only with HiCache on (eviction then
    demotes the nodes); without HiCache (always on CPU) ``offload`` is the same as
    ``recompute``."""

    KEEP = "keep"  # stay on the GPU, softly retained for ``retain_s`` (both runtimes)
    #: sim: moved to host memory now, reloaded on return; SGLang: evicted first (see above)
    OFFLOAD = "offload"
    #: sim: freed now; SGLang: evicted first; recomputed if it is ever needed again
    RECOMPUTE = "recompute"


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt as the served model reads it: its text, its size in the model's tokens and,
    when the runtime has a tokenizer of its own, the token ids (sent to the engine as they are,
    so it does not tokenize again)."""

    text: str
    tokens: int
    token_ids: tuple[int, ...] | None = None
    #: leading tokens the platform marked public (shareable across tenants)
    public_tokens: int = 0
    #: what the engine must do to read this prompt as the format means it, sent with the call
    #: (SGLang: the ``sampling_params`` entries of a ``tool_choice`` constraint)
    sampling: Mapping[str, Any] = field(default_factory=dict)

    @property
    def private_tokens(self) -> int:
        """Tokens of this prompt that belong to its tenant (what a program claims)."""
        return max(self.tokens - self.public_tokens, 0)


#: a run of a prompt's leading tokens: (a key naming the prompt through the run's end, its
#: tokens)
HeldSegment = tuple[Hashable, int]
#: tokens per segment where a runtime names a held prefix from token ids: fine enough that a
#: prefix held in part (its tail evicted) shares all but its last segment with the whole one
SEGMENT_TOKENS = 1024


def token_segments(scope: str, token_ids: Sequence[int], tokens: int) -> tuple[HeldSegment, ...]:
    """The first ``tokens`` of ``token_ids`` as chained segments of :data:`SEGMENT_TOKENS`
    (each key a digest of ``scope`` and every token up to the segment's end): the
    :attr:`PrefixProbe.held_segments` of a runtime that sees token ids."""
    segments: list[HeldSegment] = []
    digest = hashlib.blake2b(scope.encode(), digest_size=16).digest()
    end = min(tokens, len(token_ids))
    for start in range(0, end, SEGMENT_TOKENS):
        chunk = token_ids[start : min(start + SEGMENT_TOKENS, end)]
        data = digest + array("q", chunk).tobytes()
        digest = hashlib.blake2b(data, digest_size=16).digest()
        segments.append((digest, len(chunk)))
    return tuple(segments)


def chained_segments(
    scope: Hashable, runs: Iterable[tuple[Hashable, int]]
) -> tuple[HeldSegment, ...]:
    """A held prefix given as consecutive runs (key, tokens) (a prefix index's matched
    nodes, whose keys name a block, not what precedes it), merged into segments of at least
    :data:`SEGMENT_TOKENS`, each keyed by a hash chained over ``scope`` (the engine that
    holds it) and every run's key up to its end: the :attr:`PrefixProbe.held_segments` of a
    runtime that indexes blocks."""
    segments: list[HeldSegment] = []
    chain = hash(scope)
    tokens = 0
    for key, run_tokens in runs:
        chain = hash((chain, key))
        tokens += run_tokens
        if tokens >= SEGMENT_TOKENS:
            segments.append((chain, tokens))
            tokens = 0
    if tokens:
        segments.append((chain, tokens))
    return tuple(segments)


@dataclass(frozen=True, slots=True)
class PrefixProbe:
    """What an engine holds of one prompt, looked up (without changing anything) before the
    call is queued: the ticket's ``cached_tokens`` and ``restore_cost_s`` come from it."""

    prompt_tokens: int
    #: prompt tokens resident in the fastest tier (HBM): served from cache
    cached_tokens: int = 0
    #: prompt tokens resident in a slower tier (host DRAM, disk): reloaded before prefill
    slow_tokens: int = 0
    #: prompt tokens this program's earlier calls computed that the engine no longer holds:
    #: recomputed (the cost of having lost them)
    lost_tokens: int = 0
    #: the held prefix (``hit_tokens``) in segments, where the runtime can name them: two
    #: prompts share a segment's key exactly when they share the prefix through it (empty: not
    #: named). What lets the door keep room once for each prefix programs share, however many
    #: programs hold it (``ProgramDriver``'s reserve)
    held_segments: tuple[HeldSegment, ...] = ()

    @property
    def hit_tokens(self) -> int:
        """Prompt tokens found in any tier."""
        return self.cached_tokens + self.slow_tokens

    def on_engine(self, engine: Hashable) -> PrefixProbe:
        """This probe with its segments named under ``engine`` too: where one server runs
        several engines (models) whose probes name a prefix alike, each holds its own copy."""
        if not self.held_segments:
            return self
        named = tuple(((engine, key), tokens) for key, tokens in self.held_segments)
        return replace(self, held_segments=named)


@dataclass(frozen=True, slots=True)
class MemoryView:
    """The engine's KV memory and queue as program-level decisions see it (the tool-wait
    decision, the program door): one definition for every runtime.

    ``evictable_tokens`` is HBM held by unlocked cache, of which ``protected_tokens`` is kept
    for programs (tool-wait retention, holds): admission can take evictable minus protected
    without hurting a program. ``queued_tokens`` is the prompt tokens the queued calls need.
    """

    hbm_capacity_tokens: int
    free_tokens: int
    evictable_tokens: int = 0
    protected_tokens: int = 0
    queued_tokens: float = 0.0
    queued_calls: int = 0
    running_calls: int = 0
    #: requests the engine runs at once (SGLang's ``max_running_requests``; 0: unknown)
    batch_slots: int = 0
    dram_capacity_tokens: int = 0
    kv_bytes_per_token: float = 1.0
    #: bandwidth of the host link (HBM <-> DRAM), bytes per second
    host_link_bytes_per_s: float = 25e9
    #: the engines this view sums (data-parallel ranks, models): a program's own engine's
    #: view (``Runtime.memory(program_id)``) can differ from it only where there are several
    engines: int = 1

    @property
    def reclaimable_tokens(self) -> int:
        """HBM a new call can have without evicting anything a program is kept for."""
        return self.free_tokens + max(self.evictable_tokens - self.protected_tokens, 0)

    @property
    def memory_tokens(self) -> int:
        """HBM plus host DRAM, in tokens (what a working set can fill)."""
        return self.hbm_capacity_tokens + self.dram_capacity_tokens


@dataclass(frozen=True, slots=True)
class ProgramContext:
    """A program's last context as the engine holds it: ``private_tokens`` belong to it alone
    (its own prompt parts and outputs), ``shared_tokens`` are a prefix others use too."""

    private_tokens: int
    shared_tokens: int = 0


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    ticket: CallTicket
    prompt: str  # rendered prompt (chat template already applied)
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    #: cache namespace derived from the *authenticated* tenant; never from the client
    cache_namespace: str = ""
    #: leading characters of ``prompt`` the platform marked public (shareable across tenants)
    public_prefix_chars: int = 0
    #: simulated runtimes only: generate exactly this many tokens when set
    forced_output_tokens: int | None = None
    #: the prompt's token ids when the server tokenized it (the engine then skips tokenizing)
    prompt_ids: tuple[int, ...] | None = None
    #: engine-specific sampling entries the prompt's format asked for (``Prompt.sampling``)
    sampling: Mapping[str, Any] = field(default_factory=dict)
    #: the served model to run on (a runtime over several models dispatches by it); None:
    #: the runtime's one model
    model: str | None = None
    #: OpenAI's repetition penalties, -2..2 (None: not asked, the engine's default: none)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    #: OpenAI's ``logit_bias``: token id -> bias added to its logit, -100..100 (None: not
    #: asked). Ids were checked against the model's vocabulary where the runtime knows it
    #: (``vocab_size``); a simulated runtime, which samples no real tokens, ignores all three
    logit_bias: Mapping[int, float] | None = None


@dataclass(frozen=True, slots=True)
class TokenDelta:
    text: str
    tokens: int


#: the code of a prompt over the model's context, OpenAI's: a runtime's
#: ``GenerationResult.engine_abort_code`` when its engine refused one, and the API's code of
#: the refusal (the intake's and the engine's alike), which agent frameworks trim history on
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


@dataclass(frozen=True, slots=True)
class GenerationResult:
    finish_reason: str  # stop | length | abort
    text: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    queue_s: float = 0.0
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    service_s: float = 0.0
    restore_s: float = 0.0
    retractions: int = 0
    #: an abort the engine made itself (not one asked of it): the HTTP status it gives the
    #: cause (SGLang's: 400 a request it cannot serve, 503 retract under memory pressure, 500
    #: out of memory; None when it names none) and its message
    engine_abort_status: int | None = None
    engine_abort_message: str = ""
    #: that abort's cause as the API names it, where the runtime tells one
    #: (:data:`CONTEXT_LENGTH_EXCEEDED`: the engine found the prompt over its context); None
    #: else
    engine_abort_code: str | None = None
    #: an aborted call on a runtime whose abort takes effect a step later (SGLang's): every
    #: token the engine generated for it, read or not (None: the runtime generates nothing
    #: after an abort, so ``output_tokens`` is all of it)
    produced_tokens: int | None = None
    #: an aborted call whose prompt the engine did not prefill in full: the prompt tokens it
    #: did prefill (0: aborted before it was ever scheduled, in the engine's queue). None: the
    #: whole uncached prompt, ``prompt_tokens - cached_tokens`` (a call that ran its prefill)
    prefilled_tokens: int | None = None

    @property
    def computed_tokens(self) -> int:
        """The prompt tokens the engine computed for the call: what usage, quotas and the
        tenant's rate charge it for its prompt."""
        if self.prefilled_tokens is None:
            return max(self.prompt_tokens - self.cached_tokens, 0)
        return self.prefilled_tokens

    @property
    def generated_tokens(self) -> int:
        """Every token the engine generated for the call (``output_tokens`` counts only what
        was read when it was aborted)."""
        if self.produced_tokens is None:
            return self.output_tokens
        return max(self.produced_tokens, self.output_tokens)


class GenerationStream(Protocol):
    """Tokens as they are generated, then the final result: iterated, or handed to a listener
    (``scheduler.tokenstream.TokenStream``, which every runtime returns)."""

    def __aiter__(self) -> AsyncIterator[TokenDelta]: ...

    def listen(self, listener: StreamListener) -> None:
        """Hand the deltas and the end to ``listener`` as they come, instead of iterating."""

    async def result(self) -> GenerationResult:
        """Wait for the call to end (finished or aborted) and return its accounting."""
        ...


@dataclass(frozen=True, slots=True)
class QueuedCall:
    call_id: str
    program_id: str
    tenant: str
    key: float
    waited_s: float


@dataclass(frozen=True, slots=True)
class RunningCall:
    call_id: str
    program_id: str
    tenant: str
    context_tokens: int
    generated_tokens: int
    running_s: float


@dataclass(frozen=True, slots=True)
class TierUsage:
    used_tokens: int
    capacity_tokens: int
    used_bytes: int


@dataclass(frozen=True, slots=True)
class RuntimeSnapshot:
    runtime: str
    policy: str
    queued: tuple[QueuedCall, ...] = ()
    running: tuple[RunningCall, ...] = ()
    tiers: dict[str, TierUsage] = field(default_factory=dict)
    #: program id -> tier name -> tokens of that program's context resident there
    placement: dict[str, dict[str, int]] = field(default_factory=dict)
    prefix_hit_tokens: int = 0
    paused: bool = False


@dataclass(frozen=True, slots=True)
class ServicePrior:
    """What a runtime knows of its model's speed before any call ran, in wall seconds: where
    the server's learned service model starts (``server.live.modelcost``), so calls are ranked
    by the model's real speed from the first one. Only a runtime with a cost model of its own
    (the simulator's roofline) has one; a real engine is learned from its calls alone."""

    #: prefill time per uncached prompt token
    prefill_s_per_token: float
    #: one decode step of a lone call
    decode_step_s: float


#: one parsed tool call: (function name, arguments as JSON text)
ToolCallTuple = tuple[str, str]
Json = Mapping[str, Any]


class ToolCallStream(Protocol):
    """One streamed answer, split into text a client may see now and held tool-call markup."""

    def feed(self, text: str) -> str:
        """The part of the answer so far that can be sent now (markup is held back)."""

    def finish(self) -> tuple[str, list[ToolCallTuple]]:
        """(text still to send, the answer's tool calls) once the answer is complete."""


class ChatFormat(Protocol):
    """How the served model reads chats (its template, to a :class:`Prompt` in its tokens) and
    writes tool calls (its parser). Messages and tools are OpenAI objects (plain dicts)."""

    @property
    def name(self) -> str:
        """What the format is, for people (e.g. ``chatml``, ``template+llama3``)."""

    def render(
        self,
        messages: Sequence[Json],
        tools: Sequence[Json] | None,
        tool_choice: object,
        *,
        reasoning_effort: str | None = None,
    ) -> Prompt:
        """The chat's prompt, up to the assistant's answer (``ValueError``: refused).
        ``reasoning_effort`` (OpenAI's, None: not asked) reaches a model's own template as the
        keyword of that name, as SGLang's OpenAI server passes it (only reasoning models'
        templates read it); a format with no such template ignores it."""

    def encode(self, text: str) -> Prompt:
        """A raw prompt (``/v1/completions``), tokenized as the engine would."""

    def parse(self, text: str, tools: Sequence[Json]) -> tuple[str, list[ToolCallTuple]]:
        """(plain text, tool calls) of a complete answer to a prompt that declared ``tools``."""

    def stream(self, tools: Sequence[Json]) -> ToolCallStream:
        """A filter for one streamed answer to a prompt that declared ``tools``."""


class Runtime(Protocol):
    """An LLM engine the server can drive. All methods are safe to call concurrently."""

    name: str

    @property
    def chat_format(self) -> ChatFormat:
        """How this runtime's model reads chats and writes tool calls (valid once started)."""

    @property
    def max_context_tokens(self) -> int | None:
        """The served model's context window, prompt plus output: a call that cannot fit is
        refused before it is sent (None: unknown, e.g. before the engine is up; no check)."""

    @property
    def vocab_size(self) -> int | None:
        """The served model's vocabulary size (its token ids are below it): a ``logit_bias``
        naming another id is refused before it is sent (None: unknown, or no real tokens)."""

    def service_prior(self) -> ServicePrior | None:
        """The model's speed as the runtime knows it in advance (None: learned from calls)."""

    async def start(self) -> None:
        """Bring the engine up; returns when it answers requests."""

    async def stop(self) -> None:
        """Shut down; pending calls end with finish_reason ``abort``."""

    def submit(self, request: GenerationRequest) -> GenerationStream:
        """Queue a call; the engine orders it with the active policy and ``request.ticket``."""
        ...

    async def abort(self, call_id: str) -> bool:
        """Abort a queued or running call by exact id. Returns True once the engine confirmed
        the call is gone (no token is produced after that); False if it was unknown."""
        ...

    async def reprioritise(self, call_id: str, ticket: CallTicket) -> bool:
        """Re-rank a queued (or running, where preemption allows) call under a new ticket."""
        ...

    async def preempt(self, call_id: str) -> bool:
        """Take a running call off the GPU now; it is requeued and resumes later."""
        ...

    async def cache_hint(self, program_id: str, action: CacheAction, retain_s: float) -> None:
        """Apply a tool-wait decision to the program's resident context."""

    def program_ended(self, program_id: str) -> None:
        """The program ended (the driver's ``ProgramEnded``): forget where its calls were
        placed (a data-parallel rank mapping), so it no longer counts as load to come. Its KV
        stays cached until evicted; a later call under the same id is placed again."""

    def set_policy(self, name: str) -> None:
        """Switch the ordering policy for waiting calls (by registry name)."""

    async def pause(self) -> None:
        """Stop admitting new calls (drain); running calls continue."""

    async def resume(self) -> None: ...

    async def healthy(self) -> bool:
        """A real liveness probe (the engine answered recently or answers now)."""
        ...

    def snapshot(self) -> RuntimeSnapshot:
        """Queue, running batch and KV use per tier, without blocking the engine."""
        ...

    # -- what program-level decisions read (``scheduler.driver``); cheap, never blocking --------
    def probe(self, program_id: str, prompt: Prompt, namespace: str) -> PrefixProbe:
        """What the engine holds of ``prompt`` for ``program_id`` (tenant ``namespace``)."""
        ...

    def memory(self, program_id: str | None = None) -> MemoryView:
        """The engine's KV memory and queue now. None: the whole runtime's (every rank and
        model summed: what the program door sizes a new program against). A program: the
        memory of the engine its calls run on (its data-parallel rank, its latest model), the
        view ``bench`` gives the driver of the replica the program last ran on; the whole
        runtime's while it has run nowhere yet."""
        ...

    def context_of(self, program_id: str) -> ProgramContext | None:
        """The program's last context as the engine holds it (None: nothing of it cached)."""
        ...

    def node_ranks(self, program_id: str) -> Mapping[str, int]:
        """Node id -> the data-parallel rank its latest attempt ran on, shown on the program's
        nodes (empty: a runtime without ranks, or none known for the program)."""
        ...

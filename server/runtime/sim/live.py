"""The simulated runtime in wall-clock time: :class:`SimEngine` behind the Runtime protocol.

``serve --runtime sim`` runs this instead of SGLang. One asyncio task (the driver) plays the
engine: it plans a block, sleeps until the block's end, completes it and streams the tokens the
block produced to the calls' streams. A submit, abort or preempt wakes it: a run of fused
decode steps in flight is then cut at the next step boundary (``SimEngine.interrupt``), so a
new arrival waits at most one engine step for the next plan.

Engine time is a virtual clock that runs ``1 / time_scale`` times as fast as the wall clock:
``time_scale=1`` is real time, ``0`` the zero-cost mode (every block takes no wall time, for
measuring the API's own overhead). Tickets are shifted into engine time on submit; timings in
results are wall seconds (engine seconds times ``time_scale``).

Events: the engine's ``call.scheduled``, ``call.preempted``, ``kv.*`` and ``engine.stats``
events go to ``options.extra["event_sink"]`` (restamped with wall-clock time); the call
lifecycle events (queued, first token, finished, aborted) are the caller's to emit, as with any
runtime. Aborts are synchronous: when :meth:`abort` returns, the call has left the engine and
its stream has ended; tokens produced but not yet read are discarded, never delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from agentconsole.kvtiers.node import Node
from agentconsole.kvtiers.tiers import Tier
from agentconsole.scheduler.events import EventSink
from agentconsole.scheduler.fairness import FairnessConfig
from agentconsole.scheduler.policies import DEFAULT_POLICY, get_policy
from agentconsole.scheduler.runtime import (
    MAX_REMEMBERED_PROGRAMS,
    CacheAction,
    GenerationRequest,
    MemoryView,
    PrefixProbe,
    ProgramContext,
    Prompt,
    QueuedCall,
    RunningCall,
    RuntimeSnapshot,
    ServicePrior,
    TierUsage,
    chained_segments,
)
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sim.calls import EngineConfig, Phase, SimCall
from agentconsole.server.runtime.sim.carrier import memory_view
from agentconsole.server.runtime.sim.costmodel import DEFAULT_PRESET_MODEL, CostModel, preset
from agentconsole.server.runtime.sim.engine import Note, SimEngine
from agentconsole.server.runtime.sim.live_stream import Forward, SimStream
from agentconsole.server.runtime.sim.live_text import (
    answered_blocks,
    chat_format,
    natural_length,
    output_pieces,
    prompt_blocks,
)
from agentconsole.server.runtime.sim.profile import load_profile

#: block keys a served engine remembers as computed (two generations of up to this many): a
#: prefill of a block last computed longer ago counts as a first computation, not a recompute
COMPUTED_KEYS_KEPT = 100_000
#: what the served engine's held segments are named under: it is the only one (several models
#: are named apart by the intake, ``PrefixProbe.on_engine``)
ONE_ENGINE = "live"

_TIER_NAMES = {Tier.HBM: "hbm", Tier.DRAM: "dram", Tier.DISK: "disk"}


class SimLiveRuntime:
    """The Runtime protocol over a wall-clock :class:`SimEngine`; see the module docstring."""

    name = "sim"

    def __init__(
        self,
        cost: CostModel,
        *,
        policy: str = DEFAULT_POLICY,
        time_scale: float = 1.0,
        event_sink: EventSink | None = None,
        config: EngineConfig | None = None,
        start_delay_s: float = 0.0,
        output_tokens: int | None = None,
        fairness: FairnessConfig | None = None,
    ) -> None:
        if time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {time_scale}")
        self.cost = cost
        self.policy_name = policy
        self.engine = SimEngine(
            cost,
            get_policy(policy),
            Forward(event_sink),
            config=config,
            fairness=fairness,
            call_events=False,
        )
        self.time_scale = time_scale
        self.chat_format = chat_format()  # ChatML, simulated token counts
        self._start_delay_s = start_delay_s
        self._output_tokens = output_tokens
        self._calls: dict[str, SimStream] = {}
        #: each program's last finished path, for lost reuse and tool-wait hints; bounded
        #: like the SGLang adapter's contexts: a program that ended never asks again
        self._last_path: OrderedDict[str, list[Node]] = OrderedDict()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._v = time.time()  # engine clock at the anchor
        self._anchor = time.monotonic()
        self._wake: float | None = None
        self._placement: tuple[float, dict[str, dict[str, int]]] = (-math.inf, {})

    @property
    def max_context_tokens(self) -> int | None:
        """The model preset's context window (prompt plus output; None: unstated)."""
        return self.cost.model.context_window

    @property
    def vocab_size(self) -> int | None:
        """None: the simulator samples no real tokens (a ``logit_bias`` changes nothing)."""
        return None

    def service_prior(self) -> ServicePrior | None:
        """The cost model's speed in wall seconds: prefill per token at 8k, one decode step of
        a lone call (None in the zero-cost mode, where a call takes no wall time)."""
        per_token = self.cost.prefill_seconds(8192) / 8192
        step = self.cost.decode_step_seconds(1, 1024)
        scale = self.time_scale  # wall s per engine s
        if per_token > 0 and step > 0 and scale > 0:
            return ServicePrior(per_token * scale, step * scale)
        return None

    # -- clock --------------------------------------------------------------------------------
    def _now(self) -> float:
        if self.time_scale <= 0:
            return self._v
        return self._v + (time.monotonic() - self._anchor) / self.time_scale

    def _set_now(self, v: float) -> None:
        self._v, self._anchor = v, time.monotonic()

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the driver task (after ``start_delay_s``, which tests use to see /ready wait)."""
        if self._start_delay_s > 0:
            await asyncio.sleep(self._start_delay_s)
        self._set_now(time.time())
        self._task = asyncio.create_task(self._drive(), name="sim-runtime")

    async def stop(self) -> None:
        """Stop the driver; every call in flight ends with ``abort``."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        now = self._now()
        for call_id in list(self._calls):
            self._end_aborted(call_id, self._waiting_s(call_id, now))

    async def healthy(self) -> bool:
        return self._task is not None and not self._task.done()

    # -- calls ---------------------------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> SimStream:
        """Queue a call; its ticket's times are shifted into engine time."""
        ticket = request.ticket
        if ticket.call_id in self._calls:
            raise ValueError(f"call {ticket.call_id!r} is already in flight")
        now = self._now()
        engine_ticket = ticket.shifted(now - time.time())
        blocks = prompt_blocks(request.prompt, request.cache_namespace, request.public_prefix_chars)
        want = request.forced_output_tokens
        if want is None:
            want = self._output_tokens or natural_length(request.prompt)
        tokens = max(1, min(want, request.max_tokens))
        forced = request.forced_output_tokens is not None
        pieces = output_pieces(request.prompt, tokens, allow_tool_call=not forced)
        call = SimCall(engine_ticket, blocks, len(pieces), f"{ticket.call_id}/out")
        # cached as the prompt's text followed by the answer's: an agent's next prompt repeats
        # the answer after this prompt (the assistant turn), and reads it from cache
        call.finished_blocks = answered_blocks(
            blocks,
            request.prompt,
            "".join(pieces),
            request.cache_namespace,
            request.public_prefix_chars,
        )
        # ignore_eos-style forced lengths end at max_tokens like SGLang's: "length"
        capped = want > request.max_tokens or (forced and tokens >= request.max_tokens)
        stream = SimStream(call, pieces, capped=capped, submitted=time.time())
        self._calls[ticket.call_id] = stream
        self.engine.submit(call, now)
        self._kick.set()
        return stream

    async def abort(self, call_id: str) -> bool:
        """Remove the call from the engine now and end its stream (undelivered tokens are
        dropped). False if the call is unknown or already over."""
        if call_id not in self._calls:
            return False
        now = self._now()
        waiting_s = self._waiting_s(call_id, now)  # before the engine forgets it was queued
        self.engine.abort(call_id, now)
        self._end_aborted(call_id, waiting_s)
        self._kick.set()
        return True

    async def reprioritise(self, call_id: str, ticket: CallTicket) -> bool:
        """Re-rank a queued call under ``ticket`` (running calls keep their place)."""
        stream = self._calls.get(call_id)
        if stream is None or self.engine.queue.remove(call_id) is None:
            return False
        shift = self._now() - time.time()
        stream.call.ticket = replace(
            ticket,
            arrival=stream.call.ticket.arrival,
            deadline=None if ticket.deadline is None else ticket.deadline + shift,
        )
        self.engine.queue.push(stream.call.ticket, self._now())
        self._kick.set()
        return True

    async def preempt(self, call_id: str) -> bool:
        ok = self.engine.preempt(call_id, self._now())
        self._kick.set()
        return ok

    async def cache_hint(self, program_id: str, action: CacheAction, retain_s: float) -> None:
        """Apply a tool-wait decision to the program's private context (its last call's)."""
        path = self._last_path.get(program_id)
        if not path:
            return
        private = self.engine.index.owned_suffix(path, program_id)
        self.engine.apply_cache_action(
            program_id, private, action, retain_s / max(self.time_scale, 1e-9), self._now()
        )
        if action is CacheAction.RECOMPUTE:
            self._last_path.pop(program_id, None)

    def program_ended(self, program_id: str) -> None:
        """What a keep decision retained for the program is ordinary cache again (as on
        SGLang). One engine, nothing placed: nothing else to forget (the last path, kept for a
        program that comes back under the same id, is bounded on its own)."""
        self.engine.release_kept(program_id, self._now())

    def set_policy(self, name: str) -> None:
        """Switch the ordering policy; ``KeyError`` for an unknown name."""
        policy = get_policy(name)
        self.engine.queue.set_policy(policy, self._now())
        self.policy_name = name
        self._kick.set()

    async def pause(self) -> None:
        self.engine.paused = True

    async def resume(self) -> None:
        self.engine.paused = False
        self._kick.set()

    # -- the driver ------------------------------------------------------------------------------
    async def _drive(self) -> None:
        engine = self.engine
        while True:
            wake = self._wake
            if wake is not None and self.time_scale > 0 and wake > self._now():
                if not await self._kicked_within((wake - self._now()) * self.time_scale):
                    continue
                if engine.in_flight:  # new work: cut a run of decode steps short
                    end = engine.interrupt(self._now())
                    if end is not None:
                        self._wake = end
                    continue
                self._wake = None  # only a reload was pending: plan now
            elif wake is not None:
                self._set_now(max(self._now(), wake))
                self._wake = None
                engine.complete(wake)
                self._after_step(engine.drain_notes())
            self._wake = engine.plan(self._now())
            self._after_step(engine.drain_notes())
            if self._wake is None:
                self._kick.clear()
                await self._kick.wait()
            elif self.time_scale <= 0:
                await asyncio.sleep(0)  # zero-cost blocks: still let the server run

    async def _kicked_within(self, delay: float) -> bool:
        self._kick.clear()
        try:  # asyncio.timeout, not wait_for: wait_for can swallow a cancel on 3.11
            async with asyncio.timeout(delay):
                await self._kick.wait()
        except TimeoutError:
            return False
        return True

    def _after_step(self, notes: list[Note]) -> None:
        calls = self._calls
        for note in notes:
            stream = calls.get(note.call.call_id)
            if stream is None:
                continue
            if note.what == "first_token":
                stream.first_at = time.time()
            elif note.what == "finished":
                self._remember_path(note.call.ticket.program_id, note.path)
                stream.deliver()
                del calls[note.call.call_id]
                stream.finish(self.time_scale)
        for call in self.engine.running.values():
            stream = calls.get(call.call_id)
            if stream is not None and call.generated > stream.delivered:
                stream.deliver()

    def _waiting_s(self, call_id: str, now: float) -> float:
        """Engine seconds the call has been waiting in the engine's queue, by ``now``; 0 when
        it is not queued (the engine counts a spell in its ``queue_s`` only at admission)."""
        call = self._calls[call_id].call
        return now - call.queued_at if call.phase is Phase.QUEUED else 0.0

    def _end_aborted(self, call_id: str, waiting_s: float) -> None:
        self._calls.pop(call_id).end_aborted(self.time_scale, waiting_s)

    # -- observation ----------------------------------------------------------------------------
    def snapshot(self) -> RuntimeSnapshot:
        """Queue, batch, tier use and (at most once a second) per-program placement."""
        engine, now = self.engine, self._now()
        queued = tuple(
            QueuedCall(
                e.ticket.call_id,
                e.ticket.program_id,
                e.ticket.tenant,
                e.key_at(now),
                now - e.ticket.arrival,
            )
            for e in engine.queue.ordered(now)
        )
        running = tuple(
            RunningCall(
                c.call_id,
                c.ticket.program_id,
                c.ticket.tenant,
                c.prompt_tokens + c.generated,
                c.generated,
                (now - c.admitted_at) * self.time_scale,
            )
            for c in engine.running.values()
        )
        index, per_token = engine.index, int(self.cost.kv_bytes_per_token)
        tiers = {
            _TIER_NAMES[tier]: TierUsage(
                index.used(tier), engine.tiers.capacity(tier), index.used(tier) * per_token
            )
            for tier in (Tier.HBM, Tier.DRAM)
            if engine.tiers.has(tier)
        }
        hits = engine.hit_tokens
        return RuntimeSnapshot(
            runtime=self.name,
            policy=self.policy_name,
            queued=queued,
            running=running,
            tiers=tiers,
            placement=self._placement_by_program(),
            prefix_hit_tokens=hits,
            paused=engine.paused,
        )

    # -- what the program driver reads ------------------------------------------------------------
    def probe(self, program_id: str, prompt: Prompt, namespace: str) -> PrefixProbe:
        """What the engine holds of ``prompt``: hits by tier from a peek at the prefix index,
        and the tokens this program's last context shares with it that are gone (lost)."""
        blocks = prompt_blocks(prompt.text, namespace)
        found = self.engine.index.peek(namespace, blocks)
        slow = found.tokens_on(Tier.DRAM) + found.tokens_on(Tier.DISK)
        common = 0
        last_path = self._last_path.get(program_id)
        for block, node in zip(blocks, last_path or (), strict=False):
            if block.key != node.key:
                break
            common += block.tokens
        # a new program's: what it shares with others, named for the door's reserve
        runs = ((n.key, n.tokens) for n in found.path)
        held = () if last_path else chained_segments(ONE_ENGINE, runs)
        return PrefixProbe(
            found.requested_tokens,
            cached_tokens=found.hit_tokens - slow,
            slow_tokens=slow,
            lost_tokens=max(common - found.hit_tokens, 0),
            held_segments=held,
        )

    def memory(self, program_id: str | None = None) -> MemoryView:
        """The engine's KV memory and queue now (engine clock); one engine: the same for
        every program. Its host link in wall seconds, as :meth:`service_prior`'s speeds: the
        tool-wait decision weighs a reload against tool latencies and a learned prefill
        cost, both wall time (under ``time_scale`` 0.1 a copy takes a tenth of its engine
        time; priced in engine seconds, it looked 10x dearer and flipped the decisions)."""
        del program_id
        view = memory_view(self.engine, self._now())
        scale = self.time_scale  # wall s per engine s
        if scale > 0 and scale != 1.0:
            view = replace(view, host_link_bytes_per_s=view.host_link_bytes_per_s / scale)
        return view

    def context_of(self, program_id: str) -> ProgramContext | None:
        """The program's last context still cached: its own suffix private, the rest shared."""
        path = [n for n in self._last_path.get(program_id, ()) if not n.dead]
        private = sum(n.tokens for n in self.engine.index.owned_suffix(path, program_id))
        if not private:
            return None
        return ProgramContext(private, sum(n.tokens for n in path) - private)

    def node_ranks(self, program_id: str) -> dict[str, int]:
        """Always empty: the simulated engine runs every call on its one rank."""
        return {}

    def _remember_path(self, program_id: str, path: list[Node]) -> None:
        last = self._last_path
        last[program_id] = path
        last.move_to_end(program_id)
        while len(last) > MAX_REMEMBERED_PROGRAMS:
            last.popitem(last=False)

    def _placement_by_program(self) -> dict[str, dict[str, int]]:
        at, cached = self._placement
        if time.monotonic() - at < 1.0:
            return cached
        out: dict[str, dict[str, int]] = {}
        for node in self.engine.index.nodes():
            if node.owner:
                tiers = out.setdefault(node.owner, {})
                name = _TIER_NAMES[node.tier]
                tiers[name] = tiers.get(name, 0) + node.tokens
        self._placement = (time.monotonic(), out)
        return out


def create_runtime(options: RuntimeOptions) -> SimLiveRuntime:
    """The registry factory. ``options.model`` names a model preset (default llama-3.1-8b) on
    ``options.gpu``; ``options.profile`` overrides both. ``options.max_total_tokens`` sizes the
    GPU KV pool as SGLang's flag does. ``options.extra`` may hold ``time_scale`` (0 = zero
    cost), ``event_sink``, ``start_delay_s``, ``output_tokens``, ``host_kv_tokens`` (the host
    tier; 0 turns it off), ``fairness`` (the guard's fields, as the SGLang plugin takes them:
    ``tenant_weights``, ...)."""
    if options.profile:
        cost = CostModel.from_profile(load_profile(options.profile))
    else:
        cost = preset(options.gpu, options.model or DEFAULT_PRESET_MODEL, options.tp)
    extra: dict[str, Any] = dict(options.extra)
    config = EngineConfig(
        hbm_kv_tokens=options.max_total_tokens, computed_keys_kept=COMPUTED_KEYS_KEPT
    )
    if options.max_running_requests is not None:
        config = replace(config, max_running_requests=options.max_running_requests)
    if extra.get("host_kv_tokens") is not None:
        config = replace(config, host_kv_tokens=int(extra["host_kv_tokens"]))
    return SimLiveRuntime(
        cost,
        policy=options.policy,
        time_scale=float(extra.get("time_scale", 1.0)),
        event_sink=extra.get("event_sink"),
        config=config,
        start_delay_s=float(extra.get("start_delay_s", 0.0)),
        output_tokens=extra.get("output_tokens"),
        fairness=FairnessConfig.from_settings(extra.get("fairness")),
    )

"""What program-level decisions read of the SGLang runtime: ``memory()``, ``context_of()`` and
``probe()`` of the ``Runtime`` protocol (mixed into ``SGLangRuntime``).

All three are cheap and never block the engine: they read the plugin's latest ``status.json``
(KV pool, queue) and ``placement.json`` (each tracked program's resident context, at most a
second old), and the adapter's own memory of each program's last context (``contexts``).

* ``memory()``: capacity, free and evictable tokens of SGLang's device pool; ``protected`` is
  what the ``agentconsole`` eviction strategy keeps for programs in tool wait; the queued
  demand is the prompt tokens of calls waiting in SGLang plus those the adapter holds that
  SGLang has not registered yet; with HiCache (GPU only, untested here) the host tier's
  room beyond its copies of the device pool when it is written through, as serve runs it
  (``engine_config.host_written_through``). With data-parallel ranks, every rank's summed;
  ``memory(program_id)``: the rank the program last ran on alone (the driver's tool-wait and
  parking decisions, as ``bench --replicas`` decides them on the program's replica).
* ``context_of()``: the program's last context as resident now, split into its exclusive
  suffix (private) and a prefix other sequences share, as the plugin measured it.
* ``probe()``: the common prefix of the prompt with the program's last context (the prompt's
  ids, else the engine's tokenizer), capped by the resident tokens last reported; what the
  cap cuts off is lost (recomputed). A program with no context of its own (a new one, sized
  at the program door by what the engine already holds of its first prompt) is credited
  instead with the longest prefix it shares with another program's remembered context under
  the same cache salt (SGLang never shares a prefix across salts), capped by that context's
  resident tokens by the same rule; nothing of it is lost. That lookup is bounded
  (``contexts.ProgramContexts.shared``: an index by salt and first ids, at most
  ``contexts.SHARED_CANDIDATES`` contexts compared, about one full comparison when they share
  one prefix) and a program with a context never pays it. With data-parallel ranks each rank
  has its own radix cache, so only what the rank the call goes to holds counts: the rank the
  router (``ranks.RankRouter.likely_ranks``) would place it on now, by the placement rule's
  own score (cached tokens against load: the rank holding the prefix wins unless its load
  outweighs the prefix), and on a tie, or unpinned (SGLang's controller spreads calls round
  robin), the least over the ranks it may go to (``runtime/prefixcredit.py``: the rule
  ``bench --replicas`` credits by too); a context counts on a rank by that rank's
  sweep, or, before one ran since, on the rank its program last ran on alone. The call is
  placed when it is sent, so the load may have changed by then. On CPU there is no slower
  tier (``slow_tokens`` 0). An estimate: a prefix held only by a context the adapter no
  longer remembers (or by a call still in flight) is not counted.

``metrics_dir()`` names the folder of SGLang's Prometheus multiprocess files, which
``server.prometheus`` merges into ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentconsole.scheduler.runtime import (
    MemoryView,
    PrefixProbe,
    ProgramContext,
    Prompt,
    token_segments,
)
from agentconsole.server.runtime.prefixcredit import credited_prefix
from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.contexts import LastContext, ResidentOf
from agentconsole.server.runtime.sglang.dataparallel import routed_calls
from agentconsole.server.runtime.sglang.engine_config import EngineSettings, host_written_through
from agentconsole.server.runtime.sglang.lastcalls import LastCalls
from agentconsole.server.runtime.sglang.rank_status import RankFiles
from agentconsole.server.runtime.sglang.ranks import RankRouter
from agentconsole.server.runtime.sglang.status import Placement, SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream
from agentconsole.server.runtime.sglang.telemetry import Telemetry


class KVView:
    """``memory``, ``context_of`` and ``probe`` of ``SGLangRuntime`` (state lives there)."""

    settings: EngineSettings
    engine: Any
    state_dir: Path
    telemetry: Telemetry
    _calls: dict[str, SGLangStream]
    _last_calls: LastCalls
    rank_files: RankFiles
    router: RankRouter | None

    def read_status(self) -> SchedulerStatus | None: ...  # LiveControl's

    def read_placement(self, program_id: str | None = None) -> Placement | None:
        """The plugin's latest ``placement.json`` (None before the first sweep). With
        data-parallel ranks: the sweep of the rank ``program_id`` is placed on, else every
        rank's merged (a program's largest context on any rank)."""
        rank = self.router.rank_of(program_id) if self.router and program_id else None
        if rank is not None:
            return self.rank_files.placements()[rank]
        return self.rank_files.placement()

    def metrics_dir(self) -> Path | None:
        """Where SGLang's processes write their Prometheus multiprocess files (the adapter
        points ``PROMETHEUS_MULTIPROC_DIR`` there); None with SGLang's metrics off."""
        if self.engine is None or not self.settings.enable_metrics:
            return None
        return self.state_dir / "prometheus"

    def memory(self, program_id: str | None = None) -> MemoryView:
        """The engine's KV pool and queue now (from the plugin's status; without the plugin,
        the configured pool and the adapter's own calls). With data-parallel ranks and
        ``program_id``: the pool and queue of the rank the program last ran on (its own radix
        cache and batch, as ``bench --replicas`` shows the driver its replica's); every rank's
        summed when no rank is known for it (a new program, unpinned ranks) or that rank has
        not reported yet."""
        rank = self._rank_of_program(program_id)
        if rank is not None:
            statuses = self.rank_files.statuses()
            status = statuses[rank] if rank < len(statuses) else None
            if status is not None:
                here = [c for c in self._calls.values() if c.rank == rank]
                return self._memory_of(status, here)
        engines = self.router.size if self.router is not None else 1
        status = self.read_status()
        calls = list(self._calls.values())
        if status is None:
            pending = [c for c in calls if c.first_at is None]
            capacity = self.settings.max_total_tokens or 0
            return MemoryView(
                hbm_capacity_tokens=capacity,
                free_tokens=capacity,
                queued_tokens=float(sum(_prompt_tokens(c) for c in pending)),
                queued_calls=len(pending),
                running_calls=len(calls) - len(pending),
                batch_slots=self.settings.max_running_requests or 0,
                engines=engines,
            )
        return self._memory_of(status, calls, engines)

    def _rank_of_program(self, program_id: str | None) -> int | None:
        """The data-parallel rank whose memory answers for ``program_id``: the rank its latest
        call ran on, else the rank it is placed on (None: one rank, unpinned ranks, no program
        or none known for it)."""
        if self.router is None or program_id is None:
            return None
        ran_on = self.router.ran_on(program_id)
        return ran_on if ran_on is not None else self.router.rank_of(program_id)

    def _memory_of(
        self, status: SchedulerStatus, calls: Sequence[SGLangStream], engines: int = 1
    ) -> MemoryView:
        """``status``'s pool and queue (one rank's, or every rank's merged: ``engines``), with
        those of ``calls`` (the adapter's calls sent there) that it does not list yet as
        queued."""
        pending = [c for c in calls if c.first_at is None]
        known = {q.rid for q in status.queued} | {r.rid for r in status.running}
        waiting_here = [c for c in pending if c.rid not in known]  # being tokenized or held
        queued = sum(q.prompt_tokens for q in status.queued)
        queued += sum(_prompt_tokens(c) for c in waiting_here)
        host = status.host_capacity_tokens
        if host > 0 and host_written_through(self.settings):
            # the host pool holds a copy of the device pool's KV: its room is the rest, as
            # the simulated host tier counts it
            host = max(host - status.kv_capacity_tokens, 0)
        return MemoryView(
            hbm_capacity_tokens=status.kv_capacity_tokens,
            free_tokens=max(status.kv_capacity_tokens - status.kv_used_tokens, 0),
            evictable_tokens=status.kv_evictable_tokens,
            # the plugin lists a kept context only until its retention deadline
            protected_tokens=sum(status.retained_tokens.values()),
            queued_tokens=float(queued),
            queued_calls=len(status.queued) + len(waiting_here),
            running_calls=len(status.running),
            batch_slots=status.batch_slots,
            dram_capacity_tokens=host,
            kv_bytes_per_token=float(status.kv_bytes_per_token or 1),
            engines=engines,
        )

    def context_of(self, program_id: str) -> ProgramContext | None:
        """The program's last context as resident now (None: nothing of it is cached, or the
        plugin does not track it)."""
        placement = self.read_placement(program_id)
        # a call that ended after the placement was written is not in it yet (``lastcalls``)
        ended = self._last_calls.since(program_id, placement.written_at if placement else 0.0)
        if ended is not None:
            return ended
        found = placement.programs.get(program_id) if placement is not None else None
        if not found or found[0] <= 0:
            return None
        resident, private = found
        return ProgramContext(private_tokens=private, shared_tokens=max(resident - private, 0))

    def probe(self, program_id: str, prompt: Prompt, namespace: str) -> PrefixProbe:
        """What the engine holds of ``prompt`` for ``program_id`` (see the module docstring);
        changes nothing."""
        ids = prompt.token_ids if prompt.token_ids is not None else self._tokenize(prompt.text)
        if ids is None:
            return PrefixProbe(prompt_tokens=prompt.tokens)
        public = prompt.tokens > 0 and prompt.public_tokens >= prompt.tokens
        salt = (
            wire.PUBLIC_SALT
            if public
            else wire.cache_salt(namespace, prompt_chars=1, public_prefix_chars=0)
        )
        contexts = self.telemetry.contexts
        last = contexts.get(program_id)
        if last is None:  # a new program: what the tenant's other programs computed
            held, rank = self._shared_on_its_rank(program_id, salt, ids)
            # named per rank where the call's rank is known: each rank holds a copy of its own
            scope = salt if rank is None else f"{salt}@rank{rank}"
            segments = token_segments(scope, ids, held)
            return PrefixProbe(len(ids), cached_tokens=held, held_segments=segments)
        resident = _resident(self.read_placement(program_id), program_id, last)
        reuse = contexts.reuse(program_id, salt, ids, resident)
        return PrefixProbe(
            prompt_tokens=len(ids), cached_tokens=reuse.resident, lost_tokens=reuse.lost
        )

    def _shared_on_its_rank(
        self, program_id: str, salt: str, ids: Sequence[int]
    ) -> tuple[int, int | None]:
        """The prefix of a new program's prompt that other programs' contexts hold resident
        where its call will run, and that rank when it is the only one (None: one engine, or
        any of several). With data-parallel ranks each rank has its own radix cache: only the
        rank the call would be routed to now counts (the least of the ranks it may go to:
        every rank when SGLang places calls round robin, the tied ones on a tie)."""
        contexts = self.telemetry.contexts
        if self.settings.dp <= 1:
            placement = self.read_placement(program_id)
            held = contexts.shared(salt, ids, lambda p, last: _resident(placement, p, last))
            return held, None
        placements = self.rank_files.placements()
        if self.router is None:  # unpinned: SGLang's controller may send it to any rank
            ranks = list(range(self.settings.dp))
        else:
            calls = routed_calls(self._calls.values())
            ranks = self.router.likely_ranks(
                program_id, salt, ids, len(ids), calls, contexts, placements
            )
        held = credited_prefix(
            ranks, lambda r: contexts.shared(salt, ids, self._resident_on(r, placements))
        )
        return held, ranks[0] if len(ranks) == 1 else None

    def _resident_on(self, rank: int, placements: Sequence[Placement | None]) -> ResidentOf:
        """A remembered context's tokens resident on ``rank``: as that rank's sweep lists them
        once it swept after the context was remembered; before that, all of it where its
        program last ran and none elsewhere (a context whose rank is not known counts on
        none)."""
        placement = placements[rank] if rank < len(placements) else None

        def resident_of(program: str, last: LastContext) -> int | None:
            if placement is not None and placement.written_at > last.at:
                return placement.programs.get(program, (0, 0))[0]
            ran_on = self.router.ran_on(program) if self.router is not None else None
            return None if ran_on == rank else 0

        return resident_of

    def _tokenize(self, text: str) -> list[int] | None:
        """``text`` in the served model's tokens, as SGLang tokenizes a prompt (None before
        the engine started)."""
        tokenizer = getattr(getattr(self.engine, "tokenizer_manager", None), "tokenizer", None)
        if tokenizer is None:
            return None
        return list(tokenizer.encode(text))


def _resident(placement: Placement | None, program: str, last: LastContext) -> int | None:
    """The program's resident context tokens in the plugin's latest sweep, if that sweep ran
    after its last context was remembered (None: not reported since, taken as all still
    there; a sweep lags by up to a second). A program the sweep does not list holds none."""
    if placement is None or placement.written_at <= last.at:
        return None
    return placement.programs.get(program, (0, 0))[0]


def _prompt_tokens(call: SGLangStream) -> int:
    """The call's prompt size: its ids when known, else the ticket's count."""
    r = call.request
    if r.prompt_ids is not None:
        return len(r.prompt_ids)
    return len(call.prompt_ids) if call.prompt_ids is not None else r.ticket.prompt_tokens

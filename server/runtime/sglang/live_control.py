"""Live control of the SGLang runtime: what reaches calls already inside the engine.

Mixed into ``SGLangRuntime``. Each operation edits the plugin's ``control.json`` (see
``control``): policy switch, drain, operator boost, re-prioritisation, operator preempt,
tool-wait retention hints. The plugin applies a change at the scheduler's next ordering pass
(it re-reads the file at most every 20 ms, and always before it orders the queue); where the
order of effects matters (drain, boost, preempt) the call waits for the plugin to acknowledge
the control version in ``status.json``; only those versions (and a policy switch) make the
plugin write its status at once (``ControlState.ack_version``).

Operator preempt: SGLang has no per-request preempt, so the plugin first demotes the call
(``control.preempted``), then the runtime asks SGLang to retract its running batch
(``pause_generation(mode="retract")`` then ``continue_generation``): every running call is
requeued with its KV kept in the radix cache, and the plugin re-admits all but the demoted
one at once (they keep their better keys). Whether a call is running is :func:`runs_now`'s
answer: one a preempt already requeued waits, though it streamed before, so a second preempt
of it answers that it is not running (it retracts no batch, and the first preempt's time,
which its starvation clock restarted at, stands). Drain is the plugin's admission gate:
running calls continue, queued ones wait (SGLang's own pause would freeze running calls too);
without the plugin, new calls are held in the runtime.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from agentconsole.scheduler.policies import get_policy
from agentconsole.scheduler.runtime import CacheAction, GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import retention, symbols
from agentconsole.server.runtime.sglang.control import ControlWriter, RetentionHint
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.lastcalls import LastCalls
from agentconsole.server.runtime.sglang.rank_status import RankFiles
from agentconsole.server.runtime.sglang.ranks import RankRouter
from agentconsole.server.runtime.sglang.status import SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream
from agentconsole.server.runtime.sglang.telemetry import Telemetry

_ACK_TIMEOUT_S = 3.0


def runs_now(call: SGLangStream, status: SchedulerStatus | None) -> bool:
    """Whether ``call`` is in the engine's running batch, as far as the plugin's latest
    ``status`` and the call's own stream tell. The status lags (it is written every 100 ms or
    so) and a streamed token only shows that the call ran once, so each covers the other:

    * listed running: it runs;
    * listed waiting: it runs only if it streamed a token the status had not counted (it was
      admitted again after the status was written). A call that streamed and was then
      requeued (retracted by an operator's preempt, or by SGLang under memory pressure) waits
      with its output so far: every token it streamed was counted, it is not running;
    * listed nowhere (a status older than the call, or none): it runs once it streamed.

    A preempt asks SGLang to retract and does not wait for it (SGLang retracts at its next
    pass), so within a status interval of a preempt the call may still be listed running."""
    rid = call.rid
    if status is not None:
        if any(r.rid == rid for r in status.running):
            return True
        for queued in status.queued:
            if queued.rid == rid:
                return call.engine_tokens > queued.generated
    return call.first_at is not None


class LiveControl:
    """The control operations of ``SGLangRuntime`` (state lives there)."""

    settings: EngineSettings
    policy_name: str
    control: ControlWriter
    engine: Any
    _calls: dict[str, SGLangStream]
    _last_calls: LastCalls
    _gate: asyncio.Event
    rank_files: RankFiles
    router: RankRouter | None
    _retention_seq: int
    _hit_tokens: int
    telemetry: Telemetry

    # -- calls in flight (both SGLang runtimes) -------------------------------------------------
    def _new_call(self, request: GenerationRequest) -> SGLangStream:
        """A stream for ``request``; ``ValueError`` if a call with its id is in flight."""
        rid = request.ticket.call_id
        if rid in self._calls:
            raise ValueError(f"call {rid!r} is already in flight")
        return SGLangStream(request)

    def _launch(self, call: SGLangStream, pump: Coroutine[Any, Any, None], name: str) -> None:
        """Count ``call`` in flight, end its program's tool-wait retention, run ``pump``."""
        self._calls[call.rid] = call
        self._end_retention(call.request.ticket.program_id, back=True)
        call.task = asyncio.create_task(pump, name=f"{name}:{call.rid}")

    def _settle(self, call: SGLangStream, error: BaseException | None) -> None:
        """The call's stream is over (``error`` if it failed): out of the books, once (a
        second settle, an abort's for a task that may never have run, does nothing)."""
        if self._calls.get(call.rid) is call:
            del self._calls[call.rid]
        if call.ended:
            return
        if error is None and call.ran:
            # its context is on the engine: the driver may decide on it now. A call the engine
            # ended without running it (refused before queueing, a worker's 400, aborted while
            # it waited, held at the drain gate) left nothing there: the program's context is
            # still what its last call that ran left (else that context read as none, and the
            # driver's tool-wait and door decisions found nothing cached)
            program_id = call.request.ticket.program_id
            # every token it generated has its KV there, read or not (an abort stops delivery)
            output = max(call.tokens, call.engine_tokens)
            self._last_calls.ended(program_id, call.counted_meta, output, time.time())
        self._hit_tokens += int(call.meta.get("cached_tokens") or 0)
        self.telemetry.on_end(call)
        call.finish(error)
        self._forget_control(call.rid)

    async def reprioritise(self, call_id: str, ticket: CallTicket) -> bool:
        """Re-rank a call in the engine under ``ticket`` (applied at the scheduler's next
        ordering pass); False for an unknown or ended call, and for one running now
        (:func:`runs_now`): its new rank holds should it be requeued (a preempt, memory
        pressure), but nothing moves now, as the simulator answers it."""
        call = self._calls.get(call_id)
        if call is None:
            return False
        self.control.state.tickets[call_id] = ticket.to_params()
        self.control.write()
        return not runs_now(call, self.read_status())

    async def boost(self, program_id: str, amount: float) -> None:
        """Operator boost: the program's calls already in the engine are re-ranked with
        ``amount`` as their boost (later tickets carry it from the controller); 0 removes the
        program's entry (do so when it ends)."""
        if amount:
            self.control.state.boosts[program_id] = amount
        else:
            self.control.state.boosts.pop(program_id, None)
        await self._ack(self.control.write(ack=True))

    async def preempt(self, call_id: str) -> bool:
        """Take a running call off the engine and requeue it behind the others (see the module
        docstring for the mechanism). False when the call is not running: not started yet,
        or waiting again (an earlier preempt requeued it)."""
        call = self._calls.get(call_id)
        if call is None or call.ended or not runs_now(call, self.read_status()):
            return False
        if not self.settings.plugin:
            return False
        self.control.state.preempted[call_id] = time.time()
        await self._ack(self.control.write(ack=True))
        tm = self.engine.tokenizer_manager
        try:
            await tm.pause_generation(symbols.load(symbols.PAUSE_REQ)(mode="retract"))
        finally:
            # shielded: a cancel of this task between the two (a client gone) must not
            # leave the whole engine paused
            resume = tm.continue_generation(
                symbols.load(symbols.CONTINUE_REQ)(torch_empty_cache=False)
            )
            await asyncio.shield(resume)
        return True

    def program_ended(self, program_id: str) -> None:
        """A program that ended in a tool wait (cancelled, stopped, idle) has no call coming
        back for its kept context: the retention ends now rather than at its deadline. With
        data-parallel ranks, the program's rank stops counting it (``RankRouter``). What the
        radix tree holds of it is left to eviction (a shared prefix stays useful)."""
        self._end_retention(program_id, back=False)
        if self.router is not None:
            self.router.release(program_id)

    async def cache_hint(self, program_id: str, action: CacheAction, retain_s: float) -> None:
        """Apply a tool-wait decision to the program's last context in SGLang's radix tree
        (``keep``: evicted last until ``retain_s`` from now; ``offload``/``recompute``: evicted
        first, ``offload`` demoted to host memory only with HiCache). Does not wait: the
        scheduler applies it when it next orders its queue, before that pass allocates (and
        so evicts) anything. A no-op without the plugin. With
        data-parallel ranks, ``recompute`` (the KV is given up) also ends the program's place
        on its rank: its next call is placed again."""
        if self.router is not None and action is CacheAction.RECOMPUTE:
            self.router.release(program_id)
        if not self.settings.plugin:
            return
        now = time.time()
        self._retention_seq += 1
        state = self.control.state
        state.retention[program_id] = RetentionHint(
            action.value, now + retain_s, self._retention_seq
        )
        for pid in [p for p, h in state.retention.items() if h.until < now - 60.0]:
            del state.retention[pid]
        self.control.write()

    def set_policy(self, name: str) -> None:
        """Switch the ordering policy (``KeyError`` for an unknown name); the scheduler applies
        it at its next ordering pass."""
        get_policy(name)
        if name != self.control.state.policy:
            self.policy_name = name
            self.control.state.policy = name
            self.control.write(ack=True)  # an operator's switch: the status shows it at once

    async def pause(self) -> None:
        """Drain: admit nothing new; running calls continue. Returns once the scheduler
        acknowledged (with the plugin). With tensor parallelism the plugin applies the drain
        at a planned loop pass (``lockstep``), a few passes after the write, so new calls also
        wait here, as without the plugin: none reaches an idle engine before its drain."""
        if self.settings.plugin and not self.control.state.paused:
            self.control.state.paused = True
            await self._ack(self.control.write(ack=True))
        if not self.settings.plugin or self.settings.tp > 1:
            self._gate.clear()

    async def resume(self) -> None:
        """End a drain: queued calls are admitted again."""
        if self.settings.plugin and self.control.state.paused:
            self.control.state.paused = False
            await self._ack(self.control.write(ack=True))
        self._gate.set()

    def _end_retention(self, program_id: str, *, back: bool) -> None:
        """The program is ``back`` from its tool wait, or ended: end the marks of its context.
        Back, every mark ends: it runs on that context again, and an ``offload`` or
        ``recompute`` decision's evict-first mark on what survived would push out first the
        context its new call extends (until the hint expired a minute after its deadline).
        Ended, only a ``keep`` ends: an evict-first mark still says what should go first."""
        hint = self.control.state.retention.get(program_id)
        if hint is None or hint.action == retention.RELEASE:
            return
        if back or hint.action == CacheAction.KEEP:
            self._retention_seq += 1
            self.control.state.retention[program_id] = RetentionHint(
                retention.RELEASE, time.time(), self._retention_seq
            )
            self.control.write()

    # -- observation ---------------------------------------------------------------------------
    def read_status(self) -> SchedulerStatus | None:
        """The plugin's latest ``status.json`` (None without the plugin or before the first);
        with data-parallel ranks, every rank's merged (None until each has reported)."""
        return self.rank_files.status()

    # -- helpers -------------------------------------------------------------------------------
    async def _ack(self, version: int) -> bool:
        """Wait until the plugin applied control ``version`` (True) or a timeout (False).

        Returns at once when no call of ours is in the engine: an idle scheduler sleeps on its
        sockets (up to 1 s) but re-reads the control file before it orders the next request,
        so the change is in force before it matters."""
        if not self.settings.plugin or self.engine is None or not self._calls:
            return False
        deadline = time.monotonic() + _ACK_TIMEOUT_S
        while time.monotonic() < deadline:
            status = self.read_status()
            if status is not None and status.control_version >= version:
                return True
            await asyncio.sleep(0.005)
        return False

    def _forget_control(self, rid: str) -> None:
        state = self.control.state
        if rid in state.tickets or rid in state.preempted:
            state.tickets.pop(rid, None)
            state.preempted.pop(rid, None)
            self.control.write()

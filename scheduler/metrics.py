"""Every program-level metric, computed from events in one place.

:class:`MetricsAggregator` consumes the event stream incrementally (``observe``) and reports
the metrics of overview sections 11 and 19 (``report``). ``bench`` feeds it a finished run's
events; ``serve`` feeds it live events for ``/metrics``, the SSE feed and the consoles.

Event data keys it reads (producers: the controller and the runtimes):

* ``node.added``: ``kind``, ``parents`` (comma-separated), ``branch``
* ``program.door_waited``: ``door_s`` (a wait at the program door, ending at the event)
* ``call.queued``: its time (where a door wait before the call lies on the critical path)
* ``call.scheduled``: ``hit_tokens``, ``recompute_tokens``
* ``call.finished`` / ``call.aborted``: ``prompt_tokens``, ``cached_tokens``,
  ``computed_tokens`` (prefilled), ``output_tokens``, ``service_s``, ``queue_s``,
  ``restore_s`` (KV reload/recompute time), ``ttft_s``, ``tbt_s``; a call that inserted tokens
  mid-prompt also ``inserted_tokens``, ``lost_reuse_tokens`` (resident context after the
  insertion prefilled again) and, from the simulator, ``suffix_reused_tokens`` and
  ``correction_tokens`` (what a relative-position cache reused, and prefilled to correct it);
  a finished call of a multi-model run also ``model`` and, from the simulator,
  ``cross_model_lost_tokens`` (prompt tokens another model had cached for the tenant that it
  prefilled in full), ``cross_model_reused_tokens`` and ``cross_model_recompute_tokens``
  (another model's KV reused for its shared layers, and prefilled for the rest)
* ``tool.finished``: ``latency_s``, ``outcome``, ``final``, ``node_state`` (a final attempt's
  failure completes the node, as the controller does)
* ``kv.*``: ``tokens``; ``engine.stats``: ``busy_s`` (cumulative), ``hbm_bytes``, ``dram_bytes``
* ``call.ghost_tokens``: ``tokens``

Critical-path idle: along the observed critical path (the chain of last-finishing parents),
the program's time not spent computing on that path, split into queue (waiting for the engine,
or at the program door), KV (reloading or recomputing evicted context) and tool (waiting for
tools). A tenant's *slowdown* is the mean of E2E / (E2E − queue idle − KV idle) over its
finished programs: how much longer programs took than their own work and tools required; when
the simulator knows a program's E2E alone on a warm idle engine (``ideal_e2e_s`` on
``program.created``), that is the denominator instead, so batch interference counts too.
*Starvation* is the largest wait/service ratio of any of its programs (its wait: in engine
queues and at the door).

Runs with no events of ours (the stock SGLang arms of the real-engine benchmarks) are summed
up from the rows their client recorded, by :func:`outcome_summary`.

Live figures: a wait at the door is an event only once it ends, and a program can sit there
for minutes above saturation. An aggregator given ``at_door`` (``serve``: the driver's
:meth:`~agentconsole.scheduler.driver.ProgramDriver.door_waits`) counts the waits still
running as of the ``now`` it is asked for, in starvation and a tenant's max queue wait. The
driver forgets a wait in the same step that emits its ``program.door_waited``, so each second
counts once: running, or recorded. ``bench`` gives none (its run ends with nobody at the door).

A program rebuilt after a ``serve`` restart emits no ``program.created`` again: the server
hands it over with :meth:`MetricsAggregator.adopt`, so its end still counts, with the door
waits the store recorded for it before the restart; it is not counted as created again.
"""

from __future__ import annotations

import math
from collections import OrderedDict, defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind, Scalar, paused_gc
from agentconsole.scheduler.program import NodeKind, NodeState, Program

SERVICE_FLOOR_S = 0.05  # service below this counts as this for wait/service ratios

#: programs waiting at the door now -> since when (their ``program.door_waited`` to come)
DoorWaits = Callable[[], Mapping[str, float]]


def percentile(values: Iterable[float], q: float, *, empty: float = math.nan) -> float:
    """Linear-interpolated percentile (``q`` in 0..100); ``empty`` for no data (NaN unless the
    caller says otherwise: the project's one interpolation, so every report agrees)."""
    xs = sorted(values)
    if not xs:
        return empty
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _max_known(a: float, b: float) -> float:
    """The larger of two values where NaN means unknown (NaN only if both are)."""
    if math.isnan(a):
        return b
    return a if math.isnan(b) else max(a, b)


def _mean(values: Collection[float], *, empty: float = math.nan) -> float:
    """The arithmetic mean; ``empty`` for no data (NaN unless the caller says otherwise)."""
    return sum(values) / len(values) if values else empty


@dataclass(slots=True)
class _Node:
    kind: str = "llm"
    parents: tuple[str, ...] = ()
    branch: str = "main"
    added_at: float = 0.0
    #: when its (first) call was queued: an LLM node revealed before the door parked its
    #: program waits there between the two
    queued_at: float | None = None
    finished_at: float | None = None
    queue_s: float = 0.0
    restore_s: float = 0.0
    tool_s: float = 0.0
    service_s: float = 0.0


@dataclass(slots=True)
class _Program:
    tenant: str
    created_at: float
    ideal_e2e_s: float | None = None
    nodes: dict[str, _Node] = field(default_factory=dict)
    first_token_at: float | None = None
    service_s: float = 0.0
    wait_s: float = 0.0
    #: (start, end) of each tool run: parallel tools overlap, so their union is its tool wait
    tool_spans: list[tuple[float, float]] = field(default_factory=list)
    #: node -> when its call was queued, while it waits for the engine (live starvation)
    queued_since: dict[str, float] = field(default_factory=dict)
    #: its waits at the program door, (from, to); None: it never waited there
    door: list[tuple[float, float]] | None = None


@dataclass(slots=True)
class TenantMetrics:
    programs: int = 0
    finished: int = 0
    slowdown: float = math.nan
    starvation: float = math.nan  # max wait/service ratio
    max_queue_wait_s: float = 0.0
    e2e_p95_s: float = math.nan
    tokens: int = 0


class MetricsAggregator:
    """Folds events into program and tenant statistics; ``report()`` is cheap to call often."""

    def __init__(
        self,
        window: int | None = None,
        *,
        at_door: DoorWaits | None = None,
        rate_window_s: float | None = None,
        served_since: float = math.inf,
    ) -> None:
        """``window``: keep only the latest this many samples per distribution (a live server
        runs for weeks); None keeps everything (a bench run). ``at_door``: the programs
        waiting at the door now, whose waits so far the live figures count (see the module
        docstring); None: only ended waits count. ``rate_window_s``: throughput and goodput
        over the programs that finished in the last this many seconds (a live server: a
        rate over its whole life would barely move after an hour); None: over the whole
        span of the events (a bench run). ``served_since``: when the server began serving,
        the earliest start of that window while it is younger than it (a server idle before
        its first program served that time too: dividing by the time since the first event
        read 5 programs in 55 s where a minute had passed)."""
        if rate_window_s is not None and not rate_window_s > 0:
            raise ValueError(f"rate_window_s must be > 0, got {rate_window_s}")

        def samples() -> deque[float]:
            return deque(maxlen=window)

        self._live: dict[str, _Program] = {}
        #: (program, node) of discarded branches unfinished when their program ended: their
        #: calls' aborts come after it and still count as discarded work (oldest dropped)
        self._discarded_after_end: OrderedDict[tuple[str, str], None] = OrderedDict()
        #: program -> its critical path's idle seconds at its end, the newest ended ones'
        #: (the consoles show them beside the live ones': :meth:`critical_path_idle_s`)
        self._ended_idle: OrderedDict[str, float] = OrderedDict()
        self.e2e: deque[float] = samples()
        self.ideal: deque[float] = samples()
        self.ttfp: deque[float] = samples()
        self.ttft: deque[float] = samples()
        self.tbt: deque[float] = samples()
        self.tool_wait: deque[float] = samples()
        self.cp_idle: dict[str, deque[float]] = {k: samples() for k in ("queue", "kv", "tool")}
        self.counts: dict[str, float] = defaultdict(float)
        self._tenant_slowdowns: dict[str, deque[float]] = defaultdict(samples)
        self._tenant_e2e: dict[str, deque[float]] = defaultdict(samples)
        self._tenant_starvation: dict[str, float] = defaultdict(float)
        self._tenant_programs: dict[str, int] = defaultdict(int)
        self._tenant_max_wait: dict[str, float] = defaultdict(float)
        self._tenant_tokens: dict[str, int] = defaultdict(int)
        self._hbm: deque[float] = samples()
        self._dram: deque[float] = samples()
        # engine name -> (busy_s, hbm_bytes, dram_bytes) as last reported
        self._engines: dict[str, tuple[float, float, float]] = {}
        # multi-model runs: model -> engine -> GPU-busy seconds, and calls finished per model
        self._model_gpu_s: dict[str, dict[str, float]] = {}
        self.model_calls: dict[str, int] = defaultdict(int)
        self.first_t = math.inf
        self.last_t = -math.inf
        self.at_door = at_door
        self.rate_window_s = rate_window_s
        self.served_since = served_since
        #: (when, on time) of the programs finished within ``rate_window_s`` (oldest first)
        self._recent_finishes: deque[tuple[float, bool]] = deque()

    # -- ingest -----------------------------------------------------------------------------
    def observe(self, e: Event) -> None:
        t = e.t  # comparisons, not min()/max(): this runs for every event of a live server
        if t < self.first_t:
            self.first_t = t
        if t > self.last_t:
            self.last_t = t
        handler = _HANDLERS.get(e.kind)
        if handler is not None:
            handler(self, e)

    def observe_all(self, events: list[Event]) -> MetricsAggregator:
        """Observe a finished run's ``events`` in order, the cyclic garbage collector paused
        (``events.paused_gc``: the run's events are all alive, so collecting rescans them)."""
        observe = self.observe
        with paused_gc():
            for e in events:
                observe(e)
        return self

    def _created(self, e: Event) -> None:
        ideal = e.data.get("ideal_e2e_s")
        if isinstance(ideal, int | float):
            self.ideal.append(float(ideal))
        self._live[e.program_id] = _Program(
            e.tenant, e.t, float(ideal) if isinstance(ideal, int | float) else None
        )
        self._tenant_programs[e.tenant] += 1
        self.counts["programs"] += 1

    def adopt(self, program: Program, door: Sequence[tuple[float, float]] = ()) -> None:
        """Follow ``program``, rebuilt after a restart from the store (its ``program.created``
        went to the previous server's aggregator): its end counts as any other's, its nodes
        and its wait and service so far taken from the rebuilt figures. ``door``: its waits at
        the door before the restart, (from, to), from the stored ``program.door_waited``
        events, counted as :meth:`_door_waited` counts them: its wait, its tenant's max wait
        and its critical path's queue idle as they were before. Its nodes' queue time is the
        controller's, which counts a call's wait from its queueing
        (``ProgramController.start_node``): in ``serve`` a call starts as it is queued, so that
        is the engine's queue alone, as the call events report it (neither the agent's time
        before a call to a node it declared ahead nor a wait at the door before the call). It
        is one of its tenant's programs (those this server follows, so a tenant's finished
        never outnumber them) but not counted as created: ``programs`` counts creations since
        start, and it was created before. Nothing for an ended program, or one already
        followed."""
        if program.state.terminal or program.program_id in self._live:
            return
        followed = _Program(program.tenant, program.created_at)
        followed.first_token_at = program.first_progress_at  # its TTFP was counted before
        followed.service_s = program.attained_service_s
        followed.wait_s = program.wait_s
        for start, end in door:
            self._door_span(followed, start, end)
        for node in program.nodes.values():
            done = node.state is NodeState.DONE
            if node.tool_s and node.finished_at is not None:  # its runs, taken as one span
                followed.tool_spans.append((node.finished_at - node.tool_s, node.finished_at))
            followed.nodes[node.node_id] = _Node(
                kind=node.kind.value,
                parents=node.parents,
                branch=node.branch.value,
                added_at=node.created_at,
                # its call was queued as it started (a door wait before it lies before that)
                queued_at=node.started_at if node.kind is NodeKind.LLM else None,
                finished_at=node.finished_at if done else None,
                queue_s=node.queue_s,
                restore_s=node.kv_restore_s,
                tool_s=node.tool_s,
                service_s=node.service_s,
            )
        self._live[program.program_id] = followed
        self._tenant_programs[program.tenant] += 1
        # no ``counts["programs"]``: the previous server counted its creation, and that count
        # is ``programs_created_total``, whose ``increase()`` would count every program still
        # running once more per restart

    def _node_added(self, e: Event) -> None:
        program = self._live.get(e.program_id)
        if program is None:
            return
        parents = str(e.data.get("parents") or "")
        program.nodes[e.node_id] = _Node(
            kind=str(e.data.get("kind", "llm")),
            parents=tuple(filter(None, parents.split(","))) if parents else (),
            branch=str(e.data.get("branch", "main")),
            added_at=e.t,
        )

    def _queued(self, e: Event) -> None:
        program = self._live.get(e.program_id)
        if program is not None:
            program.queued_since[e.node_id] = e.t
            node = program.nodes.get(e.node_id)
            if node is not None and node.queued_at is None:
                node.queued_at = e.t

    def _door_waited(self, e: Event) -> None:
        """A wait at the program door ended: it is the program's wait (starvation), the
        tenant's (max queue wait) and, where it lies on the critical path, queue idle
        (``_critical_path_idle``), as a wait in the engine's queue would be."""
        program = self._live.get(e.program_id)
        waited = number(e.data, "door_s")
        if program is not None:
            self._door_span(program, e.t - waited, e.t)

    def _door_span(self, program: _Program, start: float, end: float) -> None:
        """``program`` waited at the door from ``start`` to ``end`` (nothing if it did not)."""
        waited = end - start
        if waited <= 0.0:
            return
        program.wait_s += waited
        tenant = program.tenant
        self._tenant_max_wait[tenant] = max(self._tenant_max_wait[tenant], waited)
        if program.door is None:
            program.door = []
        program.door.append((start, end))

    def _scheduled(self, e: Event) -> None:
        self.counts["prefix_hit_tokens"] += number(e.data, "hit_tokens")
        self.counts["recompute_tokens"] += number(e.data, "recompute_tokens")
        self._dequeued(e)

    def _dequeued(self, e: Event) -> None:
        program = self._live.get(e.program_id)
        if program is not None:
            program.queued_since.pop(e.node_id, None)

    def _first_token(self, e: Event) -> None:
        program = self._live.get(e.program_id)
        if program is not None:
            program.queued_since.pop(e.node_id, None)
        if program is not None and program.first_token_at is None:
            program.first_token_at = e.t
            self.ttfp.append(e.t - program.created_at)

    def _call_done(self, e: Event) -> None:
        finished = e.kind is EventKind.CALL_FINISHED
        computed = number(e.data, "computed_tokens")
        output = number(e.data, "output_tokens")
        self.counts["computed_tokens"] += computed
        self.counts["output_tokens"] += output
        self.counts[_CALL_ENDS[e.kind]] += 1
        program = self._live.get(e.program_id)
        # a call's events carry its ticket's tenant; one that ends after its program (aborted
        # by a cancel) still counts for it
        tenant = e.tenant or (program.tenant if program is not None else "")
        self._tenant_tokens[tenant] += int(computed + output)
        if "inserted_tokens" in e.data:
            self.counts["insertions"] += 1
            for key in _INSERTION_KEYS:
                self.counts[key] += number(e.data, key)
        node = program.nodes.get(e.node_id) if program else None
        ended_branch = (e.program_id, e.node_id)
        if program is None and ended_branch in self._discarded_after_end:
            del self._discarded_after_end[ended_branch]
            self.counts["discarded_branch_tokens"] += computed + output
        if program is not None:
            program.queued_since.pop(e.node_id, None)
        if node is not None and program is not None:
            node.queue_s += number(e.data, "queue_s")
            node.restore_s += number(e.data, "restore_s")
            node.service_s += number(e.data, "service_s")
            program.service_s += number(e.data, "service_s")
            program.wait_s += number(e.data, "queue_s")
            self._tenant_max_wait[tenant] = max(
                self._tenant_max_wait[tenant], number(e.data, "queue_s")
            )
            if node.branch == "discarded":
                self.counts["discarded_branch_tokens"] += computed + output
            if finished:
                node.finished_at = e.t
        if not finished:
            self.counts["aborted_tokens"] += computed + output
            return
        model = e.data.get("model")
        if isinstance(model, str):
            self.model_calls[model] += 1
            for key in _CROSS_MODEL_KEYS:
                self.counts[key] += number(e.data, key)
        if "ttft_s" in e.data and output > 0:  # a call that produced no token has no TTFT
            self.ttft.append(number(e.data, "ttft_s"))
        if output > 1 and "tbt_s" in e.data:
            self.tbt.append(number(e.data, "tbt_s"))

    def _tool_done(self, e: Event) -> None:
        program = self._live.get(e.program_id)
        latency = number(e.data, "latency_s")
        if program is None:
            return
        program.tool_spans.append((e.t - latency, e.t))
        node = program.nodes.get(e.node_id)
        if node is not None:
            node.tool_s += latency
            if _tool_node_done(e.data):
                node.finished_at = e.t

    def _program_end(self, e: Event) -> None:
        program = self._live.pop(e.program_id, None)
        if program is None:
            return
        left = self._discarded_after_end
        for node_id, node in program.nodes.items():
            if node.branch == "discarded" and node.finished_at is None:
                left[(e.program_id, node_id)] = None
        while len(left) > _ENDED_KEPT:
            left.popitem(last=False)
        queue, kv, tool = _critical_path_idle(program)
        self._ended_idle[e.program_id] = queue + kv + tool
        while len(self._ended_idle) > _ENDED_KEPT:
            self._ended_idle.popitem(last=False)
        outcome = {
            EventKind.PROGRAM_FINISHED: "finished",
            EventKind.PROGRAM_FAILED: "failed",
            EventKind.PROGRAM_CANCELLED: "cancelled",
        }[e.kind]
        self.counts[outcome] += 1
        tenant = program.tenant
        ratio = program.wait_s / max(program.service_s, SERVICE_FLOOR_S)
        self._tenant_starvation[tenant] = max(self._tenant_starvation[tenant], ratio)
        if outcome != "finished":
            return
        # the program's own E2E (an idle finish is recorded after the program's last work)
        e2e = number(e.data, "e2e_s") if "e2e_s" in e.data else e.t - program.created_at
        self.e2e.append(e2e)
        self._tenant_e2e[tenant].append(e2e)
        self.tool_wait.append(_union_s(program.tool_spans))
        self.cp_idle["queue"].append(queue)
        self.cp_idle["kv"].append(kv)
        self.cp_idle["tool"].append(tool)
        late = e.data.get("deadline_met") is False
        if late:
            self.counts["late"] += 1
        if self.rate_window_s is not None:
            self._recent_finishes.append((e.t, not late))
            self._forget_finishes_before(e.t - self.rate_window_s)
        alone = program.ideal_e2e_s or max(e2e - queue - kv, 1e-9)
        self._tenant_slowdowns[tenant].append(e2e / alone)

    def critical_path_idle_s(self, program_id: str) -> float | None:
        """Seconds the program's critical path stood idle (queued, its waits at the door
        included; restoring KV; on tools), as the overview's figures count them: so far for
        a program followed now, at its end for one of the newest ended; None when unknown."""
        program = self._live.get(program_id)
        if program is not None:
            return sum(_critical_path_idle(program))
        return self._ended_idle.get(program_id)

    def _kv(self, e: Event) -> None:
        self.counts[f"{e.kind.value}_tokens"] += number(e.data, "tokens")
        self.counts[f"{e.kind.value}_count"] += 1

    def _stats(self, e: Event) -> None:
        """Engines report cumulative busy time and current KV bytes; a sample of the cluster
        is the sum of every engine's latest report."""
        engine = str(e.data.get("engine", ""))
        # an engine of a tensor-parallel group keeps that many GPUs busy
        gpus = number(e.data, "gpus") if "gpus" in e.data else 1.0
        busy = number(e.data, "busy_s") * gpus
        self._engines[engine] = (busy, number(e.data, "hbm_bytes"), number(e.data, "dram_bytes"))
        model = e.data.get("model")
        if isinstance(model, str):
            self._model_gpu_s.setdefault(model, {})[engine] = busy
        self._hbm.append(sum(v[1] for v in self._engines.values()))
        self._dram.append(sum(v[2] for v in self._engines.values()))

    @property
    def busy_s(self) -> float:
        """GPU-busy seconds summed over engines."""
        return sum(v[0] for v in self._engines.values())

    def models(self) -> dict[str, dict[str, float]]:
        """Per model of a multi-model run: calls finished on it and its GPU-busy seconds
        (empty for a one-model run)."""
        names = sorted(set(self.model_calls) | set(self._model_gpu_s))
        return {
            m: {
                "calls": self.model_calls.get(m, 0),
                "gpu_s": sum(self._model_gpu_s.get(m, {}).values()),
            }
            for m in names
        }

    def _ghost(self, e: Event) -> None:
        self.counts["ghost_tokens"] += number(e.data, "tokens")

    # -- report -----------------------------------------------------------------------------
    def door_waiting(self, now: float) -> dict[str, float]:
        """Per followed program waiting at the door (``at_door``), its wait there so far as of
        ``now``: not in its figures yet, its ``program.door_waited`` is still to come."""
        if self.at_door is None:
            return {}
        live = self._live
        return {pid: max(now - t, 0.0) for pid, t in self.at_door().items() if pid in live}

    def live_starvation(
        self, now: float, door: Mapping[str, float] | None = None
    ) -> dict[str, float]:
        """Per tenant, the largest wait/service ratio of its programs still running at
        ``now``, their waiting calls' time in the queue so far included, and their wait at
        the door so far (``door``: :meth:`door_waiting`, read at ``now`` when not given)."""
        waiting_at_door = self.door_waiting(now) if door is None else door
        out: dict[str, float] = {}
        for pid, program in self._live.items():
            waiting = sum(max(now - t, 0.0) for t in program.queued_since.values())
            waiting += waiting_at_door.get(pid, 0.0)
            ratio = (program.wait_s + waiting) / max(program.service_s, SERVICE_FLOOR_S)
            out[program.tenant] = max(out.get(program.tenant, 0.0), ratio)
        return out

    def tenants(self, now: float | None = None) -> dict[str, TenantMetrics]:
        """Per-tenant metrics; starvation counts programs still running (as of ``now``,
        default the latest event) as well as those that ended, and starvation and the max
        queue wait count the door waits still running (``at_door``) as of then."""
        at = self.last_t if now is None else now
        door = self.door_waiting(at)
        live = self.live_starvation(at, door)
        max_wait = dict(self._tenant_max_wait)
        for pid, waited in door.items():
            tenant = self._live[pid].tenant
            max_wait[tenant] = max(max_wait.get(tenant, 0.0), waited)
        out = {}
        for tenant, n in sorted(self._tenant_programs.items()):
            slowdowns: Collection[float] = self._tenant_slowdowns.get(tenant, ())
            out[tenant] = TenantMetrics(
                programs=n,
                finished=len(slowdowns),
                slowdown=_mean(slowdowns),
                starvation=_max_known(
                    self._tenant_starvation.get(tenant, math.nan), live.get(tenant, math.nan)
                ),
                max_queue_wait_s=max_wait.get(tenant, 0.0),
                e2e_p95_s=percentile(self._tenant_e2e.get(tenant, ()), 95),
                tokens=self._tenant_tokens.get(tenant, 0),
            )
        return out

    def _rates(self, now: float) -> tuple[float, float]:
        """Programs finished, and finished on time, per second: over the whole span of the
        events, or over the last ``rate_window_s`` as of ``now`` (the time served when the
        server is younger than that)."""
        c = self.counts
        if self.rate_window_s is None:
            finished = c["finished"]
            if not finished:
                return 0.0, 0.0
            span = max(self.last_t - self.first_t, 1e-9)
            return finished / span, (finished - c["late"]) / span
        self._forget_finishes_before(now - self.rate_window_s)
        recent = self._recent_finishes
        if not recent:
            return 0.0, 0.0
        began = self.first_t if self.first_t < self.served_since else self.served_since
        span = max(min(self.rate_window_s, now - began), 1e-9)
        on_time = sum(1 for _, in_time in recent if in_time)
        return len(recent) / span, on_time / span

    def _forget_finishes_before(self, horizon: float) -> None:
        recent = self._recent_finishes
        while recent and recent[0][0] <= horizon:
            recent.popleft()

    def ideal_p95(self) -> float:
        """P95 of the programs' E2E alone on an idle engine (NaN when unknown)."""
        return percentile(self.ideal, 95)

    def report(self, now: float | None = None) -> dict[str, Any]:
        """The metrics, named as printed in snake case with their unit; the tenants' figures
        as of ``now`` (default the latest event: a finished run's end)."""
        c = self.counts
        finished = int(c["finished"])
        throughput, goodput = self._rates(self.last_t if now is None else now)
        # nothing succeeded: no figure per success (NaN), not the totals as if one had
        per_success = finished if finished else math.nan
        tenants = self.tenants(now)
        slowdowns = [t.slowdown for t in tenants.values() if not math.isnan(t.slowdown)]
        return {
            "programs": int(c["programs"]),
            "finished": finished,
            "failed": int(c["failed"]),
            "cancelled": int(c["cancelled"]),
            "goodput_programs_per_s": goodput,
            "throughput_programs_per_s": throughput,
            "e2e_p50_s": percentile(self.e2e, 50),
            "e2e_p95_s": percentile(self.e2e, 95),
            "e2e_p99_s": percentile(self.e2e, 99),
            "e2e_mean_s": _mean(self.e2e),
            "ttfp_p50_s": percentile(self.ttfp, 50),
            "ttfp_p95_s": percentile(self.ttfp, 95),
            "ttft_p50_s": percentile(self.ttft, 50),
            "ttft_p95_s": percentile(self.ttft, 95),
            "tbt_p50_s": percentile(self.tbt, 50),
            "tbt_p95_s": percentile(self.tbt, 95),
            "tool_wait_mean_s": _mean(self.tool_wait),
            "cp_idle_queue_mean_s": _mean(self.cp_idle["queue"]),
            "cp_idle_kv_mean_s": _mean(self.cp_idle["kv"]),
            "cp_idle_tool_mean_s": _mean(self.cp_idle["tool"]),
            "gpu_s_per_success": self.busy_s / per_success,
            "tokens_per_success": (c["computed_tokens"] + c["output_tokens"]) / per_success,
            "discarded_branch_tokens": int(c["discarded_branch_tokens"]),
            "aborted_tokens": int(c["aborted_tokens"]),
            "ghost_tokens": int(c["ghost_tokens"]),
            "kv_hbm_mean_bytes": _mean(self._hbm),
            "kv_hbm_peak_bytes": max(self._hbm, default=math.nan),
            "kv_dram_mean_bytes": _mean(self._dram),
            "kv_dram_peak_bytes": max(self._dram, default=math.nan),
            "prefix_hit_tokens": int(c["prefix_hit_tokens"]),
            "migrations": int(c["kv.offloaded_count"] + c["kv.reloaded_count"]),
            "recomputes": int(c["kv.recomputed_count"]),
            "recompute_tokens": int(c["recompute_tokens"]),
            "insertions": int(c["insertions"]),
            **{key: int(c[key]) for key in _INSERTION_KEYS},
            **{key: int(c[key]) for key in _CROSS_MODEL_KEYS},
            "max_tenant_slowdown": max(slowdowns, default=math.nan),
            "max_tenant_starvation": max(
                (t.starvation for t in tenants.values() if not math.isnan(t.starvation)),
                default=math.nan,
            ),
        }


#: a call end's mid-prompt insertion figures, summed as they are named
_INSERTION_KEYS = (
    "inserted_tokens",
    "lost_reuse_tokens",
    "suffix_reused_tokens",
    "correction_tokens",
)
#: a multi-model call end's cross-model KV figures, summed as they are named
_CROSS_MODEL_KEYS = (
    "cross_model_lost_tokens",
    "cross_model_reused_tokens",
    "cross_model_recompute_tokens",
)


def _tool_node_done(data: Mapping[str, Scalar]) -> bool:
    """Whether a tool end completed its node: the controller's ``node_state`` when the event
    carries it; else (an event stored before it did) an ``ok`` outcome or a ``final``
    attempt, the controller's rule. A final attempt that failed or timed out is the tool's
    result (its children run), so it ends the node on the critical path too."""
    state = data.get("node_state")
    if isinstance(state, str):
        return state == "done"
    return data.get("outcome") == "ok" or data.get("final") is True


def _critical_path_idle(program: _Program) -> tuple[float, float, float]:
    """(queue, KV, tool) idle along the critical path: each node's own, plus, as queue, the
    door waits in the gap before a node (from its parent's end, or a root's program's
    creation, to its call's queueing, or a tool node's reveal)."""
    done = {nid: n for nid, n in program.nodes.items() if n.finished_at is not None}
    if not done:
        return 0.0, 0.0, 0.0
    nid = max(done, key=lambda k: done[k].finished_at or 0.0)
    queue = kv = tool = 0.0
    door = program.door
    while True:
        node = done[nid]
        queue += node.queue_s
        kv += node.restore_s
        tool += node.tool_s
        parents = [p for p in node.parents if p in done]
        parent = max(parents, key=lambda k: done[k].finished_at or 0.0) if parents else None
        if door is not None and (parent is not None or not node.parents):
            since = program.created_at if parent is None else done[parent].finished_at
            entered = node.added_at if node.queued_at is None else node.queued_at
            queue += _overlap(door, since or 0.0, entered)
        if parent is None:
            return queue, kv, tool
        nid = parent


def _union_s(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``spans`` (a program's parallel tools wait once)."""
    covered, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def _overlap(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of ``spans`` (disjoint) within ``start``..``end``."""
    return sum(max(min(end, hi) - max(start, lo), 0.0) for lo, hi in spans)


class ClientOutcome(Protocol):
    """One replayed program as its client saw it end (``sglang.replay.ProgramOutcome``)."""

    @property
    def e2e_s(self) -> float: ...

    @property
    def success(self) -> bool: ...

    @property
    def cancelled(self) -> bool:
        """The trace's own cancel ended it (no failure of the serving)."""
        ...

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def cached_tokens(self) -> int: ...


def outcome_summary(outcomes: Sequence[ClientOutcome]) -> dict[str, float]:
    """Programs, finished, cancelled by the trace, E2E P50/P95/mean of the finished ones,
    prefix-cache hit rate, from the rows the replaying client recorded. Client-side because
    the stock SGLang arms of the real-engine benchmarks run without our server, so there are
    no events of ours to fold; the agentconsole arms are summed up the same way (their
    ``replay_as_served`` rows), so every arm is measured alike. Figures with no data are 0,
    not NaN: the benchmarks read 0 as "no figure"."""
    done = [o.e2e_s for o in outcomes if o.success]
    prompt = sum(o.prompt_tokens for o in outcomes)
    return {
        "programs": len(outcomes),
        "finished": len(done),
        "cancelled": sum(1 for o in outcomes if o.cancelled),
        "e2e_p50_s": percentile(done, 50, empty=0.0),
        "e2e_p95_s": percentile(done, 95, empty=0.0),
        "e2e_mean_s": _mean(done, empty=0.0),
        "cache_hit_rate": sum(o.cached_tokens for o in outcomes) / prompt if prompt else 0.0,
    }


#: the counter of each way a call ends (a failed call: the engine ended it, or the runtime failed)
#: ended programs remembered (their discarded nodes whose calls may end after them, their
#: critical path's idle): a bound, an abort that never comes leaves no entry for good
_ENDED_KEPT = 65_536

_CALL_ENDS = {
    EventKind.CALL_FINISHED: "calls_finished",
    EventKind.CALL_ABORTED: "calls_aborted",
    EventKind.CALL_FAILED: "calls_failed",
}

_HANDLERS = {
    EventKind.PROGRAM_CREATED: MetricsAggregator._created,
    EventKind.PROGRAM_DOOR_WAITED: MetricsAggregator._door_waited,
    EventKind.CALL_QUEUED: MetricsAggregator._queued,
    EventKind.CALL_FAILED: MetricsAggregator._call_done,
    EventKind.NODE_ADDED: MetricsAggregator._node_added,
    EventKind.CALL_SCHEDULED: MetricsAggregator._scheduled,
    EventKind.CALL_FIRST_TOKEN: MetricsAggregator._first_token,
    EventKind.CALL_FINISHED: MetricsAggregator._call_done,
    EventKind.CALL_ABORTED: MetricsAggregator._call_done,
    EventKind.TOOL_FINISHED: MetricsAggregator._tool_done,
    EventKind.PROGRAM_FINISHED: MetricsAggregator._program_end,
    EventKind.PROGRAM_FAILED: MetricsAggregator._program_end,
    EventKind.PROGRAM_CANCELLED: MetricsAggregator._program_end,
    EventKind.KV_OFFLOADED: MetricsAggregator._kv,
    EventKind.KV_RELOADED: MetricsAggregator._kv,
    EventKind.KV_DROPPED: MetricsAggregator._kv,
    EventKind.KV_EVICTED: MetricsAggregator._kv,
    EventKind.KV_RECOMPUTED: MetricsAggregator._kv,
    EventKind.GHOST_TOKENS: MetricsAggregator._ghost,
    EventKind.ENGINE_STATS: MetricsAggregator._stats,
}

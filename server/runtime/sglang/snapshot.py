"""The SGLang runtime's ``RuntimeSnapshot``: the scheduler's view merged with the adapter's.

With the plugin, the scheduler's ``status.json`` gives the waiting queue in policy order, the
running batch and KV use; calls the adapter holds that SGLang has not registered yet are shown
queued ahead of it (they are being tokenized or held by a drain). Without the plugin (stock
SGLang), the adapter's own view is all there is: a call is running once its first token came.
KV: the device tier, ``hbm`` (on the CPU engine that is host RAM), and with HiCache (GPU only,
untested here) its host tier as ``dram``. Placement per program: the tokens of its last context
resident on the device, from the plugin's placement sweep (``placement.json``, at most a second
old); a program kept for a tool wait that no sweep has seen yet shows its kept tokens.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from agentconsole.scheduler.runtime import QueuedCall, RunningCall, RuntimeSnapshot, TierUsage
from agentconsole.server.runtime.sglang.status import Placement, SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream

DEVICE_TIER = "hbm"
HOST_TIER = "dram"


def build_snapshot(
    name: str,
    policy: str,
    status: SchedulerStatus | None,
    calls: Sequence[SGLangStream],
    *,
    hit_tokens: int,
    paused: bool,
    placement: Placement | None = None,
) -> RuntimeSnapshot:
    """Snapshot from the plugin's status (if any) and the adapter's calls in flight."""
    now = time.time()
    if status is None:
        return RuntimeSnapshot(
            runtime=name,
            policy=policy,
            queued=tuple(_queued(c, now) for c in calls if c.first_at is None),
            running=tuple(_running(c, now) for c in calls if c.first_at is not None),
            prefix_hit_tokens=hit_tokens,
            paused=paused,
        )
    known = {q.rid for q in status.queued} | {r.rid for r in status.running}
    pending = tuple(_queued(c, now) for c in calls if c.rid not in known and c.first_at is None)
    # the status file may be a moment old: calls that ended since are left out
    live = {c.rid for c in calls}
    tiers: dict[str, TierUsage] = {DEVICE_TIER: status.device_tier()}
    host = status.host_tier()
    if host is not None:
        tiers[HOST_TIER] = host
    where = {p: {DEVICE_TIER: n} for p, n in status.retained_tokens.items()}
    if placement is not None:
        where.update({p: {DEVICE_TIER: n} for p, (n, _) in placement.programs.items()})
    return RuntimeSnapshot(
        runtime=name,
        policy=status.policy or policy,
        queued=pending + tuple(q for q in status.queued_calls(now) if q.call_id in live),
        running=tuple(r for r in status.running_calls() if r.call_id in live),
        tiers=tiers,
        placement=where,
        prefix_hit_tokens=hit_tokens,
        paused=paused or status.paused,
    )


def _queued(call: SGLangStream, now: float) -> QueuedCall:
    t = call.request.ticket
    return QueuedCall(t.call_id, t.program_id, t.tenant, 0.0, now - call.submitted)


def _running(call: SGLangStream, now: float) -> RunningCall:
    t = call.request.ticket
    context = int(call.meta.get("prompt_tokens") or 0) + call.tokens
    return RunningCall(
        t.call_id, t.program_id, t.tenant, context, call.tokens, now - (call.first_at or now)
    )

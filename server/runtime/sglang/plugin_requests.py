"""What the plugin remembers of each request its scheduler holds.

Per request id: the decoded ticket (``wire``), when the plugin first saw it waiting and when it
was first admitted (both in decision time: the wall clock, or in lockstep the decision clock),
and whether an operator preempt of it has taken effect (seen waiting after the preempt, then
running again: from then on it is no longer demoted). Entries of requests the scheduler no
longer holds are pruned. SGLang's ``Req`` is duck-typed (``rid``,
``sampling_params.custom_params``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentconsole.server.runtime.sglang import wire
from agentconsole.server.runtime.sglang.ranked import Candidate


class RequestBook:
    def __init__(self) -> None:
        self._wires: dict[str, wire.WireTicket | None] = {}
        #: the last candidate made for each request: it holds when the request was first seen
        #: and its place in that order (the keys' tie-break)
        self._candidates: dict[str, Candidate] = {}
        self._next_seq = 0
        self.admitted: dict[str, float] = {}  # request -> its first step
        #: request -> its first step since it last came out of the waiting queue
        self._running_since: dict[str, float] = {}
        #: request -> times it came back from the waiting queue after running
        self.reentries: dict[str, int] = {}
        self._requeued: set[str] = set()  # preempted by the operator, then seen waiting
        self._resumed: set[str] = set()  # ... and then seen running again
        #: admitted, then seen waiting again (retracted or preempted): its next step is its
        #: first forward since, after another spell of queueing
        self._back_in_queue: set[str] = set()

    def wire_of(self, req: Any) -> wire.WireTicket | None:
        """The ticket ``req`` carries (decoded once), or None."""
        rid = req.rid
        if rid not in self._wires:
            params = getattr(req.sampling_params, "custom_params", None)
            self._wires[rid] = wire.decode(params)
        return self._wires[rid]

    def candidate(
        self,
        req: Any,
        now: float,
        preempted_at: float | None,
        *,
        record: bool = True,
        resident_tokens: int | None = None,
    ) -> Candidate:
        """``req`` as the orderer sees it (``preempted_at``: when the operator preempted it,
        if they did; ``resident_tokens``: its prompt tokens on the device now, if looked up);
        ``record`` notes ``now`` as when it was first seen (a report passes False: it must
        not change what decisions see)."""
        rid = req.rid
        if preempted_at is not None and rid in self._resumed:
            preempted_at = None
        known = self._candidates.get(rid)
        if known is not None:
            if known.preempted_at == preempted_at and known.resident_tokens == resident_tokens:
                return known  # the same object each pass: the key memo compares it by identity
            first, seq = known.first_seen, known.seq
        else:  # a report numbers an unseen request after every seen one, unrecorded (the
            # unseen ones of a report tie, and keep their queue order)
            first, seq = now, self._next_seq
            self._next_seq += record
        made = Candidate(rid, self.wire_of(req), first, seq, preempted_at, resident_tokens)
        if record:
            self._candidates[rid] = made
        return made

    def seen_waiting(self, candidate: Candidate, now: float) -> None:
        """``candidate`` was in the waiting queue at ``now`` (after its preempt, if any)."""
        if candidate.preempted_at is not None and now > candidate.preempted_at:
            self._requeued.add(candidate.rid)
        if candidate.rid in self.admitted:
            self._back_in_queue.add(candidate.rid)

    def ran(self, rid: str) -> bool:
        """Request ``rid`` was admitted before (it ran a step)."""
        return rid in self.admitted

    def seen_running(self, rid: str, now: float) -> bool:
        """Request ``rid`` ran a step at ``now``; True when it just came out of the waiting
        queue (its first step, or its first since it was seen waiting again)."""
        entered = rid not in self.admitted
        if entered:
            self.admitted[rid] = now
            self._running_since[rid] = now
        if rid in self._back_in_queue:
            self._back_in_queue.discard(rid)
            self._running_since[rid] = now
            self.reentries[rid] = self.reentries.get(rid, 0) + 1
            entered = True
        if rid in self._requeued:
            self._requeued.discard(rid)
            self._resumed.add(rid)
        return entered

    def resident_s(self, rid: str, now: float) -> float:
        """How long ``rid`` has been running at ``now`` since it last came out of the
        waiting queue (0 if it has not run): a resumed call's protection counts from its
        resume, as the simulator's does."""
        return now - self._running_since.get(rid, now)

    def prune(self, live: set[str], preempted: Iterable[str]) -> None:
        """Forget requests not in ``live``; the preempt mark stays while ``preempted`` names
        the request (the operator's preempt is still in control)."""
        for table in (
            self._wires,
            self._candidates,
            self.admitted,
            self._running_since,
            self.reentries,
        ):
            for rid in [rid for rid in table if rid not in live]:
                del table[rid]
        self._requeued &= live
        self._back_in_queue &= live
        self._resumed &= live | set(preempted)

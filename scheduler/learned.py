"""What a program's and a tool's ends teach the scheduler, as their events record it.

The scheduler learns online from finished programs: how many calls a program of a workload
makes (the policies' remaining work), how large a kind of program's private context grows (the
door's size of it) and how long it runs from the door to its end (the door's line). A restart
would forget all of it, and a server restarted under load would size and order programs as on
its first day: a long session sized by its first call again, the line first come first served
again, every tool wait priced by the prior. So the finish event carries each figure (and a
tool's end its tool's kind), and start-up replays the latest of them (:data:`RELEARNED`)
through the same learners (``ProgramDriver.relearn``), in their order.
"""

from __future__ import annotations

from agentconsole.scheduler.events import EventKind

#: the program's ``workload`` label: the class its calls are learned under
LABEL = "workload"
#: the calls the program completed
CALLS = "calls"
#: the kind its growth and run are learned under, with the event's tenant (``growth.kind_key``:
#: a kind is a name in its tenant's namespace, relearned under the same tenant)
KIND = "program_kind"
#: the most private tokens its context held
PEAK_TOKENS = "peak_private_tokens"
#: seconds from passing the door to its last work
RUN_S = "door_run_s"

#: a tool's end: which tool (its latency is learned per tool, else per kind of tool)
TOOL = "tool"
TOOL_KIND = "tool_kind"

#: what start-up replays: the latest events of each kind per tenant and these data fields (a
#: failed program teaches its label's calls, as it does live, and nothing else)
RELEARNED = (
    (EventKind.PROGRAM_FINISHED, (KIND, LABEL)),
    (EventKind.PROGRAM_FAILED, (LABEL,)),
    (EventKind.TOOL_FINISHED, (TOOL,)),
)
RELEARNED_KINDS = frozenset(kind for kind, _ in RELEARNED)
#: events replayed per tenant and group at start-up: the means weigh a finish by 0.8 per later
#: one, so the 64th latest counts below a millionth; the remaining-work histogram and the
#: tools' latency fits are rebuilt from the latest 64 of each tenant (a recent window rather
#: than all time)
RELEARN_PER_GROUP = 64

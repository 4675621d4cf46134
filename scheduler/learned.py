"""What a program's and a tool's ends teach the scheduler, as their events record it.

The scheduler learns online from finished programs: how many calls a program of a workload
makes (the policies' remaining work), how large a kind of program's private context grows (the
door's size of it) and how long it runs from the door to its end (the door's line). A restart
would forget all of it, and a server restarted under load would size and order programs as on
its first day: a long session sized by its first call again, the line first come first served
again, every tool wait priced by the prior. So the finish event carries each figure (and a
tool's end its tool's kind), and start-up replays the latest of them (:data:`RELEARNED`)
through the same learners (``ProgramDriver.relearn``), in their order.

A tenant's calls' output lengths (per its programs' ``model`` label, and over all its calls)
are learned per call, its programs' calls interleaved, so no program's end can replay them.
Each end event carries the means as they stood when it was recorded instead
(:data:`MODEL_OUTPUT_TOKENS`, :data:`TENANT_OUTPUT_TOKENS`), and the latest of them is taken
back as learned. The ends are grouped by their ``model`` label too, so the latest end of each
of a tenant's models is the newest of its group, always among those replayed (grouped by
kind and workload alone, a model run by few of a workload's programs fell out of the window).
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

#: the program's ``model`` label: what its calls' output lengths are learned under (not
#: ``model``, which a call's end names the model that ran it by)
MODEL = "model_label"
#: the mean output tokens of the calls of the tenant's programs of that ``model`` label, and of
#: all the tenant's calls, as learned when the program ended (absent: none learned)
MODEL_OUTPUT_TOKENS = "model_output_tokens"
TENANT_OUTPUT_TOKENS = "tenant_output_tokens"

#: a tool's end: which tool (its latency is learned per tool, else per kind of tool)
TOOL = "tool"
TOOL_KIND = "tool_kind"

#: what start-up replays: the latest events of each kind per tenant and these data fields (a
#: failed program teaches its label's calls and its calls' output lengths, as it does live,
#: and nothing else)
RELEARNED = (
    (EventKind.PROGRAM_FINISHED, (KIND, LABEL, MODEL)),
    (EventKind.PROGRAM_FAILED, (LABEL, MODEL)),
    (EventKind.TOOL_FINISHED, (TOOL,)),
)
RELEARNED_KINDS = frozenset(kind for kind, _ in RELEARNED)
#: events replayed per tenant and group at start-up: the means weigh a finish by 0.8 per later
#: one, so the 64th latest counts below a millionth; the remaining-work histogram and the
#: tools' latency fits are rebuilt from the latest 64 of each tenant (a recent window rather
#: than all time)
RELEARN_PER_GROUP = 64

"""What a program's end teaches the scheduler, as its ``program.finished`` event records it.

The scheduler learns online from finished programs: how many calls a program of a workload
makes (the policies' remaining work), how large a kind of program's private context grows (the
door's size of it) and how long it runs from the door to its end (the door's line). A restart
would forget all of it, and a server restarted under load would size and order programs as on
its first day: a long session sized by its first call again, the line first come first served
again. So the finish event carries each figure, and start-up replays the latest finishes of
every kind through the same learners (``ProgramDriver.relearn``), in their order.
"""

from __future__ import annotations

#: the program's ``workload`` label: the class its calls are learned under
LABEL = "workload"
#: the calls the program completed
CALLS = "calls"
#: the kind its growth and run are learned under (``growth.program_kind``)
KIND = "kind"
#: the most private tokens its context held
PEAK_TOKENS = "peak_private_tokens"
#: seconds from passing the door to its last work
RUN_S = "door_run_s"

#: finishes replayed per (tenant, kind, label) at start-up: the means weigh a finish by
#: 0.8 per later one, so the 64th latest counts below a millionth; the remaining-work
#: histogram is the latest 64 programs' (a recent window rather than all time)
RELEARN_PER_KIND = 64

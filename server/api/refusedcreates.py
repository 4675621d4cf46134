"""Creates refused after they had opened their program, so that a retry of one is answered as
it would have been (``POST /v1/programs``).

A create opens its program in memory, then waits for its rows to commit (and, with an
operator key, for its audit row). When that wait fails (the disk filled in between: 503,
``x-should-retry: true``), the program stays open while its client was told to try again;
the retry would then meet it and be told 409 "exists", and a well-behaved client would take
the program it created for someone else's.

A retry is recognised by what a retry repeats: the same tenant and the same body (deadline,
quotas, labels), for the very program the refused attempt opened (its creation time: not a
later program under the same id). The id alone would weaken the 409: a create of a taken id
by another tenant, or by the same tenant with another body, must still learn it is taken.
Once one attempt is answered 201 the entry goes: that creation was acknowledged, and the same
body again is a second create (409). Without an idempotency key nothing finer tells two
identical requests apart, and both name the same program for the same tenant, so answering
the second as the first is what the first would have wanted.

Only creates that name their program are recognised: a server-chosen id is not known to the
client before the answer, so its retry opens another program (the first ends idle). A create
that carries ``Idempotency-Key`` needs none of this: its key answers every retry, after a 201,
a 503 or a restart alike (:mod:`createkeys`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agentconsole.scheduler.program import Program
from agentconsole.server.api.schemas import ProgramCreate

#: refused creates remembered at most (oldest forgotten first): each needs a store refusal
#: that came after its program opened, so these are few; the bound keeps a long outage small
MAX_REFUSED_CREATES = 10_000


def create_request(data: ProgramCreate) -> str:
    """What a retry of ``data`` repeats besides the id: its body, in one canonical text."""
    body = data.model_dump(mode="json", exclude_none=True, exclude={"program_id"})
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class _Refused:
    tenant: str
    request: str
    #: the program the refused attempt opened (``Program.created_at``)
    created_at: float


class RefusedCreates:
    """Programs opened by a create that was not answered 201 (one app's; event-loop only)."""

    def __init__(self, limit: int = MAX_REFUSED_CREATES) -> None:
        self._limit = limit
        self._by_program: dict[str, _Refused] = {}

    def __len__(self) -> int:
        return len(self._by_program)

    def remember(self, program: Program, request: str) -> None:
        """``program`` was opened by a create of ``request`` that then failed."""
        self._by_program.pop(program.program_id, None)
        if len(self._by_program) >= self._limit:
            del self._by_program[next(iter(self._by_program))]
        self._by_program[program.program_id] = _Refused(program.tenant, request, program.created_at)

    def is_retry(self, program: Program, tenant: str, request: str) -> bool:
        """Whether a create of ``request`` by ``tenant`` repeats the refused one that opened
        ``program`` (then it is answered with ``program``, not 409)."""
        refused = self._by_program.get(program.program_id)
        return refused == _Refused(tenant, request, program.created_at)

    def answered(self, program_id: str) -> None:
        """A create of ``program_id`` was answered 201: its creation is acknowledged."""
        self._by_program.pop(program_id, None)

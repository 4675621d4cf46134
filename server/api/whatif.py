"""``/v1/operator/whatif``: replay a window of the running server's traffic (operator key).

``POST`` writes the programs that arrived in the window as a trace under the server's what-if
directory (the server names the file) and answers its path, the number of programs and the
``agentconsole bench`` command that replays it under every policy; ``run: true`` also starts
that bench in the background (one at a time: 409 while one runs). An empty window answers 200
with ``programs: 0`` and no file. ``GET /run`` reads the latest run. The export is audited
like every operator action (``whatif``); see :mod:`agentconsole.server.whatif.desk`.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, get, post
from litestar.params import JSONBody
from pydantic import ValidationError

from agentconsole.server.api.contract import REF, contract
from agentconsole.server.api.deps import LiveDep, PrincipalDep
from agentconsole.server.api.errors import ApiError
from agentconsole.server.api.schemas import WhatIfIn

JSON = dict[str, Any]
#: the published body: the model, or null (or no body) for its defaults, as ``boost`` has
BODY = {"oneOf": [{"$ref": REF.format(model=WhatIfIn.__name__)}, {"type": "null"}]}


def parse_body(data: JSON | None) -> WhatIfIn:
    """The body (absent: ``{}``), validated here: Litestar answers a validation error of a
    body field named like a dependency (``tenant``) with a 500, so the handler takes the
    JSON object and this raises the usual 422 naming the field."""
    try:
        return WhatIfIn.model_validate(data or {}, strict=True)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        message = f"{field}: {first['msg']}" if field else str(first["msg"])
        raise ApiError(422, message, field=field) from None


class WhatIfController(Controller):
    path = "/v1/operator/whatif"
    tags = ("operator",)

    @post(
        "/",
        status_code=200,
        summary="Replay a window of traffic",
        opt={**contract(409, body=BODY), "audit_action": "whatif"},
    )
    async def export(
        self,
        live: LiveDep,
        operator_principal: PrincipalDep,
        data: JSONBody[JSON | None] = None,
    ) -> JSON:
        """Write the window's trace and answer ``{since, until, tenant, programs, path,
        command, message, run}``; ``programs: 0`` (no file, no command) when nothing of the
        window ran."""
        body = parse_body(data)

        async def work() -> JSON:
            return await live.whatif.export(
                since=body.since,
                until=body.until,
                tenant=body.tenant,
                run=body.run,
                kv_policy=live.service.kv_policy,
            )

        args = body.model_dump(exclude_none=True)
        return await live.desk.run(operator_principal.key_id, "whatif", "", args, work)

    @get(
        "/run",
        summary="The latest what-if bench run",
        opt={**contract(404), "audit_action": "whatif_run"},
    )
    async def run(self, live: LiveDep, operator_principal: PrincipalDep) -> JSON:
        """``{state, trace, command, report, started_at, finished_at, exit_code, table,
        policies, error}``; ``state`` is ``running``, ``done``, ``failed``, ``timed_out`` or
        ``stopped``; 404 before the first run."""
        del operator_principal
        return live.whatif.run_json()

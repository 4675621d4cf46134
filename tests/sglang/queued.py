"""SGLang's queued ``Req`` as the plugin reads it, without an engine."""

from __future__ import annotations

from types import SimpleNamespace

from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang import wire


def queued(name: str, remaining_s: float, arrival: float) -> SimpleNamespace:
    """Program ``name``'s queued request, its ticket ranking it by ``remaining_s``."""
    ticket = CallTicket(
        f"{name}/n/0001",
        name,
        "n",
        "t",
        arrival=arrival,
        prompt_tokens=100,
        expected_output_tokens=500,
        remaining_cp_s=remaining_s,
        service_estimate_s=remaining_s,
    )
    params = SimpleNamespace(custom_params=wire.encode(ticket, clock_offset=0.0))
    return SimpleNamespace(
        rid=ticket.call_id,
        sampling_params=params,
        origin_input_ids=list(range(100)),
        output_ids=[1] * 5,
        priority=0,
        finished=lambda: False,
    )

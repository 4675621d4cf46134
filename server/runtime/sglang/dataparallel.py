"""The SGLang runtime's data-parallel side: placing each call on a rank, and what the server
reads of the ranks (mixed into ``SGLangRuntime``).

With ``EngineSettings.dp > 1`` the adapter starts SGLang with ``dp_size`` ranks and a
:class:`~agentconsole.server.runtime.sglang.ranks.RankRouter` decides the rank of every
program call at submit time (sent as ``routed_dp_rank``; SGLang's DP controller honours it
before its own balancing). The rank SGLang reports in ``meta_info["dp_rank"]`` is recorded per
node (``node_ranks``, shown on the program's nodes by the API). Abort needs no routing: SGLang's
DP controller sends an ``AbortReq`` to every rank, and only the rank holding the rid acts.
With one rank (the default) nothing here changes a request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentconsole.scheduler.runtime import TierUsage
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.rank_status import RankFiles
from agentconsole.server.runtime.sglang.ranks import InFlight, RankRouter
from agentconsole.server.runtime.sglang.snapshot import DEVICE_TIER
from agentconsole.server.runtime.sglang.stream import SGLangStream
from agentconsole.server.runtime.sglang.telemetry import Telemetry, salt_of


class RankRouting:
    """Rank placement and per-rank views of ``SGLangRuntime`` (state lives there)."""

    settings: EngineSettings
    telemetry: Telemetry
    rank_files: RankFiles
    router: RankRouter | None
    _calls: dict[str, SGLangStream]

    def _place(self, call: SGLangStream) -> None:
        """Choose the rank of a program call about to be sent (nothing with one rank)."""
        if self.router is None:
            return
        r, t = call.request, call.request.ticket
        prompt = r.prompt_ids or ()
        call.rank = self.router.route(
            t.program_id,
            salt_of(call),
            prompt,
            len(prompt) or t.prompt_tokens,
            routed_calls(self._calls.values()),
            self.telemetry.contexts,
            self.rank_files.placements(),
        )
        self.router.note(t.program_id, t.node_id, call.rank)

    def _served_on(self, call: SGLangStream, meta: dict[str, Any]) -> None:
        """SGLang names the rank that served the call: that is the node's rank."""
        served = meta.get("dp_rank")
        if self.router is not None and isinstance(served, int) and served != call.rank:
            t = call.request.ticket
            self.router.note(t.program_id, t.node_id, served)
            call.rank = served

    def node_ranks(self, program_id: str) -> dict[str, int]:
        """Node id -> the data-parallel rank its latest attempt ran on; empty with one rank."""
        return self.router.node_ranks(program_id) if self.router is not None else {}

    def rank_tiers(self) -> dict[str, TierUsage]:
        """Each rank's device KV as its own tier, ``hbm.rank<r>`` (empty with one rank): the
        snapshot's ``hbm`` is their sum."""
        if self.router is None:
            return {}
        out: dict[str, TierUsage] = {}
        for r, status in enumerate(self.rank_files.statuses()):
            if status is not None:
                out[f"{DEVICE_TIER}.rank{r}"] = status.device_tier()
        return out


def routed_calls(calls: Iterable[SGLangStream]) -> list[InFlight]:
    """The load of the calls already sent to a rank, as routing (and a probe asking where a
    new program would go) weighs it."""
    return [_in_flight(c) for c in calls if c.rank is not None]


def _in_flight(call: SGLangStream) -> InFlight:
    """A routed call's load on its rank: its prompt until the first token, then its context."""
    r = call.request
    prompt = len(r.prompt_ids) if r.prompt_ids is not None else r.ticket.prompt_tokens
    rank = call.rank if call.rank is not None else -1
    if call.first_at is None:
        return InFlight(rank, prefill_tokens=prompt)
    return InFlight(rank, decode_tokens=prompt + call.tokens)

"""One candidate model's figures for one call, built the same way by every carrier.

The simulator (``server/runtime/sim/models.py``) and ``serve`` (``server/live/modeldesk.py``)
predict a candidate's queue and service differently (a roofline over the replica's load; rates
learned from finished calls over the engine's ``MemoryView``): that is each caller's
:class:`CandidateCost`. What a candidate is made of beyond those two figures (its name, tier
and price, the tokens it holds and bills, the output assumed without an estimate) is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agentconsole.scheduler.models.choice import ModelOption

#: output tokens assumed when the caller has no estimate yet
DEFAULT_OUTPUT = 256.0


def output_tokens(estimate: float) -> float:
    """The output tokens to plan a call for: ``estimate``, or :data:`DEFAULT_OUTPUT` when
    there is none yet (0)."""
    return estimate or DEFAULT_OUTPUT


@dataclass(frozen=True, slots=True)
class CallSize:
    """One call as one candidate would run it: the prompt in that model's tokens, how many of
    them its engine holds, and the output tokens expected."""

    prompt_tokens: int
    cached_tokens: int
    output_tokens: float

    @property
    def billed_tokens(self) -> int:
        """What the call would bill: prompt plus expected output."""
        return self.prompt_tokens + int(self.output_tokens)


class CandidateModel(Protocol):
    """What an option names of the model itself (a served model, a simulated pool)."""

    @property
    def name(self) -> str: ...

    @property
    def tier(self) -> int: ...

    @property
    def price_per_mtok(self) -> float: ...


class CandidateCost(Protocol):
    """The caller's prediction for one candidate's engine as it stands now."""

    def queue_s(self) -> float:
        """Seconds before the call would start there."""
        ...

    def service_s(self, call: CallSize) -> float:
        """Seconds the call would run there (its uncached prefill and its decode)."""
        ...


def model_option(
    model: CandidateModel,
    call: CallSize,
    cost: CandidateCost,
    *,
    loaded: bool = True,
    load_s: float = 0.0,
) -> ModelOption:
    """The option the selector weighs for ``call`` on ``model``: ``cost``'s queue, then its
    service, the cached and billed tokens of ``call``; ``load_s`` counts only when not
    ``loaded``. Changes nothing."""
    return ModelOption(
        model.name,
        model.tier,
        model.price_per_mtok,
        loaded=loaded,
        load_s=load_s,
        queue_s=cost.queue_s(),
        service_s=cost.service_s(call),
        cached_tokens=call.cached_tokens,
        tokens=call.billed_tokens,
    )

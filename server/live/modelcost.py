"""What a call would cost on each served model: per-model service rates learned from the calls
that finished there, and a model's queue as its engine shows it.

One :class:`OnlineServiceModel` per model: a 70B and an 8B model differ by an order of
magnitude, so one learned scale for both would mispredict each. A model whose runtime knows
its speed in advance (``Runtime.service_prior``: the simulator's roofline of its preset) starts
from that; others from the defaults, scaled towards what their calls take. The calls' ends
come from the event hub (``call.finished``), matched to the model intake sent them to.
"""

from __future__ import annotations

from collections import OrderedDict

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.runtime import MemoryView, Runtime
from agentconsole.server.live.servicemodel import OnlineServiceModel

_PENDING_KEPT = 65_536  # calls in flight whose model is remembered for their end
_ENDS = (EventKind.CALL_FINISHED, EventKind.CALL_ABORTED, EventKind.CALL_FAILED)


def prior_model(runtime: Runtime) -> OnlineServiceModel:
    """A service model for ``runtime``'s model: from the speed it knows in advance when it
    knows one (``Runtime.service_prior``: the simulator's cost model), else the defaults."""
    prior = runtime.service_prior()
    if prior is None:
        return OnlineServiceModel()
    return OnlineServiceModel(prior.prefill_s_per_token, prior.decode_step_s)


class ModelCosts:
    """Per model: the learned service model; per call in flight: the model it runs on."""

    def __init__(self, runtimes: dict[str, Runtime]) -> None:
        self.models = {name: prior_model(r) for name, r in runtimes.items()}
        self._pending: OrderedDict[tuple[str, str, int], str] = OrderedDict()

    def sent(self, program_id: str, node_id: str, attempt: int, model: str) -> None:
        """A call went to ``model``: its end teaches that model."""
        self._pending[(program_id, node_id, attempt)] = model
        if len(self._pending) > _PENDING_KEPT:
            self._pending.popitem(last=False)

    def observe(self, event: Event) -> None:
        """The hub's subscriber: a finished call's service teaches its model (changes that
        model's scale only); any end forgets the call."""
        if event.kind not in _ENDS:
            return
        model = self._pending.pop((event.program_id, event.node_id, event.attempt), None)
        if model is None or event.kind is not EventKind.CALL_FINISHED:
            return
        data = event.data
        computed, output, service = (
            data.get("computed_tokens"),
            data.get("output_tokens"),
            data.get("service_s"),
        )
        if isinstance(computed, int) and isinstance(output, int) and isinstance(service, float):
            self.models[model].observe(computed, output, service)

    def queue_s(self, model: str, memory: MemoryView) -> float:
        """Predicted wait on ``model``'s engine: the prefill of the prompts queued ahead, plus
        a decode step per running call's share (a crowded batch admits later)."""
        rates = self.models[model]
        # a runtime's counters are its own: a negative one must not make a negative wait
        queued = max(memory.queued_tokens, 0)
        prefill = rates.prefill_seconds_per_token() * queued
        return prefill + rates.call_seconds(0, 1.0) * max(memory.running_calls, 0)

    def service_s(self, model: str, uncached_tokens: int, output_tokens: float) -> float:
        """Predicted run time of the call alone on ``model``."""
        return self.models[model].call_seconds(uncached_tokens, output_tokens)

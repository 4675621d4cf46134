"""Tool-wait KV policies: keep (soft-retain on HBM), offload to DRAM, or drop and recompute.

Owns the :class:`ToolWait` inputs, the :class:`Decision` output, the expected-cost model and the
policy registry (``keep``, ``offload``, ``recompute``, ``adaptive``). Re-exports the latency
distributions (:class:`LogNormal`, :class:`Constant`) from :mod:`agentconsole.scheduler.latency`.

Cost model. Every cost is in *delay-seconds* (seconds of someone's critical path), for the
program's private KV only; its shared prefix stays resident under every option and cancels::

    P          private tokens of the program          L   tool latency, S(t) = P(L > t)
    H(tau)     = E[min(L, tau)] = integral_0^tau S(t) dt  (time held under a TTL tau)
    x          = tiers.transfer_seconds(P, HBM, DRAM)  one copy over the host link
    r          = recompute_seconds_per_token * P       prefill of the dropped tokens
    pi_H       = pressure / call_tokens       delay others lose per HBM token-second held
    pi_D       = dram_pressure / call_tokens  the same for DRAM
    T          = lru_horizon_s                how long unprotected KV survives LRU churn
    w          = priority                     weight of this program's own delay
    d          = readmit_seconds              wait for HBM again when the KV is not resident
    g          = gpu_pressure                 delay others lose per GPU-second consumed
                                              (calls running or queued on the engine: a
                                              prefill step delays every one of them)

    keep(tau)  = pi_H * P * H(tau) + S(tau + T) * lapse
      lapse    = pi_H * P * x + x + w * (x + d)   with write-back: the evicting call waits for
                                                 the copy, this program later reloads
               = w * (r + d) + g * r             without DRAM or write-back: dropped, recomputed
    offload    = pi_H * P * x + pi_D * P * E[L] + w * (x + d)
                 (copy out overlapped with the tool, HBM held while copying; only the reload
                 is on the critical path; copies are DMA and take no GPU compute)
    recompute  = w * (r + d) + g * r

``keep`` is soft retention (CacheTTL / SGLang soft retention), not a pin: the KV is protected for
``tau`` seconds and then ranks as if last used at ``tau`` (``retention`` eviction strategy), so
it is lost only if the tool outlasts ``tau`` plus the LRU characteristic time ``T`` (Che's
approximation: unused LRU entries survive about ``T = evictable tokens / allocation rate``;
``T = 0``, the default, assumes contested memory is reclaimed at once). While protected it
costs others ``pi_H`` per token-second; unprotected KV costs them nothing, since they can evict
it. The fixed ``keep`` policy uses ``tau = quantile(0.9)``. ``adaptive`` evaluates ``keep`` at
``tau`` in ``{0} ∪ {Q(q)}`` for a grid of quantiles that includes the fixed policy's, and picks
the cheapest of keep and offload (ties: keep), so its expected cost is never above either fixed
policy's; recompute joins the choice only where host memory cannot take the context. That is a
measured exception to the model, not a cost: a drop's prefill runs when the program returns, at
a load the model prices with today's ``g``, and in ``bench`` the drops it chose cost more than
they saved (seed-mix, 300 programs, fcfs vs cp-cache: at 3x the peak, allowing them took
finished/s from 101% to 96% of the peak and recomputed tokens from 0.13 M to 3.2 M; at 0.9x one
drop in 2,272 decisions cost 2-4% of P50/P95). Offloaded KV is soft-retained on DRAM for
``quantile(0.9)``. Not modelled: eviction of retained KV before ``tau`` (retention is soft, but
a retained node goes only after every unretained one), DRAM held after a lapse, prefetching.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from mypy_extensions import mypyc_attr

from agentconsole.kvtiers.tiers import Tier, TierModel
from agentconsole.scheduler.latency import Constant, LatencyDistribution, LogNormal, expected_min
from agentconsole.scheduler.registry import Registry
from agentconsole.scheduler.runtime import CacheAction

__all__ = [
    "DEFAULT_TOOL_WAIT_POLICY",
    "Constant",
    "Decision",
    "LogNormal",
    "ToolWait",
    "ToolWaitPolicy",
    "available_tool_wait_policies",
    "get_tool_wait_policy",
    "keep_cost",
    "lru_horizon",
    "offload_cost",
    "pressure_from_queue",
    "recompute_cost",
    "register_tool_wait_policy",
]

#: What ``serve`` and ``bench`` decide tool waits by unless told: ``keep``, which ``adaptive``
#: was built to match and never beat by a margin (docs/BENCHMARKS.md section 3), and beat by
#: 2-4% at 0.9x of seed-mix's peak, where ``adaptive`` offloaded on transient queues
DEFAULT_TOOL_WAIT_POLICY = "keep"
#: The fixed ``keep`` policy's retention quantile (also where offloaded KV is retained to).
KEEP_QUANTILE = 0.9
#: Quantiles at which ``adaptive`` tries a retention deadline (it also tries 0).
ADAPTIVE_QUANTILES = (0.5, 0.75, 0.9, 0.95, 0.99)


@dataclass(frozen=True, slots=True)
class ToolWait:
    """Everything a policy needs about one tool wait, as plain numbers (see module docstring)."""

    private_tokens: int
    shared_tokens: int
    latency: LatencyDistribution
    tiers: TierModel
    recompute_seconds_per_token: float
    pressure: float = 0.0
    call_tokens: float = 8192.0
    lru_horizon_s: float = 0.0
    dram_pressure: float = 0.0
    priority: float = 1.0
    readmit_seconds: float = 0.0
    gpu_pressure: float = 0.0
    write_back: bool = True

    def __post_init__(self) -> None:
        if self.private_tokens < 0 or self.shared_tokens < 0:
            raise ValueError("token counts must be >= 0")
        if not (0 <= self.pressure < math.inf and 0 <= self.dram_pressure < math.inf):
            raise ValueError("pressures must be finite and >= 0")
        if not self.call_tokens > 0:
            raise ValueError("call_tokens must be > 0")
        if self.lru_horizon_s < 0 or self.gpu_pressure < 0:
            raise ValueError("lru_horizon_s and gpu_pressure must be >= 0")
        if self.recompute_seconds_per_token < 0 or self.priority < 0:
            raise ValueError("recompute cost and priority must be >= 0")

    @property
    def hbm_price(self) -> float:
        """``pi_H``: delay-seconds others lose per HBM token-second this program holds."""
        return self.pressure / self.call_tokens

    @property
    def transfer_seconds(self) -> float:
        """``x``: one copy of the private KV between HBM and DRAM (``inf`` without room)."""
        if self.tiers.capacity(Tier.DRAM) < self.private_tokens:
            return math.inf
        return self.tiers.transfer_seconds(self.private_tokens, Tier.HBM, Tier.DRAM)

    @property
    def recompute_seconds(self) -> float:
        """``r``: prefill time of the private tokens."""
        return self.recompute_seconds_per_token * self.private_tokens


def pressure_from_queue(queued_tokens: float, free_tokens: float) -> float:
    """HBM pressure: queued demand the free memory cannot take, per free token (free counted
    as at least 1 token). Zero while the queue fits: held KV then costs nobody anything."""
    return max(0.0, queued_tokens - max(0.0, free_tokens)) / max(1.0, free_tokens)


def recompute_cost(wait: ToolWait) -> float:
    """``w * (r + d) + g * r``: this program waits for the prefill, everyone else loses the
    GPU time it burns."""
    r = wait.recompute_seconds
    return wait.priority * (r + wait.readmit_seconds) + wait.gpu_pressure * r


def offload_cost(wait: ToolWait) -> float:
    """``pi_H*P*x + pi_D*P*E[L] + w*(x + d)``; ``inf`` when DRAM cannot hold the KV."""
    x = wait.transfer_seconds
    if math.isinf(x):
        return math.inf
    p = wait.private_tokens
    dram = wait.dram_pressure / wait.call_tokens * p * wait.latency.mean()
    return wait.hbm_price * p * x + dram + wait.priority * (x + wait.readmit_seconds)


def keep_cost(wait: ToolWait, retain_seconds: float) -> float:
    """``pi_H*P*H(tau) + S(tau + T)*lapse`` for a soft retention of ``retain_seconds``."""
    return _keep_cost(wait, retain_seconds, _lapse_cost(wait))


def _lapse_cost(wait: ToolWait) -> float:
    """``lapse``: what a retention that ran out costs (written back and reloaded, or dropped
    and recomputed); the same for every ``tau``, so ``adaptive`` computes it once."""
    x = wait.transfer_seconds
    if wait.write_back and not math.isinf(x):
        price, p = wait.hbm_price, wait.private_tokens
        return price * p * x + x + wait.priority * (x + wait.readmit_seconds)
    return recompute_cost(wait)


def _keep_cost(wait: ToolWait, retain_seconds: float, lapse: float) -> float:
    p = wait.private_tokens
    price = wait.hbm_price
    held = price * p * expected_min(wait.latency, retain_seconds) if price > 0 else 0.0
    lost = wait.latency.survival(retain_seconds + wait.lru_horizon_s)
    if lost <= 0:
        return held
    return held + lost * lapse


def lru_horizon(evictable_tokens: float, alloc_tokens_per_s: float) -> float:
    """LRU characteristic time ``T``: seconds unused KV survives the current allocation churn."""
    if alloc_tokens_per_s <= 0:
        return math.inf
    return max(0.0, evictable_tokens) / alloc_tokens_per_s


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's choice: ``action``, how long to soft-retain the KV where it ends up, and the
    expected cost of each option (keys ``keep``/``offload``/``recompute``; keep at the retention
    the policy would use)."""

    action: CacheAction
    retain_seconds: float
    expected_costs: dict[str, float]

    @property
    def expected_cost(self) -> float:
        """Expected cost of the chosen action."""
        return self.expected_costs[str(self.action)]

    @property
    def context_kept_s(self) -> float:
        """How long the program's context stays protected under this decision (what a working
        set counts): its retention when kept or offloaded, none when dropped."""
        return 0.0 if self.action is CacheAction.RECOMPUTE else self.retain_seconds


@mypyc_attr(allow_interpreted_subclasses=True)
class ToolWaitPolicy(ABC):
    """Decides what happens to a program's private KV during a tool wait. Stateless."""

    name: ClassVar[str]
    summary: ClassVar[str]

    @abstractmethod
    def decide(self, wait: ToolWait) -> Decision:
        """The decision for ``wait``. Must not mutate anything."""


TOOL_WAIT_POLICIES: Registry[ToolWaitPolicy] = Registry("tool-wait policy")
register_tool_wait_policy = TOOL_WAIT_POLICIES.register
get_tool_wait_policy = TOOL_WAIT_POLICIES.create
available_tool_wait_policies = TOOL_WAIT_POLICIES.names


# the actions' values, read once: a decision's costs are keyed by them, and on the simulator's
# hot path (`.value` is enum's Python-level property; str() of a StrEnum is C)
_KEEP, _OFFLOAD, _RECOMPUTE = (
    str(CacheAction.KEEP),
    str(CacheAction.OFFLOAD),
    str(CacheAction.RECOMPUTE),
)


def _costs(wait: ToolWait, keep: float) -> dict[str, float]:
    """Every option's expected cost, keep's (at the policy's retention) given as ``keep``."""
    return {_KEEP: keep, _OFFLOAD: offload_cost(wait), _RECOMPUTE: recompute_cost(wait)}


class Keep(ToolWaitPolicy):
    """Soft-retain on HBM for a fixed quantile of the tool's latency (CacheTTL-style TTL)."""

    name = "keep"
    summary = "soft-retain the KV on HBM for a quantile of the tool latency"

    def __init__(self, quantile: float = KEEP_QUANTILE) -> None:
        self.quantile = quantile

    def decide(self, wait: ToolWait) -> Decision:
        tau = wait.latency.quantile(self.quantile)
        return Decision(CacheAction.KEEP, tau, _costs(wait, keep_cost(wait, tau)))


register_tool_wait_policy(Keep)


class Offload(ToolWaitPolicy):
    """Copy the private KV to DRAM now and reload it when the tool returns."""

    name = "offload"
    summary = "offload the private KV to DRAM, reload on resume"

    def decide(self, wait: ToolWait) -> Decision:
        tau = wait.latency.quantile(KEEP_QUANTILE)
        return Decision(CacheAction.OFFLOAD, tau, _costs(wait, keep_cost(wait, tau)))


register_tool_wait_policy(Offload)


class Recompute(ToolWaitPolicy):
    """Drop the private KV and prefill it again when the tool returns."""

    name = "recompute"
    summary = "drop the private KV, recompute it on resume"

    def decide(self, wait: ToolWait) -> Decision:
        return Decision(
            CacheAction.RECOMPUTE,
            0.0,
            _costs(wait, keep_cost(wait, wait.latency.quantile(KEEP_QUANTILE))),
        )


register_tool_wait_policy(Recompute)


class Adaptive(ToolWaitPolicy):
    """Cheapest expected option, with the retention deadline chosen over latency quantiles."""

    name = "adaptive"
    summary = "minimise expected cost over keep(tau), offload and recompute"

    def __init__(self, quantiles: tuple[float, ...] = ADAPTIVE_QUANTILES) -> None:
        # the fixed keep policy's quantile first, so ties keep its (Continuum-like) deadline
        self.quantiles = (KEEP_QUANTILE, *(q for q in quantiles if q != KEEP_QUANTILE))

    def decide(self, wait: ToolWait) -> Decision:
        taus = [wait.latency.quantile(q) for q in self.quantiles]
        taus.append(0.0)
        lapse = _lapse_cost(wait)
        keep = [_keep_cost(wait, tau, lapse) for tau in taus]
        best = min(range(len(taus)), key=keep.__getitem__)  # ties: the earlier quantile
        best_tau = taus[best]
        costs = _costs(wait, keep[best])
        # recompute only when host memory cannot take the context: a dropped context costs
        # GPU time when its program returns, at a load no decision can know now, while an
        # offload only uses the host link (measured: the one drop in 2,272 decisions of
        # seed-mix at 0.9x capacity cost cp-cache 2-4% of its P50/P95 against fcfs)
        options: list[CacheAction] = [CacheAction.KEEP, CacheAction.OFFLOAD]
        if math.isinf(costs[_OFFLOAD]):
            options.append(CacheAction.RECOMPUTE)
        action = min(options, key=lambda a: costs[str(a)])  # enum order breaks ties
        if action is CacheAction.KEEP:
            retain = best_tau
        elif action is CacheAction.OFFLOAD:
            retain = wait.latency.quantile(KEEP_QUANTILE)
        else:
            retain = 0.0
        return Decision(action, retain, costs)


register_tool_wait_policy(Adaptive)

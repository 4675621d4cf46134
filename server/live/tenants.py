"""Tenant-level limits: what one tenant may take of the server, whatever its programs' quotas.

Program quotas (tokens, tool calls, branches, wall time) bound one program; a tenant can still
open programs without end. Three limits bound the tenant (overview section 13), each ``None``
for unlimited, set for every tenant (``limits.tenant_*``) or per tenant (``limits.tenants``):

* **tokens per minute**: prompt tokens computed plus output tokens of every call of the
  tenant in the last 60 s; a call is refused (429, ``Retry-After`` until enough of the window
  has aged out) once the tenant has used its minute. Counted at each call's end; meanwhile
  each call in flight holds what it may cost (its uncached prompt and ``max_tokens``), so
  calls sent in parallel cannot all pass before the first ends (the last one admitted may
  still take the tenant past the limit by its own size);
* **concurrent programs**: running programs; a new one is refused (429, ``Retry-After: 5``);
* **concurrent calls**: LLM calls in flight (one program may run many at once, and the
  server's connection limit is everyone's); a call past it is refused (429,
  ``Retry-After: 1``);
* **stored bytes**: what the store keeps for the tenant (events as encoded, tool results,
  and the definitions of the tools it registered, which the tool gateway counts at its start
  and as they change), read from the store at start and counted as it grows; new programs,
  calls and nodes (a declared node, a tool call through the gateway or reported by the agent)
  and tool registrations that store more are refused (429) once it is reached (the operator
  raises the limit or exports and prunes);
* **priority ceiling**: a chat call's ``priority`` is at most the tenant's ``max_priority``
  (0 unless set), so a tenant cannot put its calls ahead of other tenants' by asking;
* **nodes per program**: a program's DAG size (10,000 unless set; program quotas are the
  client's to choose, so this is the server's bound on one program's memory and events): a
  node past it is refused (403: it will never pass for that program);
* **edges per program**: the parent links of a program's DAG (50,000 unless set): a node
  names at most 256 parents, but 10,000 nodes of 256 parents each would still be 2.56 million
  links to keep and to answer with the program; a node whose parents would take the program
  past it is refused as a node past the node limit (403).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.live.errors import ServiceError

WINDOW_S = 60.0
#: nodes one program may hold unless the tenant's limits say otherwise
DEFAULT_PROGRAM_NODES = 10_000
#: programs one tenant may run at once unless its limits say otherwise: each holds memory
#: until it ends or idles out (~75 KB, ``program_idle_s`` 300 s), so one tenant opening
#: programs in a loop held gigabytes; this bounds it near 1 GB
DEFAULT_CONCURRENT_PROGRAMS = 10_000
#: parent links one program's DAG may hold unless the tenant's limits say otherwise: five
#: parents a node on average at the node limit (an agent's fan-in is a few tool results)
DEFAULT_PROGRAM_EDGES = 50_000
_json = msgspec.json.Encoder().encode


class TenantLimitError(ServiceError):
    """A tenant-level limit is reached (429 with ``Retry-After``). The minute's tokens and the
    concurrent limits pass again on their own (retryable); the stored bytes and a program's
    nodes only when the operator acts (raised with ``retryable=False``)."""

    status = 429
    type = "tenant_limit"
    retryable = True


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """One tenant's limits (``None``: unlimited)."""

    tokens_per_minute: int | None = None
    concurrent_programs: int | None = DEFAULT_CONCURRENT_PROGRAMS
    concurrent_calls: int | None = None
    stored_bytes: int | None = None
    program_nodes: int | None = DEFAULT_PROGRAM_NODES
    program_edges: int | None = DEFAULT_PROGRAM_EDGES
    #: the highest chat ``priority`` its calls take (a higher one is taken as this): below it
    #: a tenant orders its own calls; above 0 it goes ahead of other tenants' calls, which is
    #: the operator's to grant
    max_priority: int = 0


@dataclass(slots=True)
class CallHold:
    """What one call in flight holds of its tenant's budgets, until :meth:`TenantBudgets.release`
    (once: a second release changes nothing)."""

    tenant: str
    tokens: int
    released: bool = False


@dataclass(slots=True)
class _Usage:
    window: deque[tuple[float, int]] = field(default_factory=deque)  # (when, tokens)
    window_tokens: int = 0
    in_flight_tokens: int = 0  # what the calls in flight may cost (``reserve``)
    in_flight_calls: int = 0
    stored_bytes: int = 0
    running_programs: int = 0  # opened (or reopened) and not ended, counted from events


_PROGRAM_ENDS = frozenset(
    (EventKind.PROGRAM_FINISHED, EventKind.PROGRAM_FAILED, EventKind.PROGRAM_CANCELLED)
)


def event_bytes(event: Event) -> int:
    """What ``event`` takes in the store, as ``Repository.stored_bytes_by_tenant`` counts it:
    a fixed 48 bytes, its ids, its data as JSON text."""
    ids = len(event.program_id) + len(event.node_id) + len(event.tenant)
    return 48 + ids + len(_json(dict(event.data)))


class TenantBudgets:
    """Per-tenant usage against :class:`TenantLimits`; every method runs on the event loop."""

    def __init__(
        self,
        default: TenantLimits | None = None,
        overrides: Mapping[str, TenantLimits] | None = None,
        stored: Mapping[str, int] | None = None,
    ) -> None:
        self.default = default or TenantLimits()
        self.overrides = dict(overrides or {})
        self._usage: dict[str, _Usage] = {}
        for tenant, nbytes in (stored or {}).items():
            self._of(tenant).stored_bytes = nbytes

    def limits(self, tenant: str) -> TenantLimits:
        return self.overrides.get(tenant, self.default)

    # -- checks (raise TenantLimitError) ----------------------------------------------------------
    def check_new_program(self, tenant: str, running: int) -> None:
        """Before a program of ``tenant`` is opened with ``running`` already running."""
        limits = self.limits(tenant)
        _check_count(tenant, "programs running", running, limits.concurrent_programs, 5)
        self._check_storage(tenant, limits)

    def check_call(self, tenant: str, now: float) -> None:
        """Before a call of ``tenant`` starts at ``now``."""
        limits = self.limits(tenant)
        calls = self._of(tenant).in_flight_calls
        _check_count(tenant, "calls in flight", calls, limits.concurrent_calls, 1)
        if limits.tokens_per_minute is not None:
            usage = self._of(tenant)
            self._expire(usage, now)
            if usage.window_tokens + usage.in_flight_tokens >= limits.tokens_per_minute:
                wait = self._retry_after(usage, limits.tokens_per_minute, now)
                raise TenantLimitError(
                    f"tenant {tenant!r} used {usage.window_tokens} tokens in the last minute "
                    f"and its calls in flight may use {usage.in_flight_tokens}, its limit is "
                    f"{limits.tokens_per_minute}",
                    field="limits.tokens_per_minute",
                    headers={"Retry-After": str(wait)},
                )
        self._check_storage(tenant, limits)

    def check_hold(self, tenant: str, tokens: int, now: float) -> None:
        """Before a call of ``tenant`` that may cost ``tokens`` (its uncached prompt plus
        ``max_tokens``) is held: the minute must have room for it beside what was charged and
        what the calls in flight hold. Checking only that the minute was not spent let any
        call in, however large (a 20,000-token call under a 2,000 limit, every minute). A
        call larger than the whole minute never passes: refused not to be retried."""
        limit = self.limits(tenant).tokens_per_minute
        if limit is None:
            return
        field = "limits.tokens_per_minute"
        if tokens > limit:
            raise TenantLimitError(
                f"this call may use {tokens} tokens (its uncached prompt plus max_tokens), "
                f"more than tenant {tenant!r}'s limit of {limit} a minute: lower max_tokens",
                field=field,
                retryable=False,
            )
        usage = self._of(tenant)
        self._expire(usage, now)
        if usage.window_tokens + usage.in_flight_tokens + tokens > limit:
            wait = self._retry_after(usage, limit - tokens, now)
            raise TenantLimitError(
                f"tenant {tenant!r} used {usage.window_tokens} tokens in the last minute "
                f"and its calls in flight may use {usage.in_flight_tokens}; this call may use "
                f"{tokens} more, its limit is {limit}",
                field=field,
                headers={"Retry-After": str(wait)},
            )

    def priority(self, tenant: str, asked: int) -> int:
        """The priority a call of ``tenant`` that asked for ``asked`` takes."""
        return min(asked, self.limits(tenant).max_priority)

    def check_new_node(self, tenant: str, program_id: str, nodes: int) -> None:
        """Before a node is added to ``program_id`` of ``tenant``, which holds ``nodes``."""
        limits = self.limits(tenant)
        if limits.program_nodes is not None and nodes >= limits.program_nodes:
            error = TenantLimitError(
                f"program {program_id!r} holds {nodes} nodes, the limit of tenant {tenant!r}'s "
                f"programs is {limits.program_nodes}",
                field="limits.program_nodes",
            )
            error.status = 403  # it will never pass for this program: no Retry-After
            error.retryable = False
            raise error
        self._check_storage(tenant, limits)

    def check_new_edges(self, tenant: str, program_id: str, edges: int, adding: int) -> None:
        """Before a node with ``adding`` parents is added to ``program_id`` of ``tenant``,
        whose DAG holds ``edges`` parent links."""
        limit = self.limits(tenant).program_edges
        if limit is not None and edges + adding > limit:
            error = TenantLimitError(
                f"program {program_id!r} holds {edges} parent links, a node with {adding} "
                f"parents would take it past the limit of tenant {tenant!r}'s programs, {limit}",
                field="limits.program_edges",
            )
            error.status = 403  # this node will never pass for this program: no Retry-After
            error.retryable = False
            raise error

    def check_stored(self, tenant: str) -> None:
        """Before more is stored for ``tenant`` outside a program (a tool registration)."""
        self._check_storage(tenant, self.limits(tenant))

    def _check_storage(self, tenant: str, limits: TenantLimits) -> None:
        stored = self._of(tenant).stored_bytes
        if limits.stored_bytes is not None and stored >= limits.stored_bytes:
            raise TenantLimitError(
                f"tenant {tenant!r} stores {stored} bytes, its limit is {limits.stored_bytes}",
                field="limits.stored_bytes",
                headers={"Retry-After": "3600"},
                retryable=False,  # until the operator raises the limit or prunes
            )

    # -- what happened ----------------------------------------------------------------------------
    def reserve(self, tenant: str, tokens: int) -> CallHold:
        """A call of ``tenant`` that may cost ``tokens`` is in flight: it counts against the
        tenant's minute and its concurrent calls until :meth:`release` of the hold."""
        hold = CallHold(tenant, max(tokens, 0))
        usage = self._of(tenant)
        usage.in_flight_tokens += hold.tokens
        usage.in_flight_calls += 1
        return hold

    def release(self, hold: CallHold | None) -> None:
        """The call of ``hold`` ended (its cost is charged apart); None or a released hold:
        nothing."""
        if hold is None or hold.released:
            return
        hold.released = True
        usage = self._of(hold.tenant)
        usage.in_flight_tokens -= hold.tokens
        usage.in_flight_calls -= 1

    def charge_tokens(self, tenant: str, tokens: int, now: float) -> None:
        """``tenant``'s call used ``tokens`` (computed prompt plus output) at ``now``."""
        if tokens <= 0:
            return
        usage = self._of(tenant)
        usage.window.append((now, tokens))
        usage.window_tokens += tokens
        self._expire(usage, now)

    def recharge(self, call_ends: Iterable[Event]) -> None:
        """A restart's last minute: each call end event charges its tenant what it was charged
        live (its computed prompt and charged output, at its time), so a restart does not
        hand every tenant a fresh minute."""
        for event in call_ends:
            tokens = number(event.data, "computed_tokens") + number(
                event.data, "charged_output_tokens"
            )
            self.charge_tokens(event.tenant, int(tokens), event.t)

    def charge_bytes(self, tenant: str, nbytes: int) -> None:
        """The store took ``nbytes`` more for ``tenant``."""
        if tenant and nbytes > 0:
            self._of(tenant).stored_bytes += nbytes

    def refund_bytes(self, tenant: str, nbytes: int) -> None:
        """The store keeps ``nbytes`` less for ``tenant`` (a tool's definition replaced by a
        smaller one: unlike events, a tool's row is rewritten in place)."""
        if tenant and nbytes > 0:
            usage = self._of(tenant)
            usage.stored_bytes = max(0, usage.stored_bytes - nbytes)

    def observe(self, event: Event) -> None:
        """An ``EventHub`` subscriber: every stored event counts to its tenant's bytes, and a
        ``tool.finished`` event the bytes of the result the gateway stored."""
        result = event.data.get("result_bytes")
        stored = result if isinstance(result, int) else 0
        self.charge_bytes(event.tenant, event_bytes(event) + stored)
        if event.kind is EventKind.PROGRAM_CREATED:
            self._of(event.tenant).running_programs += 1
        elif event.kind in _PROGRAM_ENDS:
            usage = self._of(event.tenant)
            usage.running_programs = max(usage.running_programs - 1, 0)

    def reopened(self, tenant: str) -> None:
        """A running program of ``tenant`` rebuilt from the store (no event says so)."""
        self._of(tenant).running_programs += 1

    def running_programs(self, tenant: str) -> int:
        """``tenant``'s programs opened and not ended: what ``concurrent_programs`` bounds,
        counted as the events go by (a scan of every program in memory per new program was
        too slow to run by default)."""
        return self._of(tenant).running_programs

    def usage(self, tenant: str, now: float) -> dict[str, int]:
        """``tokens_last_minute``, ``in_flight`` (what its calls in flight may cost) and
        ``stored_bytes`` of ``tenant`` now."""
        usage = self._of(tenant)
        self._expire(usage, now)
        return {
            "tokens_last_minute": usage.window_tokens,
            "in_flight": usage.in_flight_tokens,
            "stored_bytes": usage.stored_bytes,
        }

    # -- internals --------------------------------------------------------------------------------
    def _of(self, tenant: str) -> _Usage:
        usage = self._usage.get(tenant)
        if usage is None:
            usage = self._usage[tenant] = _Usage()
        return usage

    @staticmethod
    def _expire(usage: _Usage, now: float) -> None:
        while usage.window and usage.window[0][0] <= now - WINDOW_S:
            usage.window_tokens -= usage.window.popleft()[1]

    @staticmethod
    def _retry_after(usage: _Usage, limit: int, now: float) -> int:
        """Seconds until the tokens still in the window drop below ``limit`` (the calls in
        flight count as spent until they end: at least a second)."""
        left = usage.window_tokens + usage.in_flight_tokens
        for when, tokens in usage.window:
            left -= tokens
            if left < limit:
                return max(1, math.ceil(when + WINDOW_S - now))
        return 1


def _check_count(tenant: str, what: str, count: int, limit: int | None, retry_s: int) -> None:
    """429 ``limits.concurrent_<programs|calls>`` when ``count`` of ``what`` reached ``limit``."""
    if limit is not None and count >= limit:
        noun = what.split()[0]
        raise TenantLimitError(
            f"tenant {tenant!r} has {count} {what}, its limit is {limit}",
            field=f"limits.concurrent_{noun}",
            headers={"Retry-After": str(retry_s)},
        )

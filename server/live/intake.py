"""Admitting a chat call: program identity, quotas, node, prompt, ticket, submit.

A call names its program (explicitly, created on first sight) or joins an *inferred* one by its
prefix chain (:mod:`identity`). It is refused when the program has stopped (with the reason it
stopped: a quota answers 429/403, otherwise 409) or is over its wall-time or token quota. Its
``priority`` (higher runs sooner) lowers the ticket's policy key by ``PRIORITY_UNIT_S`` per
unit, like an operator boost.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentconsole.scheduler.events import Event, EventKind, Scalar
from agentconsole.scheduler.models.choice import ModelChoice
from agentconsole.scheduler.program import Node, NodeKind, Program
from agentconsole.scheduler.runtime import GenerationRequest, PrefixProbe, Prompt
from agentconsole.server.live.calls import LiveCall
from agentconsole.server.live.door import ClientGone
from agentconsole.server.live.errors import (
    ContextTooLong,
    Draining,
    InvalidRequest,
    ShuttingDown,
    Unavailable,
)
from agentconsole.server.live.identity import chain_hashes
from agentconsole.server.live.nodes import CHAT_PARENTS_FIELD
from agentconsole.server.live.prompt import encode_prompt, offered_tools, render_prompt
from agentconsole.server.live.tenants import TenantLimitError

if TYPE_CHECKING:
    from agentconsole.server.live.service import ProgramService

PRIORITY_UNIT_S = 1.0
#: a request whose text is longer is rendered and tokenized on a worker thread (a few MB take
#: seconds); a shorter one inline, where a thread hop would cost every call the API's overhead
INLINE_PROMPT_CHARS = 256 * 1024


@dataclass(frozen=True, slots=True)
class ChatCall:
    """A chat completion as the service sees it (the HTTP layer validated it)."""

    messages: Sequence[Mapping[str, Any]]
    max_tokens: int
    #: False: ``max_tokens`` is the server's default, not the client's: on a model whose
    #: context cannot hold it after the prompt, it shrinks to the room left (``fit_context``)
    max_tokens_given: bool = True
    #: the request's name of ``max_tokens`` (chat's ``max_completion_tokens`` when it sent
    #: that): a refusal names the field the client wrote
    max_tokens_field: str = "max_tokens"
    tools: Sequence[Mapping[str, Any]] | None = None
    tool_choice: object = "auto"
    #: OpenAI's ``reasoning_effort`` for the model's chat template (None: not asked)
    reasoning_effort: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    program_id: str | None = None
    node_id: str | None = None
    parent_ids: tuple[str, ...] | None = None
    deadline_s: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0
    ignore_eos: bool = False
    #: ``/v1/completions``: the prompt as is (``messages`` then only identify the call)
    prompt_text: str | None = None
    #: the request's ``model``: a served model's name, or ``auto`` (``modeldesk``)
    model: str | None = None
    #: the models the call may run on (the ``agentconsole`` object or header); None: ``model``
    model_candidates: tuple[str, ...] | None = None
    #: the node's role (else the program's ``role`` label) and the least quality tier it takes
    role: str | None = None
    min_tier: int | None = None
    #: ``parallel_tool_calls: false``: 1 (the answer's first tool call only); None: every one
    max_tool_calls: int | None = None
    #: OpenAI's repetition penalties and ``logit_bias`` (token id -> bias); None: not asked
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: Mapping[int, float] | None = None

    @property
    def prompt_field(self) -> str:
        """The request's field that holds the prompt, which a refusal of it names:
        ``prompt`` for ``/v1/completions``, else ``messages``."""
        return "prompt" if self.prompt_text is not None else "messages"


def check_logit_bias(logit_bias: Mapping[int, float] | None, vocab_size: int | None) -> None:
    """Refuse (422 naming the key) a ``logit_bias`` token id the model's vocabulary of
    ``vocab_size`` ids does not have (None: unknown, no check). Before the call reaches the
    engine: an id past the model's logits is not a request any engine should be handed (one
    engine process serves every tenant)."""
    if not logit_bias or vocab_size is None:
        return
    for token_id in logit_bias:
        if not 0 <= token_id < vocab_size:
            raise InvalidRequest(
                f"logit_bias names token id {token_id}, not in the model's vocabulary (ids 0"
                f" to {vocab_size - 1})",
                field=f"logit_bias.{token_id}",
            )


def fit_context(limit: int | None, prompt_tokens: int, chat: ChatCall) -> int:
    """The call's ``max_tokens`` in a served model's context of ``limit`` tokens (its
    runtime's ``max_context_tokens``; None: unknown, no check): the request's, or (no
    ``max_tokens`` given) the default shrunk to the room the prompt leaves. 400
    ``context_length_exceeded`` when they do not fit: naming ``max_tokens`` when the client's
    own value is what overflows, the prompt when it leaves no room for a single token. The
    message opens as OpenAI's does, which frameworks match to tell an overflow (LiteLLM)."""
    if limit is None or prompt_tokens + chat.max_tokens <= limit:
        return chat.max_tokens
    room = limit - prompt_tokens
    if not chat.max_tokens_given:
        # the default is the server's guess at a useful answer, not the client's ask: blaming
        # it would name a field the client never sent
        if room >= 1:
            return room
        raise ContextTooLong.of_context(
            limit,
            f"the prompt's {prompt_tokens} tokens leave no room for an answer",
            field=chat.prompt_field,
        )
    raise ContextTooLong.of_context(
        limit,
        f"the request asks {prompt_tokens + chat.max_tokens}: {prompt_tokens} prompt tokens"
        f" + {chat.max_tokens_field} {chat.max_tokens}",
        field=chat.max_tokens_field if room > 0 else chat.prompt_field,
    )


@dataclass(frozen=True, slots=True)
class _CallIdentity:
    """The program a call belongs to and where it goes in it (:meth:`CallIntake._identify`)."""

    program: Program
    #: the call's parent nodes: the client's, or the node its inferred chain reached (none for
    #: a new inferred program); None: the defaults (the tool nodes since the last LLM node)
    parents: tuple[str, ...] | None
    #: an inferred program's prompt-chain hashes, recorded again at the call's node once it is
    #: submitted; None: the client named its program
    chain: list[bytes] | None


@dataclass(frozen=True, slots=True)
class _QueuedCall:
    """A call the driver queued (:meth:`CallIntake._queue`), not yet handed to the runtime."""

    request: GenerationRequest
    node_id: str
    #: its prompt's tokens the engine does not hold (the probe's estimate): charged at its end
    uncached_prompt: int
    #: what the tenant's budgets hold while it is in flight: its uncached prompt + max_tokens
    held_tokens: int
    #: the most of its prompt another served model holds: reuse lost by the choice (else 0)
    cached_elsewhere: int
    #: when it was let in: its node's start, and the failed attempt's end if refused
    queued_at: float


def _choice_labels(choice: ModelChoice | None) -> dict[str, Scalar]:
    """``call.queued``'s fields for the desk's ``choice`` (none with one model served)."""
    if choice is None:
        return {}
    labels: dict[str, Scalar] = {"model": choice.chosen, "model_reason": choice.reason}
    if choice.chosen in choice.finish_s:
        labels["predicted_finish_s"] = choice.finish_s[choice.chosen]
    return labels


class CallIntake:
    """The chat-call entry of :class:`ProgramService`.

    :meth:`start` runs four steps in order, each refusing with the service's errors: identify
    the program, admit the call (quotas, the door, the tenant's limits again), queue it with the
    driver (node, model, probe, ticket) and submit it to the runtime. The refusals that come
    after something was taken give it back: every refusal after the door the program's door
    share, the runtime's refusal also the call's hold, its ticket and its node's attempt."""

    def __init__(self, service: ProgramService) -> None:
        self.service = service

    async def start(self, tenant: str, chat: ChatCall, gone: ClientGone | None = None) -> LiveCall:
        """Admit ``chat`` for ``tenant`` and submit it; raises the service's errors
        (:class:`ClientLeft` when ``gone`` resolves while the call waits at the door)."""
        await self._ready_to_serve()
        # The request's own faults first (an unknown model, a prompt the template refuses, one
        # over the context): refused before a program is opened, a call that never ran leaves
        # none. Each candidate model reads the prompt in its own format and tokens.
        request = (chat.messages, chat.tools)  # the tool schemas are rendered too
        if text_chars(request, chat.prompt_text, INLINE_PROMPT_CHARS) > INLINE_PROMPT_CHARS:
            # off the event loop: every tenant's streams and requests stood still meanwhile
            prompts, budgets = await asyncio.to_thread(self._prompts, chat)
        else:
            prompts, budgets = self._prompts(chat)
        identity = await self._identify(tenant, chat)
        now = await self._admit(tenant, identity.program, prompts, gone)
        try:
            queued = self._queue(tenant, chat, identity, prompts, budgets, now)
            call = self._submit(tenant, chat, identity.program, queued)
        except Exception:
            # past the door, refused on the way to the engine (its node withdrawn or rerun
            # meanwhile, its quota, the runtime): the program's door share is not held on for
            # a call that never ran, as after a tenant limit's refusal in ``_admit``
            await self._refused_past_the_door(identity.program.program_id)
            raise
        if identity.chain is not None:
            # the conversation's next call (this prompt plus the answer) joins it at this node
            pid = identity.program.program_id
            self.service.chains.record(tenant, identity.chain, pid, queued.node_id)
        return call

    async def _ready_to_serve(self) -> None:
        """Refuse while the server shuts down, an operator drains it or its store is dead; wait
        for a starting runtime (503 past the service's ready timeout). Changes nothing."""
        svc = self.service
        if svc.closing:
            raise ShuttingDown()
        if svc.draining:
            # the drain paused the runtime: a call let in now would wait, unanswered and
            # unbounded, until an operator ends it. Refused before anything is opened or held,
            # the client retries after ``Retry-After``; the calls let in before the drain run
            # when it ends
            raise Draining()
        # the call's events, its node and its tokens would be lost with a dead store (the
        # express lane reaches here without the HTTP layer's write gate, ``api/deps.py``)
        svc.require_store("calls")
        await self._wait_runtime()

    async def _identify(self, tenant: str, chat: ChatCall) -> _CallIdentity:
        """The call's program and parent nodes: the one it names (opened on first sight), or
        the inferred one its prompt chain continues (a new one opened, and its chain recorded
        so a refused call's retry finds it again). Refuses a foreign or unusable program id,
        and parents named for a program the tenant does not have (NotFound, as a foreign id)."""
        svc = self.service
        if chat.program_id is None:
            chain = chain_hashes(chat.messages)
            program, parents = self._inferred(tenant, chain, chat)
            if not program.nodes:
                # a new inferred program: its client's retry after a refusal (the door's 503,
                # a rate limit's 429) with the same messages finds it again, and its place
                svc.chains.record(tenant, chain, program.program_id, "")
            return _CallIdentity(program, parents, chain)
        await svc.check_new_id(tenant, chat.program_id, explicit=False)
        parents = chat.parent_ids
        if parents:
            # parents name nodes of a program the tenant already has; one it does not have is
            # refused before it is opened, and alike (NotFound) whether the id is new or
            # another tenant's, so the answer tells nothing of other tenants' ids
            svc.owned(tenant, chat.program_id)
        return _CallIdentity(svc.program_for_call(tenant, chat.program_id, chat), parents, None)

    async def _admit(
        self,
        tenant: str,
        program: Program,
        prompts: dict[str, Prompt],
        gone: ClientGone | None,
    ) -> float:
        """Let the call in and return the time it was let in: the program still runs and is
        within its quotas, the tenant within its limits, then the door (which may park the
        call; ``prompts``: the call's prompt per candidate model); the tenant's limits are
        checked again after the door's wait, a refusal there giving back the program's door
        share."""
        svc = self.service
        svc.require_running(program)
        await svc.check_quotas(program, time.time())
        svc.tenants.check_call(tenant, time.time())
        await self._door(program, prompts, gone)
        now = time.time()
        # again after the door's wait: calls admitted meanwhile hold their share of the minute
        # (from here to the call's reservation nothing awaits, so none passes unseen)
        # a drain that began while it awaited (the store, its quotas, the door) lets it on: it
        # arrived before the drain, as the calls queued in the engine then, and runs when the
        # drain ends (refusing it here would answer 503 after its wait, its program opened)
        try:
            svc.tenants.check_call(tenant, now)
        except TenantLimitError:
            await self._refused_past_the_door(program.program_id)
            raise
        return now

    async def _refused_past_the_door(self, program_id: str) -> None:
        """A call of ``program_id`` the door let in was refused before it reached the
        engine: the program keeps its door share only for the idle grace, not until it idles
        out (``ProgramDriver.call_refused``), and the driver settles it now."""
        self.service.driver.call_refused(program_id)
        await self.service.settled()

    def _queue(
        self,
        tenant: str,
        chat: ChatCall,
        identity: _CallIdentity,
        prompts: dict[str, Prompt],
        budgets: dict[str, int],
        now: float,
    ) -> _QueuedCall:
        """Queue the call with the driver: the tool nodes its messages answer end; its LLM node
        (or the node's next attempt) is checked, the model chosen and the engine probed; the
        call's cost is checked (:meth:`_check_cost`); only then is the node added and started
        and the ticket made (raised by the tenant's priority) and ``call.queued`` emitted, so
        a call refused leaves no node or attempt behind. Nothing awaits, so no other call
        passes between admission and here."""
        svc = self.service
        program = identity.program
        svc.tool_calls.answered(program.program_id, chat.messages)
        node = svc.nodes.llm_node(program, chat.node_id, identity.parents)
        pid, nid = program.program_id, node.node_id
        choice = self._choose(program, node, tenant, prompts, chat, budgets)
        model = choice.chosen if choice is not None else next(iter(prompts))
        prompt = prompts[model]
        max_tokens = budgets[model]  # the default may have shrunk to this model's room
        probe = svc.models.runtime_of(model).probe(pid, prompt, tenant)
        if svc.models.multi:  # each model's engine holds its own copy of a shared prefix
            probe = probe.on_engine(model)
        uncached = max(prompt.tokens - probe.hit_tokens, 0)
        self._check_cost(tenant, program, uncached, uncached + max_tokens)
        if nid not in program.nodes:
            svc.nodes.insert(program, node, now, parents_field=CHAT_PARENTS_FIELD)
        labels = _choice_labels(choice)
        elsewhere = 0
        if choice is not None:
            node.model_candidates, node.model_choice = tuple(prompts), choice
            elsewhere = svc.models.cached_elsewhere(pid, tenant, model, prompt)
        behind = svc.models.queued_behind(model, pid)
        ticket = svc.driver.queue_call(
            pid,
            nid,
            probe,
            now,
            private_tokens=prompt.private_tokens,
            queued_behind=behind,
            max_output_tokens=max_tokens,
        )
        # a tenant orders its own calls with it, but never past its ceiling: above it, one
        # tenant's calls would go ahead of every other tenant's
        priority = svc.tenants.priority(tenant, chat.priority)
        ticket.boost += priority * PRIORITY_UNIT_S
        svc.controller.start_node(pid, nid, now)
        request = GenerationRequest(
            ticket,
            prompt.text,
            max_tokens,
            chat.temperature,
            chat.top_p,
            chat.stop,
            cache_namespace=tenant,
            forced_output_tokens=max_tokens if chat.ignore_eos else None,
            prompt_ids=prompt.token_ids,
            sampling=prompt.sampling,
            model=model if labels else None,
            frequency_penalty=chat.frequency_penalty,
            presence_penalty=chat.presence_penalty,
            logit_bias=chat.logit_bias,
        )
        data = {"prompt_tokens": prompt.tokens, "priority": priority, **labels}
        if labels:
            svc.models.costs.sent(pid, nid, ticket.attempt, model)
        svc.hub.emit(Event(now, EventKind.CALL_QUEUED, pid, nid, ticket.attempt, tenant, data))
        return _QueuedCall(request, nid, uncached, uncached + max_tokens, elsewhere, now)

    def _check_cost(self, tenant: str, program: Program, uncached: int, held: int) -> None:
        """429 for a call whose ``uncached`` prompt would take the program past its token
        quota, or whose ``held`` tokens (its uncached prompt plus ``max_tokens``) the tenant's
        minute has no room for. Changes nothing."""
        self.service.check_call_tokens(program, uncached)
        self.service.tenants.check_hold(tenant, held, time.time())

    def _submit(
        self, tenant: str, chat: ChatCall, program: Program, queued: _QueuedCall
    ) -> LiveCall:
        """Hand the queued call to the runtime: the tenant's budgets hold its tokens while it is
        in flight and the service registers it. When the runtime refuses it (503), its hold is
        released, its ticket withdrawn and its node's attempt failed."""
        svc = self.service
        declared, _ = offered_tools(chat.tools, chat.tool_choice)
        hold = svc.tenants.reserve(tenant, queued.held_tokens)
        try:
            call = LiveCall(
                queued.request,
                svc.runtime,
                svc.accounting,
                tools=tuple(declared),
                max_tool_calls=chat.max_tool_calls,
                context_tokens=svc.models.runtime_of(queued.request.model).max_context_tokens,
                prompt_field=chat.prompt_field,
            )
        except Exception as error:
            svc.tenants.release(hold)
            self._runtime_refused(tenant, program, queued)
            raise Unavailable(f"the runtime refused the call: {error}") from error
        call.cached_elsewhere = queued.cached_elsewhere
        call.hold = hold
        call.pending_prompt = queued.uncached_prompt
        if call.finished:  # it ended within its submit: its end was accounted without
            svc.tenants.release(hold)  # its hold, and it is in flight no more
        else:
            svc.register(call)
        return call

    def _runtime_refused(self, tenant: str, program: Program, queued: _QueuedCall) -> None:
        """The runtime refused ``queued`` at its submit: its ticket is withdrawn, its node's
        attempt failed and ``call.failed`` emitted (its ``call.queued`` was: the log, and a
        restart, the metrics and the console reading it, see it end as the live server did,
        not queued for ever)."""
        svc = self.service
        ticket = queued.request.ticket
        svc.driver.withdraw(program.program_id, ticket.call_id)
        svc.nodes.fail_attempt(program, queued.node_id, queued.queued_at)
        data: dict[str, Scalar] = {
            "reason": "runtime refused",
            "outcome": "failed",
            "charged_output_tokens": 0,
        }
        pid, nid = program.program_id, queued.node_id
        svc.hub.emit(
            Event(time.time(), EventKind.CALL_FAILED, pid, nid, ticket.attempt, tenant, data)
        )

    def _prompts(self, chat: ChatCall) -> tuple[dict[str, Prompt], dict[str, int]]:
        """Candidate model -> the call's prompt in that model's format, and its ``max_tokens``
        there (``fit_context``); the candidates whose context cannot hold it left out (all of
        them: the first one's refusal). A ``logit_bias`` id outside any candidate's vocabulary
        is refused (``check_logit_bias``)."""
        desk = self.service.models
        names = desk.candidates(chat.model, chat.model_candidates)
        prompts: dict[str, Prompt] = {}
        budgets: dict[str, int] = {}
        refused: ContextTooLong | None = None
        for name in names:
            runtime = desk.runtime_of(name)
            # token ids are the model's own: each candidate's vocabulary must hold them
            check_logit_bias(chat.logit_bias, runtime.vocab_size)
            if chat.prompt_text is not None:
                prompt = encode_prompt(runtime.chat_format, chat.prompt_text)
            else:
                prompt = render_prompt(
                    runtime.chat_format,
                    chat.messages,
                    chat.tools,
                    chat.tool_choice,
                    chat.reasoning_effort,
                )
            try:
                budgets[name] = fit_context(runtime.max_context_tokens, prompt.tokens, chat)
            except ContextTooLong as error:
                refused = refused or error
                continue
            prompts[name] = prompt
        if not prompts and refused is not None:
            raise refused
        return prompts, budgets

    def _choose(
        self,
        program: Program,
        node: Node,
        tenant: str,
        prompts: dict[str, Prompt],
        chat: ChatCall,
        budgets: dict[str, int],
    ) -> ModelChoice | None:
        """The desk's choice of the model that runs the call, several models served (each
        candidate planned for at most the call's ``budgets`` there); None with one model
        served (that one runs it). Changes nothing: the caller records it on the node."""
        desk = self.service.models
        if not desk.multi:
            return None
        return desk.choose(
            program.program_id,
            tenant,
            prompts,
            role=chat.role or program.labels.get("role"),
            min_tier=chat.min_tier,
            expected_output=node.expected_output_tokens,
            max_output=budgets,
        )

    async def _door(
        self, program: Program, prompts: dict[str, Prompt], gone: ClientGone | None
    ) -> None:
        """Let the call through the program door: a new program when the driver starts it
        (sized by its first candidate's prompt, less what :meth:`_held_at_door` credits), a
        started one at once unless the started programs outgrew memory and the driver parks
        it at this call boundary (``DoorRoom.wait``: 503 after the wait limit)."""
        svc = self.service
        if not svc.driver.door_open:
            return
        pid = program.program_id
        if program.completed_calls:  # a started program at its next call boundary
            parked = svc.driver.at_boundary(pid, svc.view, time.time())
            if parked is None:
                return
            try:
                await svc.apply(parked)  # its context offloaded or dropped while it waits
            except asyncio.CancelledError:
                # its caller left while the context moved, before it waited: it keeps its
                # place for the retry and holds no newcomer up meanwhile, as a call that
                # gives up waiting does (``DoorRoom.wait``)
                svc.door.on_leave(pid)
                raise
            if not svc.driver.door.is_returning(pid):
                # let in (or ended) while the actions ran: no start is coming to wait for
                svc.require_running(program)
                return
        elif any(node.kind is NodeKind.LLM and node.attempts for node in program.nodes.values()):
            # a call of it ran (or runs) already: started, or from before a restart, with
            # nothing finished yet and no boundary to park it at; a program that only ran
            # tools, or declared its LLM nodes ahead, comes to the door with its first call
            return
        else:
            prompt = next(iter(prompts.values()))
            held = self._held_at_door(pid, program.tenant, prompt, prompts)
            memory = svc.runtime.memory()
            tokens, slots = memory.memory_tokens, memory.batch_slots
            now = time.time()
            if svc.driver.arrive(
                pid, prompt.private_tokens, tokens, now, held=held, batch_slots=slots
            ):
                return
        await svc.door.wait(pid, gone)
        if svc.closing:  # woken by the server's shutdown
            raise ShuttingDown()
        svc.require_running(program)  # it may have been cancelled while at the door

    def _held_at_door(
        self, program_id: str, tenant: str, prompt: Prompt, prompts: dict[str, Prompt]
    ) -> PrefixProbe:
        """What the engines hold of a new program's first ``prompt``, for the door; changes
        nothing. One model: its runtime's probe (with ``--dp``, the replicas' rule). Several:
        the call may run on any candidate of ``prompts``, so what the least of them holds of
        its own prompt (``ModelDesk.held_for_new_program``, the rule ``bench --models``
        credits by); the fleet's own probe asks only the default model."""
        svc = self.service
        if not svc.models.multi:
            return svc.runtime.probe(program_id, prompt, tenant)
        held = svc.models.held_for_new_program(program_id, tenant, prompts)
        return PrefixProbe(prompt.tokens, cached_tokens=held)

    def _inferred(
        self, tenant: str, hashes: list[bytes], chat: ChatCall
    ) -> tuple[Program, tuple[str, ...] | None]:
        svc = self.service
        link = svc.chains.find(tenant, hashes)
        if link is not None:
            program = svc.controller.programs.get(link[0])
            if program is not None and not program.state.terminal and program.tenant == tenant:
                linked = program.nodes.get(link[1])
                # a node cancelled on request (withdrawn) takes no child: the conversation goes
                # on past it, its parents defaulted as for an agent that names none
                if linked is None or linked.withdrawn:
                    return program, None
                return program, (linked.node_id,)
        labels = {**chat.labels, "inferred": "true"}
        pid = f"inferred-{uuid.uuid4().hex[:12]}"
        return svc.open_program(tenant, pid, deadline_s=chat.deadline_s, labels=labels), ()

    async def _wait_runtime(self) -> None:
        ready = self.service.runtime_ready
        if ready.is_set():
            return
        failure = self.service.runtime_failure
        if failure is not None:
            raise Unavailable(f"the runtime failed to start: {failure}")
        try:
            async with asyncio.timeout(self.service.ready_timeout_s):
                await ready.wait()
        except TimeoutError:
            raise Unavailable(
                "the runtime is still starting", headers={"Retry-After": "5"}
            ) from None


def text_chars(messages: object, prompt_text: str | None, enough: int) -> int:
    """The characters of the strings in ``messages`` (any nesting of mappings and lists: the
    contents, their parts, tool calls' arguments, tool schemas) plus ``prompt_text``'s,
    counted until past ``enough`` (a bound for :data:`INLINE_PROMPT_CHARS`: the walk stops
    there)."""
    total = len(prompt_text or "")
    pending: list[object] = [messages]
    while pending and total <= enough:
        item = pending.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return total

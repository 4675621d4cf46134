"""What travels with a request into SGLang's scheduler process: the ticket and the cache salt.

Owns the namespaced layout of ``sampling_params.custom_params`` (one key, ``agentconsole``, so
other users of ``custom_params`` are left alone), the static ``priority`` a request carries,
and the ``cache_salt`` that scopes a request's radix-cache entries to its tenant.

Pure Python: the adapter (server process) encodes, the plugin (scheduler process) decodes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket

PARAMS_KEY = "agentconsole"
WIRE_VERSION = 1
PUBLIC_SALT = "public"
#: the ``meta_info`` key (SGLang's ``customized_info``) under which the plugin reports the
#: seconds a call has waited in SGLang's queue (every spell, after each): SGLang's own
#: ``queue_time`` is there only with its metrics on, which register once per process
QUEUE_TIME_KEY = "agentconsole_queue_s"
#: bound on the static priority so SGLang's per-priority metric labels stay few
PRIORITY_LIMIT = 1000


class CallKind(StrEnum):
    """``call``: an LLM call of a program; ``probe``: the adapter's health probe (runs first)."""

    CALL = "call"
    PROBE = "probe"


@dataclass(frozen=True, slots=True)
class WireTicket:
    """A decoded ticket plus how to read its times in the scheduler process.

    ``clock_offset`` is ``ticket clock - time.time()`` measured by the adapter at submit, so
    the plugin computes the ticket-clock "now" as ``time.time() + clock_offset``. ``sent`` is
    the sender's wall clock at submit: the same number on every rank that receives the
    request, so tensor-parallel ranks tell time by it (``lockstep.DecisionClock``) rather than
    by their own clocks (None: an older sender).
    """

    ticket: CallTicket
    clock_offset: float = 0.0
    kind: CallKind = CallKind.CALL
    sent: float | None = None

    def now(self, wall: float) -> float:
        """The ticket clock's reading when the wall clock reads ``wall``."""
        return wall + self.clock_offset


def encode(
    ticket: CallTicket, *, clock_offset: float, kind: CallKind = CallKind.CALL
) -> dict[str, Any]:
    """``custom_params`` for a request of ``ticket`` (JSON scalars and dicts only), stamped
    with the wall clock now (``WireTicket.sent``)."""
    return {
        PARAMS_KEY: {
            "v": WIRE_VERSION,
            "kind": kind.value,
            "clock_offset": clock_offset,
            "sent": time.time(),
            "ticket": ticket.to_params(),
        }
    }


def decode(custom_params: object) -> WireTicket | None:
    """The ticket in ``custom_params``, or None when there is none or it is malformed.

    Never raises: the scheduler must keep running whatever a client put in ``custom_params``.
    """
    if not isinstance(custom_params, dict):
        return None
    body = custom_params.get(PARAMS_KEY)
    if not isinstance(body, dict) or body.get("v") != WIRE_VERSION:
        return None
    raw = body.get("ticket")
    if not isinstance(raw, dict):
        return None
    try:
        ticket = CallTicket.from_params(raw)
        kind = CallKind(body.get("kind", CallKind.CALL.value))
        offset = float(body.get("clock_offset", 0.0))
        sent = float(body["sent"]) if "sent" in body else None
    except (TypeError, ValueError):
        return None
    if not math.isfinite(offset):
        offset = 0.0
    if sent is not None and not math.isfinite(sent):
        sent = None
    return WireTicket(ticket, offset, kind, sent)


def sampling_params(
    request: GenerationRequest, *, clock_offset: float, kind: CallKind = CallKind.CALL
) -> dict[str, Any]:
    """SGLang's ``sampling_params`` of a call, the ticket in ``custom_params``. The in-process
    adapter sends them as they are; over HTTP (``/v1/completions``) they are top-level fields
    of the body, ``max_new_tokens`` named ``max_tokens``."""
    temperature, top_p = request.temperature, request.top_p
    if top_p <= 0.0:
        # OpenAI's ``top_p: 0`` keeps only the likeliest token, i.e. greedy decoding; SGLang
        # refuses it (``SamplingParams.verify`` wants 0 < top_p) and decodes greedily at
        # temperature 0 (its top_k 1), whatever temperature the client sent beside it
        temperature, top_p = 0.0, 1.0
    sampling: dict[str, Any] = {
        "max_new_tokens": request.max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "custom_params": encode(request.ticket, clock_offset=clock_offset, kind=kind),
    }
    if request.stop:
        sampling["stop"] = list(request.stop)
    # OpenAI's penalties and logit_bias only when asked (SGLang's defaults mean none; a
    # logit_bias sent at all, even empty, costs the batch a bias row over the vocabulary)
    if request.frequency_penalty is not None:
        sampling["frequency_penalty"] = request.frequency_penalty
    if request.presence_penalty is not None:
        sampling["presence_penalty"] = request.presence_penalty
    if request.logit_bias:
        # SGLang's keys are token ids as strings (as OpenAI's JSON)
        sampling["logit_bias"] = {str(token): bias for token, bias in request.logit_bias.items()}
    sampling.update(request.sampling)  # what the chat format needs: tool_choice, ...
    if request.forced_output_tokens is not None:  # benchmarks: exact output lengths
        sampling["max_new_tokens"] = max(1, request.forced_output_tokens)
        sampling["ignore_eos"] = True
    return sampling


def request_salt(request: GenerationRequest) -> str:
    """The ``cache_salt`` of ``request`` (:func:`cache_salt` of its namespace and prompt)."""
    return cache_salt(
        request.cache_namespace,
        prompt_chars=len(request.prompt),
        public_prefix_chars=request.public_prefix_chars,
    )


def static_priority(ticket: CallTicket) -> int:
    """The ``priority`` sent with the request: the operator/client boost, rounded and bounded.

    The plugin orders by policy keys and ignores it; it matters when the plugin is disabled and
    stock SGLang runs with ``--enable-priority-scheduling`` (higher runs first), and it labels
    SGLang's per-priority metrics (bounded so the label set stays small).
    """
    boost = ticket.boost if math.isfinite(ticket.boost) else 0.0
    return max(-PRIORITY_LIMIT, min(PRIORITY_LIMIT, round(boost)))


def cache_salt(namespace: str, *, prompt_chars: int, public_prefix_chars: int) -> str:
    """The ``cache_salt`` of a request: its tenant's namespace, or ``public``.

    SGLang 0.5.23 puts ``cache_salt`` into every radix key of the request (the whole tree path,
    ``mem_cache/common.py:_req_radix_key``), so salting is all-or-nothing per request: a prefix
    the platform marks public is shared across tenants only when the *whole* prompt is public.
    A partly public prompt is salted with its tenant, so its public part is cached once per
    tenant. ``namespace`` must come from the authenticated tenant, never from the client.
    """
    if prompt_chars > 0 and public_prefix_chars >= prompt_chars:
        return PUBLIC_SALT
    return f"t:{namespace}"

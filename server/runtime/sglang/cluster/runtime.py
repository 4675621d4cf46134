"""``serve --runtime sglang-router``: several SGLang servers behind sglang-router, one runtime.

Nothing here starts engines: the operator starts each worker and the router (``launch``,
docs/DEPLOY.md) and names them (``RuntimeOptions.extra``: ``router``, ``workers``; ``model``:
a local copy of the model's tokenizer and chat template, for rendering prompts).

* A call is a streamed ``/v1/completions`` request to the router (``completions``): the
  rendered prompt, ``rid`` = call id, the ticket in ``custom_params`` (the same encoding as the
  in-process adapter), ``priority``, ``cache_salt``, and the program id in
  ``X-SMG-Routing-Key``: the router's ``manual`` policy keeps every call of a program on the
  worker (and, ``--dp-aware``, the rank) its first call was assigned to, where its KV is.
* Operator settings (policy, drain, boosts, re-prioritisation, retention hints, fairness) are
  the in-process runtime's ``LiveControl`` operations on the same ``ControlState``, pushed to
  every worker's plugin endpoint instead of written to a local file (``workers``); the
  plugin's reports come back the same way, merged as data-parallel ranks' are
  (``rank_status``), so ``memory``, ``context_of``, ``probe`` and ``snapshot`` are the
  adapter's (``KVView``).
* Abort goes to every worker by exact rid (the router has none); a worker that does not hold
  the rid ignores it. It is repeated until the call's stream ends, since a worker drops an
  abort for a rid it has not registered yet. An operator preempt retracts the batch of the
  worker running the call only (when known), and reports whether any worker retracted.
* The context length is the workers' (``max_context_tokens``) and the vocabulary the local
  model folder's config (``vocab_size``), so the intake refuses a prompt over the one and a
  ``logit_bias`` id past the other before sending; a request the router or a worker refuses
  as faulty (400) ends as the in-process engine's own abort of a call does
  (``engine_abort_status``), not as a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx

from agentconsole.scheduler.events import EventSink
from agentconsole.scheduler.policies import DEFAULT_POLICY, get_policy
from agentconsole.scheduler.runtime import (
    ChatFormat,
    GenerationRequest,
    RuntimeSnapshot,
    ServicePrior,
)
from agentconsole.server.live.chatformat import ChatMLFormat
from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sglang import symbols, wire
from agentconsole.server.runtime.sglang.chat_template import build_format
from agentconsole.server.runtime.sglang.cluster.completions import (
    COMPLETIONS_PATH,
    ChunkReader,
    completion_body,
    routing_headers,
    sse_events,
)
from agentconsole.server.runtime.sglang.cluster.node_api import NODE_HEADER
from agentconsole.server.runtime.sglang.cluster.options import ClusterSettings, cluster_from_options
from agentconsole.server.runtime.sglang.cluster.workers import PushedControl, Workers
from agentconsole.server.runtime.sglang.contexts import ProgramContexts
from agentconsole.server.runtime.sglang.control import ControlState
from agentconsole.server.runtime.sglang.engine_config import EngineSettings
from agentconsole.server.runtime.sglang.kvview import KVView
from agentconsole.server.runtime.sglang.lastcalls import LastCalls
from agentconsole.server.runtime.sglang.live_control import LiveControl, runs_now
from agentconsole.server.runtime.sglang.rank_status import merge_placements, merge_statuses
from agentconsole.server.runtime.sglang.ranks import RankRouter
from agentconsole.server.runtime.sglang.snapshot import DEVICE_TIER, build_snapshot
from agentconsole.server.runtime.sglang.status import Placement, SchedulerStatus
from agentconsole.server.runtime.sglang.stream import SGLangStream
from agentconsole.server.runtime.sglang.telemetry import Telemetry

logger = logging.getLogger("agentconsole.sglang.cluster")
_GET_TOKENIZER = "sglang.srt.utils.hf_transformers.tokenizer:get_tokenizer"
_ABORT_RETRY_S = 0.2
_ABORT_DEADLINE_S = 30.0
#: the answers that blame the request itself (SGLang: 400 for a prompt over the context or a
#: bad parameter): the call ends refused, not failed. 404 (the served model's name, our
#: setting), 408 and 429 (load) are not the client's fault: they stay failures to retry
_REQUEST_FAULTS = frozenset({400, 413, 422})


class RouterRuntime(LiveControl, KVView):
    """See the module docstring. Create with :func:`create_runtime` or directly."""

    name = "sglang-router"

    def __init__(
        self,
        settings: EngineSettings,
        cluster: ClusterSettings,
        *,
        policy: str = DEFAULT_POLICY,
        control: ControlState | None = None,
        clock: Any = time.time,
        event_sink: EventSink | None = None,
    ) -> None:
        get_policy(policy)  # KeyError for an unknown name, before anything starts
        self.settings = settings
        self.cluster = cluster
        self.policy_name = policy
        self.clock = clock
        self.workers = Workers(cluster.worker_urls)
        initial = control or ControlState()
        initial.policy = policy
        self.control = PushedControl(self.workers, initial)
        self.engine: Any = None  # the router's HTTP client, once started
        self.router = None  # placement is the router's (``RankRouter`` is in-process only)
        self._calls: dict[str, SGLangStream] = {}
        # which worker served each node: only its bookkeeping is used (the router places)
        self._served_by = RankRouter(len(cluster.worker_urls))
        self.telemetry = Telemetry(
            event_sink, self.read_status, ProgramContexts(), read_ranks=self.workers.statuses
        )
        self._gate = asyncio.Event()
        self._gate.set()
        self._retention_seq = 0
        self._hit_tokens = 0
        self._last_calls = LastCalls()
        self._tokenizer: Any = None
        self._format: ChatFormat | None = None
        self._context_len: int | None = None
        self._vocab_size: int | None = None

    @property
    def chat_format(self) -> ChatFormat:
        return self._format if self._format is not None else ChatMLFormat()

    @property
    def max_context_tokens(self) -> int | None:
        """The served context length (prompt plus output), as the workers' engines report it
        (``Workers.context_length``, read at start); None before, or when none reported it.
        The intake refuses a longer request before it is sent."""
        return self._context_len

    @property
    def vocab_size(self) -> int | None:
        """The served model config's vocabulary size (``model_vocab_size`` of the local model
        folder, read at start): the bound the workers check ``logit_bias`` ids against, so the
        intake refuses an id past it with 422 before anything runs, as on the in-process
        engine (a worker's own refusal comes only once the call is sent). None before start,
        or when the folder holds no model config (then the workers' refusal stands)."""
        return self._vocab_size

    def service_prior(self) -> ServicePrior | None:
        """None: the workers' speed is learned from the calls they serve."""
        return None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the tokenizer, then wait for the router and every worker's plugin."""
        if self.engine is not None:
            return
        get_tokenizer = symbols.load(_GET_TOKENIZER)
        self._tokenizer = await asyncio.to_thread(get_tokenizer, str(self.settings.model_path))
        self._format = await asyncio.to_thread(
            build_format, self._tokenizer, self.settings.tool_call_parser
        )
        self._vocab_size = await asyncio.to_thread(model_vocab_size, self.settings.model_path)
        client = httpx.AsyncClient(
            base_url=self.cluster.router_url, timeout=httpx.Timeout(None, connect=5.0)
        )
        deadline = time.monotonic() + self.cluster.ready_timeout_s
        self.workers.start()
        while not (await _answers(client, "/health") and self._all_reported()):
            if time.monotonic() > deadline:
                await client.aclose()
                await self.workers.close()
                raise RuntimeError(
                    f"sglang-router at {self.cluster.router_url} or a worker's agentconsole "
                    "plugin did not answer (workers need AGENTCONSOLE_SGLANG_NODE_API=1)"
                )
            await asyncio.sleep(0.2)
        self._context_len = await self.workers.context_length()
        self.engine = client
        self.workers.push(self.control.state)
        self.telemetry.start()

    def _all_reported(self) -> bool:
        return all(v.statuses and all(v.statuses) for v in self.workers.views)

    async def stop(self) -> None:
        """End every call (aborted on the workers), then close the clients."""
        await self.telemetry.stop()
        calls = list(self._calls.values())
        await asyncio.gather(*(self.abort(c.rid) for c in calls), return_exceptions=True)
        for call in calls:
            if call.task is not None:
                call.task.cancel()
        await asyncio.gather(*(c.task for c in calls if c.task is not None), return_exceptions=True)
        self._calls.clear()
        client, self.engine = self.engine, None
        if client is not None:
            await client.aclose()
            await self.workers.close()

    # -- calls -------------------------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> SGLangStream:
        if self.engine is None:
            raise RuntimeError("the sglang-router runtime is not started")
        call = self._new_call(request)
        self._launch(call, self._pump(call), "sglang-router")
        return call

    async def _pump(self, call: SGLangStream, kind: wire.CallKind = wire.CallKind.CALL) -> None:
        error: BaseException | None = None
        try:
            await self._gate.wait()
            if call.aborting:
                return
            body = completion_body(
                call.request,
                model=self.cluster.served_model,
                clock_offset=self.clock() - time.time(),
                kind=kind,
            )
            headers = routing_headers(call.request)
            reader = ChunkReader()
            async with self.engine.stream(
                "POST", COMPLETIONS_PATH, json=body, headers=headers
            ) as response:
                if response.status_code != 200:
                    await self._refused(call, response)
                    return
                self._served_on(call, response.headers.get(NODE_HEADER, ""))
                async for event in sse_events(response.aiter_bytes()):
                    chunk = reader.read(event)
                    if chunk is not None:
                        self.telemetry.on_chunk(call, chunk)
                        call.feed(chunk)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            error = err
        finally:
            self._settle(call, error)

    async def _refused(self, call: SGLangStream, response: httpx.Response) -> None:
        """The router or worker refused ``call`` before its stream began. A request at fault
        (``_REQUEST_FAULTS``) ends the call as the engine's own abort of it, with the status
        and the worker's message (the client gets a 400: a retry would be refused alike, as
        the in-process engine's aborts are answered); anything else raises (a 503 to retry)."""
        status = response.status_code
        detail = (await response.aread()).decode(errors="replace")[:500]
        if status not in _REQUEST_FAULTS:
            raise RuntimeError(f"router answered {status}: {detail}")
        reason = {"type": "abort", "status_code": status, "message": _error_message(detail)}
        call.meta = {"finish_reason": reason}

    def _served_on(self, call: SGLangStream, node: str) -> None:
        """The worker that answered (its response header): the call's "rank"."""
        call.rank = self.workers.index_of_node(node)
        if call.rank is not None:
            t = call.request.ticket
            self._served_by.note(t.program_id, t.node_id, call.rank)

    def node_ranks(self, program_id: str) -> dict[str, int]:
        """Node id -> the index (in the worker list) of the worker that ran its latest
        attempt; the API shows it as the node's ``dp_rank``."""
        return self._served_by.node_ranks(program_id)

    async def abort(self, call_id: str) -> bool:
        """Abort by exact id on every worker; True once the call's stream ended."""
        call = self._calls.get(call_id)
        if call is None or call.ended:
            return False
        call.begin_abort()
        deadline = time.monotonic() + _ABORT_DEADLINE_S
        while not call.ended:
            if call.task is not None and not self._gate.is_set():
                call.task.cancel()  # held by the drain gate: it never reached a worker
                break
            await self.workers.abort(call_id)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(call.result()), _ABORT_RETRY_S)
            if time.monotonic() > deadline and call.task is not None:
                call.task.cancel()  # closing the stream makes the worker abort it too
        if call.task is not None:
            with contextlib.suppress(BaseException):
                await call.task
        # settled here too: a task cancelled before its first step never ran its own
        # ``finally`` (the call stayed in the books, its stream never ended); settling twice
        # does nothing
        self._settle(call, None)
        return True

    async def preempt(self, call_id: str) -> bool:
        """As the in-process runtime (``LiveControl.preempt``), the retraction asked over HTTP
        of the worker running the call (every worker when that is not known). False when the
        call is not running (``runs_now``: not started, or waiting again after an earlier
        preempt); False, and the call's demotion withdrawn, when no worker retracted its
        batch: the call runs on."""
        call = self._calls.get(call_id)
        if call is None or call.ended or not runs_now(call, self.read_status()):
            return False
        self.control.state.preempted[call_id] = time.time()
        await self._ack(self.control.write(ack=True))
        holder = self._holder(call)
        paused = await self.workers.post_all("/pause_generation", {"mode": "retract"}, only=holder)
        # resumed even where the pause seemed to fail: a pause that timed out may have
        # happened, and a worker left paused would stall every call it holds
        await self.workers.post_all("/continue_generation", {}, only=holder)
        if any(paused):
            return True
        # not retracted: the demotion would only requeue the call at a later retraction
        if self.control.state.preempted.pop(call_id, None) is not None:
            self.control.write()
        return False

    def _holder(self, call: SGLangStream) -> int | None:
        """The worker running ``call``: the one that answered its request, else the one whose
        status lists it (None: not known)."""
        if call.rank is not None:
            return call.rank
        return self.workers.worker_of_call(call.rid)

    async def flush_cache(self) -> bool:
        """Empty every worker's radix cache (each refuses unless idle)."""
        return all(await self.workers.post_all("/flush_cache", {}))

    async def healthy(self) -> bool:
        return (
            self.engine is not None
            and await _answers(self.engine, "/health")
            and await self.workers.healthy()
        )

    # -- observation --------------------------------------------------------------------------
    def read_status(self) -> SchedulerStatus | None:
        """The ranks of every worker that answers, merged (``Workers.status``)."""
        return self.workers.status()

    def read_placement(self, program_id: str | None = None) -> Placement | None:
        """The sweep of the worker holding ``program_id``, else every worker's merged."""
        worker = self.workers.worker_of_program(program_id) if program_id else None
        views = self.workers.views if worker is None else [self.workers.views[worker]]
        present = [p for v in views for p in v.live_placements()]
        return merge_placements(present) if present else None

    def _tokenize(self, text: str) -> list[int] | None:
        return None if self._tokenizer is None else list(self._tokenizer.encode(text))

    def metrics_dir(self) -> Path | None:
        """None: SGLang's metrics are written by the workers, other processes (on other
        hosts) that each serve their own ``/metrics``; there is no folder here to merge."""
        return None

    def snapshot(self) -> RuntimeSnapshot:
        snap = build_snapshot(
            self.name,
            self.policy_name,
            self.read_status(),
            list(self._calls.values()),
            hit_tokens=self._hit_tokens,
            paused=self.control.state.paused or not self._gate.is_set(),
            placement=self.read_placement(),
        )
        for i, view in enumerate(self.workers.views):  # each worker's KV, as ranks' are shown
            present = [st for st in view.live_statuses() if st is not None]
            if present:
                snap.tiers[f"{DEVICE_TIER}.rank{i}"] = merge_statuses(present).device_tier()
        return snap


def model_vocab_size(model_path: Path) -> int | None:
    """The vocabulary size of the model config in ``model_path``, read as SGLang's
    ``ModelConfig.vocab_size`` is (the text model's config: a multimodal model's language
    model); None when the folder has no readable config (a tokenizer-only copy)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(model_path))
    except (OSError, ValueError, KeyError) as error:
        logger.warning("no model config in %s (logit_bias ids unchecked): %s", model_path, error)
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "vocab_size", None)
    return size if isinstance(size, int) and size > 0 else None


def _error_message(body: str) -> str:
    """The message of an error answer: SGLang's ``{"message": ...}``, or the OpenAI-style
    ``{"error": {"message": ...}}`` of the router; else the body as it is."""
    try:
        data = json.loads(body)
    except ValueError:
        return body
    if not isinstance(data, dict):
        return body
    inner = data.get("error")
    found = inner.get("message") if isinstance(inner, dict) else data.get("message")
    return str(found) if found else body


async def _answers(client: httpx.AsyncClient, path: str) -> bool:
    try:
        return (await client.get(path, timeout=5.0)).is_success
    except httpx.HTTPError:
        return False


def create_runtime(options: RuntimeOptions) -> RouterRuntime:
    """The runtime registry's factory (``serve --runtime sglang-router``); see
    ``options.cluster_from_options`` for what it reads."""
    settings, cluster, control = cluster_from_options(options)
    return RouterRuntime(
        settings,
        cluster,
        policy=options.policy,
        control=control,
        event_sink=options.extra.get("event_sink"),
    )


__all__ = ["ClusterSettings", "RouterRuntime", "create_runtime"]

"""The control plane's side of every SGLang worker behind the router (``node_api``).

:class:`Workers` keeps one view per worker: its ranks' latest plugin statuses and placement
sweeps, polled every ``poll_s`` from ``GET /agentconsole/status``; a worker whose last poll
failed counts for nothing (no status, no placement) until it answers again. Operator settings
are pushed to every worker (``POST /agentconsole/control``) by one task that always sends the
newest state, so a burst of changes costs one request per worker, and a worker that missed one
(it was down) gets the state again at the next change or poll. Abort, pause and continue go to
every worker (the router has no route for them, and a worker ignores a rid it does not hold);
a preempt's pause goes only to the worker holding the call, when that is known.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentconsole.server.live.periodic import Periodic
from agentconsole.server.runtime.sglang.cluster.node_api import CONTROL_PATH, STATUS_PATH
from agentconsole.server.runtime.sglang.control import ControlState, ControlWriter
from agentconsole.server.runtime.sglang.rank_status import merge_statuses
from agentconsole.server.runtime.sglang.status import Placement, SchedulerStatus

logger = logging.getLogger("agentconsole.sglang.cluster")
_TIMEOUT_S = 5.0
#: SGLang's OpenAI model list: the served model with its context length (``max_model_len``)
MODELS_PATH = "/v1/models"


@dataclass(slots=True)
class WorkerView:
    """One worker as last polled: its ranks' statuses and placements (None: not reported)."""

    url: str
    node: str = ""  # the id the worker's responses carry (``node_api.NODE_HEADER``)
    statuses: list[SchedulerStatus | None] = field(default_factory=list)
    placements: list[Placement | None] = field(default_factory=list)
    #: the newest control state this worker accepted (0 once it restarted: it may have
    #: lost it)
    control_version: int = 0
    #: the oldest control version its ranks' statuses showed at the last poll
    applied_version: int = 0
    reachable: bool = False

    def live_statuses(self) -> list[SchedulerStatus | None]:
        """Its ranks' statuses while it answers, else a None per rank (the ranks keep their
        places, which telemetry numbers them by). A dead worker's last report must not
        count: its calls would stay queued or running forever, and its control version,
        which never advances, would hold back every acknowledgement."""
        return self.statuses if self.reachable else [None] * len(self.statuses)

    def live_placements(self) -> list[Placement]:
        """Its ranks' placement sweeps while it answers (none while it does not: a dead
        worker holds no KV to place a program by)."""
        return [p for p in self.placements if p is not None] if self.reachable else []


def _parse(cls: Any, items: object) -> list[Any]:
    out: list[Any] = []
    for item in items if isinstance(items, list) else []:
        try:
            out.append(cls.from_json(item) if isinstance(item, dict) else None)
        except (TypeError, ValueError, KeyError, IndexError):
            out.append(None)
    return out


class Workers:
    """See the module docstring. ``urls``: each worker's base URL."""

    def __init__(self, urls: Sequence[str], *, poll_s: float = 0.1) -> None:
        if not urls:
            raise ValueError("the sglang-router runtime needs at least one worker URL")
        self.views = [WorkerView(u.rstrip("/")) for u in urls]
        self._client = httpx.AsyncClient(timeout=_TIMEOUT_S)
        self._poller = Periodic("sglang-workers", poll_s, self.poll)
        self._pending: ControlState | None = None
        self._wake = asyncio.Event()
        self._pusher: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._poller.start()
        self._pusher = asyncio.create_task(self._push_forever(), name="sglang-workers-push")

    async def close(self) -> None:
        await self._poller.stop()
        if self._pusher is not None:
            self._pusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pusher
        await self._client.aclose()

    # -- reports -------------------------------------------------------------------------------
    async def poll(self) -> None:
        """Read every worker's report now."""
        await asyncio.gather(*(self._poll_one(v) for v in self.views))

    async def _poll_one(self, view: WorkerView) -> None:
        try:
            response = await self._client.get(view.url + STATUS_PATH)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError):
            view.reachable = False
            return
        view.reachable = True
        node = str(data.get("node") or "")
        view.statuses = _parse(SchedulerStatus, data.get("statuses"))
        view.placements = _parse(Placement, data.get("placements"))
        applied = min((s.control_version for s in view.statuses if s is not None), default=None)
        # A restarted worker may have lost the state: its node id (host and process) is new,
        # or its status shows an older version than before (a plugin shows them in order). A
        # status that only lags is neither (the plugin shows the versions nobody waits for at
        # its next periodic write).
        went_back = applied is not None and applied < view.applied_version
        if (view.node and node != view.node) or went_back:
            view.control_version = 0
        view.node = node
        if applied is not None:
            view.applied_version = applied
        if self._pending is not None and view.control_version < self._pending.version:
            self._wake.set()  # restarted, or a push it did not accept: send the state again

    def statuses(self) -> list[SchedulerStatus | None]:
        """Every rank of every worker, worker by worker (None: not reported, or its worker
        does not answer)."""
        return [s for v in self.views for s in v.live_statuses()] or [None]

    def status(self) -> SchedulerStatus | None:
        """The ranks of every worker that answers, merged (None until each of those reported
        every rank, or while none answers). A worker that stopped answering counts again
        with the fresh report it gives once it answers (a restarted one: its new state)."""
        ranks = [s for v in self.views if v.reachable for s in v.statuses]
        if not ranks or any(s is None for s in ranks):
            return None
        return merge_statuses([s for s in ranks if s is not None])

    def index_of_node(self, node: str) -> int | None:
        """The index (in ``urls``) of the worker whose responses carry ``node``."""
        return next((i for i, v in enumerate(self.views) if node and v.node == node), None)

    def worker_of_call(self, rid: str) -> int | None:
        """The worker whose scheduler has ``rid`` queued or running (as last polled)."""
        for i, view in enumerate(self.views):
            for s in view.live_statuses():
                if s is None:
                    continue
                if any(q.rid == rid for q in s.queued) or any(r.rid == rid for r in s.running):
                    return i
        return None

    def worker_of_program(self, program_id: str) -> int | None:
        """The worker holding most of the program's last context (as last swept)."""
        best, best_tokens = None, 0
        for i, view in enumerate(self.views):
            for p in view.live_placements():
                tokens = p.programs.get(program_id, (0, 0))[0]
                if tokens > best_tokens:
                    best, best_tokens = i, tokens
        return best

    # -- operator settings ---------------------------------------------------------------------
    def push(self, state: ControlState) -> None:
        """Send ``state`` to every worker soon (the newest state wins)."""
        self._pending = state
        self._wake.set()

    async def _push_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            state = self._pending
            if state is not None:
                body = state.to_json()
                await asyncio.gather(*(self._push_one(v, body) for v in self.views))

    async def _push_one(self, view: WorkerView, body: dict[str, Any]) -> None:
        try:
            response = await self._client.post(view.url + CONTROL_PATH, json=body)
            response.raise_for_status()
            view.control_version = int(response.json().get("version", 0))
        except (httpx.HTTPError, ValueError, TypeError):
            logger.warning("control state not delivered to %s", view.url)

    # -- every worker ----------------------------------------------------------------------------
    async def post_all(
        self, path: str, body: dict[str, Any], *, only: int | None = None
    ) -> list[bool]:
        """POST ``body`` to ``path`` on every worker (``only``: on the worker of that index
        alone); which answered 2xx."""

        async def one(view: WorkerView) -> bool:
            try:
                response = await self._client.post(view.url + path, json=body)
            except httpx.HTTPError:
                return False
            return response.is_success

        views = self.views if only is None else [self.views[only]]
        return list(await asyncio.gather(*(one(v) for v in views)))

    async def abort(self, rid: str) -> None:
        """Abort ``rid`` on every worker (only the one holding it acts)."""
        await self.post_all("/abort_request", {"rid": rid})

    async def context_length(self) -> int | None:
        """The smallest context length the workers serve (a call may land on any of them):
        each one's ``/v1/models`` ``max_model_len``, its tokenizer manager's ``context_len``
        (the model config's, or ``--context-length``). None when none answers it."""

        async def one(view: WorkerView) -> int | None:
            try:
                response = await self._client.get(view.url + MODELS_PATH)
                response.raise_for_status()
                cards = response.json().get("data") or []
                limit = cards[0].get("max_model_len") if cards else None
            except (httpx.HTTPError, ValueError, AttributeError, TypeError):
                return None
            return limit if isinstance(limit, int) and limit > 0 else None

        found = [n for n in await asyncio.gather(*(one(v) for v in self.views)) if n]
        return min(found, default=None)

    async def healthy(self) -> bool:
        """Every worker answers ``/health``."""

        async def one(view: WorkerView) -> bool:
            try:
                return (await self._client.get(view.url + "/health")).is_success
            except httpx.HTTPError:
                return False

        return all(await asyncio.gather(*(one(v) for v in self.views)))


class PushedControl(ControlWriter):
    """``ControlWriter`` whose ``write`` pushes the state to every worker (no local file)."""

    def __init__(self, workers: Workers, initial: ControlState) -> None:
        self.workers = workers
        self.state = initial
        self.write()

    def write(self, *, ack: bool = False) -> int:
        self.state.version += 1
        if ack:
            self.state.ack_version = self.state.version
        self.workers.push(self.state)
        return self.state.version

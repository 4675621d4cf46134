"""The dashboard's data movement: the feed worker, the one-at-a-time poller, the actions.

Everything here runs on Textual thread workers (``app.run_worker(thread=True)``) and talks to
the UI only by posting typed messages (see ``messages``), so no network call ever blocks the
screen. Feed events go through a :class:`FeedBuffer` with one coalescing wake-up message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from textual.app import App

from agentconsole.httpclient import ApiError, PermissionDeniedError
from agentconsole.ui.client.feed import EventBatch, FeedStatus, OverviewTick
from agentconsole.ui.client.http import ConsoleApi
from agentconsole.ui.client.toolcalls import (
    ProgramTenants,
    ToolCall,
    describe_reconciled,
    read_board,
)
from agentconsole.ui.client.whatif import chart_window
from agentconsole.ui.tui import messages as m
from agentconsole.ui.tui.feedbuffer import FeedBuffer
from agentconsole.ui.tui.loader import DOOR, TOOLS, load, operator_read
from agentconsole.ui.tui.outcome import describe, describe_node_cancel

#: the status of an operator route refused to a tenant's key
FORBIDDEN = 403


class DataSync:
    """Feeds ``app`` from ``api``; ``again`` is called when a poll asked for meanwhile may run."""

    def __init__(self, app: App[None], api: ConsoleApi, again: Callable[[], None]) -> None:
        self.app = app
        self.api = api
        self.buffer = FeedBuffer()
        self.stop = threading.Event()
        self._again = again
        self._polling = False
        self._queued = False
        #: the operator reads (the door, the audit log) the server refused to this key (403, or
        #: 401 for a key it does not know).
        #: The key is the client's, fixed for the app's life, so a refusal stands until the
        #: dashboard starts with another key: asked once, never again (as the web console's
        #: ``state.refused``); each refused call is one more row in the server's audit.
        self.refused: set[str] = set()
        #: whether the server refused an operator route to this key (403): a tenant's key.
        #: Fixed for the app's life as the key is; the operator controls then hide, so a
        #: tenant is not offered buttons that each fail and write an audit row.
        self.tenant_key = False
        #: whether ``learn_role`` has had its answer (or none): the tool calls are not read
        #: before, so a key the server names a tenant's never asks for them
        self.role_known = False
        #: each in-doubt call's tenant, by its program (read once a program)
        self.tool_tenants = ProgramTenants(
            lambda program_id: api.program(program_id).summary.tenant
        )
        self._reading_tools = False
        self._tools_again = False

    @property
    def busy(self) -> bool:
        """Whether a poll is in flight."""
        return self._polling

    def start_feed(self) -> None:
        """Read the SSE feed on a worker until :attr:`stop` is set."""
        self.app.run_worker(self._feed, thread=True, group="feed", exit_on_error=False)

    def _feed(self) -> None:
        post = self.app.post_message
        for item in self.api.feed(self.stop):
            if isinstance(item, EventBatch):
                if self.buffer.push(item.events):
                    post(m.FeedPending())
            elif isinstance(item, OverviewTick):
                post(m.OverviewLoaded(item.overview, tick=True))
            elif isinstance(item, FeedStatus):
                post(m.FeedChanged(item.connected, item.detail))

    def poll(self, wanted: tuple[str, ...], program_id: str | None, all_states: bool) -> None:
        """Read ``wanted`` (and the open program) on a worker; while one poll is in flight a
        new request only marks that another is wanted, so a slow server never piles them up.
        The tenants view also reads the admission door; a read refused to this key is not
        made again."""
        if self._polling:
            self._queued = True
            return
        self._polling = True
        if "tenants" in wanted:
            wanted = (*wanted, DOOR)
        wanted = tuple(what for what in wanted if what not in self.refused)
        work = partial(self._poll, wanted, program_id, all_states)
        self.app.run_worker(work, thread=True, group="poll", exit_on_error=False)

    def _poll(self, wanted: tuple[str, ...], program_id: str | None, all_states: bool) -> None:
        try:
            for message in load(self.api, wanted, program_id=program_id, all_states=all_states):
                if isinstance(message, m.ReadRefused):
                    # set here, before ``_finished`` can start the next poll: a flag set by
                    # the message's handler could come after that poll had asked again
                    self.refused.add(message.what)
                    if message.status == FORBIDDEN:
                        self._found_tenant_key()
                self.app.post_message(message)
        finally:
            self.app.call_from_thread(self._finished)

    def _finished(self) -> None:
        self._polling = False
        if self._queued:
            self._queued = False
            self._again()

    def learn_role(self) -> None:
        """Ask the server, on a worker, whose key this is (``GET /v1/whoami``): a tenant's
        hides the operator's controls before any of them is refused (each refusal is an audit
        row). A server without the route (or unreachable now) leaves the 403 to tell."""

        def run() -> None:
            try:
                if not self.api.whoami().operator:
                    self._found_tenant_key()
            except ApiError:
                pass  # the 403 of the first operator read tells instead
            self.app.call_from_thread(self._role_learned)

        self.app.run_worker(run, thread=True, group="role", exit_on_error=False)

    def _role_learned(self) -> None:
        self.role_known = True
        self.read_tool_calls()

    def read_tool_calls(self) -> None:
        """Read the tool calls that need an operator and the side effects running, on a worker
        of their own (the top bar counts them whatever the view shows, and a tool's feed
        event asks for them): one read in flight, at most one more asked for meanwhile.
        Never for a key known to be a tenant's (each refusal is an audit row), nor before
        :meth:`learn_role` has told whose key it is."""
        if not self.role_known or self.tenant_key or TOOLS in self.refused:
            return
        if self._reading_tools:
            self._tools_again = True
            return
        self._reading_tools = True
        self.app.run_worker(self._read_tools, thread=True, group="tools", exit_on_error=False)

    def _read_tools(self) -> None:
        try:
            try:
                board = partial(read_board, self.api.tool_calls, self.tool_tenants)
                message = operator_read(TOOLS, lambda: m.ToolCallsLoaded(board()))
            except ApiError as error:
                message = m.LoadFailed(TOOLS, str(error))
            if isinstance(message, m.ReadRefused):
                self.refused.add(TOOLS)  # before the next read can ask again, as ``_poll``
                if message.status == FORBIDDEN:
                    self._found_tenant_key()
            self.app.post_message(message)
        finally:
            self.app.call_from_thread(self._tools_read)

    def _tools_read(self) -> None:
        self._reading_tools = False
        if self._tools_again:
            self._tools_again = False
            self.read_tool_calls()

    def reconcile(self, call: ToolCall, action: str, result: Any = None) -> None:
        """Settle ``call`` on a worker: ``commit`` with ``result`` (the effect happened) or
        ``retry`` (one more execution); what the server did, or its refusal (a call another
        operator settled meanwhile: 409), comes as :class:`~m.ActionDone`."""

        def run() -> None:
            try:
                self.api.reconcile(call.tool_call_id, action, result)
                text = describe_reconciled(action, call)
                self.app.post_message(m.ActionDone("reconcile", call.program_id, True, text))
            except ApiError as error:
                if isinstance(error, PermissionDeniedError):
                    self._found_tenant_key()
                text = f"{action} {call.program_id}/{call.node_id} {call.tool}: {error.message}"
                self.app.post_message(m.ActionDone("reconcile", call.program_id, False, text))

        self.app.run_worker(run, thread=True, group="actions", exit_on_error=False)

    def load_policy_choices(self) -> None:
        """Read the server's policy names on a worker, for the switch dialog; they come as
        :class:`~m.PolicyChoicesLoaded` (None from a server that does not publish them)."""

        def run() -> None:
            try:
                choices = self.api.policy_choices()
            except PermissionDeniedError as error:
                self.app.post_message(self._refused("policy", "", error))
                return
            except ApiError:
                choices = None  # an older server: the names are typed, its refusal lists them
            self.app.post_message(m.PolicyChoicesLoaded(choices))

        self.app.run_worker(run, thread=True, group="actions", exit_on_error=False)

    def _found_tenant_key(self) -> None:
        """Note (once, from any thread) that the server refused an operator route to this key."""
        if not self.tenant_key:
            self.tenant_key = True
            self.app.post_message(m.TenantKeyFound())

    def _refused(self, title: str, program_id: str, error: ApiError) -> m.ActionDone:
        """The failed action's message; a 403 of an operator route also says the key is a
        tenant's."""
        if isinstance(error, PermissionDeniedError):
            self._found_tenant_key()
        return m.ActionDone(title, program_id, False, error.message)

    def act(self, action: str, program_id: str) -> None:
        """Preempt, cancel or boost ``program_id`` on a worker; the answer comes as a message."""

        def run() -> None:
            try:
                result = self.api.act(action, program_id)
                text = describe(result, operator=not self.tenant_key)
                self.app.post_message(m.ActionDone(action, program_id, True, text))
            except ApiError as error:
                if action == "cancel":  # the program's own route: a 403 there is no key's
                    self.app.post_message(m.ActionDone(action, program_id, False, error.message))
                else:
                    self.app.post_message(self._refused(action, program_id, error))

        self.app.run_worker(run, thread=True, group="actions", exit_on_error=False)

    def cancel_node(self, program_id: str, node_id: str) -> None:
        """Cancel ``node_id`` of ``program_id`` (and its descendants not yet ended) on a
        worker; the answer comes as :class:`~m.ActionDone` (``cancel node``). The program's
        own route, as :meth:`act`'s cancel: a refusal there (404, 409) is no key's."""

        def run() -> None:
            title = "cancel node"
            try:
                answer = self.api.cancel_node(program_id, node_id)
                text = describe_node_cancel(answer, operator=not self.tenant_key)
                self.app.post_message(m.ActionDone(title, program_id, True, text))
            except ApiError as error:
                text = f"{node_id} of {program_id}: {error.message}"
                self.app.post_message(m.ActionDone(title, program_id, False, text))

        self.app.run_worker(run, thread=True, group="actions", exit_on_error=False)

    def replay(self, samples: int) -> None:
        """Ask the server, on a worker, to write the window ``samples`` chart samples span
        (until now) as a trace; the answer comes as :class:`~m.ReplayWritten`."""

        def run() -> None:
            now = time.time()
            since = chart_window(now, samples)
            try:
                replay = self.api.replay_window(since)
                self.app.post_message(m.ReplayWritten(replay, now - since))
            except ApiError as error:
                self.app.post_message(self._refused("replay this window", "", error))

        self.app.run_worker(run, thread=True, group="actions", exit_on_error=False)

    def drain(self, enabled: bool) -> None:
        """Stop (or resume) admitting new calls, on a worker."""

        def run() -> None:
            try:
                self.api.drain(enabled)
                text = "draining: new calls refused" if enabled else "admitting new calls"
                self.app.post_message(m.ActionDone("drain", "", True, text))
            except ApiError as error:
                self.app.post_message(self._refused("drain", "", error))

        self.app.run_worker(run, thread=True, group="actions", exit_on_error=False)

    def set_policy(self, policy: str | None, kv_policy: str | None) -> None:
        """Switch the scheduling and/or tool-wait policy by name on a worker; the answer (the
        policies in force, or the server's refusal, which lists its names) comes as
        :class:`~m.ActionDone`."""

        def run() -> None:
            try:
                now = self.api.set_policy(policy, kv_policy)
                text = f"policy {now.policy} · kv policy {now.kv_policy}"
                self.app.post_message(m.ActionDone("policy", "", True, text))
            except ApiError as error:
                self.app.post_message(self._refused("policy", "", error))

        self.app.run_worker(run, thread=True, group="actions", exit_on_error=False)

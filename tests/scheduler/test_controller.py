"""The controller's lifecycle rules: readiness, quotas, retries, cancel, tickets."""

from __future__ import annotations

import pytest

from agentconsole.scheduler.controller import CallUsage, ProgramController, QuotaExceeded
from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.program import (
    Node,
    NodeKind,
    NodeState,
    ProgramState,
    Quotas,
    RetryPolicy,
    ToolKind,
    ToolSpec,
)


class FlatCost:
    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return uncached_prompt_tokens * 1e-4 + output_tokens * 1e-2


def _controller() -> tuple[ProgramController, EventLog]:
    log = EventLog()
    return ProgramController(log, FlatCost()), log


def _llm(nid: str, *parents: str) -> Node:
    return Node(nid, "", NodeKind.LLM, parents=parents)


def _tool(nid: str, *parents: str, side_effect: bool = False, idempotent: bool = True) -> Node:
    spec = ToolSpec("run_tests", ToolKind.TEST_RUN, side_effect=side_effect, idempotent=idempotent)
    return Node(nid, "", NodeKind.TOOL, parents=parents, tool=spec, retry=RetryPolicy(2))


def _usage(service: float = 0.5) -> CallUsage:
    return CallUsage(prompt_tokens=1000, cached_tokens=400, output_tokens=50, service_s=service)


def test_serial_program_lifecycle_and_events() -> None:
    c, log = _controller()
    c.open_program("p", "acme", 0.0, labels={"workload": "w"})
    n1 = c.add_node("p", _llm("n1"), 0.0)
    assert n1.state is NodeState.READY
    t = c.ticket("p", "n1", 0.0, prompt_tokens=1000, cached_tokens=400)
    assert t.call_id == "p/n1/0001"
    assert t.tenant == "acme"
    assert t.completed_calls == 0
    assert t.service_estimate_s == pytest.approx(600 * 1e-4 + t.expected_output_tokens * 1e-2)
    c.start_node("p", "n1", 1.0)
    tool = c.add_node("p", _tool("t1", "n1"), 1.5)
    assert tool.state is NodeState.PENDING  # its parent is still running
    ready = c.finish_llm("p", "n1", 2.0, _usage())
    assert [n.node_id for n in ready] == ["t1"]
    program = c.get("p")
    assert program.attained_service_s == 0.5
    assert program.completed_calls == 1
    assert program.wait_s == pytest.approx(1.0)  # ready at 0, started at 1
    assert program.tokens_used == 650
    c.start_node("p", "t1", 2.0)
    ready, retry = c.finish_tool("p", "t1", 3.0, outcome="ok", latency_s=1.0)
    assert not retry
    assert ready == []
    c.finish_program("p", 3.0)
    kinds = [e.kind for e in log]
    assert kinds[0] is EventKind.PROGRAM_CREATED
    assert kinds[-1] is EventKind.PROGRAM_FINISHED
    assert EventKind.TOOL_STARTED in kinds
    assert EventKind.TOOL_FINISHED in kinds


def test_atlas_signal_follows_heaviest_parent_path() -> None:
    c, _ = _controller()
    c.open_program("p", "t", 0.0)
    for nid, parents, service in [("a", (), 1.0), ("b", ("a",), 3.0), ("c", ("a",), 0.5)]:
        c.add_node("p", _llm(nid, *parents), 0.0)
        c.start_node("p", nid, 0.0)
        c.finish_llm("p", nid, 0.0, _usage(service))
    c.add_node("p", _llm("d", "b", "c"), 0.0)
    t = c.ticket("p", "d", 0.0, prompt_tokens=10)
    assert t.cp_service_s == pytest.approx(4.0)  # a + b, not a + b + c
    assert t.program_service_s == pytest.approx(4.5)


def test_failed_tool_retries_only_when_safe() -> None:
    c, _ = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _tool("safe"), 0.0)
    c.start_node("p", "safe", 0.0)
    _, retry = c.finish_tool("p", "safe", 1.0, outcome="timeout", latency_s=1.0)
    assert retry
    assert c.get("p").nodes["safe"].state is NodeState.READY
    c.start_node("p", "safe", 1.0)
    _, retry = c.finish_tool("p", "safe", 2.0, outcome="timeout", latency_s=1.0)
    assert not retry
    assert c.get("p").nodes["safe"].state is NodeState.FAILED

    c.add_node("p", _tool("email", side_effect=True, idempotent=False), 2.0)
    c.start_node("p", "email", 2.0)
    _, retry = c.finish_tool("p", "email", 3.0, outcome="timeout", latency_s=1.0)
    assert not retry  # a side effect without a key is never re-run automatically


def test_quotas() -> None:
    c, _ = _controller()
    c.open_program("p", "t", 0.0, quotas=Quotas(tokens=1000, tool_calls=1, branches=2))
    c.add_node("p", _llm("a"), 0.0)
    c.add_node("p", _tool("t1", "a"), 0.0)
    with pytest.raises(QuotaExceeded) as err:
        c.add_node("p", _tool("t2", "a"), 0.0)
    assert err.value.quota == "tool_calls"
    c.add_node("p", _llm("b", "a"), 0.0)  # second branch under a
    with pytest.raises(QuotaExceeded) as err:
        c.add_node("p", _llm("c", "a"), 0.0)
    assert err.value.quota == "branches"
    assert "c" not in c.get("p").nodes
    assert c.get("p").branches == 2
    c.start_node("p", "a", 0.0)
    with pytest.raises(QuotaExceeded) as err:
        c.finish_llm("p", "a", 1.0, CallUsage(5000, 0, 10, 0.1))
    assert err.value.quota == "tokens"


def test_cancel_returns_running_nodes_and_is_idempotent() -> None:
    c, log = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _llm("a"), 0.0)
    c.start_node("p", "a", 0.0)
    c.add_node("p", _llm("b", "a"), 0.0)
    running = c.cancel_program("p", 1.0)
    assert [n.node_id for n in running] == ["a"]
    program = c.get("p")
    assert program.state is ProgramState.CANCELLED
    assert all(n.state is NodeState.CANCELLED for n in program.nodes.values())
    assert c.cancel_program("p", 2.0) == []
    assert sum(e.kind is EventKind.PROGRAM_CANCELLED for e in log) == 1
    with pytest.raises(ValueError, match="cancelled"):
        c.add_node("p", _llm("c"), 3.0)


def test_a_program_cancel_closes_its_running_calls_attempt_and_leaves_its_tools_open() -> None:
    """As a node cancel does: nothing closes a cancelled LLM node's attempt later (the
    abort's end closes only nodes still in flight), while a running tool's stays open for
    its end after the cancel; a store rebuild closes the LLM attempt the same way."""
    c, _ = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _llm("a"), 0.0)
    c.ticket("p", "a", 0.0, prompt_tokens=100)
    c.start_node("p", "a", 0.0)
    c.add_node("p", _tool("t1"), 0.0)
    c.start_node("p", "t1", 0.5)
    c.cancel_program("p", 1.0)
    nodes = c.get("p").nodes
    (call,), (tool,) = nodes["a"].attempts, nodes["t1"].attempts
    assert (call.finished_at, call.outcome) == (1.0, "cancelled")
    assert tool.finished_at is None


def test_a_preempted_call_that_runs_again_keeps_its_attempt_and_counts_its_wait() -> None:
    """The simulator admits a preempted call again: ``resume_node`` with the time counts
    its wait since the preemption as ``start_node`` counts a call's, and opens no attempt."""
    c, _ = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _llm("a"), 0.0)
    c.ticket("p", "a", 0.0, prompt_tokens=100)
    c.start_node("p", "a", 1.0)
    c.requeue_node("p", "a", 2.0)
    c.resume_node("p", "a", 5.0)
    node = c.get("p").nodes["a"]
    assert node.state is NodeState.RUNNING
    assert [(a.number, a.finished_at) for a in node.attempts] == [(1, None)]
    assert node.queue_s == pytest.approx(1.0 + 3.0)
    assert c.get("p").wait_s == pytest.approx(4.0)


def test_a_tool_ending_after_the_cancel_is_recorded_on_its_cancelled_node() -> None:
    """A side effect let run past the cancel: its end closes its attempt, counts its tool time
    and moves the node's end to its own; node and program stay cancelled; once only."""
    c, log = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _tool("write", side_effect=True, idempotent=False), 0.0)
    c.add_node("p", _tool("never"), 0.0)
    c.start_node("p", "write", 1.0)
    assert not c.finish_tool_after_cancel("p", "write", 1.5, outcome="ok", latency_s=0.5)
    c.cancel_program("p", 2.0)
    assert not c.finish_tool_after_cancel("p", "never", 3.0, outcome="ok", latency_s=1.0)
    assert c.finish_tool_after_cancel("p", "write", 5.0, outcome="ok", latency_s=4.0)
    assert not c.finish_tool_after_cancel("p", "write", 6.0, outcome="ok", latency_s=5.0)
    program = c.get("p")
    node = program.nodes["write"]
    assert program.state is ProgramState.CANCELLED
    assert node.state is NodeState.CANCELLED
    assert (node.tool_s, node.finished_at) == (4.0, 5.0)
    assert [(a.finished_at, a.outcome) for a in node.attempts] == [(5.0, "ok")]
    assert program.nodes["never"].attempts == []
    end = log.events[-1]
    assert (end.kind, end.node_id, end.t) == (EventKind.TOOL_FINISHED, "write", 5.0)
    assert end.data["after_cancel"] is True
    assert end.data["node_state"] == "cancelled"
    assert (end.data["outcome"], end.data["latency_s"], end.data["tool"]) == (
        "ok",
        4.0,
        "run_tests",
    )
    assert sum(e.kind is EventKind.TOOL_FINISHED for e in log) == 1


def test_remaining_work_is_learned_and_errors_recorded() -> None:
    c, _ = _controller()
    for i in range(10):
        pid = f"p{i}"
        c.open_program(pid, "t", 0.0, labels={"workload": "w"})
        prev: tuple[str, ...] = ()
        for k in range(4):
            c.add_node(pid, _llm(f"n{k}", *prev), 0.0)
            c.ticket(pid, f"n{k}", 0.0, prompt_tokens=10)
            c.start_node(pid, f"n{k}", 0.0)
            c.finish_llm(pid, f"n{k}", 0.0, _usage(0.1))
            prev = (f"n{k}",)
        c.finish_program(pid, 1.0)
    assert c.remaining_work.remaining_calls("t", "w", 1) == pytest.approx(3.0)
    summary = c.prediction_log.summary()
    assert summary["remaining_calls"]["count"] == 40
    assert "output_tokens" in summary


def test_close_node_cancels_its_subtree_and_keeps_the_program() -> None:
    c, log = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _llm("a"), 0.0)
    c.start_node("p", "a", 0.0)
    c.add_node("p", _llm("b", "a"), 0.0)
    changed = c.close_node("p", "a", 1.0, "aborted")
    assert {n.node_id for n in changed} == {"a", "b"}
    program = c.get("p")
    assert program.state is ProgramState.RUNNING
    assert program.nodes["a"].attempts[-1].outcome == "aborted"
    assert c.close_node("p", "a", 2.0, "aborted") == []
    assert sum(e.kind is EventKind.NODE_CANCELLED for e in log) == 2


def test_forget_only_ended_programs() -> None:
    c, _ = _controller()
    c.open_program("p", "t", 0.0)
    with pytest.raises(ValueError, match="still running"):
        c.forget("p")
    c.finish_program("p", 1.0)
    assert c.forget("p") is not None
    assert "p" not in c.programs
    assert c.forget("p") is None


def test_runtime_queue_time_counts_as_wait() -> None:
    c, _ = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _llm("a"), 0.0)
    c.start_node("p", "a", 0.0)
    c.finish_llm("p", "a", 3.0, CallUsage(100, 0, 10, 0.5, runtime_queue_s=2.0))
    assert c.get("p").wait_s == pytest.approx(2.0)
    assert c.get("p").nodes["a"].queue_s == pytest.approx(2.0)


def test_a_node_declared_ahead_queues_from_its_call_not_from_its_readiness() -> None:
    """``serve``: an agent declares its LLM node at 0 (ready: no parents), sends the call 5 s
    later (its ticket), and the call starts 1 s after that. The 5 s were the agent's own, not
    the server's queue: the node and its program waited 1 s, and the next call's ticket ranks
    the program by that 1 s."""
    c, _ = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _llm("plan"), 0.0)
    c.ticket("p", "plan", 5.0, prompt_tokens=100)
    c.start_node("p", "plan", 6.0)
    c.finish_llm("p", "plan", 7.0, _usage())
    program = c.get("p")
    assert program.nodes["plan"].queue_s == pytest.approx(1.0)
    assert program.wait_s == pytest.approx(1.0)
    c.add_node("p", _llm("act", "plan"), 7.0)
    assert c.ticket("p", "act", 9.0, prompt_tokens=100).program_wait_s == pytest.approx(1.0)


def test_each_attempt_queues_from_its_own_queueing() -> None:
    """A node ready at 0: its first call queued at 5 and started at 6, preempted at 8 and
    running again at 9 (2 s queued), then failed at 10 (the runtime refused it: ``serve``'s
    ``fail_attempt``); the agent's retry queued at 20, started at 20.5. Its queue time is
    2.5 s, not counted again from 0 for the retry."""
    c, _ = _controller()
    c.open_program("p", "t", 0.0)
    c.add_node("p", _llm("plan"), 0.0)
    c.ticket("p", "plan", 5.0, prompt_tokens=100)
    c.start_node("p", "plan", 6.0)
    c.requeue_node("p", "plan", 8.0)
    c.start_node("p", "plan", 9.0)
    assert c.close_attempt("p", "plan", 10.0, "failed")
    node = c.get("p").nodes["plan"]
    node.state = NodeState.FAILED
    retry = c.ticket("p", "plan", 20.0, prompt_tokens=100)
    assert retry.program_wait_s == pytest.approx(2.0)
    c.start_node("p", "plan", 20.5)
    assert node.queue_s == pytest.approx(2.5)
    assert c.get("p").wait_s == pytest.approx(2.5)


# -- tenants' estimates apart --------------------------------------------------------------------
def _run_programs(
    c: ProgramController,
    tenant: str,
    labels: dict[str, str],
    *,
    calls: int,
    output: int,
    tool_s: float,
) -> None:
    """Six finished programs of ``tenant`` with ``labels``: ``calls`` calls each of ``output``
    tokens, then one ``run_tests`` tool of ``tool_s`` seconds."""
    for k in range(6):
        pid = f"{tenant}-{k}-{len(c.programs)}"
        c.open_program(pid, tenant, 0.0, labels=labels)
        prev: tuple[str, ...] = ()
        for n in range(calls):
            c.add_node(pid, _llm(f"n{n}", *prev), 0.0)
            c.ticket(pid, f"n{n}", 0.0, prompt_tokens=10)
            c.start_node(pid, f"n{n}", 0.0)
            usage = CallUsage(
                prompt_tokens=10, cached_tokens=0, output_tokens=output, service_s=0.1
            )
            c.finish_llm(pid, f"n{n}", 0.0, usage)
            prev = (f"n{n}",)
        c.add_node(pid, _tool("t", *prev), 0.0)
        c.start_node(pid, "t", 0.0)
        c.finish_tool(pid, "t", tool_s, outcome="ok", latency_s=tool_s)
        c.finish_program(pid, 1.0)


def _alphas_estimates(c: ProgramController) -> tuple[float, ...]:
    """What alpha's next programs and calls are predicted: its workload's and its unlabelled
    programs' remaining calls, its model's and any call's output, its tool's latency, and the
    remaining critical path of a fresh program's first call (its tool waits to come weigh in
    by alpha's own mean tool time)."""
    probe = f"alpha-probe-{len(c.programs)}"
    c.open_program(probe, "alpha", 0.0, labels={"workload": "w", "model": "m"})
    c.add_node(probe, _llm("n0"), 0.0)
    remaining_cp_s = c.ticket(probe, "n0", 0.0, prompt_tokens=100).remaining_cp_s
    c.cancel_program(probe, 0.0)
    return (
        c.remaining_work.remaining_calls("alpha", "w", 0),
        c.remaining_work.remaining_calls("alpha", "", 0),
        c.output_lengths.predict("alpha", "m"),
        c.output_lengths.predict("alpha"),
        c.tool_distribution("alpha", "run_tests", "test_run").mean(),
        remaining_cp_s,
    )


_BRAVOS_AIM: tuple[dict[str, str], ...] = ({"workload": "w", "model": "m"}, {})


def test_a_calls_max_tokens_caps_what_its_ticket_expects() -> None:
    """A tenant whose calls produced 300 tokens sends one with ``max_tokens`` 40 (a verifier's
    verdict): its ticket expects 40 and is priced at 40; a cap above what is learned changes
    nothing, and the next attempt without one expects the learned length again."""
    c, _ = _controller()
    _run_programs(c, "acme", {}, calls=2, output=300, tool_s=1.0)
    c.open_program("p", "acme", 10.0)
    c.add_node("p", _llm("verify"), 10.0)
    learned = c.output_lengths.predict("acme")
    assert learned > 40
    capped = c.ticket("p", "verify", 10.0, prompt_tokens=100, max_output_tokens=40)
    assert capped.expected_output_tokens == 40
    assert capped.service_estimate_s == pytest.approx(100 * 1e-4 + 40 * 1e-2)
    loose = c.ticket("p", "verify", 10.0, prompt_tokens=100, max_output_tokens=4096)
    assert loose.expected_output_tokens == learned
    assert c.ticket("p", "verify", 10.0, prompt_tokens=100).expected_output_tokens == learned


def test_no_tenants_programs_change_another_tenants_estimates() -> None:
    """Tenant bravo runs programs labelled like alpha's (its workload, its model, its tool's
    name), and unlabelled ones, ten times the size: alpha's remaining work, its calls' output
    and its tool waits are predicted from alpha's own history as before, and a restart
    relearns the remaining work, the output lengths and the tool latencies apart."""
    c, log = _controller()
    _run_programs(c, "alpha", {"workload": "w", "model": "m"}, calls=2, output=20, tool_s=1.0)
    _run_programs(c, "alpha", {}, calls=3, output=20, tool_s=1.0)
    before = _alphas_estimates(c)
    for labels in _BRAVOS_AIM:
        _run_programs(c, "bravo", labels, calls=30, output=4_000, tool_s=1_000.0)
    assert _alphas_estimates(c) == before
    c.open_program("alpha-next", "alpha", 2.0, labels={"model": "m"})
    assert c.add_node("alpha-next", _llm("n0"), 2.0).expected_output_tokens == 20
    restarted = ProgramController(EventLog(), FlatCost())
    for event in log.events:
        restarted.relearn(event)
    relearned = _alphas_estimates(restarted)  # all but the mean call time in the path
    assert relearned[:5] == pytest.approx(before[:5])


def test_a_tenants_first_estimates_are_the_priors_not_another_tenants() -> None:
    c, _ = _controller()
    priors = _alphas_estimates(c)
    for labels in _BRAVOS_AIM:
        _run_programs(c, "bravo", labels, calls=30, output=4_000, tool_s=1_000.0)
    assert _alphas_estimates(c) == priors

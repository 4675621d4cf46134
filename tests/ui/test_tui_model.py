"""The dashboard's pure parts: state updates, filter and sort, DAG layers, bars, the buffer."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st
from rich.text import Text

from agentconsole.ui.client.http import ActionResult
from agentconsole.ui.client.models import FeedEvent, KVState, TenantRow
from agentconsole.ui.client.programs import (
    Node,
    Phase,
    ProgramDetail,
    ProgramPage,
    ProgramSummary,
)
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.feedbuffer import FeedBuffer
from agentconsole.ui.tui.graph import drawn_now, layers, render_dag, span, timeline_bar
from agentconsole.ui.tui.outcome import describe
from agentconsole.ui.tui.selection import matches, next_sort, select
from agentconsole.ui.tui.stale import stale_line
from agentconsole.ui.tui.state import DashboardState
from agentconsole.ui.tui.views.kv import tiers_text
from agentconsole.ui.tui.views.tenants import COLUMNS as TENANT_COLUMNS
from agentconsole.ui.tui.views.tenants import cells as tenant_cells
from tests.ui.canned import CannedClient
from tests.ui.stub_world import BIG_PROGRAM, StubWorld


def _event(seq: int, kind: str, program_id: str = "prog-0002") -> FeedEvent:
    return FeedEvent(seq, 0.0, kind, program_id, "", 1, "tenant-a", "")


def _node(node_id: str, *parents: str, spans: tuple[Phase, ...] = ()) -> Node:
    return Node(node_id, "llm", "done", parents, "main", None, 1, 0, 0, 0, 0, 0, 0, 0, None, spans)


def test_terminal_event_updates_the_list_before_the_next_poll() -> None:
    state = DashboardState()
    state.set_programs(CannedClient(StubWorld()).programs())
    version = state.programs_version
    touched = state.apply_events([_event(1, "call.finished"), _event(2, "program.cancelled")])
    assert touched == {"prog-0002"}
    assert state.programs["prog-0002"].state == "cancelled"
    assert state.programs_version == version + 1
    assert len(state.events) == 2


def test_filter_words_labels_and_inversion() -> None:
    page: ProgramPage = CannedClient(StubWorld()).programs()
    rows = list(page.programs)
    assert all(
        matches(p, "tenant-a running") for p in select(rows, "tenant-a running", "program", False)
    )
    inverted = select(rows, "!tenant-a", "program", False)
    assert inverted
    assert all(p.tenant != "tenant-a" for p in inverted)
    assert {p.labels["workload"] for p in select(rows, "workload:research", "program", False)} == {
        "research"
    }
    by_service = select(rows, "", "service", True)
    assert [p.attained_service_s for p in by_service] == sorted(
        (p.attained_service_s for p in rows), reverse=True
    )
    assert next_sort("slack") == "program"


def test_layers_follow_longest_paths_and_survive_cycles() -> None:
    nodes = [
        _node("a"),
        _node("b", "a"),
        _node("c", "a"),
        _node("d", "b", "c", "zz"),
        _node("e", "a", "d"),
    ]
    assert [[n.node_id for n in layer] for layer in layers(nodes)] == [
        ["a"],
        ["b", "c"],
        ["d"],
        ["e"],
    ]
    looped = layers([_node("x", "y"), _node("y", "x"), _node("r")])
    assert [n.node_id for n in looped[0]] == ["r"]
    assert {n.node_id for n in looped[-1]} == {"x", "y"}


def test_big_dag_renders_every_node_and_marks_the_critical_path() -> None:
    body = StubWorld().program_json(BIG_PROGRAM)
    detail = ProgramDetail.parse(body)
    text = render_dag(detail, 80).plain
    assert all(f" {n.node_id} " in text for n in detail.nodes)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.count("◆") == len(detail.critical_path)


@given(
    st.floats(min_value=0, max_value=9.9),
    st.floats(min_value=0.0, max_value=5.0),
    st.integers(min_value=1, max_value=120),
)
def test_timeline_bar_has_its_width_and_shows_every_span(
    start: float, length: float, width: int
) -> None:
    node = _node("n", spans=(Phase("queue", start, start + length), Phase("decode", 9.95, 10.0)))
    bar = timeline_bar(node, 0.0, 10.0, width, now=10.0).plain
    assert len(bar) == width
    assert "█" in bar  # a 50 ms span on a 10 s axis still gets its cell


def test_buffer_wakes_once_per_drain_and_bounds_memory() -> None:
    buffer = FeedBuffer(capacity=10)
    wakes = [buffer.push([_event(i, "x")]) for i in range(25)]
    assert wakes.count(True) == 1
    assert len(buffer.drain()) == 10
    assert buffer.dropped == 15
    assert buffer.push([]) is True


def test_buffer_is_safe_across_threads() -> None:
    buffer = FeedBuffer(capacity=100_000)
    threads = [
        threading.Thread(target=lambda: [buffer.push([_event(i, "x")]) for i in range(5000)])
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    got = 0
    while any(t.is_alive() for t in threads):
        got += len(buffer.drain())
    for t in threads:
        t.join()
    assert got + len(buffer.drain()) == 20_000


def test_formatting() -> None:
    assert [fmt.secs(x) for x in (None, 0.4, 12.34, 245, -7200)] == [
        "-",
        "0.40s",
        "12.3s",
        "4m05s",
        "-2h00m",
    ]
    assert [fmt.count(x) for x in (950, 12_345, 4_560_000)] == ["950", "12.3K", "4.56M"]
    # never in e-notation: what rounds up to a thousand of its unit is the next unit's 1
    assert [fmt.count(x) for x in (999_500, 999_999_999, -999_500)] == ["1M", "1G", "-1M"]
    assert [fmt.rate(x) for x in (12.34, 99.96, 12_345)] == ["12.3/s", "100/s", "12345/s"]
    assert fmt.nbytes(1536) == "1.5KiB"
    assert fmt.clock(1_767_225_600.25) == "00:00:00.250"
    assert fmt.bar(0.5, 10).plain == "█████░░░░░"
    assert fmt.short("abcdef", 4) == "abc…"


def test_middle_ellipsis_keeps_both_ends_of_an_id() -> None:
    cut = fmt.middle("demo-13cf10-0-seed-mix-s0-00013", 13)
    assert cut == "demo-1…-00013"
    assert len(cut) == 13
    assert fmt.middle("short", 13) == "short"
    assert fmt.middle("abcdefgh", 3) == "ab…"


def _detail(*nodes: Node) -> ProgramDetail:
    summary = ProgramSummary.parse({"program_id": "p", "state": "running"})
    return ProgramDetail(summary, {}, nodes, (), (), {})


def test_an_open_span_is_drawn_up_to_now() -> None:
    decoding = _node(
        "n",
        spans=(Phase("queue", 0.0, 1.0), Phase("prefill", 1.0, 2.0), Phase("decode", 2.0, None)),
    )
    assert timeline_bar(decoding, 0.0, 10.0, 10, now=10.0).plain == "░▓████████"
    assert timeline_bar(decoding, 0.0, 10.0, 10, now=6.0).plain == "░▓████····"
    tool = _node("t", spans=(Phase("tool", 4.0, None),))
    assert timeline_bar(tool, 0.0, 10.0, 10, now=8.0).plain == "····▒▒▒▒··"
    # the window runs to now while a span is open; a clock behind the server's is not
    # allowed to cut it short of what the server already reported
    detail = _detail(decoding, _node("d", spans=(Phase("queue", 3.0, 7.5),)))
    assert span(detail, 12.0) == (0.0, 12.0)
    assert drawn_now(detail, 5.0) == 7.5
    assert drawn_now(detail, 12.0) == 12.0


def test_a_failing_read_is_news_once_per_outage_and_again_after_a_recovery() -> None:
    state = DashboardState()
    assert state.read_failed("tenants", "down", at=10.0)
    assert not state.read_failed("tenants", "down", at=11.0)  # every poll repeats it
    assert state.failures["tenants"].since == 10.0
    assert state.read_failed("tenants", "timed out", at=12.0)  # another error is news
    state.read_succeeded("tenants", at=13.0)
    assert "tenants" not in state.failures
    assert state.read_at["tenants"] == 13.0
    assert state.read_failed("tenants", "down", at=20.0)  # it came back: reported again
    line = stale_line(state, ("overview", "tenants"), now=21.5)
    assert line is not None
    assert line.plain == "⚠ stale tenants: read 8.50s ago · down"
    assert stale_line(state, ("overview",), now=21.5) is None
    assert state.read_failed("kv", "refused", at=20.0)
    never = stale_line(state, ("kv",), now=23.0)
    assert never is not None
    assert never.plain == "⚠ stale kv: not read yet, failing 3.00s · refused"


def test_the_boost_notification_says_the_amount_the_server_applied() -> None:
    answer = {"program_id": "p1", "boost": 10.0, "reranked_calls": ["p1/n3/0001"]}
    text = describe(ActionResult("boost", "p1", answer))
    assert text == "boosted p1 by 10s of policy key: 1 queued calls re-ranked"
    silent = describe(ActionResult("boost", "p1", {"program_id": "p1"}))
    assert silent == "boosted p1 (the server did not say by how much)"


def test_a_cancel_notice_says_side_effects_run_on_and_where_doubt_goes() -> None:
    """A cancel lets side-effecting tools run on (``flagged_tools``): each commits, and only
    one whose end leaves its effect in doubt waits for an operator; a tenant's key is not
    offered the tools view, so its notice does not send it there."""
    answer = {"aborted_calls": ["c1"], "interrupted_tools": [], "flagged_tools": list("abcde")}
    text = describe(ActionResult("cancel", "p1", answer))
    assert text == (
        "cancelled p1: 1 calls aborted; side-effecting tools still running: a, b, c and 2 more "
        "(they finish and commit; one whose effect ends in doubt is listed in 7 tools to "
        "reconcile)"
    )
    tenant = describe(ActionResult("cancel", "p1", answer), operator=False)
    assert tenant.endswith("one whose effect ends in doubt waits for an operator)")
    assert "flagged" not in text
    agents = {"aborted_calls": [], "interrupted_tools": [], "running_tools": ["t1", "t2"]}
    own = describe(ActionResult("cancel", "p1", agents))
    assert own == "cancelled p1: 0 calls aborted; the agent's own tools left to it: t1, t2"


def test_tenant_cells_unit_unknown_starvation_and_stored_bytes() -> None:
    assert dict(TENANT_COLUMNS)["starve"] == "Starve (wait/service)"
    row = TenantRow.parse(
        {"tenant": "t", "starvation": None, "stored_bytes": 3 * 2**20, "limits": {}}
    )
    shown = [str(cell) for cell in tenant_cells(row)]
    keys = [key for key, _ in TENANT_COLUMNS]
    assert shown[keys.index("starve")] == "-"
    assert shown[keys.index("stored")] == "3.0MiB"
    limited = TenantRow.parse(
        {"tenant": "t", "stored_bytes": 2**30, "limits": {"stored_bytes": 2**30}}
    )
    stored = tenant_cells(limited)[keys.index("stored")]
    assert isinstance(stored, Text)
    assert stored.plain == "1.0GiB / 1.0GiB"
    assert stored.style == "bold red"


def test_a_tier_over_its_capacity_shows_its_true_fill() -> None:
    kv = KVState.parse(
        {"tiers": {"hbm": {"used_tokens": 1_500, "capacity_tokens": 1_000, "used_bytes": 0}}}
    )
    text = tiers_text(kv, 80).plain
    assert "150%" in text
    assert "100%" not in text
    assert fmt.fill(1.5).style == "bold red"
    assert fmt.fill(0.42).plain == " 42%"

"""The dashboard's pure parts: state updates, filter and sort, DAG layers, bars, the buffer."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from agentconsole.ui.client.models import FeedEvent
from agentconsole.ui.client.programs import Node, Phase, ProgramDetail, ProgramPage
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.feedbuffer import FeedBuffer
from agentconsole.ui.tui.graph import layers, render_dag, timeline_bar
from agentconsole.ui.tui.selection import matches, next_sort, select
from agentconsole.ui.tui.state import DashboardState
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
    bar = timeline_bar(node, 0.0, 10.0, width).plain
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

"""``GET /v1/programs/{id}``'s nodes: ``kv_tier`` where the program's context mostly is, on an
LLM node that ran a call; none on a node that never ran (the consoles showed ``hbm`` on a
pending join and on a node withdrawn before it ran, as if it held KV)."""

from __future__ import annotations

from agentconsole.scheduler.controller import ProgramController
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.program import Node, NodeKind
from agentconsole.server.live.servicemodel import OnlineServiceModel
from agentconsole.server.live.views import program_json


def test_only_llm_nodes_that_ran_show_where_the_context_is() -> None:
    controller = ProgramController(EventLog(), OnlineServiceModel())
    controller.open_program("p", "t", 0.0)
    controller.add_node("p", Node("a", "p", NodeKind.LLM), 0.0)
    controller.start_node("p", "a", 0.5)
    controller.add_node("p", Node("t1", "p", NodeKind.TOOL, parents=("a",)), 1.0)
    controller.add_node("p", Node("b", "p", NodeKind.LLM, parents=("t1",)), 1.0)
    view = program_json(controller.programs["p"], None, {"hbm": 900, "dram": 100})
    tiers = {n["node_id"]: n["kv_tier"] for n in view["nodes"]}
    assert tiers == {"a": "hbm", "t1": None, "b": None}
    assert view["kv"] == {"hbm_tokens": 900, "dram_tokens": 100, "disk_tokens": 0}

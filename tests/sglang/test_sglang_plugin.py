"""The plugin is active where it must be: in SGLang's scheduler process, with our policy
class, our eviction strategy and the Python tree core it needs."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from agentconsole.server.runtime.sglang.control import marker_files

pytestmark = pytest.mark.sglang


def test_marker_comes_from_an_engine_child_process(rt: Any) -> None:
    markers = marker_files(rt.state_dir)
    assert markers, "the plugin wrote no marker: it is not active in the scheduler"
    info = json.loads(markers[0].read_text())
    assert info["pid"] in rt._procs.pids
    assert info["pid"] != os.getpid()
    assert info["policy_class"] == "ProgramAwareSchedulePolicy"
    assert info["eviction_strategy"] == "RetentionStrategy"
    assert info["tree_core"] == "UnifiedTreeCore"  # the Python core (Rust: RustUnifiedTreeCore)


def test_status_is_written_by_the_scheduler(rt: Any) -> None:
    status = rt.read_status()
    assert status is not None
    assert status.pid in rt._procs.pids
    assert status.errors == 0, status.last_error
    assert status.kv_capacity_tokens == 4096
    assert status.batch_slots == 1  # SGLang's max_running_requests: the door fills the batch
    assert rt.memory().batch_slots == 1


def test_engine_environment_is_not_left_in_the_server_process(rt: Any) -> None:
    # the state folder and the tree-core choice were set only while the engine was spawned
    assert rt.engine is not None
    assert os.environ.get("AGENTCONSOLE_SGLANG_STATE_DIR") is None
    assert os.environ.get("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND") != "python"

"""Replaying agent traces against a live agentconsole server, in real time.

* :func:`run_replay` (``agentconsole.replay.engine``): ``await run_replay(base_url,
  api_keys_by_tenant, programs, speed=1.0, stop_event=None, options=..., progress=...)`` plays
  each :class:`~agentconsole.sample_traces.TraceProgram` at its arrival offset: it opens the
  program, runs its LLM nodes as ``/v1/chat/completions`` calls with program headers (prompt
  text synthesised to the node's token count, ``max_tokens`` its output), its tool nodes
  through the gateway (builtin ``sleep`` tools for the recorded latency) or as agent-run
  tools reported with ``tool-calls/start|finish``, cancels it at ``cancel_at_s``, finishes
  it, and returns a :class:`ReplaySummary` (finished, cancelled, E2E p50/p95).
* :func:`run_demo` (``agentconsole.replay.demo``): what ``serve --demo`` runs in the
  background.
* The ``agentconsole replay`` command (:mod:`agentconsole.replay.command`) adds a progress bar.
"""

from __future__ import annotations

from agentconsole.replay.demo import run_demo
from agentconsole.replay.engine import assign_keys, run_replay
from agentconsole.replay.results import ProgramOutcome, ReplayOptions, ReplaySummary

__all__ = [
    "ProgramOutcome",
    "ReplayOptions",
    "ReplaySummary",
    "assign_keys",
    "run_demo",
    "run_replay",
]

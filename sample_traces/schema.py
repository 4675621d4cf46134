"""Access to ``schema.json``, the JSON Schema (2020-12) of one trace line.

The schema checks shapes and ranges for tools outside Python; the cross-field rules (DAG,
attempt timing, branch dependencies) live in :mod:`agentconsole.sample_traces.format`.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def load_schema() -> dict[str, Any]:
    """The parsed schema of one program line (a fresh dict each call; callers may mutate it)."""
    text = resources.files("agentconsole.sample_traces").joinpath("schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema

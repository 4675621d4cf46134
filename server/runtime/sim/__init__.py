"""Simulated runtime: roofline step costs, hardware presets and calibration profiles."""

from __future__ import annotations


def compiled() -> bool:
    """Whether the simulator runs from the compiled build (``scripts/compile.sh`` first on
    ``PYTHONPATH``) rather than the interpreted package."""
    from agentconsole.server.runtime.sim import engine

    return not (engine.__file__ or "").endswith(".py")

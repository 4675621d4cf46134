"""What a scenario reports: its figures, its criteria (each met or missed) and a printed table."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

# the project's one interpolation, re-exported for the scenarios' figures
from agentconsole.scheduler.metrics import percentile as percentile

Figure = int | float | str


def ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded for a table."""
    return round(seconds * 1000, 1)


@dataclass(frozen=True, slots=True)
class Criterion:
    """One pass/fail check: what it demands, whether it held, and what was seen."""

    name: str
    passed: bool
    seen: str


@dataclass(slots=True)
class Report:
    """A scenario's outcome. ``figures`` keep their insertion order (the table's rows)."""

    scenario: str
    command: str
    figures: dict[str, Figure] = field(default_factory=dict)
    criteria: list[Criterion] = field(default_factory=list)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))

    def check(self, name: str, passed: bool, seen: object) -> None:
        self.criteria.append(Criterion(name, bool(passed), str(seen)))

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.criteria)

    def table(self) -> str:
        machine = f"{os.cpu_count()} cores, {platform.machine()}, load {_load()}"
        lines = [f"== {self.scenario}  ({self.started}; {machine})", f"$ {self.command}", ""]
        width = max((len(k) for k in self.figures), default=0)
        lines += [f"  {name:<{width}}  {_show(value)}" for name, value in self.figures.items()]
        lines.append("")
        for c in self.criteria:
            lines.append(f"  {'PASS' if c.passed else 'FAIL'}  {c.name}  (seen: {c.seen})")
        lines.append(f"\n{self.scenario}: {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)

    def write_json(self, path: Path) -> None:
        body = {
            "scenario": self.scenario,
            "command": self.command,
            "started": self.started,
            "passed": self.passed,
            "figures": self.figures,
            "criteria": [
                {"name": c.name, "passed": c.passed, "seen": c.seen} for c in self.criteria
            ],
        }
        path.write_text(json.dumps(body, indent=2))


def _show(value: Figure) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if value == value else "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    return value


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"

"""The consoles' view of ``POST /v1/operator/whatif``: a window of traffic written as a trace.

The consoles ask for the window their overview charts span (:func:`chart_window`) and show
the trace's path and the ``agentconsole bench`` command that replays it under every policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentconsole.httpclient import jsonread as j

#: the feed's overview tick: one chart sample a second
TICK_S = 1.0


def chart_window(now: float, samples: int) -> float:
    """The start (unix seconds) of the window ``samples`` one-second chart samples span
    until ``now``: what "replay this window" replays."""
    return now - samples * TICK_S


@dataclass(frozen=True, slots=True)
class WindowReplay:
    """The answer: how many programs were written, where, and the bench command (``path``
    and ``command`` are None when nothing of the window ran)."""

    since: float | None
    until: float
    programs: int
    path: str | None
    command: str | None
    message: str
    run_state: str | None

    @property
    def empty(self) -> bool:
        """Whether nothing was written."""
        return self.path is None or self.programs == 0

    @staticmethod
    def parse(data: Any) -> WindowReplay:
        """Parse the answer object."""
        d = j.obj(data)
        run = j.obj(d.get("run"))
        return WindowReplay(
            since=j.opt_num(d, "since"),
            until=j.num(d, "until"),
            programs=j.integer(d, "programs"),
            path=j.opt_text(d, "path"),
            command=j.opt_text(d, "command"),
            message=j.text(d, "message"),
            run_state=j.opt_text(run, "state"),
        )

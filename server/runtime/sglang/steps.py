"""Recording engine steps for calibration (plugin side; on only while ``record_steps`` is).

One line of ``steps.jsonl`` per engine step: when its forward started (wall clock), how long
SGLang took to schedule it (``get_next_batch_to_run``), to run its forward (``run_batch``) and
to process its result (``process_batch_result``), and its composition in the cost model's
terms (prefill tokens, causal attention pairs, cached context read by the prefill, decode
batch and the context it attends to). The step time the simulator models is the sum of the
three phases: idle waits between steps are not part of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentconsole.server.runtime.sim.costmodel import attention_pairs


class StepRecorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._scheduled: dict[int, float] = {}  # id(batch) -> scheduling seconds
        self._pending: dict[int, dict[str, Any]] = {}

    def scheduled(self, batch: Any, seconds: float) -> None:
        """The scheduler formed ``batch`` in ``seconds``."""
        if batch is not None:
            self._scheduled[id(batch)] = seconds

    def forward(
        self, batch: Any, reqs: list[Any], extend: list[int], start: float, seconds: float
    ) -> None:
        """``batch``'s forward started at ``start`` (wall) and took ``seconds``; ``extend``
        holds the prefill chunk of each request (empty for a decode step)."""
        prefix = list(getattr(batch, "prefix_lens", None) or [])
        if len(prefix) != len(extend):
            prefix = [0] * len(extend)
        self._pending[id(batch)] = {
            "start": start,
            "sched_s": self._scheduled.pop(id(batch), 0.0),
            "run_s": seconds,
            "prefill_tokens": sum(extend),
            "prefill_attn_pairs": sum(map(attention_pairs, extend, prefix)),
            "prefill_context_tokens": sum(prefix),
            "prefill_context_sq": sum(n * n for n in prefix),
            "decode_batch": 0 if extend else len(reqs),
            "decode_context": 0
            if extend
            else sum(len(r.origin_input_ids) + len(r.output_ids) for r in reqs),
        }

    def result(self, batch: Any, seconds: float) -> None:
        """``batch``'s result took ``seconds`` to process: the step is complete; write it."""
        row = self._pending.pop(id(batch), None)
        self._scheduled.pop(id(batch), None)
        if row is None:
            return
        row["process_s"] = seconds
        row["seconds"] = row["sched_s"] + row["run_s"] + seconds
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")

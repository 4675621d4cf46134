"""What a test that starts a server waits for on ``/ready``: the server is *up*.

``/ready`` is 503 while an operator drains the server (docs/API.md), and a drain is remembered
across a restart: a server started on a store whose last drain was not ended is up (it
answers reads and the operator's routes, and serves again once the drain ends) but not ready.
A start-up wait that took only 200 for "up" would wait forever on it.
"""

from __future__ import annotations

import httpx

#: ``/ready``'s body when the runtime and the store are ready and only a drain is on
DRAINED_ONLY = {"runtime": True, "store": True, "draining": True}


def up(answer: httpx.Response) -> bool:
    """``answer`` (to ``GET /ready``) says the server is up: 200, or 503 for a drain alone."""
    if answer.status_code == 200:
        return True
    if answer.status_code != 503:
        return False
    try:
        return bool(answer.json() == DRAINED_ONLY)
    except ValueError:  # not JSON: something else answered
        return False

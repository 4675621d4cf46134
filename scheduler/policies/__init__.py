"""Scheduling policies: small objects in a registry, chosen by name.

Importing this package registers the built-in policies; look them up with
:func:`get_policy` and list them with :func:`available`.
"""

from agentconsole.scheduler.policies import critical_path, fcfs, las, progress, sjf
from agentconsole.scheduler.policies.base import Policy, available, get_policy, register

#: what ``serve`` and ``bench`` schedule by unless told (docs/BENCHMARKS.md section 1)
DEFAULT_POLICY = "cp-cache"

__all__ = [
    "DEFAULT_POLICY",
    "Policy",
    "available",
    "critical_path",
    "fcfs",
    "get_policy",
    "las",
    "progress",
    "register",
    "sjf",
]

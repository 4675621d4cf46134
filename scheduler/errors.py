"""Errors of the scheduler that subclass a builtin other than ``Exception``.

They live apart because the compiled build (mypyc, ``scripts/compile.sh``) cannot compile a
subclass of ``KeyError``; this module stays interpreted and the compiled controller raises
them like any other.
"""

from __future__ import annotations


class UnknownProgram(KeyError):
    """No program with this id is known to the controller."""

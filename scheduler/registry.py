"""A registry of named, pluggable classes: policies, eviction strategies, tool-wait policies.

Mechanism looks implementations up by name and never branches on one; adding a policy is a
class with a ``name`` and a ``register`` call. In modules the compiled build compiles
(``scripts/compile.sh``) the call follows the class instead of decorating it: mypyc leaves a
decorated class interpreted, and an interpreted class cannot subclass a compiled one unless the
base allows it (``mypyc_attr(allow_interpreted_subclasses=True)``, as the bases of the
strategies and tool-wait policies do, so plug-ins written in Python still subclass them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar


class Named(Protocol):
    name: str


T = TypeVar("T")
C = TypeVar("C", bound=Callable[..., Any])


class Registry(Generic[T]):
    """Factories of ``T`` by name; ``what`` names the kind in error messages."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, cls: C) -> C:
        """Make ``cls`` available under ``cls.name`` (a class decorator, or a call after the
        class); a second class with the same name is a ``ValueError``."""
        name: str = cls.name  # type: ignore[attr-defined]
        if name in self._factories:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self._factories[name] = cls
        return cls

    def create(self, name: str, **params: Any) -> T:
        """A new instance of the class registered as ``name``; ``KeyError`` lists the choices."""
        return self.factory(name)(**params)

    def factory(self, name: str) -> Callable[..., T]:
        """What was registered as ``name`` (the class); ``KeyError`` lists the choices."""
        try:
            return self._factories[name]
        except KeyError:
            choices = ", ".join(self.names())
            raise KeyError(f"unknown {self.what} {name!r}; choose from {choices}") from None

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._factories)

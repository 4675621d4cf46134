"""One SDK method written once: an :class:`endpoint` turns a request builder of
:mod:`agentconsole.client.calls` into a method that returns the answer on a blocking client
and an awaitable of it on an asynchronous one, with the builder's signature and docstring.

A client says how it sends by the type of its ``_transport``: a
:class:`~agentconsole.httpclient.SyncTransport` (:class:`Blocking`) or an
:class:`~agentconsole.httpclient.AsyncTransport` (:class:`Awaited`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Generic, ParamSpec, Protocol, Self, TypeVar, cast, overload

from agentconsole.httpclient import AsyncTransport, Call, SyncTransport

P = ParamSpec("P")
T = TypeVar("T")


class Blocking(Protocol):
    """A client whose methods send at once and return the answer."""

    @property
    def _transport(self) -> SyncTransport: ...


class Awaited(Protocol):
    """A client whose methods return a coroutine that sends and returns the answer."""

    @property
    def _transport(self) -> AsyncTransport: ...


class endpoint(Generic[P, T]):  # lower case: it reads like a decorator where it is used
    """A method of both clients, built from ``build`` (its signature and docstring)."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        functools.update_wrapper(cast(Any, self), build)  # name, docstring, __wrapped__

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, client: Blocking, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(self, client: Awaited, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, client: Blocking | Awaited | None, owner: type[Any]) -> Any:
        if client is None:
            return self
        build, transport = self.build, client._transport
        if isinstance(transport, AsyncTransport):
            awaited = transport

            async def send_later(*args: P.args, **kwargs: P.kwargs) -> T:
                return await awaited.send(build(*args, **kwargs))

            return functools.update_wrapper(send_later, build)
        blocking = transport

        def send(*args: P.args, **kwargs: P.kwargs) -> T:
            return blocking.send(build(*args, **kwargs))

        return functools.update_wrapper(send, build)

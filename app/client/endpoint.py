"""One SDK method written once: an :class:`endpoint` turns a request builder of
:mod:`agentconsole.client.calls` into a method that returns the answer on a blocking client
and an awaitable of it on an asynchronous one, with the builder's signature and docstring;
an :class:`every_page` follows a paged listing's cursors to its end.

A client says how it sends by the type of its ``_transport``: a
:class:`~agentconsole.httpclient.SyncTransport` (:class:`Blocking`) or an
:class:`~agentconsole.httpclient.AsyncTransport` (:class:`Awaited`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable
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


class Paged(Protocol):
    """A page of a listing: the cursor of the next page, None on the last one."""

    @property
    def next_cursor(self) -> str | None: ...


PageT = TypeVar("PageT", bound=Paged)
ItemT = TypeVar("ItemT")
F = TypeVar("F", bound=Callable[..., Any])


class every_page(Generic[PageT, ItemT]):  # lower case: it reads like a decorator, as endpoint
    """A method of both clients that reads a paged listing to its end: ``build(None)`` is its
    first page, ``build(page.next_cursor)`` each next one, until a page has none; it returns
    every page's ``items(page)`` in order. The method takes no arguments; its name and
    docstring are ``build``'s."""

    def __init__(
        self, build: Callable[[str | None], Call[PageT]], items: Callable[[PageT], Iterable[ItemT]]
    ) -> None:
        self.build, self.items = build, items
        functools.update_wrapper(cast(Any, self), build)

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, client: Blocking, owner: type[Any]) -> Callable[[], list[ItemT]]: ...
    @overload
    def __get__(
        self, client: Awaited, owner: type[Any]
    ) -> Callable[[], Coroutine[Any, Any, list[ItemT]]]: ...
    def __get__(self, client: Blocking | Awaited | None, owner: type[Any]) -> Any:
        if client is None:
            return self
        build, items, transport = self.build, self.items, client._transport
        if isinstance(transport, AsyncTransport):
            awaited = transport

            async def read_all_later() -> list[ItemT]:
                out: list[ItemT] = []
                cursor: str | None = None
                while True:
                    page = await awaited.send(build(cursor))
                    out.extend(items(page))
                    if page.next_cursor is None:
                        return out
                    cursor = page.next_cursor

            return _named_after(read_all_later, build)
        blocking = transport

        def read_all() -> list[ItemT]:
            out: list[ItemT] = []
            cursor: str | None = None
            while True:
                page = blocking.send(build(cursor))
                out.extend(items(page))
                if page.next_cursor is None:
                    return out
                cursor = page.next_cursor

        return _named_after(read_all, build)


def _named_after(method: F, build: Callable[..., Any]) -> F:
    """``method`` with ``build``'s name and docstring, and its own signature and annotations
    (no ``__wrapped__``: ``inspect.signature`` would show the builder's ``cursor``)."""
    functools.update_wrapper(
        method, build, assigned=("__module__", "__name__", "__qualname__", "__doc__")
    )
    del cast(Any, method).__wrapped__
    return method

"""A tiny HTTP/1.1 downstream for ``http`` tool tests, on 127.0.0.1 in the test's own loop.

It counts the requests that reach it and answers each with what ``answer`` says: a JSON body,
an error status with a body, or a chunked body that never ends (until the client hangs up).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["json", "error", "endless"]
CHUNK = b"x" * 16384


@dataclass(slots=True)
class Downstream:
    """What the server answers (``mode``, ``status``, ``body``) and what it saw."""

    mode: Mode = "json"
    status: int = 200
    body: bytes = b'{"ok": true}'
    #: pause between the chunks of an endless body
    pause_s: float = 0.0
    port: int = 0
    requests: int = 0
    #: bytes of an endless body written before the client hung up
    streamed: int = 0
    bodies: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection's first request."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            self.bodies.append(await reader.readexactly(length))
            await self._answer(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: what an endless body waits for
        finally:
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter) -> None:
        if self.mode == "endless":
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            while True:
                writer.write(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
                await writer.drain()
                self.streamed += len(CHUNK)
                await asyncio.sleep(self.pause_s)
        status = self.status if self.mode == "error" else 200
        writer.write(
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (status, len(self.body), self.body)
        )
        await writer.drain()

    def payload(self, index: int = -1) -> object:
        """The JSON a request carried."""
        return json.loads(self.bodies[index])


@asynccontextmanager
async def downstream(mode: Mode = "json", **changes: object) -> AsyncIterator[Downstream]:
    """A :class:`Downstream` listening on 127.0.0.1 (``.port``) for the block."""
    served = Downstream(mode)
    for name, value in changes.items():
        setattr(served, name, value)
    server = await asyncio.start_server(served.handle, "127.0.0.1", 0)
    served.port = server.sockets[0].getsockname()[1]
    try:
        yield served
    finally:
        server.close()

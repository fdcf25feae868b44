"""A fake "broker" on loopback that answers request frames with scripted bytes.

Tests use it to feed a client what no real broker sends: random bytes, truncated or
impossible frames, unsolicited frames, or nothing at all. The n-th accepted connection
plays the n-th script (the last one again for later connections): the k-th request frame
it reads gets the k-th :class:`Reply`; once its script is used up, requests are read and
never answered. No script at all: a server that never answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from aiokafka07.protocol import FrameSplitter
from aiokafka07.testing.hostile import LoopbackListener

__all__ = ["GarbageServer", "LoopbackServer", "Reply", "frame", "until_one_ends"]


async def until_one_ends(pipes: list[asyncio.Task[None]], upstream: asyncio.StreamWriter) -> None:
    """A proxy connection's pipes (client to upstream, upstream to client): run them
    until one ends, then stop the other and drop the upstream connection."""
    try:
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
        upstream.transport.abort()


def frame(body: bytes) -> bytes:
    """``body`` with its int32 size in front: a well-formed response frame."""
    return struct.pack(">i", len(body)) + body


class Reply(NamedTuple):
    """Bytes to write for one request (after ``delay`` seconds), then optionally close."""

    data: bytes = b""
    close: bool = False
    delay: float = 0.0


_Server = TypeVar("_Server", bound="LoopbackServer")


class LoopbackServer(LoopbackListener):
    """An asyncio server on 127.0.0.1 (an async context manager); :meth:`serve` handles
    each connection. Closing aborts every connection and waits for every handler."""

    def __init__(self) -> None:
        self._server = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self: _Server) -> _Server:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        # A connection accepted just before server.close() starts its handler a step later,
        # so look again after each round (bounded: nothing new is accepted after close()).
        for _ in range(10):
            await asyncio.sleep(0)
            if not self._handlers:
                break
            for writer in list(self._writers):
                writer.transport.abort()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            await self.serve(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            try:
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            finally:
                # Only now: close() awaits every handler still in the set, so one that
                # left it before its last await would outlive the server.
                self._handlers.discard(task)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class GarbageServer(LoopbackServer):
    """An async context manager serving ``scripts`` to connections on 127.0.0.1."""

    def __init__(self, *scripts: Sequence[Reply]) -> None:
        super().__init__()
        self.scripts = [list(script) for script in scripts]
        self.requests: list[bytes] = []  # every request frame body read, in order
        self.connections = 0

    def broadcast(self, data: bytes) -> None:
        """Write ``data`` to every open connection, unasked."""
        for writer in self._writers:
            writer.write(data)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        script = self.scripts[min(self.connections, len(self.scripts) - 1)] if self.scripts else []
        self.connections += 1
        splitter = FrameSplitter(min_size=1)
        replies = iter(script)
        while True:
            data = await reader.read(65536)
            if not data:
                break
            for body in splitter.feed(data):
                self.requests.append(body)
                reply = next(replies, None)
                if reply is None:
                    continue  # out of script: read, never answer
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                if reply.data:
                    writer.write(reply.data)
                    await writer.drain()
                if reply.close:
                    return

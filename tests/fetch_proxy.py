"""A TCP proxy on loopback in front of a real broker that spoils chosen MULTIFETCH answers.

Requests pass through unchanged; answers pass through unchanged, except that the answer to
the n-th MULTIFETCH request (counted over all connections, from 1) listed in ``spoil`` is
replaced by the bytes given for it. 0.7 answers requests in order, and PRODUCE /
MULTIPRODUCE get no answer, so the proxy pairs answers with requests by keeping the types
of the requests that await one in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque

from aiokafka07.protocol import FrameSplitter, RequestType

__all__ = ["FetchSpoilingProxy"]

_NO_ANSWER = (RequestType.PRODUCE, RequestType.MULTIPRODUCE)


class FetchSpoilingProxy:
    """An async context manager listening on 127.0.0.1 (``host``, ``port``)."""

    def __init__(self, host: str, port: int, spoil: dict[int, bytes]) -> None:
        self.target = (host, port)
        self.spoil = dict(spoil)
        self.multifetches = 0  # MULTIFETCH requests seen so far
        self.spoiled = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def __aenter__(self) -> FetchSpoilingProxy:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers.update((writer, up_writer))
        awaited: deque[int | None] = deque()  # per awaited answer: its MULTIFETCH number
        tasks = [
            asyncio.create_task(self._requests(reader, up_writer, awaited)),
            asyncio.create_task(self._answers(up_reader, writer, awaited)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()

    async def _requests(
        self, reader: asyncio.StreamReader, out: asyncio.StreamWriter, awaited: deque[int | None]
    ) -> None:
        splitter = FrameSplitter(min_size=2)
        while data := await reader.read(65536):
            for body in splitter.feed(data):
                (kind,) = struct.unpack_from(">h", body)
                if kind == RequestType.MULTIFETCH:
                    self.multifetches += 1
                    awaited.append(self.multifetches)
                elif kind not in _NO_ANSWER:
                    awaited.append(None)
                out.write(struct.pack(">i", len(body)) + body)
            await out.drain()

    async def _answers(
        self, reader: asyncio.StreamReader, out: asyncio.StreamWriter, awaited: deque[int | None]
    ) -> None:
        splitter = FrameSplitter(min_size=2)
        while data := await reader.read(65536):
            for body in splitter.feed(data):
                number = awaited.popleft()
                if number in self.spoil:
                    self.spoiled += 1
                    out.write(self.spoil.pop(number))
                else:
                    out.write(struct.pack(">i", len(body)) + body)
            await out.drain()

"""A TCP proxy on loopback in front of a real broker that spoils chosen MULTIFETCH answers.

Requests pass through unchanged; answers pass through unchanged, except that the answer to
the n-th MULTIFETCH request (counted over all connections, from 1) listed in ``spoil`` is
replaced by the bytes given for it. 0.7 answers requests in order, and PRODUCE /
MULTIPRODUCE get no answer, so the proxy pairs answers with requests by keeping the types
of the requests that await one in order.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque

from aiokafka07.protocol import FrameSplitter, RequestType

from .garbage_server import LoopbackServer, until_one_ends

__all__ = ["FetchSpoilingProxy"]

_NO_ANSWER = (RequestType.PRODUCE, RequestType.MULTIPRODUCE)


class FetchSpoilingProxy(LoopbackServer):
    """An async context manager listening on 127.0.0.1 (``host``, ``port``)."""

    def __init__(self, host: str, port: int, spoil: dict[int, bytes]) -> None:
        super().__init__()
        self.target = (host, port)
        self.spoil = dict(spoil)
        self.multifetches = 0  # MULTIFETCH requests seen so far
        self.spoiled = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        awaited: deque[int | None] = deque()  # per awaited answer: its MULTIFETCH number
        pipes = [
            asyncio.create_task(self._requests(reader, up_writer, awaited)),
            asyncio.create_task(self._answers(up_reader, writer, awaited)),
        ]
        await until_one_ends(pipes, up_writer)

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

"""A raw TCP peer for broker tests: send exact bytes, read exact frames, see EOF; and
what tests of real processes wait with (:func:`eventually`, :func:`stopped`)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka07.connection import BrokerAddress
from aiokafka07.protocol import FrameSplitter, encode_offsets_request
from aiokafka07.testing import KafkaCluster

EOF_MARK = b"<eof>"


def address_of(cluster: KafkaCluster, broker_id: int = 0) -> BrokerAddress:
    """Where a broker of an embedded cluster listens."""
    broker = cluster.broker(broker_id)
    return BrokerAddress(broker_id, broker.host, broker.port)


async def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``check`` (plain or async) until it returns something truthy; return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.01)


def stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` is stopped (state T in /proc): a SIGSTOP
    has taken effect."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError):
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state in ("T", "t") for state in states)


async def sigstop(pid: int, timeout: float = 10.0) -> None:
    """Stop process ``pid`` with SIGSTOP; return once the stop has taken effect (the
    caller sends SIGCONT, also when it fails)."""
    os.kill(pid, signal.SIGSTOP)
    await eventually(lambda: stopped(pid), timeout)


#: Coroutines of the servers' connection handlers: the embedded broker's, and the test
#: servers' (tests/garbage_server.py).
SERVER_HANDLERS = ("Broker._serve", "LoopbackServer._accept")
#: A ZooKeeper session's ping: every live session (the test's own, a producer's, an
#: embedded broker's) starts one every third of its timeout, so one of a session older
#: than ``before`` may be pending at any moment. A session a client leaked still shows:
#: its repair loop (``Session.repair_loop``) runs until the session is closed.
ZOOKEEPER_PINGS = ("Session.heartbeat",)


def client_tasks(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks started since ``before`` and not done, except the servers' connection
    handlers (a server notices a connection closed by a client some event-loop iterations
    after the client's close() returned; since Python 3.12, whose wait_for no longer runs
    the awaitable in a task of its own, a close returns two iterations sooner) and the
    pings of ZooKeeper sessions (:data:`ZOOKEEPER_PINGS`)."""
    ignored = SERVER_HANDLERS + ZOOKEEPER_PINGS
    return {
        t
        for t in asyncio.all_tasks() - before
        if not t.done() and t.get_coro().__qualname__ not in ignored  # type: ignore[union-attr]
    }


class RawConnection:
    """One client socket to a broker, speaking bytes (no client library in between)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.splitter = FrameSplitter(min_size=1)
        self.frames: list[bytes] = []
        self.raw = bytearray()

    @classmethod
    async def open(cls, host: str, port: int) -> RawConnection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def frame(self, timeout: float = 5.0) -> bytes:
        """The next response frame, whole (size prefix included), or EOF_MARK at EOF."""
        while not self.frames:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                return EOF_MARK
            self.raw += data
            self.frames += self.splitter.feed(data)
        body = self.frames.pop(0)
        return len(body).to_bytes(4, "big") + body

    async def closed_by_peer(self, timeout: float = 2.0) -> bool:
        """True if the broker closes the connection (EOF) within ``timeout``."""
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except asyncio.TimeoutError:
            return False
        except ConnectionError:
            return True
        if data:
            raise AssertionError(f"unexpected bytes from the broker: {data!r}")
        return True

    async def latest(self, topic: str = "wire", partition: int = 0) -> bytes:
        """Send OFFSETS(time -1, max 1) and return the whole response frame."""
        await self.send(encode_offsets_request(topic, partition, -1, 1))
        return await self.frame()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()

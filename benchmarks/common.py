"""Shared by the benchmark scripts: an embedded broker in its own process (so the broker
and the client measured each get a core and do not share a GIL), backlogs written as 0.7.2
segment files before it starts, the median-and-spread summary every figure uses, a timed
run (CPU and wall seconds), and the machine's load.

No script prints a verdict against a fixed number: what one machine does at one moment
says little on another, so every figure that compares is a ratio to a floor or a peer
measured in the same run, interleaved with it, over repetitions (median and min..max),
with the load average before and after."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from aiokafka07.broker.log import segment_file_name
from aiokafka07.group.consumer import Consumer
from aiokafka07.protocol import (
    FetchRequest,
    Message,
    decode_messages_into,
    decode_multifetch_response,
    encode_multifetch_request,
)
from aiokafka07.protocol.messages import count_message_set
from aiokafka07.testing.flush import flush_properties
from aiokafka07.testing.process import start_broker_process
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

__all__ = [
    "LOOPS",
    "RawFetcher",
    "Run",
    "add_loop_option",
    "count_batches",
    "count_checked",
    "count_records",
    "load",
    "on_each_loop",
    "ratios",
    "spread",
    "start_broker",
    "timed",
    "write_segments",
]


async def start_broker(
    log_dir: str,
    *,
    partitions: int = 1,
    settings: dict[str, str] | None = None,
    zookeeper: str | None = None,
    broker_id: int = 0,
    flush: str = "shipped",
) -> tuple[asyncio.subprocess.Process, int]:
    """Start ``python -m aiokafka07 broker`` (no fsync, 4 MiB socket buffers; registered
    in ``zookeeper`` if given); return it and its port. ``flush`` names how it flushes
    (:mod:`aiokafka07.testing.flush`): by default as 0.7.2's shipped
    ``server.properties`` (every 10,000 messages, or about every second), what real
    clusters run; ``settings`` (``server.properties`` keys) override anything."""
    options = {
        "socket.send.buffer": "4194304",
        "socket.receive.buffer": "4194304",
        **flush_properties(flush),
        **(settings or {}),
    }
    process, address = await start_broker_process(
        log_dir, broker_id=broker_id, partitions=partitions, zookeeper=zookeeper, settings=options
    )
    return process, address.port


def spread(values: Sequence[float]) -> dict[str, float]:
    """The median of repeated measurements, with their min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratios(values: Sequence[float], floors: Sequence[float]) -> dict[str, float]:
    """:func:`spread` of ``value / floor`` per repetition (each value over the floor
    measured next to it)."""
    return spread([v / f for v, f in zip(values, floors, strict=True)])


def milliseconds(f: dict[str, float]) -> str:
    """A :func:`spread` of seconds in milliseconds: ``12.3 ms (11.0..15.2)``."""
    return f"{f['median'] * 1000:.1f} ms ({f['min'] * 1000:.1f}..{f['max'] * 1000:.1f})"


async def commit_offsets(connect: str, offsets: Mapping[tuple[str, str, int, int], int]) -> None:
    """Commit each (group, topic, broker, partition) → offset in ZooKeeper at ``connect``,
    500 at a time (the exporter's benchmarks' groups)."""
    async with ZooKeeper(connect) as zk:
        commits = [
            GroupRegistry(zk, group).commit(topic, f"{b}-{p}", offset)
            for (group, topic, b, p), offset in offsets.items()
        ]
        for start in range(0, len(commits), 500):
            await asyncio.gather(*commits[start : start + 500])


def load() -> list[float]:
    """The load average over 1, 5 and 15 minutes (printed before and after a run)."""
    return list(os.getloadavg())


class Run:
    """One timed read or write: CPU seconds of this process and wall seconds for
    ``count`` messages."""

    def __init__(self, count: int, cpu: float, wall: float) -> None:
        self.count, self.cpu, self.wall = count, cpu, wall

    @property
    def cpu_us(self) -> float:
        """CPU microseconds per message."""
        return self.cpu / self.count * 1e6

    @property
    def rate(self) -> float:
        """Messages per wall-clock second."""
        return self.count / self.wall


async def timed(work: Callable[[], Awaitable[int]]) -> Run:
    """Run ``work`` (which returns how many messages it handled) and time it."""
    cpu, wall = time.process_time(), time.perf_counter()
    count = await work()
    return Run(count, time.process_time() - cpu, time.perf_counter() - wall)


def write_segments(
    log_dir: Path, topic: str, partitions: int, chunk: bytes, sets: int
) -> list[int]:
    """Backlog for a broker not yet started: ``sets`` copies of the message set ``chunk``
    in one 0.7.2 segment file ``<log.dir>/<topic>-<p>/00000000000000000000.kafka`` per
    partition (the broker's recovery validates them). Returns each partition's size."""
    sizes = []
    for p in range(partitions):
        directory = log_dir / f"{topic}-{p}"
        directory.mkdir(parents=True)
        with open(directory / segment_file_name(0), "wb") as segment:
            for _ in range(sets):
                segment.write(chunk)
            sizes.append(segment.tell())
    return sizes


class _Frames(asyncio.BufferedProtocol):
    """Size-prefixed frames read straight into one buffer each (no stream buffer, no
    copies): the cheapest way asyncio offers to take a large answer off a socket."""

    def __init__(self) -> None:
        self.head = bytearray(4)
        self.body: bytearray | None = None
        self.pos = 0
        self.waiter: asyncio.Future[bytearray] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's do not subclass it
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.head if self.body is None else self.body)[self.pos :]

    def buffer_updated(self, nbytes: int) -> None:
        self.pos += nbytes
        if self.body is None and self.pos == 4:
            self.body, self.pos = bytearray(int.from_bytes(self.head, "big")), 0
        if self.body is not None and self.pos == len(self.body):
            frame, self.body, self.pos = self.body, None, 0
            assert self.waiter is not None, "an answer nobody asked for"
            self.waiter.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("the broker closed the connection"))

    async def request(self, frame: bytes) -> bytearray:
        """Write ``frame``; its answer (one at a time: the floor pipelines nothing)."""
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(frame)
        return await self.waiter


class RawFetcher:
    """The consumer floors' client: the cheapest honest way to read partitions of one
    broker from asyncio, with no component of aiokafka07's but the codec. One bare
    connection (an ``asyncio.BufferedProtocol`` reading each answer into one buffer of
    its size); one MULTIFETCH for every partition not yet at its end, the next one written
    as soon as the answer before it is decoded (with the same C decoder the consumers use,
    CRCs checked, compressed wrappers expanded). It trusts its broker: no bounds, no
    timeouts, no retries, which a real client must have."""

    def __init__(self, protocol: _Frames) -> None:
        self.protocol = protocol

    @classmethod
    async def open(cls, port: int) -> RawFetcher:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(_Frames, "127.0.0.1", port)
        return cls(protocol)

    async def close(self) -> None:
        if self.protocol.transport is not None:
            self.protocol.transport.close()

    async def batches(
        self, topic: str, partitions: Sequence[int], max_size: int
    ) -> AsyncIterator[list[Message]]:
        """One decoded list per partition answer that holds messages, from offset 0 until
        every partition's answer is empty (the end of a backlog)."""
        offsets = dict.fromkeys(partitions, 0)
        while offsets:
            fetches = [FetchRequest(topic, p, offset, max_size) for p, offset in offsets.items()]
            frame = await self.protocol.request(encode_multifetch_request(fetches))
            # A view: the message sets are decoded where they lie, never copied.
            answer = decode_multifetch_response(memoryview(frame), len(fetches))
            decoded = []
            for fetch, response in zip(fetches, answer.responses, strict=True):
                if response.error_code:
                    raise RuntimeError(f"fetch of {fetch} failed: {response.error_code}")
                messages: list[Message] = []
                valid = decode_messages_into(messages, response.message_set, fetch.offset)
                if valid:
                    offsets[fetch.partition] += valid
                    decoded.append(messages)
                else:
                    del offsets[fetch.partition]
            for messages in decoded:
                yield messages

    async def checked(
        self, topic: str, partitions: Sequence[int], max_size: int
    ) -> AsyncIterator[tuple[int, int]]:
        """The least any checking consumer does: the same MULTIFETCH loop, each answer's
        message set walked in C without a Python object per message (``count_message_set``,
        the exporter's message count): every size, magic byte and CRC checked, compressed
        wrappers expanded and the CRC of every message inside them checked too. Yields
        ``(messages, bytes checked)`` per partition answer that holds messages."""
        offsets = dict.fromkeys(partitions, 0)
        while offsets:
            fetches = [FetchRequest(topic, p, offset, max_size) for p, offset in offsets.items()]
            frame = await self.protocol.request(encode_multifetch_request(fetches))
            answer = decode_multifetch_response(memoryview(frame), len(fetches))
            counted = []
            for fetch, response in zip(fetches, answer.responses, strict=True):
                if response.error_code:
                    raise RuntimeError(f"fetch of {fetch} failed: {response.error_code}")
                messages, valid = count_message_set(response.message_set)
                if valid:
                    offsets[fetch.partition] += valid
                    counted.append((messages, valid))
                else:
                    del offsets[fetch.partition]
            for count in counted:
                yield count

    async def records(
        self, topic: str, partitions: Sequence[int], max_size: int
    ) -> AsyncIterator[Message]:
        """The same, one record at a time from an async generator (the shape of
        ``async for record in consumer``)."""
        async for messages in self.batches(topic, partitions, max_size):
            for message in messages:
                yield message


async def count_batches(batches: AsyncIterator[list[Message]]) -> int:
    """Messages in every list (the work of a ``getmany()`` / ``batches()`` reader)."""
    count = 0
    async for messages in batches:
        count += len(messages)
    return count


async def count_checked(counts: AsyncIterator[tuple[int, int]]) -> int:
    """Messages (and bytes) of every checked answer (the work of a checking floor)."""
    count = size = 0
    async for messages, checked in counts:
        count += messages
        size += checked
    return count


async def count_records(records: AsyncIterator[Message]) -> int:
    """Records, every value touched (the work of an ``async for`` reader)."""
    count = size = 0
    async for record in records:
        count += 1
        size += len(record.value)
    return count


#: The event loops a benchmark can run on: asyncio's own, and uvloop when installed
#: (the ``uvloop`` extra).
LOOPS = ("asyncio", "uvloop")


def add_loop_option(parser: argparse.ArgumentParser) -> None:
    """``--loop``: asyncio, uvloop, or both (the default when uvloop is installed)."""
    both = importlib.util.find_spec("uvloop") is not None
    parser.add_argument(
        "--loop",
        choices=(*LOOPS, "both"),
        default="both" if both else "asyncio",
        help="the event loop(s) to run on, one after the other (default: both when uvloop "
        "is installed, else asyncio)",
    )


def on_each_loop(
    choice: str, main: Callable[[], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any]:
    """Run the benchmark ``main()`` once on each chosen loop, one after the other; every
    ratio is taken within one loop's run. Returns ``{"loops": {name: figures}}``."""
    names = LOOPS if choice == "both" else (choice,)
    results: dict[str, Any] = {}
    for name in names:
        if name == "uvloop":
            import uvloop

            results[name] = uvloop.run(main())
        else:
            results[name] = asyncio.run(main())
    return {"loops": results}


_groups = itertools.count()


def fresh_member(connect: str, topic: str, idle_ms: float) -> Consumer:
    """A member of a group of its own (a new one each call), reading ``topic`` from its
    start; iteration ends after ``idle_ms`` without records."""
    return Consumer(
        topic,
        group=f"bench-{next(_groups)}",
        zookeeper=connect,
        auto_offset_reset="smallest",
        consumer_timeout_ms=idle_ms,
    )

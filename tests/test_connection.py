"""BrokerConnection over real sockets: pipelining, cancellation, failures, produce and
confirm mode, client-side size checks, every broker edge case of PROTOCOL §10.3/§10.4
and §11, and garbage from a fake broker."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokafka07.connection import (
    READ_SIZE,
    WRITE_ALONE,
    BrokerAddress,
    BrokerConnection,
    check_message_sizes,
    write_chunks,
)
from aiokafka07.errors import (
    InvalidMessageError,
    InvalidMessageSizeError,
    InvalidPartitionError,
    KafkaConnectionError,
    KafkaError,
    MalformedFrameError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    ProduceNotConfirmedError,
    ProtocolError,
    RequestTimeoutError,
    UnknownError,
)
from aiokafka07.protocol import (
    EARLIEST,
    LATEST,
    FetchRequest,
    FetchResponse,
    FrameSplitter,
    decode_fetch_response,
    decode_message_set,
    encode_fetch_request,
    encode_fetch_response,
    encode_message_set,
    encode_multifetch_response,
    encode_offsets_request,
    encode_offsets_response,
    encode_produce_request,
    encode_wrapper,
    entry_size,
)
from aiokafka07.testing import KafkaCluster

from .garbage_server import GarbageServer, Reply, frame
from .wire import address_of, eventually

Factory = Callable[..., KafkaCluster]


async def connect(cluster: KafkaCluster, **options: Any) -> BrokerConnection:
    return await BrokerConnection.open(address_of(cluster), **options)


def values(response: FetchResponse, offset: int) -> list[bytes]:
    return [m.value for m in response.decode(offset).messages]


def set_offsets(start: int, payloads: list[bytes]) -> list[int]:
    """The 0.7.2 "next offset" of every message of an uncompressed set at ``start``."""
    result, position = [], start
    for payload in payloads:
        position += entry_size(len(payload))
        result.append(position)
    return result


def is_closed(conn: BrokerConnection) -> bool:
    """``conn.closed``, unnarrowed (mypy takes the property for a constant)."""
    return conn.closed


async def bounded(awaitable: Awaitable[Any], timeout: float = 10.0) -> Any:
    return await asyncio.wait_for(awaitable, timeout)


# -- pipelining ----------------------------------------------------------------------------


def test_a_long_frame_is_written_alone_and_short_ones_together() -> None:
    """A produce frame goes to the transport as it is (joining it with the probe behind
    it copied the whole frame each request); a run of short frames is one write."""
    big, other = b"p" * WRITE_ALONE, b"q" * (WRITE_ALONE + 1)
    probe, request = b"o" * 30, b"r" * 40
    chunks = write_chunks([probe, request, big, probe, other, request, probe])
    assert chunks == [probe + request, big, probe, other, request + probe]
    assert chunks[1] is big
    assert chunks[3] is other
    assert write_chunks([big, probe])[0] is big
    single = [probe]
    assert write_chunks(single) is single
    assert b"".join(write_chunks([probe, big, request])) == probe + big + request


async def test_produces_queued_while_a_reading_is_under_way_share_the_next(
    cluster: KafkaCluster,
) -> None:
    """Confirm mode reads the partition's end behind a produce; the produces queued while
    that reading is under way share the next reading instead of one each (a probe per
    produce doubled the requests, their answers and their bookkeeping). Each is still
    confirmed, at an end that shows every byte up to it, and the log holds them all."""
    conn = await connect(cluster)
    batches = [[b"shared %d" % i] for i in range(50)]
    frames = [encode_produce_request("coalesced", 0, encode_message_set(b)) for b in batches]
    futures = [conn.submit_produce(frame, confirm=True) for frame in frames]
    ends = await bounded(asyncio.gather(*futures))
    own = list(itertools.accumulate(len(encode_message_set(b)) for b in batches))
    assert all(end >= mine and end in own for end, mine in zip(ends, own, strict=True)), ends
    response = await conn.fetch("coalesced", 0, 0, 1 << 20)
    assert values(response, 0) == [b[0] for b in batches]
    # 50 produces, the base reading in front of the first, a reading behind it, one
    # behind the 49 queued meanwhile, and the polls while a flush is awaited (a probe
    # per produce: 50 more), then the fetch.
    assert conn.requests_sent <= 50 + 3 + 10 + 1, conn.requests_sent
    await conn.close()


async def test_hundreds_of_interleaved_requests_are_each_matched_to_their_answer(
    cluster: KafkaCluster,
) -> None:
    conn = await connect(cluster)
    topic = "pipe"
    ends = [0, 0]
    logged: list[list[bytes]] = [[], []]
    calls: list[Awaitable[Any]] = []
    expected: list[tuple[str, Any]] = []
    frames = 0
    confirmed: set[int] = set()
    boundaries: list[set[int]] = [set(), set()]  # each partition's ends after each produce
    confirms = 0
    for k in range(150):
        p = k % 2
        payloads = [b"%d:%d" % (k, j) * (j + 1) for j in range(k % 3 + 1)]
        start, size = ends[p], len(encode_message_set(payloads))
        ends[p] += size
        logged[p] += payloads
        boundaries[p].add(ends[p])
        if k % 5 == 0:
            calls.append(conn.produce(topic, p, payloads, confirm=True))
            expected.append(("confirm", (p, ends[p])))
            frames += 1
            confirms += 1  # and a reading behind it, or shared with the next
            if p not in confirmed:
                confirmed.add(p)
                frames += 1  # the partition's first: an OFFSETS probe in front (its base)
        else:
            calls.append(conn.produce(topic, p, payloads))
            expected.append(("produce", None))
            frames += 1
        calls.append(conn.offsets(topic, p, LATEST))
        expected.append(("offsets", (ends[p],)))
        calls.append(conn.fetch(topic, p, start, size))
        expected.append(("fetch", (start, payloads, set_offsets(start, payloads), size)))
        frames += 2
        if k % 10 == 9:
            calls.append(
                conn.multifetch([FetchRequest(topic, 0, 0, 1 << 20), FetchRequest(topic, 1, 0, 1)])
            )
            expected.append(("multifetch", (list(logged[0]), ends[0])))
            frames += 1

    answers = await bounded(asyncio.gather(*calls))

    assert len(answers) == len(expected) > 400
    for i, (answer, (kind, want)) in enumerate(zip(answers, expected, strict=True)):
        if kind == "confirm":
            # The log end a reading behind the produce saw: the produce's own end, or
            # that of a produce queued after it (produces queued while a reading is under
            # way share the next one).
            p, end = want
            assert answer in boundaries[p], (i, kind, answer)
            assert answer >= end, (i, kind, answer, end)
        elif kind in ("produce", "offsets"):
            assert answer == want, (i, kind)
        elif kind == "fetch":
            start, payloads, offsets, size = want
            assert answer.error_code == 0, i
            decoded = answer.decode(start)
            assert [m.value for m in decoded.messages] == payloads, i
            assert [m.offset for m in decoded.messages] == offsets, i
            assert decoded.valid_bytes == size, i
        else:
            everything, end = want
            first, second = answer.responses
            assert first.error_code == 0
            decoded = first.decode(0)
            assert [m.value for m in decoded.messages] == everything, i
            assert decoded.valid_bytes == end, i
            # One byte of partition 1: a partial first message, returned as error 0.
            assert second.error_code == 0
            assert len(second.message_set) == 1
    # Each partition's confirmed produces had at least one reading behind them, and at
    # most one each.
    assert frames + 2 <= conn.requests_sent <= frames + confirms
    assert conn.in_flight == 0
    await conn.close()
    assert conn.closed


async def test_many_tasks_pipelining_large_responses_split_over_many_reads(
    cluster: KafkaCluster,
) -> None:
    conn = await connect(cluster)
    rng = random.Random(1)
    payloads = [rng.randbytes(rng.randrange(1, 200_000)) for _ in range(40)]
    await conn.produce("big", 0, payloads, confirm=True)
    offsets = [0, *set_offsets(0, payloads)]

    async def worker(w: int) -> None:
        for j in range(15):
            i = (w * 7 + j * 3) % len(payloads)
            if j % 3 == 2:
                assert await conn.offsets("big", 0, LATEST) == (offsets[-1],)
            else:
                response = await conn.fetch("big", 0, offsets[i], offsets[i + 1] - offsets[i])
                assert values(response, offsets[i]) == [payloads[i]], (w, j)

    await bounded(asyncio.gather(*(worker(w) for w in range(20))))
    assert conn.requests_sent == 1 + 2 + 20 * 15  # the produce and its two probes
    await conn.close()


async def test_a_large_answer_is_read_in_place_and_request_still_returns_bytes(
    cluster: KafkaCluster,
) -> None:
    """A fetch answer over FrameSplitter.COLLECT_FROM is read straight into its own
    buffer (the decoded set is a view of the bytearray the socket wrote into, with no
    copy); ``request()`` keeps returning ``bytes``; small answers are bytes as before."""
    conn = await connect(cluster)
    payloads = [bytes([i % 251]) * 1000 for i in range(300)]  # ~300 KB
    await conn.produce("inplace", 0, payloads, confirm=True)
    size = len(encode_message_set(payloads))
    assert size > FrameSplitter.COLLECT_FROM + READ_SIZE

    large = await conn.fetch("inplace", 0, 0, size)
    assert type(large.message_set.obj) is bytearray
    assert values(large, 0) == payloads
    small = await conn.fetch("inplace", 0, 0, entry_size(1000))
    assert type(small.message_set.obj) is bytes
    assert values(small, 0) == payloads[:1]
    body = await conn.request(encode_fetch_request("inplace", 0, 0, size))
    assert type(body) is bytes
    assert values(decode_fetch_response(body), 0) == payloads
    await conn.close()


# -- cancellation ------------------------------------------------------------------------


async def test_cancelling_some_pipelined_requests_keeps_the_fifo_aligned(
    cluster: KafkaCluster,
) -> None:
    conn = await connect(cluster)
    payloads = [b"message-%03d" % i for i in range(60)]
    await conn.produce("cx", 0, payloads, confirm=True)
    await conn.produce("cx", 1, [b"only"], confirm=True)
    offsets = [0, *set_offsets(0, payloads)]
    sent_before = conn.requests_sent

    tasks: list[asyncio.Task[Any]] = []
    wanted: list[Any] = []
    for k in range(300):
        if k % 2:
            i = k % len(payloads)
            tasks.append(asyncio.ensure_future(conn.fetch("cx", 0, offsets[i], 1 << 16)))
            wanted.append(payloads[i:])
        else:
            tasks.append(asyncio.ensure_future(conn.offsets("cx", k % 4 // 2, LATEST)))
            wanted.append((offsets[-1],) if k % 4 == 0 else (entry_size(4),))

    picks = list(range(300))
    random.Random(3).shuffle(picks)  # both kinds of request in every group
    never_started = set(picks[:30])  # cancelled before their first step
    for i in never_started:
        tasks[i].cancel()
    await asyncio.sleep(0)  # every other task has queued its request; nothing written yet
    assert conn.requests_sent == sent_before
    queued_only = set(picks[30:60])  # cancelled while queued: must never be written
    for i in queued_only:
        assert tasks[i].cancel()
    await asyncio.sleep(0)  # the flush
    written = 300 - len(never_started) - len(queued_only)
    assert conn.requests_sent == sent_before + written
    # Cancelled once written, before the answers came: they keep their place; the
    # answers are read and dropped.
    after_write = set(picks[60:90])
    for i in after_write:
        assert tasks[i].cancel()

    results = await bounded(asyncio.gather(*tasks, return_exceptions=True))
    cancelled = never_started | queued_only | after_write
    for i, (result, want) in enumerate(zip(results, wanted, strict=True)):
        if i in cancelled:
            assert isinstance(result, asyncio.CancelledError), i
        elif isinstance(want, tuple):
            assert result == want, i
        else:
            start = offsets[payloads.index(want[0])]
            assert values(result, start) == want, i

    # The connection is still aligned: later answers belong to later requests.
    assert not conn.closed
    assert await conn.offsets("cx", 1, LATEST) == (entry_size(4),)
    assert values(await conn.fetch("cx", 0, offsets[59], 100), offsets[59]) == [payloads[59]]
    assert values(await conn.fetch("cx", 1, 0, 100), 0) == [b"only"]
    assert conn.in_flight == 0
    await conn.close()


async def test_a_cancelled_confirmed_produce_still_produces_and_keeps_alignment(
    cluster: KafkaCluster,
) -> None:
    conn = await connect(cluster)
    task = asyncio.ensure_future(conn.produce("cp", 0, [b"a"], confirm=True))
    await asyncio.sleep(0)
    assert task.cancel()  # queued, not written: the produce is written all the same
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await conn.offsets("cp", 0, LATEST) == (entry_size(1),)
    # The produce, its two probes (the ledger keeps counting it) and the OFFSETS above.
    assert conn.requests_sent == 4
    await conn.close()


# -- failures ------------------------------------------------------------------------------


async def test_broker_crash_fails_every_outstanding_request(cluster: KafkaCluster) -> None:
    conn = await connect(cluster)
    payloads = [b"v%d" % i for i in range(30)]
    await conn.produce("crash", 0, payloads, confirm=True)
    offsets = [0, *set_offsets(0, payloads)]
    tasks = [
        asyncio.ensure_future(
            conn.fetch("crash", 0, offsets[k % 30], 1 << 16)
            if k % 2
            else conn.offsets("crash", 0, LATEST)
        )
        for k in range(400)
    ]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert conn.requests_sent == 3 + 400  # all written
    await cluster.crash_broker(0)
    results = await bounded(asyncio.gather(*tasks, return_exceptions=True), 5)

    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures
    for k, result in enumerate(results):
        if isinstance(result, BaseException):
            assert type(result) is KafkaConnectionError, (k, result)
            assert result.maybe_delivered, k
            assert result.broker == str(address_of(cluster))
        elif k % 2:
            assert values(result, offsets[k % 30]) == payloads[k % 30 :]
        else:
            assert result == (offsets[-1],)
    assert conn.closed
    assert conn.in_flight == 0
    # At once, not after a reconnect or a request timeout (30 s): bounded() fails a hang.
    with pytest.raises(KafkaConnectionError) as info:
        await bounded(conn.offsets("crash", 0, LATEST), 5)
    assert not info.value.maybe_delivered
    with pytest.raises(KafkaConnectionError):
        await conn.produce("crash", 0, [b"x"])
    await bounded(conn.close(), 2)


async def test_abort_fails_queued_requests_as_not_delivered(cluster: KafkaCluster) -> None:
    conn = await connect(cluster)
    tasks = [asyncio.ensure_future(conn.offsets("ab", 0, LATEST)) for _ in range(20)]
    await asyncio.sleep(0)  # queued, not yet written
    conn.abort()
    results = await bounded(asyncio.gather(*tasks, return_exceptions=True), 2)
    for result in results:
        assert isinstance(result, KafkaConnectionError)
        assert not result.maybe_delivered
    assert conn.requests_sent == 0
    assert conn.closed
    await bounded(conn.close(), 2)


async def test_request_timeout_closes_the_connection_and_fails_the_rest() -> None:
    async with GarbageServer() as server:  # reads requests, never answers
        conn = await BrokerConnection.open(
            BrokerAddress(None, server.host, server.port), request_timeout_ms=300
        )
        started = time.monotonic()
        first = asyncio.ensure_future(conn.offsets("t", 0, LATEST))
        await asyncio.sleep(0.1)
        others = [asyncio.ensure_future(conn.fetch("t", 0, 0, 100)) for _ in range(5)]
        with pytest.raises(RequestTimeoutError) as info:
            await bounded(first, 10)
        assert time.monotonic() - started >= 0.25  # not before its timeout
        assert info.value.maybe_delivered
        # The others failed with the first timeout, not after their own 0.3 s (which ends
        # 0.1 s later at the earliest): they are done as soon as the first is.
        assert all(other.done() for other in others)
        results = await bounded(asyncio.gather(*others, return_exceptions=True), 5)
        for result in results:
            assert isinstance(result, KafkaConnectionError)
            assert result.maybe_delivered
        assert conn.closed
        with pytest.raises(KafkaConnectionError):
            await conn.offsets("t", 0, LATEST)
        await bounded(conn.close(), 2)
        assert len(server.requests) == 6


async def test_each_request_times_out_at_its_own_deadline_under_one_timer() -> None:
    """Requests awaiting answers share one timer, set for the oldest one not answered:
    an answered request's deadline passes without effect, the next one's fails the
    connection on time (not at the first deadline, not later), and a hundred requests
    waiting keep one timer scheduled, not one each."""
    answer = frame(struct.pack(">hiq", 0, 1, 0))  # OFFSETS: no error, one offset: 0
    async with GarbageServer([Reply(answer)]) as server:  # answers the first request only
        conn = await BrokerConnection.open(
            BrokerAddress(None, server.host, server.port), request_timeout_ms=400
        )
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        assert await bounded(conn.offsets("t", 0, LATEST), 5) == (0,)
        await asyncio.sleep(0.2)
        second = asyncio.ensure_future(conn.offsets("t", 0, LATEST))
        others = [asyncio.ensure_future(conn.fetch("t", 0, 0, 100)) for _ in range(100)]
        await asyncio.sleep(0.05)
        scheduled = getattr(loop, "_scheduled", None)  # asyncio's own loop (not uvloop)
        if scheduled is not None:
            mine = [h for h in scheduled if getattr(h._callback, "__self__", None) is conn]
            assert len(mine) == 1
        with pytest.raises(RequestTimeoutError):
            await bounded(second, 10)
        waited = time.monotonic() - started
        assert 0.55 <= waited < 2.0  # its own deadline (0.6 s), not the first's (0.4 s)
        results = await bounded(asyncio.gather(*others, return_exceptions=True), 5)
        assert all(isinstance(r, KafkaConnectionError) and r.maybe_delivered for r in results)
        assert conn.closed
        await bounded(conn.close(), 2)
        assert len(server.requests) == 102


async def test_connect_refused_is_a_typed_error_never_delivered() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = sock.getsockname()[1]
        address = BrokerAddress(3, "127.0.0.1", port)
        with pytest.raises(KafkaConnectionError) as info:
            await bounded(BrokerConnection.open(address), 5)
        assert not info.value.maybe_delivered
        assert info.value.broker == str(address) == f"broker 3 at 127.0.0.1:{port}"


async def test_unopened_connection_refuses_requests() -> None:
    conn = BrokerConnection(BrokerAddress(None, "127.0.0.1", 1))
    with pytest.raises(KafkaConnectionError):
        await conn.offsets("t", 0, LATEST)
    assert conn.requests_sent == 0


# -- flow control and write order --------------------------------------------------------


class Sink:
    """A loopback peer that reads and counts bytes (and keeps them, with ``keep``), or
    (``reading=False``) reads nothing until :meth:`start_reading`."""

    def __init__(self, *, reading: bool = True, keep: bool = False) -> None:
        self.reading = reading
        self.keep = keep
        self.received = 0
        self.data = bytearray()
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._handlers: list[asyncio.Task[Any]] = []
        self._go = asyncio.Event()

    def start_reading(self) -> None:
        self._go.set()

    async def __aenter__(self) -> BrokerAddress:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return BrokerAddress(None, "127.0.0.1", self._server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        self._go.set()
        await asyncio.gather(*self._handlers)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        self._writers.append(writer)
        if not self.reading:
            writer.transport.pause_reading()
            await self._go.wait()
            writer.transport.resume_reading()
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1 << 16):
                self.received += len(data)
                if self.keep:
                    self.data += data


async def test_a_caller_that_never_waits_still_cannot_grow_memory() -> None:
    """300 produce() calls of 1000 x 100 B without confirm: each waits while more than
    max_unsent_bytes wait for the socket, so data flows during the loop and what waits
    stays bounded (before, nothing reached the socket until the loop ended)."""
    limit = 1 << 20
    payloads = [b"p" * 100] * 1000
    frame_size = len(encode_produce_request("t", 0, encode_message_set(payloads)))
    server = Sink()
    async with server as address:
        conn = await BrokerConnection.open(address, max_unsent_bytes=limit)
        peak = 0
        received_midway = 0
        for i in range(300):
            await conn.produce("t", 0, payloads)
            peak = max(peak, conn.unsent_bytes)
            if i == 150:
                received_midway = server.received
        assert peak <= 2 * limit + frame_size
        assert received_midway > 0  # written while the caller went on
        await eventually(lambda: server.received == 300 * frame_size, 10)
        await conn.close()


async def test_a_peer_that_reads_nothing_times_the_writer_out() -> None:
    limit = 1 << 20
    payloads = [b"p" * 100] * 1000
    frame_size = len(encode_produce_request("t", 0, encode_message_set(payloads)))
    async with Sink(reading=False) as address:
        conn = await BrokerConnection.open(address, max_unsent_bytes=limit, request_timeout_ms=500)
        started = time.monotonic()
        peak = calls = 0

        async def fill() -> None:
            nonlocal peak, calls
            while calls < 10_000:
                await conn.produce("t", 0, payloads)
                calls += 1
                peak = max(peak, conn.unsent_bytes)

        with pytest.raises(RequestTimeoutError, match="took no data"):
            await fill()
        assert time.monotonic() - started < 5
        assert peak <= 2 * limit + frame_size
        assert calls < 10_000
        assert conn.closed
        await bounded(conn.close(), 2)


class UnsentPeak:
    """The largest ``conn.unsent_bytes`` seen: sampled on every event-loop iteration by a
    task, and by the callers whenever they like (``sample()``)."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.peak = 0
        self._task = asyncio.ensure_future(self._watch())

    def sample(self) -> None:
        self.peak = max(self.peak, self.conn.unsent_bytes)

    async def _watch(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0)

    async def stop(self) -> int:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return self.peak


async def test_the_bound_holds_for_500_concurrent_callers_of_a_peer_that_reads_nothing() -> None:
    """500 produce() calls at once, 100 kB frames, a 1 MiB bound, a peer that reads
    nothing: each call waits for room before its frame is queued, first come first served,
    so what waits for the socket never exceeds the bound by more than one frame (before,
    every frame was queued before its wait: about 50 MB). Once the kernel's buffers are
    full the socket takes nothing: every call ends within its timeout, written or with
    RequestTimeoutError, and no call is written while an earlier one still waits."""
    limit = 1 << 20
    timeout_ms = 1000
    payloads = [b"p" * 100_000]
    frame_size = len(encode_produce_request("t", 0, encode_message_set(payloads)))
    loop = asyncio.get_running_loop()
    async with Sink(reading=False) as address:
        conn = await BrokerConnection.open(
            address, max_unsent_bytes=limit, request_timeout_ms=timeout_ms
        )
        peak = UnsentPeak(conn)

        async def call() -> tuple[bool, float, float]:
            """(written, when it started, when it ended)"""
            started = loop.time()
            try:
                await conn.produce("t", 0, payloads)
                written = True
            except RequestTimeoutError:
                written = False
            peak.sample()
            return written, started, loop.time()

        results = await bounded(asyncio.gather(*(call() for _ in range(500))), 30)
        assert await peak.stop() <= limit + frame_size
        assert 0 < sum(written for written, _, _ in results) < 500
        # Within its timeout (the slack is for a loaded machine; a call that waited
        # without a bound would take the test's 30 s).
        assert max(ended - started for _, started, ended in results) < timeout_ms / 1000 + 5
        # First come, first served: a call that timed out was not overtaken, every later
        # call that was written ended after it gave up.
        for k, (written, _, ended) in enumerate(results):
            if not written:
                assert all(results[j][2] >= ended for j in range(k + 1, 500) if results[j][0])
        conn.abort()


async def test_concurrent_callers_are_written_in_call_order_within_the_bound() -> None:
    """500 produce() calls at once to a peer that reads: all are written, in call order,
    while what waits for the socket stays within the bound (plus one frame)."""
    limit = 64 << 10
    frames = [
        encode_produce_request("t", 0, encode_message_set([b"%03d" % i + b"p" * 10_000]))
        for i in range(500)
    ]
    sink = Sink(keep=True)
    async with sink as address:
        conn = await BrokerConnection.open(address, max_unsent_bytes=limit)
        peak = UnsentPeak(conn)
        await bounded(asyncio.gather(*(conn.send(frame) for frame in frames)), 30)
        assert await peak.stop() <= limit + len(frames[0])
        total = sum(map(len, frames))
        await eventually(lambda: sink.received == total, 10)
        assert bytes(sink.data) == b"".join(frames)
        await conn.close()


async def test_a_frame_larger_than_the_bound_goes_alone() -> None:
    """A frame larger than max_unsent_bytes is written when nothing else waits for the
    socket (it would wait for ever otherwise); a call behind it waits for it to go."""
    big = encode_produce_request("t", 0, encode_message_set([b"b" * 300_000]))
    small = encode_produce_request("t", 0, encode_message_set([b"s"]))
    sink = Sink(keep=True)
    async with sink as address:
        conn = await BrokerConnection.open(address, max_unsent_bytes=1 << 10)
        peak = UnsentPeak(conn)
        await bounded(asyncio.gather(conn.send(big), conn.send(small), conn.send(big)), 10)
        assert await peak.stop() <= len(big)
        await eventually(lambda: sink.received == 2 * len(big) + len(small), 10)
        assert bytes(sink.data) == big + small + big
        await conn.close()


async def test_a_caller_cancelled_in_line_is_never_written() -> None:
    """A call waiting for room that is cancelled leaves the line: its frame is never
    written, and the call behind it goes on once there is room."""
    first = encode_produce_request("t", 0, encode_message_set([b"1" * 8_000_000]))
    second = encode_produce_request("t", 0, encode_message_set([b"2" * 5000]))
    third = encode_produce_request("t", 0, encode_message_set([b"3" * 5000]))
    sink = Sink(reading=False, keep=True)
    async with sink as address:
        conn = await BrokerConnection.open(address, max_unsent_bytes=1 << 20)
        await conn.send(first)  # larger than the kernel's buffers: some of it stays unsent
        await eventually(lambda: conn.unsent_bytes < len(first))
        waiting = asyncio.ensure_future(conn.send(second))
        behind = asyncio.ensure_future(conn.send(third))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # in line
        assert not behind.done()
        waiting.cancel()
        await asyncio.sleep(0.05)
        assert not behind.done()  # still no room
        sink.start_reading()
        await bounded(behind)
        await eventually(lambda: sink.received == len(first) + len(third), 10)
        assert bytes(sink.data) == first + third
        assert waiting.cancelled()
        await conn.close()


async def test_submitted_produces_are_written_in_call_order(cluster: KafkaCluster) -> None:
    """submit_produce() queues at once: whatever each caller awaits afterwards, the broker
    sees the frames in the order of the calls (the producer's ordering guarantee)."""
    conn = await connect(cluster)
    futures = []
    for i in range(200):
        frame = encode_produce_request("order", 0, encode_message_set([b"%03d" % i]))
        futures.append(conn.submit_produce(frame, confirm=i % 7 == 0))
        if i % 3 == 0:
            await asyncio.sleep(0)  # some in one write, some in the next
    await bounded(asyncio.gather(*futures))
    response = await conn.fetch("order", 0, 0, 1 << 20)
    assert values(response, 0) == [b"%03d" % i for i in range(200)]
    await conn.close()


async def test_raw_frames_are_checked_before_anything_is_written(cluster: KafkaCluster) -> None:
    conn = await connect(cluster)
    with pytest.raises(MalformedFrameError, match="PRODUCE"):
        await conn.send(encode_offsets_request("t", 0, LATEST, 1))  # its answer has no owner
    with pytest.raises(MalformedFrameError, match="send_produce"):
        await conn.request(encode_produce_request("t", 0, b""))  # would wait forever
    with pytest.raises(MalformedFrameError):
        await conn.request(b"\0\0\0\x02\0\x01")  # a frame too short for a fetch
    assert conn.requests_sent == 0
    assert await conn.offsets("t", 0, LATEST) == (0,)  # still aligned
    await conn.close()


# -- produce -----------------------------------------------------------------------------


async def test_produce_variants_round_trip(cluster: KafkaCluster) -> None:
    conn = await connect(cluster)
    plain = [b"one", b"two", b""]
    end = await conn.produce("pv", 0, plain, confirm=True)
    assert end == len(encode_message_set(plain))

    gz = [b"g" * 500, b"zip"]
    gz_start = end
    end = await conn.produce("pv", 0, gz, compression="gzip", confirm=True)
    assert end is not None
    wrapper = decode_message_set((await conn.fetch("pv", 0, gz_start, 1 << 20)).message_set)
    assert wrapper.messages[0].value == b"g" * 500
    shallow = decode_message_set(
        (await conn.fetch("pv", 0, gz_start, 1 << 20)).message_set, shallow=True
    )
    assert [m.attributes & 3 for m in shallow.messages] == [1]
    assert end == gz_start + shallow.valid_bytes < gz_start + len(encode_message_set(gz))

    sn = [b"s" * 300, b"nappy"]
    sn_start = end
    end = await conn.produce("pv", 0, sn, compression="snappy", confirm=True)
    fetched = (await conn.fetch("pv", 0, 0, 1 << 20)).decode(0)
    assert [m.value for m in fetched.messages] == plain + gz + sn
    assert [m.offset for m in fetched.messages] == [
        *set_offsets(0, plain),
        gz_start,
        sn_start,
        sn_start,
        end,
    ]
    assert fetched.messages[-2].offset == sn_start

    # Without confirm nothing comes back, but the produce is processed in order.
    assert await conn.produce("pv", 1, [b"later"]) is None
    assert await conn.offsets("pv", 1, LATEST) == (entry_size(5),)

    # Pre-built sets (e.g. kept wrappers) go out unchanged.
    kept = encode_wrapper("snappy", encode_message_set([b"k1", b"k2"]))
    start = entry_size(5)
    assert await conn.produce_message_set("pv", 1, kept, confirm=True) == start + len(kept)
    response = await conn.fetch("pv", 1, start, 1 << 20)
    assert bytes(response.message_set) == kept
    assert [(m.value, m.offset) for m in response.decode(start).messages] == [
        (b"k1", start),
        (b"k2", start + len(kept)),
    ]
    await conn.close()


async def test_multiproduce_to_two_partitions(cluster: KafkaCluster) -> None:
    conn = await connect(cluster)
    last = await conn.multiproduce(
        [("mp", 0, [b"a", b"b"]), ("mp", 1, [b"c"]), ("other", 0, [b"d"]), ("mp", 1, [b"e"])],
        confirm=True,
    )
    assert last == 2 * entry_size(1)  # the last target's end: mp/1
    assert values(await conn.fetch("mp", 0, 0, 1000), 0) == [b"a", b"b"]
    assert values(await conn.fetch("mp", 1, 0, 1000), 0) == [b"c", b"e"]
    assert values(await conn.fetch("other", 0, 0, 1000), 0) == [b"d"]
    assert await conn.multiproduce([("mp", 0, [b"x"]), ("mp", 1, [b"y"])], compression=2) is None
    snappy_x = len(encode_message_set([b"x"], compression="snappy"))
    assert await conn.offsets("mp", 0, LATEST) == (2 * entry_size(1) + snappy_x,)
    assert values(await conn.fetch("mp", 1, 2 * entry_size(1), 1000), 2 * entry_size(1)) == [b"y"]
    with pytest.raises(ValueError, match="nothing to confirm"):
        await conn.multiproduce([], confirm=True)
    await conn.close()


async def test_confirm_detects_a_produce_to_an_invalid_partition(cluster: KafkaCluster) -> None:
    conn = await connect(cluster)
    assert await conn.produce("inv", 1, [b"kept"], confirm=True) == entry_size(4)
    with pytest.raises(ProduceNotConfirmedError) as info:
        await bounded(conn.produce("inv", 7, [b"lost"], confirm=True), 5)
    assert info.value.maybe_delivered
    assert isinstance(info.value.__cause__, KafkaConnectionError)
    assert conn.closed
    conn = await connect(cluster)
    assert await conn.offsets("inv", 1, LATEST) == (entry_size(4),)
    assert await conn.offsets("inv", 0, LATEST) == (0,)  # never created
    with pytest.raises(InvalidPartitionError):
        await conn.produce("inv", -2, [b"x"], confirm=True)
    assert not conn.closed
    await conn.close()


def corrupt_crc(message_set: bytes) -> bytes:
    data = bytearray(message_set)
    data[6] ^= 0xFF  # the first byte of the first message's CRC (after size, magic, attrs)
    return bytes(data)


async def test_bad_crc_is_refused_client_side_and_closes_the_broker_connection(
    cluster: KafkaCluster,
) -> None:
    conn = await connect(cluster)
    good = encode_message_set([b"good"])
    await conn.produce_message_set("crc", 0, good, confirm=True)
    bad = corrupt_crc(encode_message_set([b"bad"]))
    sent = conn.requests_sent
    # produce_message_set decodes the set shallowly (for the size check) before sending,
    # so a bad top-level CRC is refused on the client, with nothing written.
    with pytest.raises(InvalidMessageError):
        await conn.produce_message_set("crc", 0, bad, confirm=True)
    with pytest.raises(InvalidMessageError):
        await conn.produce_message_set("crc", 0, good + bad)
    assert conn.requests_sent == sent
    assert not conn.closed

    # Sent anyway (as a raw frame), the broker refuses it by closing the connection.
    await conn.send(encode_produce_request("crc", 0, good + bad))
    with pytest.raises(KafkaConnectionError) as info:
        await bounded(conn.offsets("crc", 0, LATEST), 5)
    assert info.value.maybe_delivered
    assert is_closed(conn)

    # A corrupt inner message hides behind a valid wrapper CRC: only confirm mode sees it.
    conn = await connect(cluster)
    inner = corrupt_crc(encode_message_set([b"inner"]))
    with pytest.raises(ProduceNotConfirmedError):
        await bounded(
            conn.produce_message_set("crc", 0, encode_wrapper("gzip", inner), confirm=True), 5
        )
    conn = await connect(cluster)
    assert await conn.offsets("crc", 0, LATEST) == (len(good),)  # nothing appended
    await conn.close()


async def test_oversized_messages_are_refused_before_sending(cluster: KafkaCluster) -> None:
    conn = await connect(cluster, max_message_size=100)
    await conn.produce("big", 0, [b"x" * 100], confirm=True)  # exactly the limit: fine
    end = entry_size(100)
    sent = conn.requests_sent
    noise = random.Random(5).randbytes(400)
    cases: list[Callable[[], Awaitable[Any]]] = [
        lambda: conn.produce("big", 0, [b"y" * 101]),
        lambda: conn.produce("big", 0, [b"ok", b"y" * 101], confirm=True),
        lambda: conn.produce("big", 0, [noise], compression="gzip"),
        lambda: conn.produce("big", 0, [noise[:200], noise[200:]], compression="snappy"),
        lambda: conn.produce_message_set("big", 0, encode_message_set([b"z" * 101])),
        lambda: conn.multiproduce([("big", 1, [b"fine"]), ("big", 0, [b"y" * 101])]),
    ]
    for case in cases:
        with pytest.raises(MessageTooLargeError):
            await case()
    assert conn.requests_sent == sent
    # The limit applies to a wrapper's compressed payload, not to what it holds.
    await conn.produce("big", 0, [b"\0" * 5000, b"\0" * 5000], compression="gzip", confirm=True)
    assert await conn.offsets("big", 1, LATEST) == (0,)
    assert (await conn.offsets("big", 0, LATEST))[0] > end
    assert values(await conn.fetch("big", 0, end, 1 << 20), end) == [b"\0" * 5000] * 2
    await conn.close()


def test_check_message_sizes_directly() -> None:
    check_message_sizes(encode_message_set([b"a" * 10]), 10)
    with pytest.raises(MessageTooLargeError, match="11 bytes"):
        check_message_sizes(encode_message_set([b"a" * 11]), 10)
    with pytest.raises(MessageTooLargeError, match="compressed set"):
        check_message_sizes(encode_message_set([os.urandom(64)], compression="gzip"), 10)


# -- broker edge cases (PROTOCOL §10.3, §10.4, §11) ----------------------------------------


async def test_fetch_edge_cases(kafka_cluster: Factory) -> None:
    async with kafka_cluster(
        1,
        zookeeper=None,
        num_partitions=2,
        max_topic_name_length=12,
        topic_log_file_size={"seg": 100},
    ) as cluster:
        conn = await connect(cluster)
        payloads = [b"first", b"second" * 10, b"third"]
        end = await conn.produce("edge", 0, payloads, confirm=True)
        offsets = set_offsets(0, payloads)
        assert end == offsets[-1]

        normal = await conn.fetch("edge", 0, 0, 1000)
        assert (normal.error_code, values(normal, 0)) == (0, payloads)

        at_end = await conn.fetch("edge", 0, end, 1000)
        assert (at_end.error_code, bytes(at_end.message_set)) == (0, b"")
        assert at_end.decode(end).messages == []

        for beyond in (end + 1, -1, -(1 << 40)):
            response = await conn.fetch("edge", 0, beyond, 1000)
            assert (response.error_code, bytes(response.message_set)) == (1, b"")
            with pytest.raises(OffsetOutOfRangeError) as out_of_range:
                response.decode(beyond)
            assert out_of_range.value.offset == beyond

        # Mid-message: no check on the broker; the bytes are garbage to the client.
        middle = await conn.fetch("edge", 0, 2, 1000)
        assert middle.error_code == 0
        assert len(middle.message_set) == end - 2
        with pytest.raises(ProtocolError):
            middle.decode(2)

        # A fetch smaller than the next message: error 0 and a partial first message.
        partial = await conn.fetch("edge", 0, offsets[0], 20)
        assert partial.error_code == 0
        assert len(partial.message_set) == 20
        with pytest.raises(InvalidMessageSizeError) as too_small:
            partial.decode(offsets[0])
        assert too_small.value.size == 6 + 60
        assert too_small.value.available == 16
        assert too_small.value.position == 0
        # The partial tail of a larger fetch is dropped, not an error.
        tail = await conn.fetch("edge", 0, 0, offsets[0] + 20)
        decoded = tail.decode(0)
        assert [m.value for m in decoded.messages] == [b"first"]
        assert decoded.valid_bytes == offsets[0]

        empty = await conn.fetch("edge", 0, 0, 0)
        assert (empty.error_code, bytes(empty.message_set)) == (0, b"")

        for partition in (2, 7, -1):
            wrong = await conn.fetch("edge", partition, 0, 1000)
            assert (wrong.error_code, bytes(wrong.message_set)) == (3, b"")
            with pytest.raises(InvalidPartitionError):
                wrong.decode(0)

        for topic, partition in (("nothing", 0), ("edge", 1)):  # no log here: nothing made
            unknown = await conn.fetch(topic, partition, 0, 1000)
            assert (unknown.error_code, bytes(unknown.message_set)) == (0, b"")
        assert await conn.offsets("edge", 1, LATEST) == (0,)

        # A name the broker refuses (longer than its max.topic.name.length of 12).
        invalid = await conn.fetch("a-long-topic-name", 0, 0, 1000)
        assert (invalid.error_code, bytes(invalid.message_set)) == (-1, b"")
        with pytest.raises(UnknownError):
            invalid.decode(0)

        multi = await conn.multifetch(
            [
                FetchRequest("edge", 0, 0, 1000),
                FetchRequest("edge", 0, end + 5, 1000),
                FetchRequest("edge", 9, 0, 1000),
                FetchRequest("nothing", 0, 0, 1000),
                FetchRequest("a-long-topic-name", 0, 0, 1000),
                FetchRequest("edge", 0, 0, 0),
                FetchRequest("edge", 0, 0, 1000),
            ]
        )
        assert [r.error_code for r in multi.responses] == [0, 1, 3, 0, -1, 0, 0]
        assert values(multi.responses[0], 0) == payloads == values(multi.responses[6], 0)
        assert [bytes(r.message_set) for r in multi.responses[1:6]] == [b""] * 5

        # Segments: a fetch never spans two (topic "seg" rolls after 100 bytes).
        one = [b"p" * 40]  # 50 bytes a message
        for _ in range(5):
            await conn.produce("seg", 0, one)
        assert await conn.offsets("seg", 0, LATEST, 10) == (250, 150, 0)
        assert len((await conn.fetch("seg", 0, 0, 1000)).decode(0).messages) == 3
        assert len((await conn.fetch("seg", 0, 100, 1000)).decode(100).messages) == 1
        assert len((await conn.fetch("seg", 0, 150, 1000)).decode(150).messages) == 2
        assert not conn.closed
        await conn.close()


async def test_offsets_edge_cases(cluster: KafkaCluster) -> None:
    conn = await connect(cluster)
    end = await conn.produce("off", 0, [b"a", b"b", b"c"], confirm=True)
    assert end == 3 * entry_size(1)
    assert await conn.offsets("off", 0, LATEST) == (end,)
    assert await conn.offsets("off", 0, LATEST, 5) == (end, 0)
    assert await conn.offsets("off", 0, EARLIEST) == (0,)
    assert await conn.offsets("off", 0, EARLIEST, 5) == (0,)
    assert await conn.offsets("off", 0, LATEST, 0) == ()
    now_ms = int(time.time() * 1000)
    assert await conn.offsets("off", 0, now_ms + 3_600_000, 5) == (end, 0)
    assert await conn.offsets("off", 0, 0, 5) == ()  # before every segment
    assert await conn.offsets("off", 0, -3, 5) == ()  # just a timestamp nothing matches

    # No log on this broker (valid name, valid partition): [0] for -1/-2, [] otherwise.
    for topic, partition in (("unknown", 0), ("off", 1)):
        assert await conn.offsets(topic, partition, LATEST) == (0,)
        assert await conn.offsets(topic, partition, EARLIEST, 3) == (0,)
        assert await conn.offsets(topic, partition, now_ms, 3) == ()
    assert not conn.closed

    # An invalid partition is not caught for OFFSETS: the broker closes the connection.
    for partition in (2, -1):
        pending = asyncio.ensure_future(conn.offsets("off", 0, LATEST))
        # Let it queue its request first: since Python 3.12, wait_for (in bounded) runs
        # the bad request in this task at once instead of in a task started after it.
        await asyncio.sleep(0)
        with pytest.raises(KafkaConnectionError) as info:
            await bounded(conn.offsets("off", partition, LATEST), 5)
        assert info.value.maybe_delivered
        assert await pending == (end,)  # answered before the bad one
        assert is_closed(conn)
        conn = await connect(cluster)
    await conn.close()


async def test_offsets_of_an_invalid_topic_name_close_the_connection(
    kafka_cluster: Factory,
) -> None:
    async with kafka_cluster(1, zookeeper=None, max_topic_name_length=5) as cluster:
        conn = await connect(cluster)
        with pytest.raises(KafkaConnectionError):
            await bounded(conn.offsets("sixsix", 0, LATEST), 5)
        assert conn.closed


# -- garbage from the "broker" ----------------------------------------------------------


def offsets_frame(*offsets: int) -> bytes:
    return encode_offsets_response(offsets)


async def open_garbage(server: GarbageServer, timeout: float = 1.0) -> BrokerConnection:
    return await BrokerConnection.open(
        BrokerAddress(None, server.host, server.port), request_timeout_ms=timeout * 1000
    )


async def outcome(awaitable: Awaitable[Any], timeout: float = 5.0) -> Any:
    """The result or the exception of ``awaitable``; a hang fails the test."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        raise AssertionError("the client hung") from None
    except Exception as exc:
        return exc


GARBAGE_CASES: dict[str, tuple[list[Reply], type[KafkaError]]] = {
    "truncated frame, then close": (
        [Reply(offsets_frame(1)[:-3], close=True)],
        KafkaConnectionError,
    ),
    "size 0": ([Reply(struct.pack(">i", 0))], MalformedFrameError),
    "size 1 (no room for an error code)": ([Reply(frame(b"\0"))], MalformedFrameError),
    "negative size": ([Reply(struct.pack(">i", -5) + b"\0" * 8)], MalformedFrameError),
    # The answer to OFFSETS(max 1) has at most 14 bytes: a larger size is refused as soon
    # as its prefix arrives, without waiting for (or buffering) the body.
    "huge size, then close": (
        [Reply(struct.pack(">i", 0x7FFFFFFF) + b"\0" * 100, close=True)],
        MalformedFrameError,
    ),
    "huge size, then silence": (
        [Reply(struct.pack(">i", 0x7FFFFFFF) + b"\0" * 100)],
        MalformedFrameError,
    ),
    "more offsets than asked for": ([Reply(offsets_frame(1, 2))], MalformedFrameError),
    "close without a byte": ([Reply(close=True)], KafkaConnectionError),
    "offsets body shorter than its count": (
        [Reply(frame(b"\0\0\0\0\0\x01"))],
        MalformedFrameError,
    ),
    "negative offsets count": ([Reply(frame(b"\0\0\xff\xff\xff\xff"))], MalformedFrameError),
    "offsets body without a count": ([Reply(frame(b"\0\0\0"))], MalformedFrameError),
}


@pytest.mark.parametrize("case", list(GARBAGE_CASES))
async def test_garbage_ends_in_a_typed_error(case: str) -> None:
    script, expected = GARBAGE_CASES[case]
    async with GarbageServer(script) as server:
        conn = await open_garbage(server, timeout=60)
        # Nothing waits for the request timeout (60 s): outcome() fails a wait of 10 s.
        result = await outcome(conn.offsets("t", 0, LATEST), 10)
        assert isinstance(result, expected), repr(result)
        if isinstance(result, KafkaConnectionError):
            assert result.maybe_delivered
        if not conn.closed:  # a well-framed but undecodable answer keeps the framing intact
            assert isinstance(result, MalformedFrameError)
            assert case.startswith("offsets") or case.startswith("negative offsets")
        else:
            later = await outcome(conn.offsets("t", 0, LATEST), 5)
            assert isinstance(later, KafkaConnectionError)
        await bounded(conn.close(), 2)


@pytest.mark.parametrize(
    "bad",
    [struct.pack(">i", 0), struct.pack(">i", -1), struct.pack(">i", 1) + b"\0"],
    ids=["size 0", "size -1", "size 1"],
)
async def test_a_bad_frame_fails_every_outstanding_request(bad: bytes) -> None:
    good = offsets_frame(42)
    # The second request's answer is good; a bad frame follows in the same write.
    script = [Reply(), Reply(), Reply(good + good + bad)]
    async with GarbageServer(script) as server:
        conn = await open_garbage(server, timeout=5)
        tasks = [asyncio.ensure_future(conn.offsets("t", 0, LATEST)) for _ in range(5)]
        results = [await outcome(t) for t in tasks]
        assert results[:2] == [(42,), (42,)]  # frames before the bad one still answer
        for result in results[2:]:
            assert isinstance(result, MalformedFrameError)
        assert conn.closed
        assert isinstance(await outcome(conn.offsets("t", 0, LATEST)), KafkaConnectionError)


async def test_an_unsolicited_frame_closes_the_connection() -> None:
    script = [Reply(offsets_frame(7) + offsets_frame(8))]
    async with GarbageServer(script) as server:
        conn = await open_garbage(server)
        assert await bounded(conn.offsets("t", 0, LATEST)) == (7,)
        await eventually(lambda: conn.closed, 2)
        later = await outcome(conn.offsets("t", 0, LATEST))
        assert isinstance(later, KafkaConnectionError)
        assert "nobody asked for" in str(later)


async def test_an_unsolicited_frame_arriving_later_closes_the_connection() -> None:
    async with GarbageServer([Reply(offsets_frame(7))]) as server:
        conn = await open_garbage(server)
        assert await bounded(conn.offsets("t", 0, LATEST)) == (7,)
        server.broadcast(offsets_frame(9))
        await eventually(lambda: conn.closed, 2)
        assert isinstance(await outcome(conn.fetch("t", 0, 0, 10)), KafkaConnectionError)


async def test_fetch_and_multifetch_garbage_bodies() -> None:
    script = [
        Reply(encode_fetch_response(4, b"")),  # error 4 from a broker
        Reply(encode_fetch_response(99, b"")),  # a code 0.7 does not have
        Reply(encode_fetch_response(0, b"\xff\xff\xff\xf0")),  # negative message size
        Reply(encode_multifetch_response([(0, b""), (0, b"")])),  # 2 answers for 3
        Reply(frame(b"\0\0" + struct.pack(">i", 1) + b"\0")),  # sub-response of 1 byte
        Reply(frame(b"\0\0" + struct.pack(">i", 50) + b"\0\0")),  # truncated sub-response
    ]
    async with GarbageServer(script) as server:
        conn = await open_garbage(server)
        with pytest.raises(InvalidMessageSizeError):
            (await conn.fetch("t", 0, 0, 10)).decode(0)
        with pytest.raises(UnknownError):
            (await conn.fetch("t", 0, 0, 10)).decode(0)
        with pytest.raises(InvalidMessageSizeError):
            (await conn.fetch("t", 0, 0, 10)).decode(0)
        three = [FetchRequest("t", p, 0, 10) for p in range(3)]
        for _ in range(3):
            with pytest.raises(MalformedFrameError):
                await bounded(conn.multifetch(three))
        await bounded(conn.close(), 2)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=1, max_size=64), fetch=st.booleans())
def test_random_bytes_end_in_typed_errors_only(data: bytes, fetch: bool) -> None:
    async def scenario() -> None:
        async with GarbageServer([Reply(data, close=True)]) as server:
            conn = await open_garbage(server, timeout=1)
            request = conn.fetch("t", 0, 0, 100) if fetch else conn.offsets("t", 0, LATEST)
            result = await outcome(request)
            if isinstance(result, FetchResponse):
                try:
                    result.decode(0)
                except Exception as exc:
                    result = exc
            if isinstance(result, Exception):
                assert isinstance(result, KafkaError), repr(result)
            # The server hung up: whatever came before, the connection ends closed.
            later = await outcome(conn.offsets("t", 0, LATEST))
            assert isinstance(later, KafkaConnectionError), repr(later)
            assert conn.closed
            await outcome(conn.close(), 2)

    asyncio.run(scenario())


def test_the_client_works_on_uvloop() -> None:
    """On uvloop (whose transports are not asyncio.Transport subclasses) a producer,
    a connection and a SimpleConsumer work as on asyncio's loop: confirmed produce,
    pipelined fetches, offsets. (The uvloop nox session runs the whole client there.)"""
    uvloop = pytest.importorskip("uvloop")
    from aiokafka07 import Producer, SimpleConsumer

    async def main() -> list[bytes]:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        async with KafkaCluster(1) as cluster:
            async with Producer(brokers=cluster.broker_list) as producer:
                futures = [await producer.send("uv", b"m%d" % i) for i in range(50)]
                await asyncio.gather(*futures)
            broker = cluster.broker(0)
            async with SimpleConsumer(broker.host, broker.port) as consumer:
                values: list[bytes] = []
                async for batch in consumer.batches("uv", 0, 0):
                    values += [m.value for m in batch.messages]
                    if len(values) >= 50:
                        break
                return values

    assert uvloop.run(main()) == [b"m%d" % i for i in range(50)]

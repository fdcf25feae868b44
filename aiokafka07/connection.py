"""One pipelined TCP connection to one Kafka 0.7 broker.

0.7 has no correlation ids: a broker answers a connection's requests strictly in order,
and never answers PRODUCE / MULTIPRODUCE. So a connection keeps a FIFO of the requests
that expect an answer, in the order they were written, and hands each response frame to
the oldest. Rules that keep that FIFO aligned:

* requests queued in the same event-loop iteration go out in one socket write;
* a request cancelled before it was written is never written; one cancelled after keeps
  its place in the FIFO and its answer is read and dropped;
* produce frames take no place in the FIFO;
* a timed-out request closes the connection (every later answer would queue behind the
  lost one), failing everything outstanding with a typed error that says whether each
  request may have reached the broker.

Confirm mode closes the gap of 0.7's unacknowledged produce (DESIGN.md): an OFFSETS request
pipelined behind a produce is answered only after the broker processed the produce, and a
broker that refuses a produce closes the connection instead.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from .errors import (
    InvalidPartitionError,
    KafkaConnectionError,
    MessageTooLargeError,
    ProduceNotConfirmedError,
    ProtocolError,
    RequestTimeoutError,
)
from .protocol import (
    LATEST,
    Compression,
    FetchRequest,
    FetchResponse,
    FrameSplitter,
    MultiFetchResponse,
    decode_fetch_response,
    decode_message_set,
    decode_multifetch_response,
    decode_offsets_response,
    encode_fetch_request,
    encode_message_set,
    encode_multifetch_request,
    encode_multiproduce_request,
    encode_offsets_request,
    encode_produce_request,
)
from .protocol.messages import BytesLike

__all__ = ["BrokerAddress", "BrokerConnection", "check_message_sizes"]

log = logging.getLogger("aiokafka07.connection")

#: 0.7.2 ``max.message.size``: the largest top-level payload a broker accepts.
MAX_MESSAGE_SIZE = 1000000


class BrokerAddress(NamedTuple):
    """Where a broker listens. ``broker_id`` is None for a broker known only by address."""

    broker_id: int | None
    host: str
    port: int

    def __str__(self) -> str:
        where = f"{self.host}:{self.port}"
        return where if self.broker_id is None else f"broker {self.broker_id} at {where}"


def check_message_sizes(message_set: BytesLike, max_message_size: int) -> None:
    """Refuse a set with a top-level payload over ``max_message_size``.

    A 0.7 broker drops such a produce silently, so the client must refuse it up front.
    For compressed sets the limit applies to the wrapper's compressed payload (§13).
    """
    for message in decode_message_set(message_set, shallow=True).messages:
        if len(message.value) > max_message_size:
            kind = "compressed set" if message.attributes & 3 else "message"
            raise MessageTooLargeError(
                f"{kind} payload of {len(message.value)} bytes exceeds max.message.size "
                f"{max_message_size}; a 0.7 broker would drop it silently"
            )


class _Request:
    __slots__ = ("frame", "future")

    def __init__(self, frame: bytes, future: asyncio.Future[bytes] | None) -> None:
        self.frame = frame
        self.future = future


class BrokerConnection(asyncio.Protocol):
    """A pipelined connection to one broker. Open it with :meth:`open` (or ``async with``).

    ``request_timeout`` bounds the wait for each answer (0.7.2 ``socket.timeout.ms``; the
    Java client's timeout never fires on reads, this one does). ``max_message_size`` is
    the client-side produce check.
    """

    def __init__(
        self,
        address: BrokerAddress,
        *,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        send_buffer: int | None = None,
        receive_buffer: int | None = None,
        max_message_size: int = MAX_MESSAGE_SIZE,
    ) -> None:
        self.address = address
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.send_buffer = send_buffer
        self.receive_buffer = receive_buffer
        self.max_message_size = max_message_size
        self._transport: asyncio.Transport | None = None
        self._splitter = FrameSplitter()
        self._in_flight: collections.deque[asyncio.Future[bytes]] = collections.deque()
        self._outbox: list[_Request] = []
        self._flush_scheduled = False
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closed: KafkaConnectionError | None = None
        self._lost = asyncio.Event()
        self.requests_sent = 0

    # -- lifecycle --------------------------------------------------------------------

    @classmethod
    async def open(cls, address: BrokerAddress, **options: Any) -> BrokerConnection:
        """Connect to ``address``; raise :class:`KafkaConnectionError` if that fails."""
        conn = cls(address, **options)
        await conn._connect()
        return conn

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: self, self.address.host, self.address.port),
                self.connect_timeout,
            )
        except asyncio.TimeoutError:
            raise KafkaConnectionError(
                f"connecting to {self.address} timed out after {self.connect_timeout} s",
                broker=str(self.address),
            ) from None
        except OSError as exc:
            raise KafkaConnectionError(
                f"cannot connect to {self.address}: {exc.strerror or exc}",
                broker=str(self.address),
            ) from exc
        log.info("connected to %s", self.address)

    async def __aenter__(self) -> BrokerConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests written (or queued) whose answers have not arrived yet."""
        return len(self._in_flight) + sum(1 for r in self._outbox if r.future is not None)

    async def close(self, timeout: float = 5.0) -> None:
        """Wait up to ``timeout`` for outstanding answers, then close; what is still
        outstanding fails with :class:`KafkaConnectionError`."""
        if self._closed is None:
            log.debug("closing the connection to %s", self.address)
        if self._closed is None and self.in_flight:
            pending = [f for f in self._in_flight if not f.done()]
            pending += [r.future for r in self._outbox if r.future and not r.future.done()]
            if pending:
                await asyncio.wait(pending, timeout=timeout)
        self._fail(KafkaConnectionError(f"connection to {self.address} closed"))
        if self._transport is not None:
            await self._lost.wait()

    def abort(self) -> None:
        """Drop the connection at once; everything outstanding fails."""
        self._fail(KafkaConnectionError(f"connection to {self.address} aborted"), abort=True)

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            if self.receive_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._splitter.feed(data)
        except ProtocolError as exc:
            for frame in exc.decoded or ():
                self._answer(frame)
            self._fail_with(exc)
            return
        for frame in frames:
            self._answer(frame)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._closed is None:  # not closed by us: the broker or the network did it
            log.info("connection to %s lost%s", self.address, f": {exc}" if exc else "")
        self._fail(
            KafkaConnectionError(
                f"connection to {self.address} lost" + (f": {exc}" if exc else ""),
                broker=str(self.address),
            )
        )
        self._transport = None
        self._lost.set()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # -- internals ----------------------------------------------------------------------

    def _answer(self, frame: bytes) -> None:
        if not self._in_flight:
            self._fail_with(ProtocolError(f"{self.address} sent a response nobody asked for"))
            return
        future = self._in_flight.popleft()
        if not future.done():  # else: cancelled after it was written; the answer is dropped
            future.set_result(frame)

    def _fail_with(self, exc: Exception) -> None:
        """Fail everything outstanding with ``exc`` (bad bytes from the broker)."""
        log.warning("closing the connection to %s: %s", self.address, exc)
        for future in self._outstanding():
            if not future.done():
                future.set_exception(exc)
        self._fail(KafkaConnectionError(f"connection to {self.address} failed: {exc}"))

    def _outstanding(self) -> list[asyncio.Future[bytes]]:
        written = list(self._in_flight)
        queued = [r.future for r in self._outbox if r.future is not None]
        return written + queued

    def _fail(self, reason: KafkaConnectionError, *, abort: bool = False) -> None:
        if self._closed is None:
            self._closed = reason
        broker = str(self.address)
        for future in self._in_flight:
            if not future.done():
                future.set_exception(type(reason)(str(reason), broker=broker, maybe_delivered=True))
        for request in self._outbox:
            if request.future is not None and not request.future.done():
                request.future.set_exception(
                    KafkaConnectionError(str(reason), broker=broker, maybe_delivered=False)
                )
        self._in_flight.clear()
        self._outbox.clear()
        self.resume_writing()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if abort:
                transport.abort()
            else:
                transport.close()

    def _check_open(self) -> None:
        if self._closed is not None:
            raise KafkaConnectionError(
                f"connection to {self.address} is closed ({self._closed})",
                broker=str(self.address),
            )
        if self._transport is None:
            raise KafkaConnectionError(f"connection to {self.address} is not open")

    def _queue(self, frame: bytes, expect_response: bool) -> asyncio.Future[bytes] | None:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] | None = loop.create_future() if expect_response else None
        self._outbox.append(_Request(frame, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        if future is not None and self.request_timeout:
            handle = loop.call_later(self.request_timeout, self._timed_out, future)
            future.add_done_callback(lambda _: handle.cancel())
        return future

    def _flush(self) -> None:
        """Write every frame queued this iteration in one go, skipping cancelled requests."""
        self._flush_scheduled = False
        if self._transport is None or self._closed is not None:
            return
        frames = []
        for request in self._outbox:
            if request.future is not None and request.future.done():
                continue  # cancelled before it was written: never sent
            frames.append(request.frame)
            if request.future is not None:
                self._in_flight.append(request.future)
        self._outbox.clear()
        if frames:
            self.requests_sent += len(frames)
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s: wrote %d requests, %d bytes", self.address, len(frames), len(data))
            self._transport.write(data)

    def _timed_out(self, future: asyncio.Future[bytes]) -> None:
        if future.done():
            return
        reason = RequestTimeoutError(
            f"no answer from {self.address} within {self.request_timeout} s",
            broker=str(self.address),
            maybe_delivered=True,
        )
        future.set_exception(reason)
        log.warning("closing the connection to %s: %s", self.address, reason)
        self._fail(reason, abort=True)

    async def _drain(self) -> None:
        if self._paused and self._closed is None:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    # -- requests -----------------------------------------------------------------------

    async def request(self, frame: bytes) -> bytes:
        """Send a framed request and return its response frame body (after the size)."""
        future = self._queue(frame, True)
        assert future is not None
        try:
            await self._drain()
            return await future
        except asyncio.CancelledError:
            future.cancel()  # unsent: never written; sent: its answer will be dropped
            raise

    async def send(self, frame: bytes) -> None:
        """Send a framed request that gets no answer (PRODUCE, MULTIPRODUCE).

        Returns once the frame is queued for the socket, respecting flow control; that
        does not mean the broker has it (see confirm mode).
        """
        self._queue(frame, False)
        await self._drain()

    async def fetch(self, topic: str, partition: int, offset: int, max_size: int) -> FetchResponse:
        """FETCH: raw message-set bytes (check ``error_code``; decode with ``.decode``)."""
        frame = await self.request(encode_fetch_request(topic, partition, offset, max_size))
        return decode_fetch_response(frame)

    async def multifetch(self, fetches: Sequence[FetchRequest]) -> MultiFetchResponse:
        """MULTIFETCH: one response per fetch, in order."""
        frame = await self.request(encode_multifetch_request(fetches))
        return decode_multifetch_response(frame, count=len(fetches))

    async def offsets(
        self, topic: str, partition: int, time: int, max_offsets: int = 1
    ) -> tuple[int, ...]:
        """OFFSETS: offsets before ``time`` (LATEST / EARLIEST / ms), newest first."""
        frame = await self.request(encode_offsets_request(topic, partition, time, max_offsets))
        response = decode_offsets_response(frame)
        return response.offsets

    async def produce(
        self,
        topic: str,
        partition: int,
        payloads: Iterable[BytesLike],
        *,
        compression: Compression | int | str | None = None,
        confirm: bool = False,
    ) -> int | None:
        """PRODUCE payloads as one message set (one wrapper when compressed).

        With ``confirm`` it returns the broker's latest offset of the partition once the
        broker processed the produce, or raises :class:`ProduceNotConfirmedError` if the
        connection closed first (the broker refused it, or went away).
        """
        message_set = encode_message_set(payloads, compression=compression)
        return await self.produce_message_set(topic, partition, message_set, confirm=confirm)

    async def produce_message_set(
        self, topic: str, partition: int, message_set: BytesLike, *, confirm: bool = False
    ) -> int | None:
        """PRODUCE an already encoded message set (e.g. wrappers kept by a mirror)."""
        check_message_sizes(message_set, self.max_message_size)
        frame = encode_produce_request(topic, partition, message_set)
        return await self._produce(frame, [(topic, partition)], confirm)

    async def multiproduce(
        self,
        batches: Iterable[tuple[str, int, Iterable[BytesLike]]],
        *,
        compression: Compression | int | str | None = None,
        confirm: bool = False,
    ) -> int | None:
        """MULTIPRODUCE (topic, partition, payloads) batches in one request, in order."""
        entries = [
            (topic, partition, encode_message_set(payloads, compression=compression))
            for topic, partition, payloads in batches
        ]
        return await self.multiproduce_message_sets(entries, confirm=confirm)

    async def multiproduce_message_sets(
        self,
        entries: Sequence[tuple[str, int, BytesLike]],
        *,
        confirm: bool = False,
        check_sizes: bool = True,
    ) -> int | None:
        """MULTIPRODUCE already encoded (topic, partition, message set) entries (a single
        entry goes as a plain PRODUCE). ``check_sizes=False`` skips the max.message.size
        check for callers that checked every message already."""
        if check_sizes:
            for _, _, message_set in entries:
                check_message_sizes(message_set, self.max_message_size)
        if len(entries) == 1:
            frame = encode_produce_request(*entries[0])
        else:
            frame = encode_multiproduce_request(entries)
        return await self._produce(frame, [(t, p) for t, p, _ in entries], confirm)

    async def _produce(
        self, frame: bytes, targets: list[tuple[str, int]], confirm: bool
    ) -> int | None:
        if not confirm:
            await self.send(frame)
            return None
        if not targets:
            raise ValueError("nothing to confirm: no produce entries")
        # OFFSETS refuses partition -1 by closing; partition 0 exists for every topic.
        topic, partition = targets[-1]
        if partition < -1:
            raise InvalidPartitionError(f"partition {partition} is not valid for a produce")
        probe = encode_offsets_request(topic, max(partition, 0), LATEST, 1)
        self._check_open()
        self._queue(frame, False)
        future = self._queue(probe, True)
        assert future is not None
        try:
            await self._drain()
            answer = await future
        except asyncio.CancelledError:
            future.cancel()
            raise
        except RequestTimeoutError:
            raise
        except KafkaConnectionError as exc:
            raise ProduceNotConfirmedError(
                f"{self.address} closed the connection before confirming the produce to "
                f"{topic}: it refused it (invalid topic or partition, corrupt data) or failed",
                broker=str(self.address),
                maybe_delivered=True,
            ) from exc
        offsets = decode_offsets_response(answer).offsets
        return offsets[0] if offsets else 0

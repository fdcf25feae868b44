"""SimpleConsumer: fetch, multifetch and offsets against one broker, like 0.7.2's, and more.

Beyond the 0.7.2 SimpleConsumer: broker errors become typed exceptions as soon as a
fetch answers; :meth:`SimpleConsumer.messages` iterates a partition from an offset with the
next fetch already in flight while the current batch is handed out, grows the fetch size
when a message does not fit (up to a limit, then a clear error; an offset that is not a
message start is a typed error at once, see :mod:`.fetch_size`), can poll when caught up
and stop at an end offset. Like the Java client, a request that meets a broken connection
is sent once more on a fresh one (fetches and offsets are safe to repeat).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from .connection import BrokerAddress, BrokerConnection
from .errors import (
    BrokerError,
    CompressionError,
    InvalidConfigError,
    KafkaConnectionError,
    ProtocolError,
    RequestTimeoutError,
)
from .fetch_size import FetchSizer, decompression_bound
from .pool import ConnectionPool
from .protocol import EARLIEST, LATEST, FetchRequest, FetchResponse, decode_messages_into
from .protocol.columns import MessageColumns, decode_columns
from .protocol.messages import BytesLike
from .protocol.requests import validate_topic
from .record_batch import FetchedColumns, RecordBatch
from .records import ConsumerRecord
from .validation import (
    INT32_MAX,
    check_fetch_size,
    check_int,
    check_ms,
    check_offset,
    check_optional_int,
    check_optional_ms,
    check_partition,
)

__all__ = ["EARLIEST", "LATEST", "FetchResult", "SimpleConsumer"]

log = logging.getLogger("aiokafka07.simple")

T = TypeVar("T")
#: How a fetched set is decoded: (topic, partition, offset, set) → (messages, valid bytes).
Decode = Callable[[str, int, int, BytesLike], tuple[Any, int]]

#: 0.7.2 consumer ``fetch.size``.
FETCH_SIZE = 1048576


class FetchResult(NamedTuple):
    """The outcome of one fetch: records, where to fetch next, and the broker's error."""

    topic: str
    partition: int
    offset: int
    messages: list[ConsumerRecord]
    next_offset: int
    error: BrokerError | None = None

    def raise_for_error(self) -> FetchResult:
        """Raise the broker's error, if any; return self otherwise."""
        if self.error is not None:
            raise self.error
        return self


class SimpleConsumer:
    """Requests against one broker (an async context manager; connects lazily).

    ``fetch_size`` is 0.7.2's ``fetch.size``; :meth:`messages` grows it for a larger
    message, up to ``max_fetch_size``. ``max_decompressed_bytes`` bounds what the
    compressed wrappers of one fetch may decompress to (default: ``max_fetch_size``, at
    least 64 MiB; see :func:`~aiokafka07.fetch_size.decompression_bound`).
    Durations are milliseconds: ``request_timeout_ms`` is ``socket.timeout.ms`` (a real
    read timeout), ``connect_timeout_ms`` bounds each connection attempt (``request_timeout``
    and ``connect_timeout``, in seconds, are their deprecated names). ``receive_buffer``
    is ``socket.buffersize`` (default: leave the kernel's autotuning on, which lets the
    next fetch land while a batch is handed out; 0.7.2's 64 KiB throttles that). Pass a
    shared ``pool`` to reuse connections of a larger client.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 6667,
        *,
        broker_id: int | None = None,
        fetch_size: int = FETCH_SIZE,
        max_fetch_size: int = 64 * FETCH_SIZE,
        max_decompressed_bytes: int | None = None,
        request_timeout_ms: float = 30000.0,
        connect_timeout_ms: float = 5000.0,
        receive_buffer: int | None = None,
        pool: ConnectionPool | None = None,
        request_timeout: float | None = None,
        connect_timeout: float | None = None,
    ) -> None:
        if not isinstance(host, str) or not host:
            raise InvalidConfigError(f"host must be a non-empty str, not {host!r}")
        port = check_int("port", port, minimum=1, maximum=65535)
        broker_id = check_optional_int("broker_id", broker_id, minimum=0)
        fetch_size = check_int("fetch_size", fetch_size, minimum=1, maximum=INT32_MAX)
        max_fetch_size = check_int(
            "max_fetch_size", max_fetch_size, minimum=fetch_size, maximum=INT32_MAX
        )
        if pool is not None and not isinstance(pool, ConnectionPool):
            raise InvalidConfigError(f"pool must be a ConnectionPool, not {pool!r}")
        self.address = BrokerAddress(broker_id, host, port)
        self.fetch_size = fetch_size
        self.max_fetch_size = max_fetch_size
        self.max_decompressed_bytes = decompression_bound(max_fetch_size, max_decompressed_bytes)
        self._own_pool = pool is None
        request = check_ms(
            "SimpleConsumer", "request_timeout_ms", request_timeout_ms, request_timeout, above=True
        )
        connect = check_ms(
            "SimpleConsumer", "connect_timeout_ms", connect_timeout_ms, connect_timeout, above=True
        )
        self._pool = pool or ConnectionPool(
            request_timeout_ms=request, connect_timeout_ms=connect, receive_buffer=receive_buffer
        )

    async def __aenter__(self) -> SimpleConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections (unless the pool is shared)."""
        if self._own_pool:
            await self._pool.close()

    async def connection(self) -> BrokerConnection:
        """The connection in use (opened on first use)."""
        return await self._pool.connection(self.address)

    async def _call(self, op: Callable[[BrokerConnection], Awaitable[T]]) -> T:
        """Run ``op`` on a connection; once more on a fresh one if the first one broke."""
        conn = await self.connection()
        try:
            return await op(conn)
        except RequestTimeoutError:
            raise
        except KafkaConnectionError as exc:
            if not conn.closed:
                raise
            log.info("%s; sending the request again on a new connection", exc)
            return await op(await self.connection())

    # -- requests -----------------------------------------------------------------------

    async def fetch(
        self, topic: str, partition: int, offset: int, max_size: int | None = None
    ) -> FetchResult:
        """Fetch from ``offset``; raise the broker's error as a typed exception.

        A first message larger than ``max_size`` raises InvalidMessageSizeError, whose
        ``size`` tells how large the fetch must be (:meth:`batches` grows the fetch
        itself).
        """
        size = self.fetch_size if max_size is None else check_fetch_size(max_size)
        _check_fetch(topic, partition, offset)
        response = await self._call(lambda c: c.fetch(topic, partition, offset, size))
        return self._result(topic, partition, offset, response).raise_for_error()

    async def multifetch(
        self, fetches: Sequence[FetchRequest | tuple[str, int, int, int]]
    ) -> list[FetchResult]:
        """Fetch several partitions in one request; each result carries its own error.
        Refuses an empty list (:class:`~aiokafka07.errors.InvalidConfigError`)."""
        requests = [FetchRequest(*f) for f in fetches]
        if not requests:
            raise InvalidConfigError("multifetch needs at least one fetch")
        for request in requests:
            _check_fetch(request.topic, request.partition, request.offset)
            check_fetch_size(request.max_size)
        multi = await self._call(lambda c: c.multifetch(requests))
        return [
            self._result(r.topic, r.partition, r.offset, response)
            for r, response in zip(requests, multi.responses, strict=True)
        ]

    async def offsets_before(
        self, topic: str, partition: int, time: int, max_offsets: int = 1
    ) -> list[int]:
        """Up to ``max_offsets`` offsets before ``time`` (ms, LATEST or EARLIEST), newest
        first (PROTOCOL §11)."""
        validate_topic(topic)
        check_partition(partition)  # a broker closes the connection on a bad one
        check_int("max_offsets", max_offsets, minimum=0, maximum=INT32_MAX)
        return list(await self._call(lambda c: c.offsets(topic, partition, time, max_offsets)))

    def _name(self, partition: int) -> int | str:
        """A partition as errors name it: ``<broker>-<partition>`` (the project's name of
        a 0.7 partition) when the broker id is known, else its bare number."""
        broker_id = self.address.broker_id
        return partition if broker_id is None else f"{broker_id}-{partition}"

    def _result(
        self,
        topic: str,
        partition: int,
        offset: int,
        response: FetchResponse,
        decode: Decode | None = None,
    ) -> FetchResult:
        error = response.error(offset)
        if error is not None:
            return FetchResult(topic, partition, offset, [], offset, error)
        try:
            records, valid = (decode or self._decode)(
                topic, partition, offset, response.message_set
            )
        except ProtocolError as exc:
            # Named at the bad entry's own offset (its position counts from ``offset``).
            where = f"{topic}/{self._name(partition)} at offset {offset + (exc.position or 0)}"
            over = isinstance(exc, CompressionError) and exc.limit is not None
            hint = " (max_decompressed_bytes)" if over else ""
            exc.args = (f"{where}: {exc}{hint}",)
            raise
        return FetchResult(topic, partition, offset, records, offset + valid)

    def _decode(
        self, topic: str, partition: int, offset: int, message_set: BytesLike
    ) -> tuple[Any, int]:
        """The messages of a fetched set and its valid byte count: a list of
        :class:`ConsumerRecord` (a columnar reader, the Spark source, decodes into
        column buffers instead: anything with a length, that ``batches`` hands out)."""
        records: list[ConsumerRecord] = []
        valid = decode_messages_into(
            records,
            message_set,
            offset,
            message_type=ConsumerRecord,
            prefix=(topic, self.address.broker_id, partition),
            max_decompressed=self.max_decompressed_bytes,
        )
        return records, valid

    def _decode_columns(
        self, topic: str, partition: int, offset: int, message_set: BytesLike
    ) -> tuple[MessageColumns, int]:
        """The messages of a fetched set as column buffers (:meth:`record_batches`)."""
        return decode_columns(message_set, offset, max_decompressed=self.max_decompressed_bytes)

    # -- iteration ----------------------------------------------------------------------

    async def batches(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        end_offset: int | None = None,
        poll_interval_ms: float | None = None,
        fetch_size: int | None = None,
        poll_interval: float | None = None,
    ) -> AsyncGenerator[FetchResult, None]:
        """Fetch results from ``offset`` on, one per non-empty fetch.

        The next fetch is sent before a result is handed out. Without ``poll_interval_ms``
        the iteration ends when it catches up with the log end; with it, it waits that
        many milliseconds and fetches again. With ``end_offset`` it stops there, handing
        out only messages that end at or before it. (``poll_interval``, in seconds, is the
        deprecated form of ``poll_interval_ms``.)
        """
        poll_ms = check_optional_ms(
            "SimpleConsumer.batches", "poll_interval_ms", poll_interval_ms, poll_interval
        )
        results = self._results(topic, partition, offset, end_offset, poll_ms, fetch_size, None)
        async with contextlib.aclosing(results):  # closing this closes the prefetch too
            async for result in results:
                yield result

    async def record_batches(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        end_offset: int | None = None,
        poll_interval_ms: float | None = None,
        fetch_size: int | None = None,
    ) -> AsyncGenerator[RecordBatch, None]:
        """:meth:`batches` as :class:`~aiokafka07.RecordBatch` objects: each non-empty
        fetch decoded straight into columns (no Python object per message), for Arrow
        without a copy. The same fetching, growing, ``end_offset`` and polling rules and
        errors; a batch's :attr:`~aiokafka07.RecordBatch.next_offset` is where the next
        fetch starts."""
        poll_ms = check_optional_ms(
            "SimpleConsumer.record_batches", "poll_interval_ms", poll_interval_ms, None
        )
        results = self._results(
            topic, partition, offset, end_offset, poll_ms, fetch_size, self._decode_columns
        )
        broker_id = self.address.broker_id
        async with contextlib.aclosing(results):
            async for result in results:
                decoded = cast(MessageColumns, result.messages)  # (by _decode_columns)
                columns = FetchedColumns(topic, broker_id, partition, decoded, result.offset)
                yield columns.batch(0, len(columns))

    async def _results(
        self,
        topic: str,
        partition: int,
        offset: int,
        end_offset: int | None,
        poll_ms: float | None,
        fetch_size: int | None,
        decode: Decode | None,
    ) -> AsyncGenerator[FetchResult, None]:
        """The fetch loop of :meth:`batches` and :meth:`record_batches`, decoding each
        fetched set with ``decode`` (:meth:`_decode` when None)."""
        _check_fetch(topic, partition, offset)
        sizer = FetchSizer(
            topic,
            self._name(partition),
            fetch_size or self.fetch_size,
            max(self.max_fetch_size, fetch_size or 0),
        )
        pending: asyncio.Task[FetchResponse] | None = None
        conn = await self.connection()

        def start(at: int) -> asyncio.Task[FetchResponse]:
            return asyncio.ensure_future(conn.fetch(topic, partition, at, sizer.size))

        try:
            pending = start(offset)
            while True:
                assert pending is not None
                try:
                    response = await pending
                except RequestTimeoutError:
                    raise
                except KafkaConnectionError:
                    if not conn.closed:
                        raise
                    conn = await self.connection()  # one fresh connection, as in Java
                    response = await conn.fetch(topic, partition, offset, sizer.size)
                pending = None
                data = response.message_set
                cut = end_offset is not None and len(data) > end_offset - offset
                if cut:
                    # Entries crossing end_offset become a partial tail: handed out are
                    # exactly the messages that end at or before it (a wrapper's inner
                    # messages end with the wrapper, whatever offset they report).
                    assert end_offset is not None
                    response = response._replace(message_set=data[: max(0, end_offset - offset)])
                try:
                    result = self._result(
                        topic, partition, offset, response, decode
                    ).raise_for_error()
                except ProtocolError as exc:
                    declared = FetchSizer.incomplete_first(exc)
                    if declared is None:
                        if exc.decoded is not None and exc.decoded.messages:
                            # Hand out what came before the bad entry first, as Java does.
                            good = FetchResult(
                                topic,
                                partition,
                                offset,
                                exc.decoded.messages,
                                offset + exc.decoded.valid_bytes,
                            )
                            yield good
                        raise
                    if cut and 4 + declared <= len(data):
                        return  # a whole message, which ends past end_offset
                    await self._judge(sizer, partition, offset, declared, len(data), grow=not cut)
                    if cut:
                        return  # a message that may be real, and ends past end_offset
                    pending = start(offset)
                    continue
                messages, next_offset = result.messages, result.next_offset
                if next_offset == offset and data and not cut:
                    # Fewer than 4 bytes, no error: a cut entry (or a tiny fetch size).
                    await self._judge(sizer, partition, offset, None, len(data), grow=True)
                    pending = start(offset)
                    continue
                done = cut or (end_offset is not None and next_offset >= end_offset)
                if not done and next_offset != offset:
                    pending = start(next_offset)
                if messages:
                    yield result._replace(messages=messages)
                if done:
                    return
                if next_offset == offset:  # caught up
                    if poll_ms is None:
                        return
                    await asyncio.sleep(poll_ms / 1000)
                    pending = start(offset)
                offset = next_offset
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending

    async def _judge(
        self,
        sizer: FetchSizer,
        partition: int,
        offset: int,
        declared: int | None,
        received: int,
        *,
        grow: bool,
    ) -> None:
        """A fetch at ``offset`` brought no complete message: raise the typed error if the
        entry there cannot be one, else (``grow``) enlarge the next fetch. The log end
        comes from OFFSETS when the fetch alone cannot tell."""
        log_end = None
        if sizer.needs_log_end(received):
            offsets = await self.offsets_before(sizer.topic, partition, LATEST)
            log_end = offsets[0] if offsets else None
        if grow:
            sizer.grow(offset, declared, received, log_end)
        else:
            sizer.check(offset, declared, received, log_end)

    async def messages(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        end_offset: int | None = None,
        poll_interval_ms: float | None = None,
        fetch_size: int | None = None,
        poll_interval: float | None = None,
    ) -> AsyncGenerator[ConsumerRecord, None]:
        """Every message from ``offset`` on, compressed wrappers expanded with 0.7.2
        offsets (see :meth:`batches` for ``end_offset`` and ``poll_interval_ms``)."""
        batches = self.batches(
            topic,
            partition,
            offset,
            end_offset=end_offset,
            poll_interval_ms=check_optional_ms(
                "SimpleConsumer.messages", "poll_interval_ms", poll_interval_ms, poll_interval
            ),
            fetch_size=fetch_size,
        )
        async with contextlib.aclosing(batches):  # closing this closes the prefetch too
            async for batch in batches:
                for record in batch.messages:
                    yield record


def _check_fetch(topic: str, partition: int, offset: int) -> None:
    """What a fetch names, checked before anything is sent: a topic the broker accepts,
    a partition (0 and up) and an offset (0 and up)."""
    validate_topic(topic)
    check_partition(partition)
    check_offset(offset)

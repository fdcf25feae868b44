"""SimpleConsumer: fetch, multifetch and offsets against one broker, like 0.7.2's, and more.

Beyond the 0.7.2 SimpleConsumer: broker errors become typed exceptions as soon as a
fetch answers; :meth:`SimpleConsumer.messages` iterates a partition from an offset with the
next fetch already in flight while the current batch is handed out, grows the fetch size
when a message does not fit (up to a limit, then a clear error), can poll when caught up
and stop at an end offset. Like the Java client, a request that meets a broken connection
is sent once more on a fresh one (fetches and offsets are safe to repeat).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import NamedTuple, TypeVar

from .connection import BrokerAddress, BrokerConnection
from .errors import (
    BrokerError,
    InvalidConfigError,
    InvalidMessageSizeError,
    KafkaConnectionError,
    ProtocolError,
    RequestTimeoutError,
)
from .pool import ConnectionPool
from .protocol import EARLIEST, LATEST, FetchRequest, FetchResponse, decode_messages_into
from .protocol.requests import validate_topic
from .records import ConsumerRecord
from .validation import check_int, check_optional_int

__all__ = ["EARLIEST", "LATEST", "FetchResult", "SimpleConsumer"]

log = logging.getLogger("aiokafka07.simple")

T = TypeVar("T")

#: 0.7.2 consumer ``fetch.size``.
FETCH_SIZE = 1048576
_INT32_MAX = (1 << 31) - 1


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
    message, up to ``max_fetch_size``. ``request_timeout`` is ``socket.timeout.ms`` (a
    real read timeout); ``receive_buffer`` is ``socket.buffersize`` (default: leave the
    kernel's autotuning on, which lets the next fetch land while a batch is handed out;
    0.7.2's 64 KiB throttles that). Pass a shared
    ``pool`` to reuse connections of a larger client.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 6667,
        *,
        broker_id: int | None = None,
        fetch_size: int = FETCH_SIZE,
        max_fetch_size: int = 64 * FETCH_SIZE,
        request_timeout: float = 30.0,
        connect_timeout: float = 5.0,
        receive_buffer: int | None = None,
        pool: ConnectionPool | None = None,
    ) -> None:
        if not isinstance(host, str) or not host:
            raise InvalidConfigError(f"host must be a non-empty str, not {host!r}")
        port = check_int("port", port, minimum=1, maximum=65535)
        broker_id = check_optional_int("broker_id", broker_id, minimum=0)
        fetch_size = check_int("fetch_size", fetch_size, minimum=1, maximum=_INT32_MAX)
        max_fetch_size = check_int(
            "max_fetch_size", max_fetch_size, minimum=fetch_size, maximum=_INT32_MAX
        )
        if pool is not None and not isinstance(pool, ConnectionPool):
            raise InvalidConfigError(f"pool must be a ConnectionPool, not {pool!r}")
        self.address = BrokerAddress(broker_id, host, port)
        self.fetch_size = fetch_size
        self.max_fetch_size = max_fetch_size
        self._own_pool = pool is None
        self._pool = pool or ConnectionPool(
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            receive_buffer=receive_buffer,
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
        ``size`` tells how large the fetch must be.
        """
        size = self.fetch_size if max_size is None else max_size
        validate_topic(topic)
        response = await self._call(lambda c: c.fetch(topic, partition, offset, size))
        return self._result(topic, partition, offset, response).raise_for_error()

    async def multifetch(
        self, fetches: Sequence[FetchRequest | tuple[str, int, int, int]]
    ) -> list[FetchResult]:
        """Fetch several partitions in one request; each result carries its own error."""
        requests = [FetchRequest(*f) for f in fetches]
        for request in requests:
            validate_topic(request.topic)
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
        return list(await self._call(lambda c: c.offsets(topic, partition, time, max_offsets)))

    def _result(
        self, topic: str, partition: int, offset: int, response: FetchResponse
    ) -> FetchResult:
        error = response.error(offset)
        if error is not None:
            return FetchResult(topic, partition, offset, [], offset, error)
        records: list[ConsumerRecord] = []
        try:
            valid = decode_messages_into(
                records,
                response.message_set,
                offset,
                message_type=ConsumerRecord,
                prefix=(topic, self.address.broker_id, partition),
            )
        except ProtocolError as exc:
            exc.args = (f"{topic}/{partition} at offset {offset}: {exc}",)
            raise
        return FetchResult(topic, partition, offset, records, offset + valid)

    # -- iteration ----------------------------------------------------------------------

    async def batches(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        end_offset: int | None = None,
        poll_interval: float | None = None,
        fetch_size: int | None = None,
    ) -> AsyncGenerator[FetchResult, None]:
        """Fetch results from ``offset`` on, one per non-empty fetch.

        The next fetch is sent before a result is handed out. Without ``poll_interval``
        the iteration ends when it catches up with the log end; with it, it waits that
        many seconds and fetches again. With ``end_offset`` it stops there, handing out
        only messages that end at or before it.
        """
        validate_topic(topic)
        size = fetch_size or self.fetch_size
        pending: asyncio.Task[FetchResponse] | None = None
        conn = await self.connection()

        def start(at: int) -> asyncio.Task[FetchResponse]:
            return asyncio.ensure_future(conn.fetch(topic, partition, at, size))

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
                    response = await conn.fetch(topic, partition, offset, size)
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
                    result = self._result(topic, partition, offset, response).raise_for_error()
                except InvalidMessageSizeError as exc:
                    if exc.position != 0 or exc.size is None:
                        raise
                    if cut:
                        return  # the next entry ends past end_offset
                    size = self._grown(size, exc.size + 4, topic, partition, offset)
                    pending = start(offset)
                    continue
                messages, next_offset = result.messages, result.next_offset
                done = cut or (end_offset is not None and next_offset >= end_offset)
                if not done and next_offset != offset:
                    pending = start(next_offset)
                if messages:
                    yield result._replace(messages=messages)
                if done:
                    return
                if next_offset == offset:  # caught up
                    if poll_interval is None:
                        return
                    await asyncio.sleep(poll_interval)
                    pending = start(offset)
                offset = next_offset
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending

    def _grown(self, size: int, needed: int, topic: str, partition: int, offset: int) -> int:
        if needed > self.max_fetch_size:
            raise InvalidMessageSizeError(
                f"{topic}/{partition}: the message at offset {offset} needs a fetch size of "
                f"{needed} bytes, above the limit of {self.max_fetch_size}",
                position=0,
                size=needed - 4,
            )
        return min(self.max_fetch_size, max(needed, size * 2))

    async def messages(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        end_offset: int | None = None,
        poll_interval: float | None = None,
        fetch_size: int | None = None,
    ) -> AsyncGenerator[ConsumerRecord, None]:
        """Every message from ``offset`` on, compressed wrappers expanded with 0.7.2
        offsets (see :meth:`batches` for ``end_offset`` and ``poll_interval``)."""
        batches = self.batches(
            topic,
            partition,
            offset,
            end_offset=end_offset,
            poll_interval=poll_interval,
            fetch_size=fetch_size,
        )
        async with contextlib.aclosing(batches):  # closing this closes the prefetch too
            async for batch in batches:
                for record in batch.messages:
                    yield record

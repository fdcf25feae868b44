"""The :class:`Producer`: a thin facade over router, accumulator and sender.

* :mod:`.router` chooses each message's (broker, partition) as a 0.7.2 producer does and
  checks what the caller supplies (partition pairs, keys) when ``send()`` is called;
* :mod:`.accumulator` keeps accepted messages in per-(broker, topic, partition) batches,
  with the buffer's space accounting and ``linger``;
* :mod:`.sender` is the only part that touches connections: one supervised task per
  broker, every outcome classified into done, retry or fail;
* :mod:`.results` is where each message ends, exactly once.

The invariant: every message ``send()`` accepted ends within ``delivery_timeout_ms``,
delivered or failed with its cause (its future says which), and a failure is true: the
messages are not in the log, or the error says it cannot know
(:class:`DeliveryUnknownError`, ``maybe_delivered``). :meth:`Producer.close` returns
within its timeout whatever went wrong, and raises :class:`ProducerClosedError` naming
every place messages failed, with the cause's text, counting the unknown ones apart.

0.7 never acknowledges a produce, and a broker drops a message over its
``max.message.size`` without closing the connection. With ``confirm`` (the default) the
connection reads the partition's log end (OFFSETS) before its first confirmed produce
there and after each request, and messages count as delivered once the log has grown by
every byte the connection wrote there (:mod:`aiokafka07.confirm`); OFFSETS shows flushed
data only, so a confirmation waits for the broker's flush, while the writes go on (the
buffer bounds what waits for confirmation, not a count of requests). A request the log
never shows fails with :class:`ProduceNotConfirmedError`. If the connection breaks
first, the log ends read once the broker answers again settle what they prove
(:mod:`.settlement`); what they cannot settle is sent again
(``on_unconfirmed="retry"``: at least once) or fails as unknown (``"fail"``: at most
once). Without confirm, delivered means written to the socket.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from array import array
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, overload

from ..backoff import Backoff
from ..cluster import Cluster, cluster_from
from ..connection import MAX_MESSAGE_SIZE
from ..errors import (
    ArrowValuesError,
    InvalidConfigError,
    ProducerClosedError,
    QueueFullError,
)
from ..pool import ConnectionPool, PoolMetrics
from ..protocol import Compression, _accel, validate_topic
from ..supervisor import Supervisor
from ..validation import (
    INT32_MAX,
    NOT_GIVEN,
    check_callable,
    check_gzip_level,
    check_int,
    check_ms,
    check_number,
    check_optional_int,
    check_optional_ms,
    deprecated,
    warn_deprecated,
)
from .accumulator import Accumulator
from .arrow_input import ArrowSets, capsules, gather_sets, read_keys
from .batch import Batch, BatchBuilder, Route, check_message_size, serialize
from .encoding import MessageSetEncoder, topics_to_compress
from .legacy import SEND_BATCH_OF_VALUES, send_batch_of_values_arguments
from .results import EncodedMessage, Outcomes, ProduceResult, ProducerMetrics
from .router import Partitioner, Router, check_partition
from .sender import Sender, exc_closed

__all__ = ["Producer"]

log = logging.getLogger("aiokafka07.producer")


#: ``delivery_timeout_ms`` when not given (the modern Java producer's default).
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000.0


def delivery_timeout(given: object, linger_ms: float, request_timeout_ms: float) -> float:
    """``delivery_timeout_ms``: None is the default, raised to ``linger_ms +
    request_timeout_ms`` if that is more (a request must have its whole timeout); a value
    given must be at least that sum (as the Java producer's check)."""
    least = linger_ms + request_timeout_ms
    if given is None:
        return max(DEFAULT_DELIVERY_TIMEOUT_MS, least)
    value = check_number("delivery_timeout_ms", given, minimum=0, above=True)
    if value < least:
        raise InvalidConfigError(
            f"delivery_timeout_ms ({value:g}) must be at least linger_ms + request_timeout_ms "
            f"({linger_ms:g} + {request_timeout_ms:g}): a message must be able to wait for "
            "its batch and then for its request"
        )
    return value


def _never_hot(topic: str, value: Any, /) -> None:
    """send()'s hot path for a producer with a ``value_serializer``: never taken."""
    return None


class Producer:
    """Send messages to Kafka 0.7 (an async context manager).

    Exactly one of ``zookeeper`` (``zk.connect``) and ``brokers`` (``broker.list``) is
    given, or a shared ``cluster``. ``compression`` applies to ``compressed_topics`` (all
    topics when None or empty; a string is one topic), as ``compression.codec`` /
    ``compressed.topics`` do; ``compression_level`` is gzip's, 0 to 9 (None: 6, Java's
    default, which keeps sets byte for byte the Java producer's; 1 costs less CPU for more
    bytes: see the producer guide). Every parameter is checked here: a bad value raises
    :class:`~aiokafka07.errors.InvalidConfigError` (a ``ValueError`` and ``TypeError``)
    naming it. Every duration is in milliseconds (``*_ms``), as everywhere in aiokafka07;
    ``request_timeout`` and ``connect_timeout`` (seconds) are the deprecated names of
    ``request_timeout_ms`` and ``connect_timeout_ms``.

    ``delivery_timeout_ms`` bounds each message's life, as the modern Java producer's
    ``delivery.timeout.ms``: every message ``send()`` accepted ends within it (delivered,
    or failed with :class:`~aiokafka07.errors.DeliveryTimeoutError`, or with
    :class:`~aiokafka07.errors.DeliveryUnknownError` if it was written and never
    settled). Inside it, failed attempts are retried with backoff whatever the cause (a
    refused connection, no live broker, a broker gone from ZooKeeper). None: 120,000 ms,
    or ``linger_ms + request_timeout_ms`` if that is more; a value given must be at least
    that sum. ``retries`` (None: no cap) optionally caps the attempts as well.
    """

    def __init__(
        self,
        *,
        zookeeper: str | None = None,
        brokers: str | None = None,
        cluster: Cluster | None = None,
        compression: Compression | int | str | None = None,
        compressed_topics: Iterable[str] | str | None = None,
        compression_level: int | None = None,
        value_serializer: Callable[[Any], bytes] | None = None,
        key_serializer: Callable[[Any], Any] | None = None,
        partitioner: Partitioner | None = None,
        batch_size: int = 1000,
        batch_bytes: int = 1 << 20,
        linger_ms: float = 5.0,
        max_buffered_messages: int = 100_000,
        max_buffered_bytes: int = 64 << 20,
        max_in_flight: int = 5,
        max_request_bytes: int = 8 << 20,
        confirm: bool = True,
        on_unconfirmed: str = "retry",
        retries: int | None = None,
        retry_backoff_ms: float = 100.0,
        max_message_size: int = MAX_MESSAGE_SIZE,
        request_timeout_ms: float = 30000.0,
        connect_timeout_ms: float = 5000.0,
        pool: ConnectionPool | None = None,
        request_timeout: float | None = None,
        connect_timeout: float | None = None,
        delivery_timeout_ms: float | None = None,
    ) -> None:
        batch_size = check_int("batch_size", batch_size, minimum=1)
        batch_bytes = check_int("batch_bytes", batch_bytes, minimum=1)
        self.linger_ms = check_number("linger_ms", linger_ms, minimum=0)
        max_buffered_messages = check_int("max_buffered_messages", max_buffered_messages, minimum=1)
        max_buffered_bytes = check_int("max_buffered_bytes", max_buffered_bytes, minimum=1)
        self.max_in_flight = check_int("max_in_flight", max_in_flight, minimum=1)
        max_request_bytes = check_int(
            "max_request_bytes", max_request_bytes, minimum=1, maximum=INT32_MAX
        )
        retries = check_optional_int("retries", retries, minimum=0)
        retry_backoff = check_number("retry_backoff_ms", retry_backoff_ms, minimum=0, above=True)
        self.max_message_size = check_int(
            "max_message_size", max_message_size, minimum=1, maximum=INT32_MAX
        )
        request_timeout_ms = check_ms(
            "Producer", "request_timeout_ms", request_timeout_ms, request_timeout, above=True
        )
        connect_timeout_ms = check_ms(
            "Producer", "connect_timeout_ms", connect_timeout_ms, connect_timeout, above=True
        )
        self.delivery_timeout_ms = delivery_timeout(
            delivery_timeout_ms, self.linger_ms, request_timeout_ms
        )
        if not isinstance(confirm, bool):
            raise InvalidConfigError(f"confirm must be True or False, not {confirm!r}")
        if on_unconfirmed not in ("retry", "fail"):
            raise InvalidConfigError(
                f"on_unconfirmed must be 'retry' or 'fail', not {on_unconfirmed!r}"
            )
        for name, value in (
            ("value_serializer", value_serializer),
            ("key_serializer", key_serializer),
            ("partitioner", partitioner),
        ):
            check_callable(name, value)
        try:
            self.compression = Compression.parse(compression)
        except (TypeError, ValueError) as exc:
            raise InvalidConfigError(f"compression: {exc}") from exc
        self.compression_level = check_gzip_level(self.compression.name.lower(), compression_level)
        self.compressed_topics = topics_to_compress(compressed_topics)
        for topic in self.compressed_topics or ():
            validate_topic(topic)
        if pool is not None and not isinstance(pool, ConnectionPool):
            raise InvalidConfigError(f"pool must be a ConnectionPool, not {pool!r}")

        if cluster is None:
            cluster = cluster_from(zookeeper, brokers)
            self._own_cluster = True
        else:
            self._own_cluster = False
        self.cluster = cluster
        self._router = Router(cluster, partitioner, key_serializer)
        self.value_serializer = value_serializer
        self._plain_values = value_serializer is None
        self.batch_size = batch_size
        self.confirm = confirm
        self.retries = retries
        self._own_pool = pool is None
        self._pool = pool or ConnectionPool(
            request_timeout_ms=request_timeout_ms,
            connect_timeout_ms=connect_timeout_ms,
            max_message_size=self.max_message_size,
        )
        self._metrics = ProducerMetrics()
        self._supervisor = Supervisor("producer", log)
        self._accumulator = Accumulator(
            batch_size=batch_size,
            batch_bytes=batch_bytes,
            linger=self.linger_ms / 1000,
            max_messages=max_buffered_messages,
            max_bytes=max_buffered_bytes,
            max_message_size=self.max_message_size,
            on_new_queue=self._new_broker,
        )
        # send()'s hot path (HotPath.append), never with a value_serializer (the hot path
        # takes bytes as they are).
        self._append_hot: Callable[[str, Any], asyncio.Future[Any] | None] = (
            self._accumulator.hot_path.append if value_serializer is None else _never_hot
        )
        self._outcomes = Outcomes(self._metrics, self._accumulator.release)
        self._sender = Sender(
            accumulator=self._accumulator,
            router=self._router,
            encoder=MessageSetEncoder(
                self.compression,
                self.compressed_topics,
                self.max_message_size,
                self.compression_level,
            ),
            cluster=cluster,
            pool=self._pool,
            outcomes=self._outcomes,
            metrics=self._metrics,
            supervisor=self._supervisor,
            confirm=confirm,
            retry_unconfirmed=on_unconfirmed == "retry",
            retries=retries,
            backoff=Backoff(retry_backoff / 1000, max(retry_backoff / 1000, 5.0)),
            max_in_flight=self.max_in_flight,
            max_request_bytes=max_request_bytes,
            delivery_timeout=self.delivery_timeout_ms / 1000,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closing = False
        self._valid_topics: set[str] = set()

    def _new_broker(self, broker_id: int) -> None:
        self._sender.start(broker_id)

    # -- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close. If the block raised, its exception is the one that propagates: a
        failure to deliver is then logged and attached to it as a note, never raised
        over it."""
        if exc is None:
            await self.close()
            return
        try:
            await self.close()
        except Exception as close_error:
            log.error("closing the producer after %s: %s", type(exc).__name__, close_error)
            add_note = getattr(exc, "add_note", None)
            if add_note is not None:
                add_note(f"while closing the producer: {close_error}")

    async def start(self) -> None:
        """Start the cluster view (ZooKeeper session) if this producer owns it."""
        if self._started:
            return
        if self._closing:
            raise ProducerClosedError("a closed producer cannot start again")
        if self._own_cluster:
            await self.cluster.start()
        self._loop = asyncio.get_running_loop()
        self._accumulator.bind(self._loop)
        self._started = True
        log.info(
            "producer started on %r: compression %s%s, confirm %s (%s when unconfirmed), "
            "batch_size %d, linger_ms %g, max_in_flight %d, delivery_timeout_ms %g, "
            "retries %s",
            self.cluster,
            self.compression.name.lower()
            + ("" if self.compression_level is None else f" level {self.compression_level}"),
            "" if self.compressed_topics is None else f" for {sorted(self.compressed_topics)}",
            self.confirm,
            "retry" if self._sender.retry_unconfirmed else "fail",
            self.batch_size,
            self.linger_ms,
            self.max_in_flight,
            self.delivery_timeout_ms,
            "no cap" if self.retries is None else self.retries,
        )

    def _pending(self) -> list[asyncio.Future[Any]]:
        """Futures of every message accepted and not ended yet."""
        batches = [*self._accumulator.batches(), *self._sender.batches()]
        return [f for batch in batches if not batch.ended for f in batch.pending()]

    async def flush(self) -> None:
        """Send everything accepted so far without lingering, and wait until each
        message is delivered or failed (failures stay on the messages' futures). Bounded:
        each message ends within ``delivery_timeout_ms``. With confirm, the last
        messages are confirmed once the broker flushes them: on its timer
        (``log.default.flush.interval.ms``) when too few follow to reach its count."""
        pending = self._pending()
        self._accumulator.hurry()
        # One wait per message still pending when its turn comes, not asyncio.wait() over
        # them all: that adds a done callback to every message (and runs each as a loop
        # callback), ~0.2 s for a full buffer of 100,000. A batch's messages end
        # together, so this waits about once per batch, often once.
        for future in pending:
            if not future.done():
                await asyncio.wait((future,))

    async def close(self, timeout: float | None = None, *, timeout_ms: float | None = None) -> None:
        """Deliver everything accepted, then close the connections (and the cluster view
        if owned). Raises :class:`ProducerClosedError` counting, for each partition, the
        messages not delivered of each cause, with the cause's text (its ``causes`` add
        up to ``undelivered``; with the delivered ones, to every message accepted).

        ``timeout_ms`` bounds the close: deliveries get all of it but the last fifth (at
        most 0.5 s), in which what is still undelivered fails
        (:class:`ProducerClosedError`, or :class:`ProduceNotConfirmedError` for a request
        the broker may have received) and the connections close. (Closing a ZooKeeper
        session the producer owns is bounded by its session timeout.) None waits for
        every message to end, which each does within ``delivery_timeout_ms``. New
        messages are refused from the moment ``close()`` is called. (``timeout``, in
        seconds, is the deprecated form.)
        """
        await self._close(check_optional_ms("Producer.close", "timeout_ms", timeout_ms, timeout))

    async def stop(self, timeout: float | None = None, *, timeout_ms: float | None = None) -> None:
        """Alias of :meth:`close` (aiokafka's name)."""
        await self._close(check_optional_ms("Producer.stop", "timeout_ms", timeout_ms, timeout))

    async def _close(self, timeout_ms: float | None) -> None:
        if self._closing:
            return
        timeout = None if timeout_ms is None else timeout_ms / 1000
        self._closing = True
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        self._accumulator.stop_accepting()  # the counters are exact from now on
        try:
            if self._started:
                self._accumulator.hurry()
                # What is left then fails and the connections close in the rest.
                wait = None if timeout is None else timeout - min(timeout * 0.2, 0.5)
                await self._accumulator.wait_drained(wait)
        finally:
            await self._shut_down(loop, deadline)
        error = self._outcomes.report()
        if error is not None:
            raise error

    async def _shut_down(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> None:
        """Fail whatever is left, with its cause, and release every resource."""

        def remaining(default: float) -> float:
            return default if deadline is None else max(deadline - loop.time(), 0.0)

        self._sender.stop()
        for batch in self._accumulator.close():
            self._outcomes.fail(batch, exc_closed())
        await self._supervisor.aclose(timeout=max(remaining(10.0), 0.1))
        if self._own_pool:
            # Answers still outstanding may arrive while the connections close. A
            # connection waits up to its timeout twice (for answers, then for the socket
            # to close): half of what is left each.
            await self._pool.close(timeout_ms=remaining(10.0) * 1000 / 2)
            await asyncio.sleep(0)  # let the requests' done callbacks run
        self._sender.abandon()
        if self._own_cluster and self._started:
            await self.cluster.close()
        if self._started:
            m = self._metrics
            log.info(
                "producer closed: %d messages (%d bytes) sent in %d requests, "
                "%d retried, %d failed, %d unknown",
                m.messages_sent,
                m.bytes_sent,
                m.requests_sent,
                m.retries,
                m.messages_failed,
                m.messages_unknown,
            )

    # -- what is known -------------------------------------------------------------

    @property
    def metrics(self) -> ProducerMetrics:
        """The counters, as of now (a snapshot)."""
        messages, size = self._accumulator.settle()
        return dataclasses.replace(self._metrics, queued_messages=messages, queued_bytes=size)

    @property
    def pool_metrics(self) -> PoolMetrics:
        """The broker connections' counters, as of now (a snapshot of its
        :class:`~aiokafka07.ConnectionPool`, shared with others when one was given)."""
        return self._pool.metrics

    async def partitions_for(self, topic: str) -> list[tuple[int, int]]:
        """The (broker id, partition) pairs a message for ``topic`` may go to, sorted
        numerically: what the partitioner chooses from (static mode: ``(id, 0)`` per
        broker; the producer sends partition -1 there). Raises :class:`NoBrokersError`
        when no live broker can take the topic."""
        validate_topic(topic)
        partitions = self._router.partitions(topic)
        if not partitions:
            raise self._router.cluster.no_brokers_error(topic)
        return partitions

    # -- accepting -------------------------------------------------------------------

    def _check_running(self) -> None:
        if self._loop is None or self._closing:
            raise ProducerClosedError("the producer is not running (use start() or async with)")

    def _check_topic(self, topic: str) -> None:
        if topic not in self._valid_topics:
            validate_topic(topic)
            self._valid_topics.add(topic)

    def _validated(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: object,
        *,
        raw: EncodedMessage | None = None,
    ) -> tuple[bytes, Any, tuple[int, int] | None]:
        """Everything about a message that can be checked before waiting for space:
        running, topic, payload, size, key, the partition pair. Returns (what to queue,
        the key as routing uses it, the pinned partition)."""
        self._check_running()
        self._check_topic(topic)
        if raw is not None:
            check_message_size(len(raw.value), self.max_message_size)
            # The entry as the consumer read it: same magic, attributes, payload, hence CRC.
            data = _accel.impl.encode_message_set((raw.value,), raw.magic, raw.attributes)
        else:
            data = value if type(value) is bytes and self._plain_values else None
            if data is None:
                data = serialize(value, self.value_serializer)
            check_message_size(len(data), self.max_message_size)
        pinned = None if partition is None else check_partition(partition)
        return data, self._router.key(key), pinned

    def _route(
        self, topic: str, routing_key: Any, pinned: tuple[int, int] | None, *, sticky: bool
    ) -> tuple[tuple[int, int], Route | None]:
        """(target, how to route it again on a retry) for a message or a batch, given the
        key as routing uses it (:meth:`Router.key`). Without a key or partition: the
        topic's sticky target when ``sticky``, else a random one."""
        if pinned is not None:
            return pinned, (None, pinned)
        if routing_key is not None:
            return self._router.by_key(topic, routing_key), (routing_key, None)
        target = self._accumulator.sticky_target(topic) if sticky else None
        return target or self._router.random_target(topic), None

    def _add(
        self,
        topic: str,
        data: bytes,
        routing_key: Any,
        pinned: tuple[int, int] | None,
        *,
        raw: bool,
    ) -> tuple[asyncio.Future[ProduceResult], Batch]:
        """Route and queue a validated message (space was checked)."""
        target, route = self._route(topic, routing_key, pinned, sticky=True)
        return self._accumulator.add(topic, target, data, route, raw=raw)

    async def _accept(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: object,
        raw: EncodedMessage | None = None,
    ) -> tuple[asyncio.Future[ProduceResult], Batch]:
        data, routing_key, pinned = self._validated(topic, value, key, partition, raw=raw)
        if self._accumulator.full():
            await self._accumulator.wait_for_space()
            self._check_running()
        return self._add(topic, data, routing_key, pinned, raw=raw is not None)

    def _accept_nowait(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: object,
        raw: EncodedMessage | None = None,
    ) -> asyncio.Future[ProduceResult]:
        data, routing_key, pinned = self._validated(topic, value, key, partition, raw=raw)
        accumulator = self._accumulator
        if accumulator.full():
            messages, size = accumulator.settle()
            raise QueueFullError(
                f"{messages} messages ({size} bytes) are waiting to be sent; the buffer holds "
                f"{accumulator.max_messages} messages / {accumulator.max_bytes} bytes"
            )
        return self._add(topic, data, routing_key, pinned, raw=raw is not None)[0]

    async def _let_senders_run(self) -> None:
        """A batch was sealed: let its sender write it now, so sending overlaps with the
        caller filling the next one (instead of waiting for a full buffer)."""
        self._accumulator.sealed = False
        await asyncio.sleep(0)

    async def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> asyncio.Future[ProduceResult]:
        """Accept a message; wait while the buffer is full. Returns the delivery future.

        ``partition`` = (broker id, partition) bypasses the partitioner. Everything is
        checked before the message is accepted: the topic name
        (:class:`InvalidTopicError`), the payload (``TypeError`` without a serializer
        for it; :class:`MessageTooLargeError`), the partition pair
        (:class:`InvalidPartitionError`) and the key (:class:`InvalidConfigError` for
        one whose hash is not the same in every process, such as a float or an object,
        unless a partitioner of your own takes it; what the partitioner raises).
        """
        if self._accumulator.sealed:
            # The sender writes the batch sealed since the last call first; this happens
            # before the message is taken, so a send() cancelled here took nothing (none
            # of its awaits comes after the message is accepted).
            await self._let_senders_run()
        if key is None and partition is None:
            # The accumulator's hot path: one call (in C when it was built).
            future = self._append_hot(topic, value)
            if future is not None:
                return future
        future, _ = await self._accept(topic, value, key, partition)
        return future

    def send_nowait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> asyncio.Future[ProduceResult]:
        """Accept a message, or raise :class:`QueueFullError` if the buffer is full."""
        if key is None and partition is None:
            future = self._append_hot(topic, value)
            if future is not None:
                return future
        return self._accept_nowait(topic, value, key, partition)

    async def send_and_wait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> ProduceResult:
        """Send one message now (its batch does not linger; others' do) and wait for
        its delivery."""
        future, batch = await self._accept(topic, value, key, partition)
        self._accumulator.hurry(batch)
        return await future

    async def send_message(
        self,
        topic: str,
        message: EncodedMessage,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> asyncio.Future[ProduceResult]:
        """Send a consumed message on exactly as it is: magic, attributes and payload, so
        the same bytes and CRC (waits while the buffer is full).

        A compressed wrapper from a shallow consumer stays one wrapper, byte for byte,
        and the producer's ``compression`` never applies to it: this is how a mirror
        forwards compressed sets without decompressing them. ``key`` and ``partition``
        choose the partition as in :meth:`send` (0.7 messages carry no key).
        """
        future, _ = await self._accept(topic, None, key, partition, raw=message)
        return future

    def send_message_nowait(
        self,
        topic: str,
        message: EncodedMessage,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> asyncio.Future[ProduceResult]:
        """:meth:`send_message`, or raise :class:`QueueFullError` if the buffer is full."""
        return self._accept_nowait(topic, None, key, partition, raw=message)

    # -- batches (aiokafka's shape) ------------------------------------------------

    def create_batch(self) -> BatchBuilder:
        """An empty :class:`BatchBuilder` to fill with ``append(value)`` and hand to
        :meth:`send_batch`; full at ``batch_size`` messages or ``batch_bytes`` bytes."""
        return BatchBuilder(
            max_count=self.batch_size,
            max_bytes=self._accumulator.batch_bytes,
            max_message_size=self.max_message_size,
            serializer=self.value_serializer,
        )

    @overload
    async def send_batch(
        self,
        batch: BatchBuilder,
        topic: str,
        *,
        partition: tuple[int, int] | None = None,
        key: Any = None,
    ) -> asyncio.Future[ProduceResult]: ...

    @overload
    @deprecated(
        "Producer.send_batch(topic, values, key=None, partition=None) is deprecated and goes "
        "in the next release: use batch = producer.create_batch(), batch.append(value) for "
        "each value, then send_batch(batch, topic, key=key, partition=partition) (one message "
        "set, one future), or send(topic, value, key, partition) for each value"
    )
    async def send_batch(
        self,
        topic: str,
        values: Iterable[Any],
        /,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> list[asyncio.Future[ProduceResult]]: ...

    async def send_batch(
        self,
        batch: Any = NOT_GIVEN,
        topic: Any = NOT_GIVEN,
        *args: Any,
        partition: tuple[int, int] | None = None,
        key: Any = None,
        **kwargs: Any,
    ) -> asyncio.Future[ProduceResult] | list[asyncio.Future[ProduceResult]]:
        """Accept a batch built with :meth:`create_batch`: its messages go as one message
        set (one wrapper when compressed), to ``partition``, or where ``key`` routes, or
        to a random partition. Waits while the buffer is full; returns one future for
        the whole batch. The batch is closed to further appends.

        Deprecated, until the next release: ``send_batch(topic, values, key=None,
        partition=None)``, the form before ``create_batch()``, still sends each value as
        :meth:`send` does and returns their futures, with a :class:`DeprecationWarning`.
        """
        if not isinstance(batch, BatchBuilder):
            old = send_batch_of_values_arguments(batch, topic, args, kwargs, key, partition)
            warn_deprecated(*SEND_BATCH_OF_VALUES)
            return [
                await self.send(old["topic"], value, old["key"], old["partition"])
                for value in old["values"]
            ]
        if topic is NOT_GIVEN or args or kwargs:
            raise TypeError(
                "send_batch(batch, topic, *, partition=None, key=None) takes a batch, a topic, "
                "and partition and key by keyword only"
            )
        self._check_running()
        self._check_topic(topic)
        pinned = None if partition is None else check_partition(partition)
        if self._accumulator.sealed:  # before the batch is taken, as in send()
            await self._let_senders_run()
        batch.close()
        if self._accumulator.full():
            await self._accumulator.wait_for_space()
            self._check_running()
        target, route = self._route(topic, self._router.key(key), pinned, sticky=False)
        assert self._loop is not None
        future: asyncio.Future[ProduceResult] = self._loop.create_future()
        whole = Batch(topic, target[0], target[1])
        whole.values = batch.values
        whole.size = batch.size_bytes
        whole.futures = [future]
        whole.whole = True
        if route is not None:
            whole.routes = {0: route}
        if not whole.values:
            future.set_result(ProduceResult(topic, target[0], target[1], self.confirm))
            return future
        self._accumulator.add_batch(whole)  # sealed: the next call lets its sender write it
        return future

    # -- Arrow arrays (issue 38) ---------------------------------------------------

    async def send_arrow(
        self,
        topic: str,
        values: Any,
        *,
        keys: Any = None,
        partition: tuple[int, int] | None = None,
        key: Any = None,
    ) -> asyncio.Future[list[ProduceResult]]:
        """Accept the values of an Arrow array as messages, encoded straight from its
        buffers: no Python object per message. Waits while the buffer is full; returns
        one future for the whole array.

        ``values`` is any object with the Arrow PyCapsule interface's
        ``__arrow_c_array__`` (a pyarrow ``Array``, a polars ``Series``, nanoarrow...)
        whose type is binary or string (Arrow formats ``z``, ``u``, ``Z``, ``U``: large
        ones too; a slice's offset is honoured), or with ``__arrow_c_stream__`` only (a
        pyarrow ``ChunkedArray``): its arrays in order, each cut on its own. The array is
        encoded, then released, before this returns, so its buffers may be reused at
        once.

        A sibling of :meth:`send_batch`, not a new form of it: what it takes (one array,
        not values appended one by one) and what its future holds differ. As with
        :meth:`send_batch`, the messages go where ``partition`` or ``key`` routes them
        (one key routes the whole array, as 0.7 messages carry no key), or to a random
        partition, and the producer's compression applies. The ``value_serializer`` does
        not: the values are bytes already.

        ``keys`` (instead of ``key`` and ``partition``): an Arrow array of binary or
        string keys, one per value (``bytes`` and ``str`` keys to the partitioner, after
        the ``key_serializer``), each routing its message as :meth:`send` with that key
        would; the messages of one partition go together, in their order, cut as above.
        The keys are read into Python objects (the partitioner is a Python call per
        message), the values are not. A set retried is routed again by its first key.
        ``values`` must then have ``__arrow_c_array__`` (not a stream only).

        The array is cut as :meth:`create_batch`'s batches are: at most ``batch_size``
        messages and ``batch_bytes`` of payload per message set, each one request entry
        (one wrapper when compressed, split as the producer splits its own). The future's
        result is the list of their :class:`ProduceResult`, in order; it fails with the
        first failure once every set ended (a note says how many were delivered: the
        sets before it may be in the log, exactly as separate :meth:`send_batch` calls).
        Each set is retried on its own, as separate batches are, so after a retry sets
        may land out of their order (each whole, its messages in order). An empty array
        gives an empty list.

        Refused before anything is queued: an object without either method, an
        array of another type, released or malformed, or holding a null (a 0.7 message
        has no null: send ``b""`` for an empty one) raise
        :class:`~aiokafka07.errors.ArrowValuesError` (a ``TypeError`` and a
        ``ValueError``); a value over ``max_message_size`` raises
        :class:`~aiokafka07.errors.MessageTooLargeError` naming its ``index``; the topic,
        partition and key are checked as in :meth:`send`.
        """
        self._check_running()
        self._check_topic(topic)
        if keys is not None:
            return await self._send_arrow_keyed(topic, values, keys, key, partition)
        pinned = None if partition is None else check_partition(partition)
        routing_key = self._router.key(key)
        chunks = self._arrow_sets().encode(values)
        await self._arrow_space()
        target, route = self._route(topic, routing_key, pinned, sticky=False)
        return self._queue_sets(topic, [(target, route, chunks)])

    async def _arrow_space(self) -> None:
        """Wait for buffer space before an array is taken, as send_batch() does."""
        if self._accumulator.sealed:  # before the array is taken, as in send()
            await self._let_senders_run()
        if self._accumulator.full():
            await self._accumulator.wait_for_space()
            self._check_running()

    async def _send_arrow_keyed(
        self, topic: str, values: Any, keys: Any, key: Any, partition: object
    ) -> asyncio.Future[list[ProduceResult]]:
        """:meth:`send_arrow` with per-message ``keys``: each message to its key's
        partition, one group of sets per partition."""
        if key is not None or partition is not None:
            raise ArrowValuesError("send_arrow() takes keys= or key=/partition=, not both")
        from .. import arrow  # ctypes: keys are read into Python objects

        key_list = read_keys(keys)
        kind = type(values)
        if getattr(kind, "__arrow_c_array__", None) is None:
            raise ArrowValuesError(
                f"send_arrow(keys=...) takes values with __arrow_c_array__, not a {kind.__name__}"
            )
        length = arrow.array_length(capsules(values)[1])
        if length != len(key_list):
            raise ArrowValuesError(f"send_arrow() got {len(key_list)} keys for {length} values")
        routing = [self._router.key(k) for k in key_list]  # checked as send() checks
        await self._arrow_space()
        groups: dict[tuple[int, int], list[int]] = {}
        routes: dict[tuple[int, int], Route | None] = {}
        keyless: tuple[tuple[int, int], Route | None] | None = None
        for row, routing_key in enumerate(routing):
            if routing_key is None:  # static mode: keys choose nothing, one random target
                if keyless is None:
                    keyless = self._route(topic, None, None, sticky=False)
                target, route = keyless
            else:
                target, route = self._route(topic, routing_key, None, sticky=False)
            rows = groups.get(target)
            if rows is None:
                rows = groups[target] = []
                routes[target] = route
            rows.append(row)
        parts = [
            (
                target,
                routes[target],
                self._arrow_sets().encode_arrays(kind, [capsules(values)], array("q", rows)),
            )
            for target, rows in groups.items()
        ]
        return self._queue_sets(topic, parts)

    def _arrow_sets(self) -> ArrowSets:
        """How :meth:`send_arrow` cuts and encodes an array: as this producer's batches."""
        return ArrowSets(self.batch_size, self._accumulator.batch_bytes, self.max_message_size)

    def _queue_sets(
        self,
        topic: str,
        parts: list[tuple[tuple[int, int], Route | None, list[tuple[int, int, bytes]]]],
    ) -> asyncio.Future[list[ProduceResult]]:
        """Queue encoded message sets as whole batches, each (target, route, sets) part
        to its target; one future for all of them (an empty list for no sets)."""
        assert self._loop is not None
        loop = self._loop
        whole: asyncio.Future[list[ProduceResult]] = loop.create_future()
        futures: list[asyncio.Future[ProduceResult]] = []
        for target, route, chunks in parts:
            for count, size, encoded in chunks:
                future: asyncio.Future[ProduceResult] = loop.create_future()
                batch = Batch(topic, target[0], target[1])
                batch.encoded = encoded
                batch.encoded_count = count
                batch.size = size
                batch.futures = [future]
                batch.whole = True
                if route is not None:
                    batch.routes = {0: route}
                futures.append(future)
                self._accumulator.add_batch(batch)
        if not futures:
            whole.set_result([])
            return whole
        gather_sets(whole, futures)
        return whole

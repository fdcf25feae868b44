"""The Producer: batching, compression, 0.7.2 partitioning, failure handling.

Messages are routed as a 0.7.2 producer routes them (ZOOKEEPER §6-§7): the candidates for
a topic are every registered (broker, partition) pair, sorted numerically; a key picks one
with the Java-compatible default partitioner (or yours), no key picks one at random;
topics no broker registered yet go to partition 0 of every live broker. In static mode
(``brokers="0:host:port,..."``) a random broker gets the message with partition -1 and
picks the partition itself, as with 0.7.2's ``broker.list``.

Accepted messages wait in per-(broker, topic, partition) batches. Each broker has one
sender task that sends everything ready for it as one MULTIPRODUCE when a batch is full,
when the oldest batch is ``linger_ms`` old, or on :meth:`Producer.flush`. Up to
``max_in_flight`` requests per broker are pipelined on one connection, which keeps their
order.

0.7 never acknowledges a produce. With ``confirm`` (the default) an OFFSETS request is
pipelined behind each MULTIPRODUCE, and messages count as delivered only once it is
answered. If the connection breaks first, the messages are sent again (``on_unconfirmed=
"retry"``: at least once) or failed (``"fail"``: at most once); the caller chooses.
Without confirm, delivered means written to the socket. Messages that were never written,
or whose broker disappeared, are routed again with the current cluster view after a
backoff, up to ``retries`` times. A message is never dropped silently: its future gets a
result or an exception, and :meth:`Producer.close` raises :class:`ProducerClosedError`
naming what was not delivered.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from .cluster import Cluster, cluster_from
from .connection import MAX_MESSAGE_SIZE
from .errors import (
    InvalidPartitionError,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaError,
    MessageTooLargeError,
    NoBrokersError,
    ProduceNotConfirmedError,
    ProducerClosedError,
    QueueFullError,
    RequestTimeoutError,
)
from .partitioner import default_partition
from .pool import ConnectionPool
from .protocol import Compression, _accel, encode_message_set, encode_wrapper, validate_topic
from .protocol.messages import entry_size

__all__ = ["EncodedMessage", "ProduceResult", "Producer", "ProducerMetrics"]

log = logging.getLogger("aiokafka07.producer")

Partitioner = Callable[[Any, int], int]


class ProduceResult(NamedTuple):
    """Where a message went. ``confirmed``: the broker proved it processed the produce."""

    topic: str
    broker_id: int
    partition: int
    confirmed: bool


@dataclass
class ProducerMetrics:
    """Counters a user can read (``producer.metrics``)."""

    messages_sent: int = 0
    bytes_sent: int = 0
    batches_sent: int = 0
    requests_sent: int = 0
    retries: int = 0
    messages_failed: int = 0
    queued_messages: int = 0
    queued_bytes: int = 0


class EncodedMessage(Protocol):
    """A message as a consumer hands it out (:class:`~aiokafka07.protocol.Message`,
    :class:`~aiokafka07.records.ConsumerRecord`): what :meth:`Producer.send_message`
    sends on unchanged."""

    @property
    def value(self) -> bytes: ...

    @property
    def magic(self) -> int: ...

    @property
    def attributes(self) -> int: ...


class _Message:
    __slots__ = ("attempts", "future", "isolate", "key", "partition", "raw", "topic", "value")

    def __init__(
        self,
        topic: str,
        value: bytes,
        key: Any,
        partition: tuple[int, int] | None,
        future: asyncio.Future[ProduceResult],
        raw: bool = False,
    ) -> None:
        self.topic = topic
        # The payload, or with ``raw`` a whole encoded entry to send as it is.
        self.value = value
        self.raw = raw
        self.key = key
        self.partition = partition
        self.future = future
        self.attempts = 0
        # Retried after a refused multi-entry request: sent in a request of its own, so
        # an entry the broker refuses cannot take other entries down with it again.
        self.isolate = False


class _Batch:
    __slots__ = ("created", "isolated", "messages", "partition", "raw", "size", "topic")

    def __init__(self, topic: str, partition: int, isolated: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.isolated = isolated
        self.messages: list[_Message] = []
        self.size = 0
        self.raw = False  # holds entries encoded already (send_message)
        self.created = time.monotonic()


class _BrokerQueue:
    """The batches waiting for one broker: open ones still filling, full ones ready."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.open: dict[tuple[str, int, bool], _Batch] = {}
        self.ready: collections.deque[_Batch] = collections.deque()
        self.urgent = False  # send without lingering (flush, send_and_wait)
        self.wakeup = asyncio.Event()
        self.sender: asyncio.Task[None] | None = None
        self.in_flight: set[asyncio.Task[None]] = set()
        # Requests take turns to get the connection and write, in the order they were
        # started, so batches of one partition reach the broker in order (a request that
        # must wait for the connection to open must not be overtaken by a later one).
        self.turn = asyncio.Lock()

    def __bool__(self) -> bool:
        return bool(self.open or self.ready)

    def add(self, message: _Message, partition: int, max_messages: int, max_bytes: int) -> bool:
        """Add to the open batch of (topic, partition); True when that batch became full."""
        key = (message.topic, partition, message.isolate)
        batch = self.open.get(key)
        if batch is None:
            batch = self.open[key] = _Batch(message.topic, partition, message.isolate)
            if len(self.open) == 1 and not self.ready:
                self.wakeup.set()  # the sender starts the linger clock
        batch.messages.append(message)
        batch.size += len(message.value)
        batch.raw |= message.raw
        if len(batch.messages) >= max_messages or batch.size >= max_bytes:
            del self.open[key]
            self.ready.append(batch)
            self.wakeup.set()
            return True
        return False

    def ripen(self, linger: float) -> float | None:
        """Move open batches older than ``linger`` (all, if urgent) to ready; return how
        long until the next one ripens, or None when nothing is open."""
        now = time.monotonic()
        wait: float | None = None
        for key, batch in list(self.open.items()):
            left = batch.created + linger - now
            if left <= 0 or self.urgent:
                del self.open[key]
                self.ready.append(batch)
            elif wait is None or left < wait:
                wait = left
        self.urgent = False
        return wait

    def take(self, max_bytes: int) -> list[_Batch]:
        """Ready batches for one request: at least one, then up to ``max_bytes``; an
        isolated batch always goes alone."""
        first = self.ready.popleft()
        batches, size = [first], first.size
        if first.isolated:
            return batches
        while self.ready and not self.ready[0].isolated and size + self.ready[0].size <= max_bytes:
            batch = self.ready.popleft()
            batches.append(batch)
            size += batch.size
        return batches

    def hurry(self) -> None:
        if self:
            self.urgent = True
            self.wakeup.set()


def _default_serializer(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(
        f"cannot send a {type(value).__name__} value without a value_serializer "
        "(bytes and str are sent as they are)"
    )


class Producer:
    """Send messages to Kafka 0.7 (an async context manager).

    Exactly one of ``zookeeper`` (``zk.connect``) and ``brokers`` (``broker.list``) is
    given, or a shared ``cluster``. ``compression`` applies to ``compressed_topics`` (all
    topics when None or empty), as ``compression.codec`` / ``compressed.topics`` do.
    """

    def __init__(
        self,
        *,
        zookeeper: str | None = None,
        brokers: str | None = None,
        cluster: Cluster | None = None,
        compression: Compression | int | str | None = None,
        compressed_topics: Iterable[str] | None = None,
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
        retries: int = 3,
        retry_backoff_ms: float = 100.0,
        max_message_size: int = MAX_MESSAGE_SIZE,
        request_timeout: float = 30.0,
        connect_timeout: float = 5.0,
        pool: ConnectionPool | None = None,
    ) -> None:
        if cluster is None:
            cluster = cluster_from(zookeeper, brokers)
            self._own_cluster = True
        else:
            self._own_cluster = False
        if partitioner is not None and cluster.static:
            raise ValueError(
                "a partitioner needs ZooKeeper mode (0.7.2 refuses one with broker.list)"
            )
        if on_unconfirmed not in ("retry", "fail"):
            raise ValueError("on_unconfirmed must be 'retry' or 'fail'")
        if batch_size < 1 or batch_bytes < 1 or max_in_flight < 1:
            raise ValueError("batch_size, batch_bytes and max_in_flight must be positive")
        if retries < 0:
            raise ValueError(f"retries must be 0 or more, not {retries}")
        self.cluster = cluster
        self.compression = Compression.parse(compression)
        # CONFIG §2.1: an empty compressed.topics compresses every topic, as None does.
        self.compressed_topics = frozenset(compressed_topics or ()) or None
        self.value_serializer = value_serializer or _default_serializer
        self._plain_values = value_serializer is None
        self.key_serializer = key_serializer
        self.partitioner: Partitioner = partitioner or default_partition
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.linger = linger_ms / 1000
        self.max_buffered_messages = max_buffered_messages
        self.max_buffered_bytes = max_buffered_bytes
        self.max_in_flight = max_in_flight
        self.max_request_bytes = max_request_bytes
        self.confirm = confirm
        self.retry_unconfirmed = on_unconfirmed == "retry"
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000
        self.max_message_size = max_message_size
        self._own_pool = pool is None
        self._pool = pool or ConnectionPool(
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            max_message_size=max_message_size,
        )
        self.metrics = ProducerMetrics()
        self._queues: dict[int, _BrokerQueue] = {}
        self._space = asyncio.Event()
        self._space.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False
        self._closing = False
        self._failures: dict[tuple[str, int | None, int], BaseException] = {}
        self._last_queue: _BrokerQueue | None = None
        self._sticky: dict[str, tuple[int, int]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batch_ready = False
        self._valid_topics: set[str] = set()

    # -- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the cluster view (ZooKeeper session) if this producer owns it."""
        if self._started:
            return
        if self._own_cluster:
            await self.cluster.start()
        self._loop = asyncio.get_running_loop()
        self._started = True
        log.info(
            "producer started on %r: compression %s%s, confirm %s (%s when unconfirmed), "
            "batch_size %d, linger_ms %g, max_in_flight %d, retries %d",
            self.cluster,
            self.compression.name.lower(),
            "" if self.compressed_topics is None else f" for {sorted(self.compressed_topics)}",
            self.confirm,
            "retry" if self.retry_unconfirmed else "fail",
            self.batch_size,
            self.linger * 1000,
            self.max_in_flight,
            self.retries,
        )

    async def flush(self) -> None:
        """Send everything accepted so far and wait until each message is delivered or
        failed (failures stay on the messages' futures)."""
        pending = [
            m.future
            for q in self._queues.values()
            for b in [*q.open.values(), *q.ready]
            for m in b.messages
        ]
        for queue in self._queues.values():
            queue.hurry()
        in_flight = [t for q in self._queues.values() for t in q.in_flight]
        waiting: list[asyncio.Future[Any]] = [*pending, *in_flight, *self._tasks]
        if waiting:
            await asyncio.wait(waiting)
        # Retries scheduled meanwhile may have queued more.
        if any(q or q.in_flight for q in self._queues.values()) or self._tasks:
            await self.flush()

    async def close(self) -> None:
        """Deliver everything accepted, then close. Raises :class:`ProducerClosedError`
        naming the messages that could not be delivered."""
        if self._closing:
            return
        try:
            if self._started:
                await self.flush()
        finally:
            self._closing = True
            for queue in self._queues.values():
                if queue.sender is not None:
                    queue.sender.cancel()
            senders = [q.sender for q in self._queues.values() if q.sender is not None]
            await asyncio.gather(*senders, return_exceptions=True)
            if self._own_pool:
                await self._pool.close()
            if self._own_cluster and self._started:
                await self.cluster.close()
            if self._started:
                m = self.metrics
                log.info(
                    "producer closed: %d messages (%d bytes) sent in %d requests, "
                    "%d retried, %d failed",
                    m.messages_sent,
                    m.bytes_sent,
                    m.requests_sent,
                    m.retries,
                    m.messages_failed,
                )
        if self._failures:
            failed = self.metrics.messages_failed
            where = ", ".join(
                f"{t}/{b}-{p}: {type(e).__name__}"
                for (t, b, p), e in sorted(
                    self._failures.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1, kv[0][2])
                )
            )
            raise ProducerClosedError(
                f"{failed} messages were not delivered ({where})",
                undelivered=failed,
                errors=dict(self._failures),
            )

    # -- sending ------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> asyncio.Future[ProduceResult]:
        """Accept a message; wait while the buffer is full. Returns the delivery future.

        ``partition`` = (broker id, partition) bypasses the partitioner.
        """
        await self._wait_for_space()
        future = self.send_nowait(topic, value, key, partition)
        await self._yield_to_sender()
        return future

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
        await self._wait_for_space()
        future = self.send_message_nowait(topic, message, key, partition)
        await self._yield_to_sender()
        return future

    async def _wait_for_space(self) -> None:
        m = self.metrics
        while (
            m.queued_messages >= self.max_buffered_messages
            or m.queued_bytes >= self.max_buffered_bytes
        ) and not self._closing:
            self._space.clear()
            await self._space.wait()

    async def _yield_to_sender(self) -> None:
        if self._batch_ready:
            # Let the sender write the full batch now, so sending overlaps with the
            # caller filling the next one instead of waiting for a full buffer.
            self._batch_ready = False
            await asyncio.sleep(0)

    def send_nowait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> asyncio.Future[ProduceResult]:
        """Accept a message, or raise :class:`QueueFullError` if the buffer is full."""
        loop = self._accepting(topic)
        if type(value) is bytes and self._plain_values:
            payload = value
        else:
            payload = self.value_serializer(value)
        return self._accept(loop, topic, payload, len(payload), key, partition, raw=False)

    def send_message_nowait(
        self,
        topic: str,
        message: EncodedMessage,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> asyncio.Future[ProduceResult]:
        """:meth:`send_message`, or raise :class:`QueueFullError` if the buffer is full."""
        loop = self._accepting(topic)
        # The entry as the consumer read it: same magic, attributes, payload, hence CRC.
        entry = _accel.impl.encode_message_set((message.value,), message.magic, message.attributes)
        return self._accept(loop, topic, entry, len(message.value), key, partition, raw=True)

    def _accepting(self, topic: str) -> asyncio.AbstractEventLoop:
        """The loop, once the producer is known to take a message for ``topic`` now."""
        loop = self._loop
        if loop is None or self._closing:
            raise ProducerClosedError("the producer is not running (use start() or async with)")
        m = self.metrics
        if (
            m.queued_messages >= self.max_buffered_messages
            or m.queued_bytes >= self.max_buffered_bytes
        ):
            raise QueueFullError(
                f"{m.queued_messages} messages ({m.queued_bytes} bytes) are waiting to be sent"
            )
        if topic not in self._valid_topics:
            validate_topic(topic)
            self._valid_topics.add(topic)
        return loop

    def _accept(
        self,
        loop: asyncio.AbstractEventLoop,
        topic: str,
        data: bytes,
        payload_size: int,
        key: Any,
        partition: tuple[int, int] | None,
        *,
        raw: bool,
    ) -> asyncio.Future[ProduceResult]:
        if payload_size > self.max_message_size:
            raise MessageTooLargeError(
                f"a message of {payload_size} bytes exceeds max.message.size "
                f"{self.max_message_size}; a 0.7 broker would drop it silently"
            )
        if key is not None and self.key_serializer is not None:
            key = self.key_serializer(key)
        future: asyncio.Future[ProduceResult] = loop.create_future()
        m = self.metrics
        m.queued_messages += 1
        m.queued_bytes += len(data)
        try:
            queue = self._enqueue(_Message(topic, data, key, partition, future, raw))
        except BaseException:
            # Not accepted (a key the partitioner cannot hash, a partitioner that raised):
            # the caller gets the error, and the buffer is as it was.
            future.cancel()
            self._release(1, len(data))
            raise
        self._last_queue = queue
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> ProduceResult:
        """Send one message now (no lingering) and wait for its delivery."""
        future = await self.send(topic, value, key, partition)
        if self._last_queue is not None and not future.done():
            self._last_queue.hurry()
        return await future

    async def send_batch(
        self,
        topic: str,
        values: Iterable[Any],
        key: Any = None,
        partition: tuple[int, int] | None = None,
    ) -> list[asyncio.Future[ProduceResult]]:
        """Accept several messages with one key / partition choice each."""
        return [await self.send(topic, value, key, partition) for value in values]

    # -- internals ----------------------------------------------------------------------

    def _release(self, messages: int, size: int) -> None:
        """Messages left the buffer (delivered or failed): wake blocked senders once the
        buffer is below its low-water mark, not for every single message."""
        m = self.metrics
        m.queued_messages -= messages
        m.queued_bytes -= size
        if (
            not self._space.is_set()
            and m.queued_messages <= self.max_buffered_messages * 0.8
            and m.queued_bytes <= self.max_buffered_bytes * 0.8
        ):
            self._space.set()

    def _route(self, message: _Message) -> tuple[int, int]:
        if message.partition is not None:
            return message.partition
        cluster = self.cluster
        if message.key is None or cluster.static:
            # A random target, kept until its batch is handed to the sender: keyless
            # messages still spread uniformly, in full batches instead of one per target.
            target = self._sticky.get(message.topic)
            if target is None:
                target = self._sticky[message.topic] = self._random_target(message.topic)
            return target
        candidates = cluster.partitions(message.topic)
        if not candidates:
            raise NoBrokersError(f"no live broker for topic {message.topic}")
        index = self.partitioner(message.key, len(candidates))
        if not 0 <= index < len(candidates):
            raise InvalidPartitionError(
                f"partitioner chose index {index} of {len(candidates)} candidates"
            )
        return candidates[index]

    def _random_target(self, topic: str) -> tuple[int, int]:
        """0.7.2's choice for a message without key: a random candidate partition, or in
        static mode a random broker with partition -1."""
        if self.cluster.static:
            brokers = list(self.cluster.brokers)
            if not brokers:
                raise NoBrokersError(f"no broker for topic {topic}")
            return random.choice(brokers), -1
        candidates = self.cluster.partitions(topic)
        if not candidates:
            raise NoBrokersError(f"no live broker for topic {topic}")
        return random.choice(candidates)

    def _enqueue(self, message: _Message) -> _BrokerQueue | None:
        """Route a message into its broker's batch; the queue, or None if it failed.

        A routing error that is not a KafkaError (from a partitioner) is raised; a
        message being retried is failed with it instead (see :meth:`_retry`).
        """
        try:
            broker_id, partition = self._route(message)
        except KafkaError as exc:
            self._fail([message], exc, (message.topic, None, -1))
            return None
        except Exception as exc:
            if not message.attempts:
                raise
            self._fail([message], exc, (message.topic, None, -1))
            return None
        queue = self._queues.get(broker_id)
        if queue is None:
            queue = self._queues[broker_id] = _BrokerQueue(broker_id)
            queue.sender = asyncio.create_task(self._sender(queue), name=f"producer-{broker_id}")
        if queue.add(message, partition, self.batch_size, self.batch_bytes):
            self._sticky.pop(message.topic, None)
            self._batch_ready = True
        return queue

    async def _sender(self, queue: _BrokerQueue) -> None:
        """Send what is ready for one broker, keeping up to max_in_flight requests."""
        while True:
            await queue.wakeup.wait()
            queue.wakeup.clear()
            while queue:
                wait = queue.ripen(0 if self._closing else self.linger)
                if not queue.ready:
                    assert wait is not None
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(queue.wakeup.wait(), wait)
                    queue.wakeup.clear()
                    continue
                while len(queue.in_flight) >= self.max_in_flight:
                    await asyncio.wait(queue.in_flight, return_when=asyncio.FIRST_COMPLETED)
                batches = queue.take(self.max_request_bytes)
                for batch in batches:  # their keyless messages pick a new random target
                    if self._sticky.get(batch.topic) == (queue.broker_id, batch.partition):
                        del self._sticky[batch.topic]
                if batches[0].isolated:
                    # Alone on the connection too: a request pipelined behind a refused
                    # one would be lost with it.
                    if queue.in_flight:
                        await asyncio.wait(queue.in_flight)
                    await self._send(queue.broker_id, batches)
                    continue
                task = asyncio.create_task(self._send(queue.broker_id, batches))
                queue.in_flight.add(task)
                task.add_done_callback(queue.in_flight.discard)

    def _encode(self, batch: _Batch) -> list[bytes]:
        """The batch as message sets, in order: entries of :meth:`send_message` as they
        are, runs of payloads encoded per :meth:`_encode_payloads`."""
        if not batch.raw:
            return self._encode_payloads(batch.topic, [m.value for m in batch.messages])
        sets: list[bytes] = []
        for raw, run in itertools.groupby(batch.messages, key=lambda m: m.raw):
            values = [m.value for m in run]
            sets.extend([b"".join(values)] if raw else self._encode_payloads(batch.topic, values))
        return sets

    def _encode_payloads(self, topic: str, payloads: list[bytes]) -> list[bytes]:
        """Payloads as message sets: one wrapper when compressed, split in halves if a
        wrapper's compressed payload would exceed max.message.size; a single message
        whose wrapper is still too large (incompressible data near the limit) goes
        uncompressed, which fits since send() checked its size (the broker would drop
        the wrapper silently)."""
        codec = self.compression
        if codec is Compression.NONE or (
            self.compressed_topics is not None and topic not in self.compressed_topics
        ):
            return [encode_message_set(payloads)]
        return self._compressed(payloads, codec)

    def _compressed(self, payloads: list[bytes], codec: Compression) -> list[bytes]:
        plain = encode_message_set(payloads)
        wrapper = encode_wrapper(codec, plain)
        if len(wrapper) - entry_size(0) <= self.max_message_size:
            return [wrapper]
        if len(payloads) == 1:
            log.debug(
                "a %d-byte message is sent uncompressed: compressed, it would exceed "
                "max.message.size %d",
                len(payloads[0]),
                self.max_message_size,
            )
            return [plain]
        half = len(payloads) // 2
        return self._compressed(payloads[:half], codec) + self._compressed(payloads[half:], codec)

    async def _send(self, broker_id: int, batches: list[_Batch]) -> None:
        address = self.cluster.brokers.get(broker_id)
        try:
            if address is None:
                raise KafkaConnectionError(f"broker {broker_id} is not in the cluster")
            entries = []
            for batch in batches:
                for message_set in self._encode(batch):
                    entries.append((batch.topic, batch.partition, message_set))
            async with self._queues[broker_id].turn:
                conn = await self._pool.connection(address)
                # Created in turn, so written in turn (a task's first step writes).
                request = asyncio.ensure_future(
                    conn.multiproduce_message_sets(entries, confirm=self.confirm, check_sizes=False)
                )
            self.metrics.requests_sent += 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "producing to %s: %d entries, %d messages, %d bytes of payload",
                    address,
                    len(entries),
                    sum(len(b.messages) for b in batches),
                    sum(b.size for b in batches),
                )
            # Sizes were checked at send() and when building wrappers (_compressed).
            try:
                await request
            except asyncio.CancelledError:
                request.cancel()
                raise
        except (MessageTooLargeError, InvalidTopicError) as exc:
            for batch in batches:
                self._fail(batch.messages, exc, (batch.topic, broker_id, batch.partition))
            return
        except KafkaConnectionError as exc:
            retriable = not exc.maybe_delivered or (
                self.retry_unconfirmed
                and isinstance(exc, (ProduceNotConfirmedError, RequestTimeoutError))
            )
            for batch in batches:
                where = (batch.topic, broker_id, batch.partition)
                if retriable:
                    if len(batches) > 1:
                        for message in batch.messages:
                            message.isolate = True
                    self._retry(batch, exc, where)
                else:
                    self._fail(batch.messages, exc, where)
            log.warning("produce to %s failed (%s)", address or broker_id, exc)
            return
        self.metrics.batches_sent += len(batches)
        for batch in batches:
            result = ProduceResult(batch.topic, broker_id, batch.partition, self.confirm)
            self.metrics.messages_sent += len(batch.messages)
            self.metrics.bytes_sent += batch.size
            for message in batch.messages:
                if not message.future.done():
                    message.future.set_result(result)
            self._release(len(batch.messages), batch.size)

    def _retry(self, batch: _Batch, exc: BaseException, where: tuple[str, int | None, int]) -> None:
        retry_now = []
        for message in batch.messages:
            message.attempts += 1
            if message.attempts > self.retries:
                self._fail([message], exc, where)
            else:
                retry_now.append(message)
        if not retry_now:
            return
        self.metrics.retries += len(retry_now)
        delay = self.retry_backoff * 2 ** (min(m.attempts for m in retry_now) - 1)

        async def later() -> None:
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            with contextlib.suppress(Exception):
                await self.cluster.refresh()
            for message in retry_now:
                self._enqueue(message)  # routed again with the current view

        task = asyncio.create_task(later())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _fail(
        self, messages: list[_Message], exc: BaseException, where: tuple[str, int | None, int]
    ) -> None:
        self._failures[where] = exc
        for message in messages:
            if not message.future.done():
                self.metrics.messages_failed += 1
                message.future.set_exception(exc)
                # Nobody may be waiting: the failure is reported by close() instead.
                message.future.add_done_callback(_retrieve)
                self._release(1, len(message.value))


def _retrieve(future: asyncio.Future[ProduceResult]) -> None:
    future.exception()

"""One exception hierarchy for everything aiokafka07 raises.

Every error the library raises on purpose derives from :class:`KafkaError`, so
``except KafkaError`` catches bad bytes from a broker, a log or a user, broker error
codes, and client-side refusals alike. Errors that come from bad user input also derive
from :class:`ValueError` (or :class:`TypeError`) so generic code keeps working.

Kafka 0.7.2 has exactly six error codes (PROTOCOL §9). Each maps to one class here,
named after the Java exception a 0.7.2 client throws for it; :func:`error_for_code`
does the lookup, and any other code maps to :class:`UnknownError` as in Java.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

__all__ = [
    "ArrowValuesError",
    "BridgeError",
    "BrokerError",
    "CommitFailedError",
    "CompressionError",
    "ConsumerStoppedError",
    "DeliveryTimeoutError",
    "DeliveryUnknownError",
    "DeserializationError",
    "IllegalStateError",
    "InvalidConfigError",
    "InvalidMessageError",
    "InvalidMessageSizeError",
    "InvalidPartitionError",
    "InvalidTopicError",
    "KafkaConnectionError",
    "KafkaError",
    "MalformedFrameError",
    "MessageTooLargeError",
    "NoBrokersError",
    "OffsetOutOfRangeError",
    "ProduceNotConfirmedError",
    "ProducerClosedError",
    "ProtocolError",
    "QueueFullError",
    "RequestTimeoutError",
    "UnknownCodecError",
    "UnknownError",
    "UnknownMagicError",
    "UnsettledClaim",
    "ZNodeConflictError",
    "ZooKeeperError",
    "error_for_code",
]


class KafkaError(Exception):
    """Root of every exception aiokafka07 raises deliberately."""


class ProtocolError(KafkaError):
    """Bytes that break the Kafka 0.7 wire or log format.

    ``position`` is the byte position of the offending item within the buffer that was
    being decoded (``None`` when it does not apply). When the error was found part-way
    through a message set, ``decoded`` holds what was decoded before it, so a consumer can
    still hand out the good messages in front of a bad one.
    """

    def __init__(self, message: str, *, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position
        self.decoded: Any = None


class BrokerError(KafkaError):
    """An error identified by a Kafka 0.7 error code (PROTOCOL §9)."""

    code: ClassVar[int] = -1


class UnknownError(BrokerError):
    """Code -1: the broker failed unexpectedly (e.g. FETCH of an invalid topic name)."""

    code = -1


class OffsetOutOfRangeError(BrokerError):
    """Code 1: the fetch offset is before the oldest segment or past the flushed log end."""

    code = 1

    def __init__(self, message: str = "offset out of range", *, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class InvalidMessageError(ProtocolError, BrokerError):
    """Code 2: a message whose CRC does not match its payload (corrupt data)."""

    code = 2


class InvalidPartitionError(BrokerError, ValueError):
    """Code 3 (WrongPartition): the partition is not configured for the topic.

    Also raised by the Java-compatible partitioner for the one key hash that Java maps
    to a negative partition (ZOOKEEPER §7.2).
    """

    code = 3


class InvalidMessageSizeError(ProtocolError, BrokerError):
    """Code 4 (InvalidFetchSize): an entry's size is impossible, or the first entry of a
    message set is incomplete because the fetch size is smaller than the message (or
    the offset is not where a message starts).

    ``size`` is the entry length the data declares. ``available`` is how many bytes of
    the entry were present, and is set only when the first entry of the decoded set
    itself is incomplete (never for an entry inside a compressed wrapper, which no fetch
    size can fix); a consumer may then grow its fetch size to ``size + 4``, as
    :mod:`aiokafka07.fetch_size` decides.
    """

    code = 4

    def __init__(
        self,
        message: str,
        *,
        position: int | None = None,
        size: int | None = None,
        available: int | None = None,
    ) -> None:
        super().__init__(message, position=position)
        self.size = size
        self.available = available


class UnknownMagicError(ProtocolError):
    """A message with a magic byte other than 0 or 1."""


class UnknownCodecError(ProtocolError):
    """A message whose attributes name compression codec 3, which 0.7 does not define."""


class CompressionError(ProtocolError):
    """A compressed payload that cannot be decompressed: corrupt gzip or snappy data, or
    data that would decompress to more than the bound (``max_decompressed_bytes``).

    ``limit`` is that bound when it is the reason (``None`` for corrupt data).
    """

    def __init__(
        self, message: str, *, position: int | None = None, limit: int | None = None
    ) -> None:
        super().__init__(message, position=position)
        self.limit = limit


class MalformedFrameError(ProtocolError):
    """A request or response frame whose size or body does not parse."""


class InvalidTopicError(KafkaError, ValueError):
    """A topic name the broker would refuse (PROTOCOL §2.2); refused before sending."""


class MessageTooLargeError(KafkaError, ValueError):
    """A message larger than the configured ``max.message.size``, or, for a consumer, a
    message at ``offset`` whose entry (``size`` bytes, length field excluded) does not
    fit in ``max_fetch_size``. ``index``: the value's position in an Arrow array given to
    :meth:`~aiokafka07.Producer.send_arrow` (None otherwise).

    A 0.7 broker drops a too-large produce silently, so the client refuses it up front.
    """

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        size: int | None = None,
        index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.offset = offset
        self.size = size
        self.index = index


class ArrowValuesError(KafkaError, TypeError, ValueError):
    """What :meth:`~aiokafka07.Producer.send_arrow` refuses before anything is queued: an
    object without the Arrow PyCapsule interface, an array whose type is not binary or
    string (``format``: its Arrow format string, None when unreadable), a released or
    malformed array, a null (``index``: its position; a 0.7 message has no null). Also a
    :class:`TypeError` and a :class:`ValueError`, as a wrong argument is either."""

    def __init__(
        self, message: str, *, format: str | None = None, index: int | None = None
    ) -> None:
        super().__init__(message)
        self.format = format
        self.index = index


class InvalidConfigError(KafkaError, ValueError, TypeError):
    """A client parameter with an unusable value or type, refused at construction.

    The message names the parameter. Also a :class:`ValueError` and a :class:`TypeError`,
    so code written against either keeps working.
    """


class UnsettledClaim(NamedTuple):
    """What a connection's confirm ledger knew of one target of a confirmed produce it
    could not settle before it closed (:mod:`aiokafka07.confirm`): enough to settle it
    later from the target's log end, read on another connection.

    ``partitions`` are the partitions whose ends add up to the target's (one, or all of
    the topic's on the broker for ``partition`` -1). ``base`` is the target's log end
    before the connection's first confirmed produce to it (None: never read).
    ``written_before`` and ``written`` count the bytes the connection wrote to the target
    from ``base`` on, before this produce and up to its end: its bytes are in the log iff
    the log grew by ``written``, and none of them is while it grew by at most
    ``written_before`` (whatever else was written, if the log shows every byte appended).
    ``processed``: the broker was proven to have processed the produce (so it appended
    it, unless it dropped a message over its ``max.message.size``), which its log shows
    at its next flush; ``deadline`` (``time.monotonic()``) is when a confirmation would
    have given up waiting for that (``request_timeout_ms`` after the produce).
    """

    topic: str
    partition: int
    partitions: range
    base: int | None
    written_before: int
    written: int
    processed: bool = False
    deadline: float = 0.0


class KafkaConnectionError(KafkaError):
    """A broker connection could not be opened, or broke with a request outstanding.

    ``maybe_delivered`` says whether the request may have reached the broker: False when
    it was never written (the connection failed first), True when it was written and the
    answer (or, for a produce, the proof of processing) never came. ``claims``: for a
    confirmed produce written and not settled when the connection closed, what its ledger
    knew of each target (:class:`UnsettledClaim`), so that a producer can settle it from
    the log end once the broker is back; None otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        broker: str | None = None,
        maybe_delivered: bool = False,
        claims: tuple[UnsettledClaim, ...] | None = None,
    ) -> None:
        super().__init__(message)
        self.broker = broker
        self.maybe_delivered = maybe_delivered
        self.claims = claims


class RequestTimeoutError(KafkaConnectionError):
    """No answer within the request timeout; the connection is closed (0.7 answers in
    order, so every later request on it would wait behind the lost one)."""


class ProduceNotConfirmedError(KafkaConnectionError):
    """The broker did not confirm a produce (confirm mode: :mod:`aiokafka07.confirm`).

    Either the connection closed before the proof came: a 0.7 broker closes it when it
    refuses a produce (invalid partition or topic, corrupt message, unknown codec), and a
    broker that crashed looks the same (nothing was appended in the first case; in the
    second it may have been). Or (``processed`` True) the broker processed the request,
    but the partition's log did not grow by the bytes it wrote within the request
    timeout: a 0.7 broker drops a produce with a message over its ``max.message.size``
    without closing the connection, and a broker that flushes its log less often than
    the timeout looks the same. ``partitions`` names the (topic, partition) entries of
    the request that were not confirmed (partition -1: the broker's choice), None when
    none of them was. ``refused`` is True when the broker closed the connection before
    the request was proven processed: it refused the request (or one of its entries), or
    it went away.
    """

    def __init__(
        self,
        message: str,
        *,
        broker: str | None = None,
        maybe_delivered: bool = False,
        processed: bool = False,
        partitions: frozenset[tuple[str, int]] | None = None,
        refused: bool = False,
        claims: tuple[UnsettledClaim, ...] | None = None,
    ) -> None:
        super().__init__(message, broker=broker, maybe_delivered=maybe_delivered, claims=claims)
        self.processed = processed
        self.partitions = partitions
        self.refused = refused


class DeliveryUnknownError(ProduceNotConfirmedError):
    """A producer cannot tell whether these messages were appended: it wrote them, and
    neither a confirmation nor the log end read once the broker was back decided it
    (with ``on_unconfirmed="fail"``, or once ``delivery_timeout_ms`` ran out). They may be
    in the log, once. ``maybe_delivered`` is always True; the cause is the error that
    left the outcome open. Every other failed produce future means *not appended*.
    """

    def __init__(
        self,
        message: str,
        *,
        broker: str | None = None,
        partitions: frozenset[tuple[str, int]] | None = None,
    ) -> None:
        super().__init__(message, broker=broker, maybe_delivered=True, partitions=partitions)


class DeliveryTimeoutError(KafkaError):
    """Messages not delivered within the producer's ``delivery_timeout_ms`` of their
    ``send()``, and not appended: never written, or written and proven absent from the
    log. ``last_error`` (also the ``__cause__``) is why the last attempt failed, None if
    none was made (the messages waited in the buffer all along)."""

    def __init__(self, message: str, *, last_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error


class QueueFullError(KafkaError):
    """The producer's buffer is full and the caller asked not to wait (``send_nowait``)."""


class NoBrokersError(KafkaError):
    """No live broker can take messages for the topic (0.7.2 NoBrokersForPartition)."""


class ProducerClosedError(KafkaError):
    """The producer is closed, or closed without delivering everything it accepted.

    ``undelivered`` counts the messages that were not delivered; ``unknown`` how many of
    them may have been appended all the same (their futures failed with an error whose
    ``maybe_delivered`` is True, such as :class:`DeliveryUnknownError`): the others
    are not in the log. ``causes`` maps each (topic, broker id, partition) to how many
    failed there of each cause (the exception class name), so they add up to
    ``undelivered``; ``errors`` maps each place to the last error seen for it.
    """

    def __init__(
        self,
        message: str,
        *,
        undelivered: int = 0,
        errors: dict[tuple[str, int | None, int], BaseException] | None = None,
        causes: dict[tuple[str, int | None, int], dict[str, int]] | None = None,
        unknown: int = 0,
    ) -> None:
        super().__init__(message)
        self.undelivered = undelivered
        self.unknown = unknown
        self.errors = errors or {}
        self.causes = causes or {}


class ConsumerStoppedError(KafkaError):
    """The group consumer is closed: ``getone()`` / ``getmany()`` after (or during)
    ``close()`` / ``stop()``. Iteration simply ends instead."""


class IllegalStateError(KafkaError):
    """A partition operation (seek, pause, position, commit of given offsets, ...) on a
    partition this group member does not own; ``subscribe()`` after ``assign()`` or the
    reverse (aiokafka's rule: one or the other, ``unsubscribe()`` in between); a group
    operation (commit, committed offsets, subscribe) on a consumer without a group."""


class CommitFailedError(KafkaError):
    """Offsets were not committed because this member may no longer own the partition:
    its ZooKeeper session expired or its connection broke while the write was under way.
    A commit is never written from another session than the one that claimed the
    partition (another member may own it by then)."""


class DeserializationError(KafkaError):
    """A consumer's ``value_deserializer`` raised for ``record`` (the raw record, value
    still bytes; the deserializer's exception is the ``__cause__``). The records before it
    were handed out; the partition waits for ``seek()``, e.g. to ``record.offset`` to skip
    it."""

    def __init__(self, message: str, *, record: Any) -> None:
        super().__init__(message)
        self.record = record


class BridgeError(KafkaError):
    """The bridge to a modern Kafka cluster (:mod:`aiokafka07.bridge`) cannot go on: the
    target is unreachable or refuses (a missing topic, a record too large, a fenced
    producer), or what it holds contradicts the bridge's record of its positions."""


class ZooKeeperError(KafkaError):
    """ZooKeeper could not be reached or refused an operation, or holds unusable data."""


class ZNodeConflictError(ZooKeeperError):
    """An ephemeral znode we must own exists with someone else's data.

    A broker refuses to start on such a conflict for ``/brokers/ids/<id>`` (typically a
    restart faster than the old session's timeout, or two brokers with one id).
    """

    def __init__(self, message: str, *, path: str, existing: str | None) -> None:
        super().__init__(message)
        self.path = path
        self.existing = existing


_BY_CODE: dict[int, type[BrokerError]] = {
    cls.code: cls
    for cls in (
        UnknownError,
        OffsetOutOfRangeError,
        InvalidMessageError,
        InvalidPartitionError,
        InvalidMessageSizeError,
    )
}


def error_for_code(code: int) -> type[BrokerError]:
    """The exception class for a non-zero 0.7 error code; unlisted codes are UnknownError."""
    if code == 0:
        raise ValueError("error code 0 means no error")
    return _BY_CODE.get(code, UnknownError)

"""Kafka 0.7 requests (PROTOCOL §1.1, §3, §4): encoders and, for brokers, decoders.

A request on the wire is ``int32 size || int16 type || body``; the encoders return the
whole frame, size prefix included. There is no correlation id: a connection's responses
come back in request order, and PRODUCE / MULTIPRODUCE get no response at all.

Encoders refuse what a broker would answer by closing the connection (invalid topic
names, out-of-range integers, negative sizes), with a typed error before anything is sent.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from enum import IntEnum
from functools import lru_cache
from typing import Any, NamedTuple, TypeAlias

from ..errors import InvalidTopicError, MalformedFrameError
from ..validation import FORBIDDEN_IN_NAMES
from . import _accel
from ._reader import Reader
from .messages import BytesLike, entry_size

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_MULTI_COUNT",
    "MAX_REQUEST_SIZE",
    "MAX_TOPIC_LENGTH",
    "FetchRequest",
    "MultiFetchRequest",
    "MultiProduceRequest",
    "OffsetsRequest",
    "ProduceRequest",
    "Request",
    "RequestType",
    "decode_request",
    "encode_fetch_request",
    "encode_multifetch_request",
    "encode_multiproduce_request",
    "encode_offsets_request",
    "encode_produce_frame",
    "encode_produce_request",
    "encode_request",
    "encode_topic",
    "validate_topic",
]

#: OFFSETS ``time`` meaning "the log end" and "the oldest retained segment".
LATEST = -1
EARLIEST = -2
#: A broker closes the connection on a request frame larger than this (by default).
MAX_REQUEST_SIZE = 104857600
#: MULTIFETCH / MULTIPRODUCE counts are int16.
MAX_MULTI_COUNT = 32767
#: ``max.topic.name.length`` default.
MAX_TOPIC_LENGTH = 255

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_HEAD = struct.Struct(">ih")  # size, request type
_PART_SIZE = struct.Struct(">ii")  # partition, message set size
_FETCH_TAIL = struct.Struct(">iqi")  # partition, offset, max size
_I16 = struct.Struct(">h")

# Characters the 0.7.2 broker refuses in a topic name (§2.2): those ZooKeeper refuses in a
# path component (a topic is one, under /brokers/topics).
_BAD_TOPIC_CHARS = FORBIDDEN_IN_NAMES


class RequestType(IntEnum):
    """The int16 request type id."""

    PRODUCE = 0
    FETCH = 1
    MULTIFETCH = 2
    MULTIPRODUCE = 3
    OFFSETS = 4


class ProduceRequest(NamedTuple):
    """Append a message set to a partition; ``partition = -1`` lets the broker pick."""

    topic: str
    partition: int
    message_set: BytesLike


class FetchRequest(NamedTuple):
    """Read up to ``max_size`` bytes of the log from byte ``offset``."""

    topic: str
    partition: int
    offset: int
    max_size: int


class MultiFetchRequest(NamedTuple):
    """Several fetches answered together, each with its own error code."""

    fetches: tuple[FetchRequest, ...]


class MultiProduceRequest(NamedTuple):
    """Several produces processed in order; no response."""

    produces: tuple[ProduceRequest, ...]


class OffsetsRequest(NamedTuple):
    """Offsets before ``time`` (ms since the epoch, or LATEST / EARLIEST), newest first."""

    topic: str
    partition: int
    time: int
    max_offsets: int


Request: TypeAlias = (
    ProduceRequest | FetchRequest | MultiFetchRequest | MultiProduceRequest | OffsetsRequest
)


def validate_topic(topic: str, *, max_length: int = MAX_TOPIC_LENGTH) -> str:
    """Return ``topic`` if a 0.7.2 broker accepts it as a topic name, else raise.

    Rules (§2.2): 1 to ``max_length`` (``max.topic.name.length``, 255) characters, not
    ``.`` or ``..``, no ``/``, no control characters (U+0000-U+001F, U+007F-U+009F),
    nothing in U+D800-U+F8FF or U+FFF0-U+FFFF, nothing outside the Basic Multilingual
    Plane. Java clients mishandle non-ASCII names, so prefer ASCII topics on clusters
    shared with them.
    """
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a str, not {type(topic).__name__}")
    if not topic:
        raise InvalidTopicError("topic name is empty")
    if len(topic) > max_length:
        raise InvalidTopicError(
            f"topic name is {len(topic)} characters long; the limit is {max_length}"
        )
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    bad = _BAD_TOPIC_CHARS.search(topic)
    if bad:
        raise InvalidTopicError(
            f"topic name {topic!r} contains the illegal character {bad.group()!r}"
        )
    return topic


@lru_cache(maxsize=4096)
def encode_topic(topic: str) -> bytes:
    """A validated topic as a short string (int16 UTF-8 byte length, bytes)."""
    data = validate_topic(topic).encode("utf-8")
    return _I16.pack(len(data)) + data


def _check(name: str, value: int, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} {value} is outside {lo}..{hi}")
    return value


def _frame_head(request_type: int, body_size: int) -> bytes:
    """A request's size and type, for a body of ``body_size`` bytes after the type."""
    if body_size + 2 > _INT32[1]:
        raise ValueError(f"request of {body_size + 2} bytes does not fit a 0.7 frame")
    return _HEAD.pack(body_size + 2, request_type)


def _frame(request_type: int, body_parts: list[Any], body_size: int) -> bytes:
    return b"".join([_frame_head(request_type, body_size), *body_parts])


def _produce_head(topic: str, partition: int, set_size: int) -> tuple[list[bytes], int]:
    """What a PRODUCE body holds before its message set (topic, partition and set size),
    and the body's size with a set of ``set_size`` bytes."""
    _check("partition", partition, *_INT32)
    _check("message set size", set_size, 0, _INT32[1])
    name = encode_topic(topic)
    return [name, _PART_SIZE.pack(partition, set_size)], len(name) + 8 + set_size


def _produce_body(topic: str, partition: int, message_set: BytesLike) -> tuple[list[Any], int]:
    """A PRODUCE body's parts (topic, partition and size, the message set) and its size."""
    size = (
        len(message_set) if type(message_set) is bytes else len(memoryview(message_set).cast("B"))
    )
    head, body_size = _produce_head(topic, partition, size)
    return [*head, message_set], body_size


def _fetch_body(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    _check("partition", partition, *_INT32)
    _check("offset", offset, *_INT64)
    _check("max_size", max_size, 0, _INT32[1])
    return encode_topic(topic) + _FETCH_TAIL.pack(partition, offset, max_size)


def encode_produce_request(topic: str, partition: int, message_set: BytesLike) -> bytes:
    """PRODUCE (type 0): one message set for one partition (-1: the broker picks)."""
    parts, size = _produce_body(topic, partition, message_set)
    return _frame(RequestType.PRODUCE, parts, size)


def encode_produce_frame(
    topic: str, partition: int, payloads: Sequence[bytes], payload_bytes: int
) -> bytes:
    """``encode_produce_request(topic, partition, encode_message_set(payloads))`` built in
    one buffer: the producer's frame for an uncompressed batch, without copying its message
    set a second time (the join of a header and a set of ~100 KiB costs as much as a tenth
    of encoding it). ``payload_bytes`` is the payloads' total length, which the batch
    keeps; a wrong one raises ``ValueError`` rather than send a frame whose sizes lie."""
    set_size = payload_bytes + entry_size(0) * len(payloads)  # magic 1, uncompressed
    parts, body_size = _produce_head(topic, partition, set_size)
    head = b"".join([_frame_head(RequestType.PRODUCE, body_size), *parts])
    frame: bytes = _accel.impl.encode_message_set(payloads, 1, 0, head)
    if len(frame) != 6 + body_size:
        raise ValueError(
            f"payload_bytes {payload_bytes} is not the payloads' total length "
            f"({len(frame) - 6 - body_size + payload_bytes})"
        )
    return frame


def encode_multiproduce_request(produces: Iterable[ProduceRequest | tuple[Any, ...]]) -> bytes:
    """MULTIPRODUCE (type 3): int16 count, then PRODUCE bodies, processed in order."""
    parts: list[Any] = []
    count = 0
    total = 2  # the count
    for topic, partition, message_set in produces:
        body, size = _produce_body(topic, partition, message_set)
        parts.extend(body)
        total += size
        count += 1
    _check("multiproduce count", count, 0, MAX_MULTI_COUNT)
    parts.insert(0, _I16.pack(count))
    return _frame(RequestType.MULTIPRODUCE, parts, total)


def encode_fetch_request(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    """FETCH (type 1): up to ``max_size`` bytes of the log from ``offset``."""
    body = _fetch_body(topic, partition, offset, max_size)
    return _frame(RequestType.FETCH, [body], len(body))


def encode_multifetch_request(fetches: Iterable[FetchRequest | tuple[Any, ...]]) -> bytes:
    """MULTIFETCH (type 2): int16 count, then FETCH bodies (duplicates allowed)."""
    bodies = [_fetch_body(*f) for f in fetches]
    _check("multifetch count", len(bodies), 0, MAX_MULTI_COUNT)
    bodies.insert(0, _I16.pack(len(bodies)))
    return _frame(RequestType.MULTIFETCH, bodies, sum(map(len, bodies)))


def encode_offsets_request(topic: str, partition: int, time: int, max_offsets: int) -> bytes:
    """OFFSETS (type 4): up to ``max_offsets`` offsets before ``time`` (LATEST, EARLIEST)."""
    _check("partition", partition, *_INT32)
    _check("time", time, *_INT64)
    _check("max_offsets", max_offsets, 0, _INT32[1])
    body = encode_topic(topic) + _FETCH_TAIL.pack(partition, time, max_offsets)
    return _frame(RequestType.OFFSETS, [body], len(body))


def encode_request(request: Request) -> bytes:
    """Encode any request value."""
    if isinstance(request, ProduceRequest):
        return encode_produce_request(*request)
    if isinstance(request, FetchRequest):
        return encode_fetch_request(*request)
    if isinstance(request, OffsetsRequest):
        return encode_offsets_request(*request)
    if isinstance(request, MultiFetchRequest):
        return encode_multifetch_request(request.fetches)
    if isinstance(request, MultiProduceRequest):
        return encode_multiproduce_request(request.produces)
    raise TypeError(f"not a request: {type(request).__name__}")


def _read_produce(r: Reader) -> ProduceRequest:
    topic = r.topic()
    partition = r.i32("partition")
    size = r.i32("message set size")
    return ProduceRequest(topic, partition, bytes(r.take(size, "message set")))


def _read_fetch(r: Reader) -> FetchRequest:
    return FetchRequest(r.topic(), r.i32("partition"), r.i64("offset"), r.i32("max size"))


def _read_count(r: Reader, what: str) -> int:
    start = r.pos
    count = r.i16(what)
    if count < 0:
        raise MalformedFrameError(f"negative {what} {count} at position {start}", position=start)
    return count


def decode_request(frame: BytesLike) -> Request:
    """Decode a request frame body (after the 4-byte size: type, then body).

    Like the broker, trailing bytes after the declared fields are ignored. Anything a
    broker cannot parse (and would answer by closing the connection) raises
    :class:`MalformedFrameError`; topic names are returned as sent, not validated.
    """
    r = Reader(frame, "request")
    request_type = r.i16("request type")
    if request_type == RequestType.PRODUCE:
        return _read_produce(r)
    if request_type == RequestType.FETCH:
        return _read_fetch(r)
    if request_type == RequestType.OFFSETS:
        return OffsetsRequest(r.topic(), r.i32("partition"), r.i64("time"), r.i32("max offsets"))
    if request_type == RequestType.MULTIFETCH:
        count = _read_count(r, "multifetch count")
        return MultiFetchRequest(tuple(_read_fetch(r) for _ in range(count)))
    if request_type == RequestType.MULTIPRODUCE:
        count = _read_count(r, "multiproduce count")
        return MultiProduceRequest(tuple(_read_produce(r) for _ in range(count)))
    raise MalformedFrameError(f"unknown request type {request_type}", position=0)

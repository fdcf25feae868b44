"""Messages and message sets of Kafka 0.7 (PROTOCOL §6-§8).

A message set is a bare concatenation of entries ``int32 N || N bytes of message``; a
message is ``magic(0|1) [attributes] crc32(payload) payload``. There are no message
numbers in 0.7: offsets are byte positions in the partition log.

Decoding follows the 0.7.2 Java iterator exactly: a partial *first* entry is an error (the
fetch size is smaller than the message), a partial *later* entry is the normal tail of a
fetch and is dropped; every message reports the "next offset" (where to fetch from so
that it is not seen again); messages inside a compressed wrapper report the wrapper's
start offset, except the last one, which reports the wrapper's end (§7.3).

Decompression is bounded per decoded set: all the wrappers of one set, nested ones
included, may produce at most ``max_decompressed`` bytes together (default
:data:`~.compression.DEFAULT_MAX_DECOMPRESSED`). When a wrapper after the first entry
would pass the bound, decoding stops in front of it as at a partial tail (``valid_bytes``
ends there, so the next fetch starts at that wrapper with the whole bound); when the
first entry alone passes it, :class:`~aiokafka07.errors.CompressionError` (with
``limit``). :func:`count_messages` validates and counts a set in constant memory besides
the bound, for the broker.

The hot loop runs in the optional C accelerator when it is built, else in ``_pure``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol, TypeAlias

from ..errors import (
    CompressionError,
    InvalidMessageError,
    InvalidMessageSizeError,
    ProtocolError,
    UnknownCodecError,
    UnknownMagicError,
)
from . import _accel, _pure
from ._accel import implementation
from .compression import DEFAULT_MAX_DECOMPRESSED, Compression, compress, decompress_buffer

__all__ = [
    "MAGIC_0_HEADER",
    "MAGIC_1_HEADER",
    "MAX_WRAPPER_DEPTH",
    "BytesLike",
    "DecodedMessageSet",
    "Message",
    "SetCount",
    "SetSummary",
    "count_message_set",
    "count_messages",
    "crc32",
    "decode_message_set",
    "decode_messages_into",
    "encode_message_set",
    "encode_wrapper",
    "entry_size",
    "implementation",
    "summarize_message_set",
]

BytesLike: TypeAlias = bytes | bytearray | memoryview

#: Bytes of a magic-0 / magic-1 message header (magic, [attributes], crc), without the
#: 4-byte entry length.
MAGIC_0_HEADER = 5
MAGIC_1_HEADER = 6

#: Compressed wrappers nested deeper than this are refused (Java has no limit, but
#: unbounded nesting is a way for corrupt data to exhaust the stack).
MAX_WRAPPER_DEPTH = 16

_I32 = struct.Struct(">i")
_OFFSET_MAX = (1 << 63) - 1


class Message(NamedTuple):
    """One message of a message set.

    ``offset`` follows the 0.7.2 rule: it is the offset to fetch from next so that this
    message is not delivered again (for a message inside a compressed wrapper, the
    wrapper's start, or its end for the wrapper's last message). It is the value a
    consumer commits.
    """

    offset: int
    value: bytes
    magic: int = 1
    attributes: int = 0

    @property
    def compression(self) -> Compression:
        """The codec named by the attributes (non-NONE only for shallow-decoded wrappers)."""
        return Compression(self.attributes & 3)


class DecodedMessageSet(NamedTuple):
    """Messages decoded from a buffer and how many of its bytes were complete entries.

    A consumer that fetched at offset ``F`` fetches next at ``F + valid_bytes``.
    """

    messages: list[Message]
    valid_bytes: int


class SetSummary(NamedTuple):
    """The top level of a message set, checked without building its messages."""

    #: Bytes of complete, valid top-level entries.
    valid_bytes: int
    #: Top-level messages, a compressed wrapper counting as one.
    messages: int
    #: How many of them are compressed wrappers.
    wrappers: int
    #: The largest top-level payload (for a wrapper, its compressed payload).
    largest_payload: int


class SetCount(NamedTuple):
    """How many messages the complete entries at the head of a buffer hold (compressed
    wrappers expanded), and how many bytes those entries take."""

    #: Messages a consumer would receive from those entries (a wrapper's inner ones).
    messages: int
    #: Bytes of complete, valid top-level entries: where counting stopped.
    valid_bytes: int


class _Budget:
    """What is left of the bound on decompressed bytes of one set (nested wrappers
    included)."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"max_decompressed must be an int >= 0, not {limit!r}")
        self.left = self.limit = limit

    def exceeded(self) -> CompressionError:
        return CompressionError(
            f"the compressed messages decompress to more than {self.limit} bytes, the "
            "decompression bound",
            limit=self.limit,
        )


def crc32(data: BytesLike) -> int:
    """CRC-32 (IEEE, as ``zlib.crc32``): the checksum of a message payload."""
    result: int = _accel.impl.crc32(data)
    return result


def entry_size(payload_size: int, magic: int = 1) -> int:
    """Bytes a message with a payload of ``payload_size`` takes in a set, length included."""
    return 4 + (MAGIC_1_HEADER if magic == 1 else MAGIC_0_HEADER) + payload_size


def encode_message_set(
    payloads: Iterable[BytesLike],
    *,
    compression: Compression | int | str | None = Compression.NONE,
    magic: int = 1,
    compression_level: int | None = None,
) -> bytes:
    """Encode payloads as a message set.

    Uncompressed: one entry per payload. Compressed: one magic-1 wrapper holding all
    payloads as a message set, as the Java producer builds it (§8.1); no payloads give an
    empty set, never a wrapper around nothing. ``compression_level`` is gzip's (see
    :func:`encode_wrapper`).
    """
    codec = Compression.parse(compression)
    if codec is Compression.NONE:
        if compression_level is not None:
            raise ValueError("a compression level needs gzip compression")
        return bytes(_accel.impl.encode_message_set(payloads, magic, 0))
    if magic != 1:
        raise ValueError("compressed messages need magic 1")
    inner = _accel.impl.encode_message_set(payloads, 1, 0)
    if not inner:
        return b""
    return encode_wrapper(codec, inner, level=compression_level)


def encode_wrapper(
    compression: Compression | int | str, message_set: BytesLike, *, level: int | None = None
) -> bytes:
    """One compressed wrapper entry around an already encoded message set. ``level`` is
    gzip's, 0 to 9 (None: 6, byte for byte the Java producer's output); snappy has none."""
    codec = Compression.parse(compression)
    if codec is Compression.NONE:
        raise ValueError("a wrapper needs a compression codec")
    payload = compress(codec, message_set, level=level)
    return bytes(_accel.impl.encode_message_set((payload,), 1, int(codec)))


def decode_message_set(
    buf: BytesLike,
    base_offset: int = 0,
    *,
    shallow: bool = False,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> DecodedMessageSet:
    """Decode a message set that starts at log offset ``base_offset``.

    Compressed wrappers are expanded (recursively, producing at most ``max_decompressed``
    bytes in all; see the module docstring) unless ``shallow``, in which case they are
    returned as they are, with the wrapper's end as offset (for mirroring).

    Raises a :class:`~aiokafka07.errors.ProtocolError` subclass for corrupt data. The
    error's ``position`` is where the bad top-level entry starts and its ``decoded`` holds
    the messages before it.
    """
    messages: list[Message] = []
    valid = decode_messages_into(
        messages, buf, base_offset, shallow=shallow, max_decompressed=max_decompressed
    )
    return DecodedMessageSet(messages, valid)


def decode_messages_into(
    out: list[Any],
    buf: BytesLike,
    base_offset: int = 0,
    *,
    shallow: bool = False,
    message_type: type[tuple[Any, ...]] = Message,
    prefix: tuple[Any, ...] = (),
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> int:
    """Append decoded messages to ``out``; return the valid byte count.

    The lower-level form of :func:`decode_message_set` for consumers on the hot path:
    each message is built as ``message_type(*prefix, offset, value, magic, attributes)``
    directly (``message_type`` must be a plain tuple subclass such as a NamedTuple), so a
    consumer can get records that carry topic and partition without a second object per
    message.
    """
    records = _Records(out, message_type, prefix)
    return decode_into(records, buf, base_offset, shallow, max_decompressed)


class MessageSink(Protocol):
    """Where :func:`decode_into` puts the messages it decodes: a list of tuples
    (:func:`decode_messages_into`) or column buffers
    (:class:`~aiokafka07.protocol.columns.MessageColumns`)."""

    def scan(
        self, buf: Any, pos: int, base: int, fixed: int | None, shallow: bool
    ) -> tuple[int, int, int]:
        """Append the plain messages of ``buf`` from ``pos`` (see ``_speedups.c``: each
        reports ``fixed``, or ``base`` plus its end); return (pos, status, detail)."""

    def __len__(self) -> int:
        """Messages held."""

    def truncate(self, count: int) -> None:
        """Keep only the first ``count`` messages."""

    def set_last_offset(self, offset: int) -> None:
        """Make the last message report ``offset`` (a wrapper's end, 0.7.2 §7.3)."""

    def decoded(self) -> Any:
        """The messages as a :class:`DecodedMessageSet` holds them."""


class _Records:
    """A list of ``cls(*prefix, offset, value, magic, attributes)`` tuples as a sink."""

    __slots__ = ("cls", "out", "prefix")

    def __init__(self, out: list[Any], cls: type[tuple[Any, ...]], prefix: tuple[Any, ...]) -> None:
        self.out = out
        self.cls = cls
        self.prefix = prefix

    def scan(
        self, buf: Any, pos: int, base: int, fixed: int | None, shallow: bool
    ) -> tuple[int, int, int]:
        result: tuple[int, int, int] = _accel.impl.scan(
            buf, pos, base, fixed, self.cls, self.prefix, self.out, shallow
        )
        return result

    def __len__(self) -> int:
        return len(self.out)

    def truncate(self, count: int) -> None:
        del self.out[count:]

    def set_last_offset(self, offset: int) -> None:
        last, n = self.out[-1], len(self.prefix)
        self.out[-1] = tuple.__new__(self.cls, (*last[:n], offset, *last[n + 1 :]))

    def decoded(self) -> list[Any]:
        return self.out


def decode_into(
    sink: MessageSink,
    buf: BytesLike,
    base_offset: int,
    shallow: bool,
    max_decompressed: int,
) -> int:
    """Decode the set into ``sink`` (see :func:`decode_message_set`); return the valid
    byte count. A :class:`ProtocolError`'s ``decoded`` holds what the sink decoded."""
    if not -_OFFSET_MAX <= base_offset <= _OFFSET_MAX - len(buf):
        raise ValueError(f"base offset {base_offset} is outside the int64 range")
    budget = _Budget(max_decompressed)
    try:
        return _decode(sink, buf, base_offset, None, shallow, 0, budget)
    except ProtocolError as exc:
        exc.decoded = DecodedMessageSet(sink.decoded(), exc.position or 0)
        raise


def summarize_message_set(buf: BytesLike) -> SetSummary:
    """Check the top-level entries of a set (size, magic, CRC, codec) without building
    messages or decompressing anything; raise as :func:`decode_message_set` does."""
    pos, status, detail, plain, wrapped, largest = _accel.impl.summarize(buf, 0, True)
    _check_stop(status, detail, pos, len(buf), 0)
    return SetSummary(pos, plain + wrapped, wrapped, largest)


def count_messages(buf: BytesLike, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> int:
    """How many messages a set holds with its compressed wrappers expanded (0.7.2's
    count for the flush interval), checking every message as :func:`decode_message_set`
    does but building none: memory stays within the input plus ``max_decompressed``.

    Unlike decoding, passing the bound anywhere raises CompressionError (a broker refuses
    the whole set).
    """
    return _count(buf, 0, _Budget(max_decompressed)).messages


def count_message_set(
    buf: BytesLike, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
) -> SetCount:
    """Count the messages of a fetched set the way :func:`decode_message_set` would decode
    them, building none: the same checks (sizes, magic, every CRC, codecs, nested
    wrappers), the same partial tail dropped, the same stop in front of a wrapper past
    the ``max_decompressed`` bound. For counting a log range (the exporter's lag in
    messages) without a Python object per message.

    Raises as :func:`decode_message_set` does (its ``decoded`` is not set).
    """
    return _count(buf, 0, _Budget(max_decompressed), stop_at_bound=True)


def _decode(
    sink: MessageSink,
    buf: Any,
    base: int,
    fixed: int | None,
    shallow: bool,
    depth: int,
    budget: _Budget,
) -> int:
    scan = sink.scan
    pos: int = 0
    status: int
    detail: int
    while True:
        pos, status, detail = scan(buf, pos, base, fixed, shallow)
        if status != _pure.ST_WRAPPER:
            _check_stop(status, detail, pos, len(buf), depth)
            return pos
        try:
            pos = _expand_wrapper(sink, buf, pos, detail, base, fixed, depth, budget)
        except CompressionError as exc:
            if exc.limit is None or depth or not pos:
                raise
            return pos  # over the bound behind other entries: stop in front of it


def _check_stop(status: int, detail: int, pos: int, size: int, depth: int) -> None:
    """Raise for the status a walk stopped with, unless it is the end of the set or its
    partial tail (a partial entry that is not the first)."""
    if status == _pure.ST_END or (status == _pure.ST_PARTIAL and pos):
        return
    if status != _pure.ST_PARTIAL:
        raise _entry_error(status, detail, pos)
    available = size - 4
    if depth:
        # Inside a wrapper: corrupt data, never a matter of the fetch size (``available``
        # stays None, so no consumer grows its fetch for it).
        raise InvalidMessageSizeError(
            f"the compressed message set's first entry declares {detail} bytes but only "
            f"{available} are present",
            position=0,
            size=detail,
        )
    raise InvalidMessageSizeError(
        f"the first message needs {detail} bytes but only {available} are present "
        f"(fetch size smaller than the message, or corrupt size)",
        position=0,
        size=detail,
        available=available,
    )


def _inflate_wrapper(view: memoryview, pos: int, codec: int, depth: int, budget: _Budget) -> Any:
    """The decompressed message set of the wrapper entry at ``pos``, charged to ``budget``."""
    if depth >= MAX_WRAPPER_DEPTH:
        raise CompressionError(f"compressed wrappers nested deeper than {MAX_WRAPPER_DEPTH}")
    end = pos + 4 + _I32.unpack_from(view, pos)[0]
    try:
        inner = decompress_buffer(codec, view[pos + 4 + MAGIC_1_HEADER : end], budget.left)
    except CompressionError as exc:
        if exc.limit is None:
            raise
        raise budget.exceeded() from None
    budget.left -= len(inner)
    return inner


def _at_wrapper(exc: ProtocolError, pos: int) -> None:
    """Restate ``exc``, raised inside the wrapper at ``pos``, at the wrapper."""
    exc.args = (f"in the compressed wrapper at position {pos}: {exc}",)
    exc.position = pos


def _expand_wrapper(
    sink: MessageSink,
    buf: Any,
    pos: int,
    codec: int,
    base: int,
    fixed: int | None,
    depth: int,
    budget: _Budget,
) -> int:
    view = memoryview(buf).cast("B")
    end: int = pos + 4 + _I32.unpack_from(view, pos)[0]
    mark = len(sink)
    try:
        inner = _inflate_wrapper(view, pos, codec, depth, budget)
        start = base + pos if fixed is None else fixed
        _decode(sink, inner, 0, start, False, depth + 1, budget)
    except ProtocolError as exc:
        sink.truncate(mark)
        _at_wrapper(exc, pos)
        raise
    if fixed is None and len(sink) > mark:
        # The wrapper's last message reports the wrapper's end (0.7.2 §7.3).
        sink.set_last_offset(base + end)
    return end


def _count(buf: Any, depth: int, budget: _Budget, *, stop_at_bound: bool = False) -> SetCount:
    """Messages of ``buf`` with wrappers expanded, and the bytes of the entries counted
    (see :func:`count_messages`). ``stop_at_bound``: a top-level wrapper past the bound
    behind other entries ends the count in front of it, as decoding stops
    (:func:`count_message_set`); otherwise it raises."""
    view = memoryview(buf).cast("B")
    summarize = _accel.impl.summarize
    total: int = 0
    pos: int = 0
    while True:
        pos, status, detail, plain, _, _ = summarize(view, pos, False)
        total += plain
        if status != _pure.ST_WRAPPER:
            _check_stop(status, detail, pos, len(view), depth)
            return SetCount(total, pos)
        try:
            inner = _inflate_wrapper(view, pos, detail, depth, budget)
            total += _count(inner, depth + 1, budget).messages
        except CompressionError as exc:
            if stop_at_bound and exc.limit is not None and pos:
                return SetCount(total, pos)  # over the bound behind other entries: stop here
            _at_wrapper(exc, pos)
            raise
        except ProtocolError as exc:
            _at_wrapper(exc, pos)
            raise
        pos += 4 + _I32.unpack_from(view, pos)[0]


def _entry_error(status: int, detail: int, pos: int) -> ProtocolError:
    if status == _pure.ST_BAD_SIZE:
        return InvalidMessageSizeError(
            f"invalid message size {detail} at position {pos}", position=pos, size=detail
        )
    if status == _pure.ST_BAD_MAGIC:
        return UnknownMagicError(f"unknown magic byte {detail} at position {pos}", position=pos)
    if status == _pure.ST_BAD_CRC:
        return InvalidMessageError(
            f"corrupt message at position {pos}: stored CRC {detail:#010x} "
            "does not match the payload",
            position=pos,
        )
    if status == _pure.ST_BAD_CODEC:
        return UnknownCodecError(
            f"unknown compression codec 3 (attributes {detail:#04x}) at position {pos}",
            position=pos,
        )
    raise AssertionError(f"unexpected scan status {status}")

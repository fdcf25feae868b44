"""Messages and message sets of Kafka 0.7 (PROTOCOL §6-§8).

A message set is a bare concatenation of entries ``int32 N || N bytes of message``; a
message is ``magic(0|1) [attributes] crc32(payload) payload``. There are no message
numbers in 0.7: offsets are byte positions in the partition log.

Decoding follows the 0.7.2 Java iterator exactly: a partial *first* entry is an error (the
fetch size is smaller than the message), a partial *later* entry is the normal tail of a
fetch and is dropped; every message reports the "next offset" (where to fetch from so
that it is not seen again); messages inside a compressed wrapper report the wrapper's
start offset, except the last one, which reports the wrapper's end (§7.3).

The hot loop runs in the optional C accelerator when it is built, else in ``_pure``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, NamedTuple, TypeAlias

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
from .compression import Compression, compress, decompress_buffer

__all__ = [
    "MAGIC_0_HEADER",
    "MAGIC_1_HEADER",
    "MAX_WRAPPER_DEPTH",
    "BytesLike",
    "DecodedMessageSet",
    "Message",
    "crc32",
    "decode_message_set",
    "decode_messages_into",
    "encode_message_set",
    "encode_wrapper",
    "entry_size",
    "implementation",
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
) -> bytes:
    """Encode payloads as a message set.

    Uncompressed: one entry per payload. Compressed: one magic-1 wrapper holding all
    payloads as a message set, as the Java producer builds it (§8.1); no payloads give an
    empty set, never a wrapper around nothing.
    """
    codec = Compression.parse(compression)
    if codec is Compression.NONE:
        return bytes(_accel.impl.encode_message_set(payloads, magic, 0))
    if magic != 1:
        raise ValueError("compressed messages need magic 1")
    inner = _accel.impl.encode_message_set(payloads, 1, 0)
    if not inner:
        return b""
    return encode_wrapper(codec, inner)


def encode_wrapper(compression: Compression | int | str, message_set: BytesLike) -> bytes:
    """One compressed wrapper entry around an already encoded message set."""
    codec = Compression.parse(compression)
    if codec is Compression.NONE:
        raise ValueError("a wrapper needs a compression codec")
    return bytes(_accel.impl.encode_message_set((compress(codec, message_set),), 1, int(codec)))


def decode_message_set(
    buf: BytesLike, base_offset: int = 0, *, shallow: bool = False
) -> DecodedMessageSet:
    """Decode a message set that starts at log offset ``base_offset``.

    Compressed wrappers are expanded (recursively) unless ``shallow``, in which case they
    are returned as they are, with the wrapper's end as offset (for mirroring).

    Raises a :class:`~aiokafka07.errors.ProtocolError` subclass for corrupt data. The
    error's ``position`` is where the bad top-level entry starts and its ``decoded`` holds
    the messages before it.
    """
    messages: list[Message] = []
    valid = decode_messages_into(messages, buf, base_offset, shallow=shallow)
    return DecodedMessageSet(messages, valid)


def decode_messages_into(
    out: list[Any],
    buf: BytesLike,
    base_offset: int = 0,
    *,
    shallow: bool = False,
    message_type: type[tuple[Any, ...]] = Message,
    prefix: tuple[Any, ...] = (),
) -> int:
    """Append decoded messages to ``out``; return the valid byte count.

    The lower-level form of :func:`decode_message_set` for consumers on the hot path:
    each message is built as ``message_type(*prefix, offset, value, magic, attributes)``
    directly (``message_type`` must be a plain tuple subclass such as a NamedTuple), so a
    consumer can get records that carry topic and partition without a second object per
    message.
    """
    if not -_OFFSET_MAX <= base_offset <= _OFFSET_MAX - len(buf):
        raise ValueError(f"base offset {base_offset} is outside the int64 range")
    try:
        return _decode(out, buf, base_offset, None, shallow, message_type, prefix, 0)
    except ProtocolError as exc:
        exc.decoded = DecodedMessageSet(out, exc.position or 0)
        raise


def _decode(
    out: list[Any],
    buf: Any,
    base: int,
    fixed: int | None,
    shallow: bool,
    cls: type[tuple[Any, ...]],
    prefix: tuple[Any, ...],
    depth: int,
) -> int:
    scan = _accel.impl.scan
    pos: int = 0
    status: int
    detail: int
    while True:
        pos, status, detail = scan(buf, pos, base, fixed, cls, prefix, out, shallow)
        if status == _pure.ST_END:
            return pos
        if status == _pure.ST_PARTIAL:
            if pos:
                return pos  # the partial tail of a fetch: dropped, as in 0.7.2
            available = len(buf) - 4
            raise InvalidMessageSizeError(
                f"the first message needs {detail} bytes but only {available} are present "
                f"(fetch size smaller than the message, or corrupt size)",
                position=0,
                size=detail,
                available=available,
            )
        if status == _pure.ST_WRAPPER:
            pos = _expand_wrapper(out, buf, pos, detail, base, fixed, cls, prefix, depth)
            continue
        raise _entry_error(status, detail, pos)


def _expand_wrapper(
    out: list[Any],
    buf: Any,
    pos: int,
    codec: int,
    base: int,
    fixed: int | None,
    cls: type[tuple[Any, ...]],
    prefix: tuple[Any, ...],
    depth: int,
) -> int:
    view = memoryview(buf).cast("B")
    size: int = _I32.unpack_from(view, pos)[0]
    end = pos + 4 + size
    mark = len(out)
    try:
        if depth >= MAX_WRAPPER_DEPTH:
            raise CompressionError(f"compressed wrappers nested deeper than {MAX_WRAPPER_DEPTH}")
        inner = decompress_buffer(codec, view[pos + 4 + MAGIC_1_HEADER : end])
        start = base + pos if fixed is None else fixed
        _decode(out, inner, 0, start, False, cls, prefix, depth + 1)
    except ProtocolError as exc:
        del out[mark:]
        exc.args = (f"in the compressed wrapper at position {pos}: {exc}",)
        exc.position = pos
        raise
    if fixed is None and len(out) > mark:
        # The wrapper's last message reports the wrapper's end (0.7.2 §7.3).
        last = out[-1]
        n = len(prefix)
        out[-1] = tuple.__new__(cls, (*last[:n], base + end, *last[n + 1 :]))
    return end


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

"""Pure-Python twin of ``_speedups.c``: the same functions with the same contract.

Used when the C accelerator is not built (or ``AIOKAFKA07_PURE=1``), and as the reference
the accelerator is tested against. See ``_speedups.c`` for the contract of ``scan``. The
Arrow exports' twins are in ``aiokafka07/arrow.py`` (through ctypes).
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Sequence
from typing import Any

ST_END = 0
ST_PARTIAL = 1
ST_BAD_SIZE = 2
ST_BAD_MAGIC = 3
ST_BAD_CRC = 4
ST_WRAPPER = 5
ST_BAD_CODEC = 6
ST_OK = -1  # internal: the entry is a message (never returned)

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_HEAD1 = struct.Struct(">iBBI")  # size, magic, attributes, crc
_HEAD0 = struct.Struct(">iBI")  # size, magic, crc
_INT32_MAX = 0x7FFFFFFF

crc32 = zlib.crc32


def _check_entry(view: Any, pos: int, end: int, shallow: bool) -> tuple[int, int, int, int, int]:
    """The entry at ``pos``: ``(ST_OK, size, magic, header, attributes)``, or
    ``(status, detail, 0, 0, 0)`` for the status that stops a walk there."""
    if end - pos < 4:
        return ST_END, 0, 0, 0, 0
    (n,) = _I32.unpack_from(view, pos)
    if n < 0:
        return ST_BAD_SIZE, n, 0, 0, 0
    if end - pos - 4 < n:
        return ST_PARTIAL, n, 0, 0, 0
    if n < 1:
        return ST_BAD_SIZE, n, 0, 0, 0
    magic = view[pos + 4]
    if magic == 1:
        hdr = 6
    elif magic == 0:
        hdr = 5
    else:
        return ST_BAD_MAGIC, magic, 0, 0, 0
    if n < hdr:
        return ST_BAD_SIZE, n, 0, 0, 0
    attributes = view[pos + 5] if magic == 1 else 0
    (stored,) = _U32.unpack_from(view, pos + hdr)
    if crc32(view[pos + 4 + hdr : pos + 4 + n]) != stored:
        return ST_BAD_CRC, stored, 0, 0, 0
    codec = attributes & 3
    if codec == 3:
        return ST_BAD_CODEC, attributes, 0, 0, 0
    if codec and not shallow:
        return ST_WRAPPER, codec, 0, 0, 0
    return ST_OK, n, magic, hdr, attributes


def _view(buf: Any, pos: int) -> memoryview:
    view = memoryview(buf).cast("B")
    if pos < 0 or pos > len(view):
        raise ValueError("pos outside the buffer")
    return view


def scan(
    buf: Any,
    pos: int,
    base_offset: int,
    fixed_offset: int | None,
    cls: type[tuple[Any, ...]],
    prefix: tuple[Any, ...],
    out: list[Any],
    shallow: bool,
) -> tuple[int, int, int]:
    """Append a ``cls`` tuple per plain message from ``pos``; return (pos, status, detail)."""
    view = _view(buf, pos)
    end = len(view)
    new = tuple.__new__
    append = out.append
    while True:
        status, n, magic, hdr, attributes = _check_entry(view, pos, end, shallow)
        if status != ST_OK:
            return pos, status, n
        nxt = pos + 4 + n
        offset = fixed_offset if fixed_offset is not None else base_offset + nxt
        append(new(cls, (*prefix, offset, bytes(view[pos + 4 + hdr : nxt]), magic, attributes)))
        pos = nxt


_OFFSET = struct.Struct("=q")  # Arrow's int64 and offset buffers: native byte order
_END = struct.Struct("=i")


def scan_columns(
    buf: Any,
    pos: int,
    base_offset: int,
    fixed_offset: int | None,
    offsets: bytearray,
    value_ends: bytearray,
    values: bytearray,
) -> tuple[int, int, int]:
    """Walk as :func:`scan` does (never shallow), appending each plain message's offset to
    ``offsets`` (int64), its payload to ``values`` and the new length of ``values`` to
    ``value_ends`` (int32): the buffers of Arrow columns; return (pos, status, detail)."""
    if not all(isinstance(b, bytearray) for b in (offsets, value_ends, values)):
        raise TypeError("offsets, value_ends and values must be bytearrays")
    if len(offsets) % 8 or len(value_ends) % 4 or len(value_ends) // 4 != len(offsets) // 8 + 1:
        raise ValueError("value_ends must hold one int32 more than offsets holds int64s")
    view = _view(buf, pos)
    end = len(view)
    pack_offset, pack_end = _OFFSET.pack, _END.pack
    had = (len(offsets), len(value_ends), len(values))
    try:
        while True:
            status, n, _, hdr, _ = _check_entry(view, pos, end, False)
            if status != ST_OK:
                return pos, status, n
            nxt = pos + 4 + n
            if len(values) + n - hdr > _INT32_MAX:
                raise OverflowError("more than 2 GiB of values in one set of columns")
            values += view[pos + 4 + hdr : nxt]
            value_ends += pack_end(len(values))
            offsets += pack_offset(fixed_offset if fixed_offset is not None else base_offset + nxt)
            pos = nxt
    except BaseException:  # leave the columns as they were (as the C twin does)
        for array, size in zip((offsets, value_ends, values), had, strict=True):
            if len(array) > size:
                del array[size:]
        raise


def summarize(buf: Any, pos: int, shallow: bool) -> tuple[int, int, int, int, int, int]:
    """Walk entries from ``pos`` as :func:`scan` does, building nothing; return
    ``(pos, status, detail, plain messages, compressed wrappers, largest payload)``."""
    view = _view(buf, pos)
    end = len(view)
    plain = wrapped = largest = 0
    while True:
        status, n, _, hdr, attributes = _check_entry(view, pos, end, shallow)
        if status != ST_OK:
            return pos, status, n, plain, wrapped, largest
        largest = max(largest, n - hdr)
        if attributes & 3:
            wrapped += 1
        else:
            plain += 1
        pos += 4 + n


def encode_message_set(
    payloads: Sequence[Any], magic: int, attributes: int, head: bytes = b""
) -> bytes:
    """Encode payloads as consecutive uncompressed entries (length, header, CRC, payload),
    after ``head`` (a request's header: one buffer for the whole frame, no second copy)."""
    if magic not in (0, 1):
        raise ValueError("magic must be 0 or 1")
    if not 0 <= attributes <= 255 or (magic == 0 and attributes):
        raise ValueError("attributes must be a byte (0 for magic 0)")
    parts = [head]
    if magic == 1:
        pack1 = _HEAD1.pack
        for payload in payloads:
            size = len(memoryview(payload).cast("B"))
            if size > _INT32_MAX - 6:
                raise OverflowError("message set larger than 2 GiB")
            parts.append(pack1(6 + size, 1, attributes, crc32(payload)))
            parts.append(payload)
    else:
        pack0 = _HEAD0.pack
        for payload in payloads:
            size = len(memoryview(payload).cast("B"))
            if size > _INT32_MAX - 5:
                raise OverflowError("message set larger than 2 GiB")
            parts.append(pack0(5 + size, 0, crc32(payload)))
            parts.append(payload)
    return b"".join(parts)


# inflate's statuses: the output, a message saying why the data is corrupt, over the
# limit, or cut short (the input ends inside the deflate stream).
IN_OK = 0
IN_CORRUPT = 1
IN_OVER = 2
IN_SHORT = 3

#: Most bytes one inflate step produces (and most compressed bytes it reads): pieces of
#: output are checked against the bound as they come, so nothing much larger than the
#: bound is ever held.
INFLATE_STEP = 4 << 20
# Compressed input handed to zlib by the first call (doubling up to INFLATE_STEP): bounds
# the copy zlib makes of unused input at the end of a member.
_INFLATE_INPUT = 16 << 10


class Output:
    """Decompressed bytes, kept without copying while they are one piece, then in one
    growing buffer (never the pieces and their concatenation at once)."""

    __slots__ = ("first", "grown", "size")

    def __init__(self) -> None:
        self.first: Any = None
        self.grown: bytearray | None = None
        self.size = 0

    def add(self, piece: Any) -> None:
        if not piece:
            return
        self.size += len(piece)
        if self.grown is not None:
            self.grown += piece
        elif self.first is None:
            self.first = piece
        else:
            self.grown = bytearray(self.first)
            self.grown += piece
            self.first = None

    def result(self) -> bytes | bytearray:
        if self.grown is not None:
            return self.grown
        return self.first or b""


def inflate(data: Any, pos: int, limit: int, hint: int) -> tuple[int, Any, int, int]:
    """The raw deflate stream at ``data[pos:]`` inflated into at most ``limit`` bytes, in
    steps of at most :data:`INFLATE_STEP` each checked before the next: ``(IN_OK, output,
    end, crc)`` (``end`` where the deflate data ends, ``crc`` the output's CRC-32), or
    ``(IN_CORRUPT, message, 0, 0)``, ``(IN_OVER, None, 0, 0)``, ``(IN_SHORT, None, 0, 0)``.
    ``hint`` (the size the trailer declares) is the C twin's first allocation; unused here."""
    view = _view(data, pos)
    if limit < 0:
        raise ValueError("the limit must be >= 0")
    inflater = zlib.decompressobj(-15)
    end = len(view)
    tail: Any = b""
    take = _INFLATE_INPUT
    crc = 0
    out = Output()
    while True:
        if not tail:
            tail = view[pos : pos + take]
            pos += len(tail)
            take = min(take * 2, INFLATE_STEP)
        room = limit - out.size
        try:
            piece = inflater.decompress(tail, min(room + 1, INFLATE_STEP))
        except zlib.error as exc:
            return IN_CORRUPT, f"corrupt gzip data: {exc}", 0, 0
        if len(piece) > room:
            return IN_OVER, None, 0, 0
        crc = zlib.crc32(piece, crc)
        out.add(piece)
        if inflater.eof:
            return IN_OK, out.result(), pos - len(inflater.unused_data), crc
        if not piece and not tail and pos >= end:
            return IN_SHORT, None, 0, 0
        tail = inflater.unconsumed_tail


def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode``: 31-polynomial over UTF-16 code units, int32 wrap."""
    if not isinstance(s, str):
        raise TypeError("java_string_hash expects a str")
    h = 0
    for ch in s:
        c = ord(ch)
        if c >= 0x10000:
            c -= 0x10000
            h = (31 * h + 0xD800 + (c >> 10)) & 0xFFFFFFFF
            c = 0xDC00 + (c & 0x3FF)
        h = (31 * h + c) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def offset_seq(offsets: Any, fetched_at: int) -> bytearray:
    """``offset_seq`` (native int32 each) of messages decoded from a fetch at ``fetched_at``
    (an entry boundary), in log order, given their native int64 0.7.2 offsets (a
    bytes-like object), as the Spark source defines it: 0 for a message that ends its
    entry, 1, 2, ... for the other messages of a compressed wrapper, which report the
    wrapper's start. ``(offset, offset_seq)`` is then unique and in log order within a
    partition. Equal offsets are contiguous; the first of a run ends its entry (0) unless
    the run is at the fetch position itself, where only a wrapper's messages report it."""
    view = memoryview(offsets).cast("B")
    if len(view) % 8:
        raise ValueError("offsets must be whole int64s")
    out = array("i")
    previous = start = 0
    for index, offset in enumerate(view.cast("q")):
        if index == 0 or offset != previous:
            previous, start = offset, index
        out.append(index - start + (offset == fetched_at))
    return bytearray(out.tobytes())


# The Arrow C data interface's exports (``arrow_schema`` etc. in ``_speedups.c``): their
# twins are in ``aiokafka07/arrow.py``, imported on first use (it brings ctypes).


def arrow_schema(fields: Any, metadata: bytes) -> object:
    from .. import arrow

    return arrow.schema_capsule(fields, metadata)


def arrow_array(fields: Any, length: int, offset: int, owner: object) -> object:
    from .. import arrow

    return arrow.array_capsule(fields, length, offset, owner)


def arrow_stream(fields: Any, metadata: bytes, length: int, offset: int, owner: object) -> object:
    from .. import arrow

    return arrow.stream_capsule(fields, metadata, length, offset, owner)


def encode_arrow(
    schema: object,
    array: object,
    magic: int,
    attributes: int,
    max_count: int,
    max_bytes: int,
    max_message: int,
    rows: Any = None,
) -> tuple[int, int, int, str | None, list[tuple[int, int, bytes]] | None]:
    """The producer's Arrow path (``_speedups.c`` states the contract): message sets of
    an Arrow array of binary or string values, read through ctypes."""
    from .. import arrow

    return arrow.encode_arrow(
        schema,
        array,
        magic,
        attributes,
        max_count,
        max_bytes,
        max_message,
        encode_message_set,
        rows,
    )

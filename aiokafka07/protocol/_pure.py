"""Pure-Python twin of ``_speedups.c``: the same functions with the same contract.

Used when the C accelerator is not built (or ``AIOKAFKA07_PURE=1``), and as the reference
the accelerator is tested against. See ``_speedups.c`` for the contract of ``scan``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any

ST_END = 0
ST_PARTIAL = 1
ST_BAD_SIZE = 2
ST_BAD_MAGIC = 3
ST_BAD_CRC = 4
ST_WRAPPER = 5
ST_BAD_CODEC = 6

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_HEAD1 = struct.Struct(">iBBI")  # size, magic, attributes, crc
_HEAD0 = struct.Struct(">iBI")  # size, magic, crc
_INT32_MAX = 0x7FFFFFFF

crc32 = zlib.crc32


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
    view = memoryview(buf).cast("B")
    end = len(view)
    if pos < 0 or pos > end:
        raise ValueError("pos outside the buffer")
    new = tuple.__new__
    append = out.append
    unpack_size = _I32.unpack_from
    unpack_crc = _U32.unpack_from
    while True:
        if end - pos < 4:
            return pos, ST_END, 0
        (n,) = unpack_size(view, pos)
        if n < 0:
            return pos, ST_BAD_SIZE, n
        if end - pos - 4 < n:
            return pos, ST_PARTIAL, n
        if n < 1:
            return pos, ST_BAD_SIZE, n
        magic = view[pos + 4]
        if magic == 1:
            hdr = 6
        elif magic == 0:
            hdr = 5
        else:
            return pos, ST_BAD_MAGIC, magic
        if n < hdr:
            return pos, ST_BAD_SIZE, n
        attributes = view[pos + 5] if magic == 1 else 0
        (stored,) = unpack_crc(view, pos + hdr)
        nxt = pos + 4 + n
        value = bytes(view[pos + 4 + hdr : nxt])
        if crc32(value) != stored:
            return pos, ST_BAD_CRC, stored
        codec = attributes & 3
        if codec == 3:
            return pos, ST_BAD_CODEC, attributes
        if codec and not shallow:
            return pos, ST_WRAPPER, codec
        offset = fixed_offset if fixed_offset is not None else base_offset + nxt
        append(new(cls, (*prefix, offset, value, magic, attributes)))
        pos = nxt


def encode_message_set(payloads: Sequence[Any], magic: int, attributes: int) -> bytes:
    """Encode payloads as consecutive uncompressed entries (length, header, CRC, payload)."""
    if magic not in (0, 1):
        raise ValueError("magic must be 0 or 1")
    if not 0 <= attributes <= 255 or (magic == 0 and attributes):
        raise ValueError("attributes must be a byte (0 for magic 0)")
    parts = []
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

"""Compression codecs of Kafka 0.7 (PROTOCOL §8): gzip (1) and xerial-framed snappy (2).

gzip is written exactly as ``java.util.zip.GZIPOutputStream`` writes it (header
``1f 8b 08 00 00000000 00 ff``, raw deflate at zlib's default level 6, CRC32 and ISIZE
trailer), so a set we compress is byte-for-byte what a Java 0.7.2 producer sends for the
same messages. Compressing goes through the standard library's zlib: cramjam's deflate
yields different bytes and is slower (about 42 MB/s against 60 MB/s here). Decompressing
goes through zlib's streaming inflater too, which the bound and Java's member rules below
need: driven from C (``inflate`` in ``_speedups.c``) into one output buffer, with the
CRC taken as the output comes, or through the standard library's ``zlib`` module in the
pure-Python codec.

Snappy uses the stream framing of snappy-java 1.0.4.1 (``SnappyOutputStream``): a 16-byte
header, then each 32 KiB chunk of input as ``int32 length`` + one raw snappy block.
Readers fall back to a single raw snappy block when the header is missing, and accept
several complete streams back to back, as newer snappy-java readers do.

**Every decompression is bounded.** ``max_size`` caps the bytes one call may produce
(default :data:`DEFAULT_MAX_DECOMPRESSED`, the consumers' default ``max_fetch_size``):
snappy compares each raw block's declared length (its varint header) with what is left
of the bound before anything is allocated, and gzip inflates into one output that starts
at the size the payload's trailer declares (a hint only: clamped to the bound and to what
deflate can expand the compressed bytes to, about 1032:1) and doubles as needed, never
past the bound (the pure-Python codec: in steps of at most :data:`INFLATE_STEP` bytes,
each checked before the next), stopping as soon as the output would pass the bound. Over
the bound the call raises :class:`~aiokafka07.errors.CompressionError` with ``limit``
set; corrupt data raises it with ``limit`` None. So 22 bytes declaring a 3.3 GiB block,
or a 500 KiB gzip bomb holding 512 MiB, cost at most the bound.

**gzip members as Java reads them.** 0.7.2 decompresses with ``GZIPInputStream`` over a
``ByteBufferBackedInputStream`` (whose ``available()`` is 0), so what follows a member is
decided by the JDK's ``readTrailer`` (OpenJDK 17's): it reads another member only when more
than 26 bytes were left unread in the inflater's 512-byte input buffer when the member's
deflate data ended, and only if those bytes start a well-formed gzip header; anything
else after a complete member (zeros, garbage, a broken header, or even a whole member
when the buffer happened to end within 26 bytes of the deflate data) is ignored. A
second member whose header is well formed must then be complete and correct. A member
that is cut short, or whose CRC or length trailer is wrong, is an error. This module
reproduces that rule, buffer positions included (:func:`gzip_decompress`), checked
against OpenJDK 17's answers for 1,639 payloads (``tests/data/gzip-java/``). (JDK 25
answers 377 of them differently: the rule is the JDK's, not the format's.)
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import Any

import cramjam

from ..errors import CompressionError, UnknownCodecError
from . import _accel, _pure

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED",
    "GZIP_DEFAULT_LEVEL",
    "Compression",
    "check_compression_level",
    "compress",
    "decompress",
    "gzip_compress",
    "gzip_decompress",
    "snappy_compress",
    "snappy_decompress",
]

#: The default bound on the bytes decompressing one message set may produce: 64 MiB,
#: the consumers' default ``max_fetch_size`` (so a compressed fetch never decodes to
#: more message data than the largest uncompressed fetch could carry).
DEFAULT_MAX_DECOMPRESSED = 64 << 20

#: Most bytes one inflate step of the pure-Python codec produces (and most compressed
#: bytes it reads): pieces of output are checked against the bound as they come, so
#: nothing much larger than the bound is ever held. (The C accelerator inflates into one
#: buffer that starts at the size the gzip trailer declares and doubles up to the bound.)
INFLATE_STEP = _pure.INFLATE_STEP

_I32 = struct.Struct(">i")
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_GZIP_TRAILER = struct.Struct("<II")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_CHUNK = 32768

# java.util.zip.GZIPInputStream: its inflater input buffer, and the most bytes that may be
# left in it after a member for the member to be the last ("trailer(8) + next.header.min(10)
# + next.trailer(8)" in the JDK's readTrailer).
_JAVA_GZIP_BUFFER = 512
_JAVA_GZIP_MORE = 26
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 2, 4, 8, 16


class Compression(IntEnum):
    """The codec in the low two bits of a magic-1 message's attributes byte."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2

    @classmethod
    def parse(cls, value: Compression | int | str | None) -> Compression:
        """Accept a member, its number, its name (``"gzip"``, ``"snappy"``, ``"none"``) or None."""
        if type(value) is cls:  # a member as it is: the producer's per-batch call
            return value
        if value is None:
            return cls.NONE
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
            if value.strip().isdigit():
                value = int(value)
            else:
                raise ValueError(
                    f"unknown compression {value!r}: expected none, gzip or snappy"
                ) from None
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"unknown compression codec {value!r}: expected 0 (none), 1 (gzip) or 2 (snappy)"
            ) from None


def _over(what: str, limit: int) -> CompressionError:
    return CompressionError(f"{what} decompresses to more than {limit} bytes", limit=limit)


def _check_bound(max_size: int) -> None:
    if not isinstance(max_size, int) or max_size < 0:
        raise ValueError(f"the decompression bound must be an int >= 0, not {max_size!r}")


# -- gzip ------------------------------------------------------------------------------------


#: zlib's level when none is chosen: 6, the level of Java's ``Deflater.DEFAULT_COMPRESSION``,
#: so a set is byte for byte what the 0.7.2 Java producer writes. 0.7.2 reads a member of
#: any level (it inflates; the level is not in the data it checks).
GZIP_DEFAULT_LEVEL = 6


def check_compression_level(level: Any) -> int:
    """``level`` as a gzip level (0, stored, to 9, smallest; None: the default), or
    ``ValueError`` saying what is allowed."""
    if level is None:
        return GZIP_DEFAULT_LEVEL
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise ValueError(f"a gzip compression level is an int from 0 to 9, not {level!r}")
    return level


def gzip_compress(data: Any, level: int = GZIP_DEFAULT_LEVEL) -> bytes:
    """One gzip member of ``data`` at zlib ``level`` (0 to 9). At the default level it is
    identical to what Java's GZIPOutputStream writes; any level is read by 0.7.2."""
    deflater = zlib.compressobj(check_compression_level(level), zlib.DEFLATED, -15)
    body = deflater.compress(data) + deflater.flush()
    trailer = _GZIP_TRAILER.pack(
        _accel.impl.crc32(data), len(memoryview(data).cast("B")) & 0xFFFFFFFF
    )
    return b"".join((_GZIP_HEADER, body, trailer))


def _gzip_header(view: memoryview, pos: int) -> int:
    """The end of the gzip member header at ``pos``, checked as the JDK's ``readHeader``
    checks it (magic, method 8, optional fields, header CRC; reserved flags ignored).
    Raises CompressionError if it is cut short or malformed."""
    end = len(view)
    if end - pos < 10:
        raise CompressionError(f"gzip header at position {pos} is cut short")
    if view[pos] != 0x1F or view[pos + 1] != 0x8B:
        raise CompressionError(f"not in gzip format at position {pos}")
    if view[pos + 2] != 8:
        raise CompressionError(f"unsupported gzip compression method {view[pos + 2]}")
    flags = view[pos + 3]
    at = pos + 10
    if flags & _FEXTRA:
        if end - at < 2:
            raise CompressionError(f"gzip header at position {pos} is cut short")
        at += 2 + (view[at] | view[at + 1] << 8)
    for field in (_FNAME, _FCOMMENT):
        if flags & field:
            at = _after_zero(view, at, pos)
    if flags & _FHCRC:
        if end - at < 2:
            raise CompressionError(f"gzip header at position {pos} is cut short")
        if zlib.crc32(view[pos:at]) & 0xFFFF != view[at] | view[at + 1] << 8:
            raise CompressionError(f"corrupt gzip header CRC at position {pos}")
        at += 2
    if at > end:
        raise CompressionError(f"gzip header at position {pos} is cut short")
    return at


def _after_zero(view: memoryview, at: int, header: int) -> int:
    """The position after the zero byte ending a header string that starts at ``at``."""
    end = len(view)
    while at < end:
        window = bytes(view[at : at + 4096])
        zero = window.find(0)
        if zero >= 0:
            return at + zero + 1
        at += len(window)
    raise CompressionError(f"gzip header at position {header} is cut short")


#: Most output per byte of deflate data (258-byte matches in 1-bit codes, about 1032:1):
#: a declared size above this for the bytes at hand is a lie, not a size hint.
_DEFLATE_MAX_RATIO = 1032


def _inflate(
    view: memoryview, pos: int, out: _pure.Output, limit: int, hint: int
) -> tuple[int, int, int]:
    """Inflate the raw deflate data at ``pos`` into ``out`` while it stays within
    ``limit`` bytes in all (``inflate`` of the codec's twins; ``hint`` the size to start
    the output at); return (where the deflate data ends, its CRC-32, its size)."""
    room = limit - out.size
    # A hint is never trusted: clamped to what the compressed bytes at hand can expand
    # to and to the bound (the output still grows as needed and stops at the bound).
    hint = min(hint, (len(view) - pos) * _DEFLATE_MAX_RATIO, room)
    status, result, end, crc = _accel.impl.inflate(view, pos, room, hint)
    if status == _pure.IN_OK:
        out.add(result)
        return end, crc, len(result)
    if status == _pure.IN_OVER:
        raise _over("a gzip payload", limit)
    if status == _pure.IN_SHORT:
        raise CompressionError("gzip data is cut short (unexpected end of the deflate data)")
    raise CompressionError(result)


def _gzip_members(data: Any, max_size: int) -> bytes | bytearray:
    """Decompress a gzip payload exactly as 0.7.2's Java reader does (see the module
    docstring), producing at most ``max_size`` bytes."""
    _check_bound(max_size)
    view = memoryview(data).cast("B")
    end = len(view)
    pos = _gzip_header(view, 0)
    out = _pure.Output()
    # Java's inflater input buffer: [.., filled) is what the last 512-byte fill read, and
    # the next fill starts at ``stream``.
    filled = stream = pos
    # The first member starts its output at the size the payload's last 4 bytes declare
    # (the ISIZE of a one-member payload, as Java writes it); later members grow theirs
    # from nothing, so that many small members do not each reserve a large output.
    hint = int.from_bytes(view[-4:], "little")
    while True:
        deflate_end, crc, size = _inflate(view, pos, out, max_size, hint)
        hint = 0
        if deflate_end > filled:  # read through fills of 512 bytes from ``stream``
            steps = (deflate_end - 1 - stream) // _JAVA_GZIP_BUFFER + 1
            filled = stream = min(end, stream + steps * _JAVA_GZIP_BUFFER)
        left_in_buffer = filled - deflate_end
        if end - deflate_end < 8:
            raise CompressionError("gzip trailer is cut short")
        if _GZIP_TRAILER.unpack_from(view, deflate_end) != (crc, size & 0xFFFFFFFF):
            raise CompressionError("corrupt gzip trailer (CRC or length mismatch)")
        if left_in_buffer <= _JAVA_GZIP_MORE:
            return out.result()  # Java stops here, whatever follows
        try:
            pos = _gzip_header(view, deflate_end + 8)
        except CompressionError:
            return out.result()  # not a member: ignored, as Java ignores it
        if pos >= filled:  # the header used up the buffer: the next fill starts after it
            filled = stream = pos


def gzip_decompress(data: Any, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress a gzip payload as 0.7.2's Java reader does (concatenated members and
    trailing bytes as described in the module docstring), producing at most
    ``max_size`` bytes (CompressionError beyond)."""
    return bytes(_gzip_members(data, max_size))


# -- snappy ----------------------------------------------------------------------------------


def snappy_compress(data: Any) -> bytes:
    """xerial snappy-java 1.0.4.1 stream: header, then int32 length + raw block per 32 KiB."""
    view = memoryview(data).cast("B")
    compress_raw = cramjam.snappy.compress_raw
    pack = _I32.pack
    parts: list[Any] = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_CHUNK):
        block = compress_raw(view[start : start + _XERIAL_CHUNK])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_declared(block: memoryview) -> int:
    """The uncompressed length a raw snappy block declares (its little-endian base-128
    varint header, at most 2**32 - 1 by the format)."""
    value = 0
    for i in range(min(5, len(block))):
        byte = block[i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                break
            return value
    raise CompressionError("corrupt snappy block: bad uncompressed length header")


def _snappy_blocks(view: memoryview) -> list[memoryview]:
    """The raw blocks of a xerial stream (or the payload itself, read as one raw block,
    when it has no xerial header, as snappy-java does)."""
    end = len(view)
    if end < 16 or view[:8] != _XERIAL_MAGIC:
        return [view]
    (version,) = _I32.unpack_from(view, 8)
    if version < 1:
        raise CompressionError(f"incompatible xerial snappy stream version {version}")
    blocks: list[memoryview] = []
    pos = 16
    while pos < end:
        if end - pos >= 8 and view[pos : pos + 8] == _XERIAL_MAGIC:
            pos += 16  # another complete stream appended to this one
            continue
        if end - pos < 4:
            raise CompressionError(f"truncated snappy chunk length at position {pos}")
        (length,) = _I32.unpack_from(view, pos)
        if length < 0 or end - pos - 4 < length:
            raise CompressionError(
                f"failed to read snappy chunk at position {pos}: "
                f"length {length}, {end - pos - 4} bytes left"
            )
        blocks.append(view[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return blocks


def _snappy_decompress_buffer(data: Any, max_size: int) -> bytearray:
    """Decompress into one buffer sized from the blocks' declared lengths, which are
    checked against ``max_size`` before anything is allocated."""
    _check_bound(max_size)
    blocks = _snappy_blocks(memoryview(data).cast("B"))
    sizes = []
    total = 0
    for block in blocks:
        total += _snappy_declared(block)
        if total > max_size:
            raise _over("a snappy payload", max_size)
        sizes.append(total)
    out = bytearray(total)
    start = 0
    with memoryview(out) as target:
        for block, stop in zip(blocks, sizes, strict=True):
            try:
                cramjam.snappy.decompress_raw_into(block, target[start:stop])
            except Exception as exc:  # cramjam raises its own DecompressionError (or others)
                raise CompressionError(f"corrupt snappy block: {exc}") from exc
            start = stop
    return out


def snappy_decompress(data: Any, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Decompress a xerial-framed (or raw) snappy payload into at most ``max_size`` bytes."""
    return bytes(_snappy_decompress_buffer(data, max_size))


# -- any codec -------------------------------------------------------------------------------


def compress(codec: Compression | int | str, data: Any, *, level: int | None = None) -> bytes:
    """Compress ``data`` with a 0.7 codec (``NONE`` returns it unchanged as bytes).
    ``level`` is gzip's (0 to 9, None: :data:`GZIP_DEFAULT_LEVEL`); snappy has no levels."""
    codec = Compression.parse(codec)
    if codec is Compression.GZIP:
        return gzip_compress(data, check_compression_level(level))
    if level is not None:
        raise ValueError(f"{codec.name.lower()} has no compression levels (gzip has)")
    if codec is Compression.SNAPPY:
        return snappy_compress(data)
    return bytes(data)


def decompress_buffer(codec: int, data: Any, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> Any:
    """Decompress to a bytes-like object without a final copy (for the decoder), at most
    ``max_size`` bytes."""
    if codec == Compression.GZIP:
        return _gzip_members(data, max_size)
    if codec == Compression.SNAPPY:
        return _snappy_decompress_buffer(data, max_size)
    if codec == Compression.NONE:
        return data
    raise UnknownCodecError(f"unknown compression codec {codec}")


def decompress(
    codec: Compression | int | str, data: Any, max_size: int = DEFAULT_MAX_DECOMPRESSED
) -> bytes:
    """Decompress a payload written with a 0.7 codec into at most ``max_size`` bytes."""
    return bytes(decompress_buffer(Compression.parse(codec), data, max_size))

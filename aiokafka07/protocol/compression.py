"""Compression codecs of Kafka 0.7 (PROTOCOL §8): gzip (1) and xerial-framed snappy (2).

gzip is written exactly as ``java.util.zip.GZIPOutputStream`` writes it (header
``1f 8b 08 00 00000000 00 ff``, raw deflate at zlib's default level 6, CRC32 and ISIZE
trailer), so a set we compress is byte-for-byte what a Java 0.7.2 producer sends for the
same messages. Compressing goes through the standard library's zlib: cramjam's deflate
yields different bytes and is slower (about 42 MB/s against 60 MB/s here). Decompressing
goes through cramjam, which is the faster of the two.

Snappy uses the stream framing of snappy-java 1.0.4.1 (``SnappyOutputStream``): a 16-byte
header, then each 32 KiB chunk of input as ``int32 length`` + one raw snappy block.
Readers fall back to a single raw snappy block when the header is missing, and accept
several complete streams back to back, as newer snappy-java readers do.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import Any

import cramjam

from ..errors import CompressionError, UnknownCodecError

__all__ = [
    "Compression",
    "compress",
    "decompress",
    "gzip_compress",
    "gzip_decompress",
    "snappy_compress",
    "snappy_decompress",
]

_I32 = struct.Struct(">i")
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_GZIP_TRAILER = struct.Struct("<II")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_CHUNK = 32768


class Compression(IntEnum):
    """The codec in the low two bits of a magic-1 message's attributes byte."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2

    @classmethod
    def parse(cls, value: Compression | int | str | None) -> Compression:
        """Accept a member, its number, its name (``"gzip"``, ``"snappy"``, ``"none"``) or None."""
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


def gzip_compress(data: Any) -> bytes:
    """One gzip member, identical to what Java's GZIPOutputStream writes for ``data``."""
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = deflater.compress(data) + deflater.flush()
    trailer = _GZIP_TRAILER.pack(zlib.crc32(data), len(memoryview(data).cast("B")) & 0xFFFFFFFF)
    return b"".join((_GZIP_HEADER, body, trailer))


def _gzip_decompress_buffer(data: Any) -> Any:
    try:
        return cramjam.gzip.decompress(data)
    except Exception as exc:  # cramjam raises its own DecompressionError (or others)
        raise CompressionError(f"corrupt gzip data: {exc}") from exc


def gzip_decompress(data: Any) -> bytes:
    """Decompress a gzip payload (concatenated members are accepted)."""
    return bytes(_gzip_decompress_buffer(data))


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


def _snappy_raw(block: Any) -> Any:
    try:
        return cramjam.snappy.decompress_raw(block)
    except Exception as exc:
        raise CompressionError(f"corrupt snappy block: {exc}") from exc


def _snappy_decompress_buffer(data: Any) -> Any:
    view = memoryview(data).cast("B")
    end = len(view)
    if end < 16 or view[:8] != _XERIAL_MAGIC:
        # No xerial header: snappy-java reads the whole payload as one raw block.
        return _snappy_raw(view)
    (version,) = _I32.unpack_from(view, 8)
    if version < 1:
        raise CompressionError(f"incompatible xerial snappy stream version {version}")
    parts: list[Any] = []
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
        parts.append(_snappy_raw(view[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def snappy_decompress(data: Any) -> bytes:
    """Decompress a xerial-framed (or raw) snappy payload."""
    return bytes(_snappy_decompress_buffer(data))


def compress(codec: Compression | int | str, data: Any) -> bytes:
    """Compress ``data`` with a 0.7 codec (``NONE`` returns it unchanged as bytes)."""
    codec = Compression.parse(codec)
    if codec is Compression.GZIP:
        return gzip_compress(data)
    if codec is Compression.SNAPPY:
        return snappy_compress(data)
    return bytes(data)


def decompress_buffer(codec: int, data: Any) -> Any:
    """Decompress to a bytes-like object without a final copy (for the decoder)."""
    if codec == Compression.GZIP:
        return _gzip_decompress_buffer(data)
    if codec == Compression.SNAPPY:
        return _snappy_decompress_buffer(data)
    if codec == Compression.NONE:
        return data
    raise UnknownCodecError(f"unknown compression codec {codec}")


def decompress(codec: Compression | int | str, data: Any) -> bytes:
    """Decompress a payload written with a 0.7 codec."""
    return bytes(decompress_buffer(Compression.parse(codec), data))

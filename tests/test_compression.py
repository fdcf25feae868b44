"""gzip as Java writes it, xerial-framed snappy (PROTOCOL §8.3-§8.4)."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest

from aiokafka07.errors import CompressionError, UnknownCodecError
from aiokafka07.protocol import (
    Compression,
    compress,
    decompress,
    gzip_compress,
    gzip_decompress,
    snappy_compress,
    snappy_decompress,
)
from aiokafka07.protocol.compression import decompress_buffer

XERIAL_HEADER = bytes.fromhex("82534e41505059000000000100000001")


def test_gzip_is_what_java_writes() -> None:
    data = b"hello kafka " * 100
    out = gzip_compress(data)
    assert out[:10] == bytes.fromhex("1f8b08000000000000ff")
    deflater = zlib.compressobj(6, zlib.DEFLATED, -15)
    assert out[10:-8] == deflater.compress(data) + deflater.flush()
    assert out[-8:] == struct.pack("<II", zlib.crc32(data), len(data))
    assert gzip.decompress(out) == data


def test_gzip_reads_concatenated_members_and_python_gzip() -> None:
    joined = gzip.compress(b"ab", mtime=0) + gzip_compress(b"cd")
    assert gzip_decompress(joined) == b"abcd"


def test_corrupt_gzip_is_a_compression_error() -> None:
    out = gzip_compress(b"x" * 1000)
    for bad in (b"", b"garbage", out[:-4], out[:12]):
        with pytest.raises(CompressionError):
            gzip_decompress(bad)


@pytest.mark.parametrize("size", [0, 1, 32767, 32768, 32769, 65536, (1 << 20) + 17])
def test_snappy_framing_cuts_32k_chunks(size: int) -> None:
    data = bytes((i * 7 + i // 300) & 0xFF for i in range(size))
    out = snappy_compress(data)
    assert out[:16] == XERIAL_HEADER
    pos, chunks = 16, []
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        chunks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(out)
    assert [len(c) for c in chunks] == [min(32768, size - start) for start in range(0, size, 32768)]
    assert b"".join(chunks) == data
    assert snappy_decompress(out) == data


def test_snappy_without_header_is_read_as_one_raw_block() -> None:
    data = b"raw snappy from a third-party client " * 50
    assert snappy_decompress(bytes(cramjam.snappy.compress_raw(data))) == data
    # Also when the raw block happens to be shorter than a header.
    assert snappy_decompress(bytes(cramjam.snappy.compress_raw(b"ab"))) == b"ab"


def test_snappy_reads_streams_appended_back_to_back() -> None:
    assert snappy_decompress(snappy_compress(b"first ") + snappy_compress(b"second")) == (
        b"first second"
    )


def test_snappy_incompatible_version() -> None:
    bad = b"\x82SNAPPY\x00" + struct.pack(">ii", 0, 1) + snappy_compress(b"x")[16:]
    with pytest.raises(CompressionError, match="version"):
        snappy_decompress(bad)


@pytest.mark.parametrize(
    "bad",
    [
        XERIAL_HEADER + b"\x00\x00",  # truncated chunk length
        XERIAL_HEADER + struct.pack(">i", 10) + b"short",  # chunk shorter than its length
        XERIAL_HEADER + struct.pack(">i", -3),  # negative chunk length
        XERIAL_HEADER + struct.pack(">i", 3) + b"\xff\xff\xff",  # corrupt block
        b"\xff\xff\xff\xff\x0f",  # raw block declaring 4 GiB
        b"",
    ],
)
def test_corrupt_snappy_is_a_compression_error(bad: bytes) -> None:
    with pytest.raises(CompressionError):
        snappy_decompress(bad)


def test_codec_parsing() -> None:
    assert Compression.parse(None) is Compression.NONE
    assert Compression.parse("gzip") is Compression.GZIP
    assert Compression.parse(" Snappy ") is Compression.SNAPPY
    assert Compression.parse("2") is Compression.SNAPPY
    assert Compression.parse(1) is Compression.GZIP
    with pytest.raises(ValueError, match="lz4"):
        Compression.parse("lz4")
    with pytest.raises(ValueError, match="3"):
        Compression.parse(3)


def test_generic_compress_roundtrip() -> None:
    for codec in Compression:
        assert decompress(codec, compress(codec, b"payload" * 10)) == b"payload" * 10
    with pytest.raises(UnknownCodecError):
        decompress_buffer(3, b"x")

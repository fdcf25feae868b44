"""gzip as Java writes and reads it, xerial-framed snappy (PROTOCOL §8.3-§8.4), and the
bound on what decompression may produce."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import random
import struct
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import cramjam
import pytest

from aiokafka07.errors import CompressionError, UnknownCodecError
from aiokafka07.protocol import (
    Compression,
    _pure,
    compress,
    decode_message_set,
    decompress,
    encode_message_set,
    gzip_compress,
    gzip_decompress,
    snappy_compress,
    snappy_decompress,
)
from aiokafka07.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    INFLATE_STEP,
    decompress_buffer,
)

XERIAL_HEADER = bytes.fromhex("82534e41505059000000000100000001")
JAVA_ANSWERS = Path(__file__).parent / "data" / "gzip-java" / "java17-answers.txt.gz"


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
        with pytest.raises(CompressionError) as info:
            gzip_decompress(bad)
        assert info.value.limit is None  # corrupt, not over the bound


def _java_answers() -> list[tuple[bytes, str]]:
    with gzip.open(JAVA_ANSWERS, "rt") as lines:
        rows = [line.rstrip("\n").split(" ") for line in lines]
    return [(bytes.fromhex(case), answer) for case, answer in rows]


def test_gzip_accepts_exactly_what_java_accepts() -> None:
    """Every payload of tests/data/gzip-java: output (or error) as Java 17's
    GZIPInputStream read by 0.7.2 gives it, trailing bytes and members included."""
    answers = _java_answers()
    assert len(answers) == 1639
    kinds = {answer.partition(":")[0] for _, answer in answers}
    assert kinds == {"ok", "error"}
    for case, answer in answers:
        try:
            got = "ok:" + hashlib.sha256(gzip_decompress(case)).hexdigest()[:32]
        except CompressionError:
            got = "error"
        assert got == (answer if answer.startswith("ok:") else "error"), case.hex()


def test_gzip_trailing_bytes_as_java_reads_them() -> None:
    """The rule behind the answers: after a member, Java reads on only if more than 26
    bytes were left in its 512-byte buffer and they start a well-formed header."""
    one, two = gzip_compress(b"one"), gzip_compress(b"two")
    assert gzip_decompress(one + bytes(100)) == b"one"  # zeros after a member
    assert gzip_decompress(one + b"trailing garbage, any length") == b"one"
    assert gzip_decompress(one + two + b"\x1f\x8b") == b"onetwo"  # a broken header
    # A well-formed header commits Java to a member, which must then be whole.
    with pytest.raises(CompressionError):
        gzip_decompress(one + two[:-8] + bytes(30))  # its trailer: zeros
    # A member whose deflate data ends within 26 bytes of the end of one of Java's
    # 512-byte reads (which start after the first header, at 10) ends the stream: Java
    # never looks at what follows, even a whole member. Python's gzip reads on.
    rng = random.Random(7)
    for size in range(900, 1200):
        data = rng.randbytes(size)  # incompressible: stored, so the length moves by 1
        first = gzip_compress(data)
        deflate_end = len(first) - 8
        left = 10 + 512 * -(-(deflate_end - 10) // 512) - deflate_end
        if 8 < left <= 26:
            break
    else:
        raise AssertionError("no size puts the end of the deflate data there")
    assert gzip_decompress(first + two) == data
    assert gzip.decompress(first + two) == data + b"two"


def test_gzip_output_is_bounded() -> None:
    data = bytes(5 * INFLATE_STEP + 123)
    bomb = gzip_compress(data)
    assert len(bomb) < len(data) // 500
    assert gzip_decompress(bomb, max_size=len(data)) == data
    with pytest.raises(CompressionError, match=str(len(data) - 1)) as info:
        gzip_decompress(bomb, max_size=len(data) - 1)
    assert info.value.limit == len(data) - 1
    # The bound counts every member of a payload together.
    with pytest.raises(CompressionError):
        gzip_decompress(gzip_compress(b"a" * 600) + gzip_compress(b"b" * 600), max_size=1000)
    assert gzip_decompress(gzip_compress(b""), max_size=0) == b""
    assert DEFAULT_MAX_DECOMPRESSED == 64 << 20


def _peak(call: Callable[[], object]) -> int:
    """The most bytes held at once (traced allocations, the C accelerator's too) during
    ``call``, which may raise CompressionError."""
    tracemalloc.start()
    try:
        with contextlib.suppress(CompressionError):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_gzip_output_stays_within_the_bound_while_it_grows(impl: ModuleType) -> None:
    """A bomb against a bound: what is held never passes the bound (plus the input),
    however the output grows toward it: the C inflater grows one buffer up to the bound;
    the pure twin's pieces and the buffer they are joined into may hold it twice."""
    bound = 3 << 20
    bomb = gzip_compress(bytes(64 << 20))
    times = 1 if impl is not _pure else 2
    peak = _peak(lambda: gzip_decompress(bomb, max_size=bound))
    assert peak < times * bound + len(bomb) + (256 << 10)


def test_gzip_trailer_size_is_only_a_hint(impl: ModuleType) -> None:
    """The size a member's trailer declares sizes the first allocation, no more than what
    the compressed bytes can expand to (about 1032:1) and never past the bound; an output
    larger than a declared size grows to its true size."""
    member = gzip_compress(b"x" * 1000)
    lying = member[:-4] + struct.pack("<I", 0xFFFFFFFF)
    with pytest.raises(CompressionError, match="trailer"):
        gzip_decompress(lying, max_size=1 << 30)
    assert _peak(lambda: gzip_decompress(lying, max_size=1 << 30)) < len(lying) * 1032 + 65536
    # The last member declares 10 bytes; the first holds 200,000.
    two = gzip_compress(b"a" * 200_000) + gzip_compress(b"b" * 10)
    assert gzip_decompress(two) == b"a" * 200_000 + b"b" * 10
    # The declared size is the bound's (exactly fits), then one byte less.
    data = random.Random(5).randbytes(70_000)
    assert gzip_decompress(gzip_compress(data), max_size=70_000) == data
    with pytest.raises(CompressionError) as over:
        gzip_decompress(gzip_compress(data), max_size=69_999)
    assert over.value.limit == 69_999


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


def test_snappy_declared_length_is_checked_before_allocating() -> None:
    """The 22-byte message set that made cramjam allocate 3.3 GiB: its raw block declares
    3,572,681,096 bytes, refused against the bound before any allocation."""
    block = bytes.fromhex("8893cba70d8c61af91886776")
    with pytest.raises(CompressionError, match="67108864") as info:
        snappy_decompress(block)
    assert info.value.limit == DEFAULT_MAX_DECOMPRESSED
    data = b"snappy " * 1000
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert snappy_decompress(raw, max_size=len(data)) == data
    with pytest.raises(CompressionError):
        snappy_decompress(raw, max_size=len(data) - 1)
    # Across xerial chunks the declared lengths add up.
    framed = snappy_compress(bytes(100_000))
    assert snappy_decompress(framed, max_size=100_000) == bytes(100_000)
    with pytest.raises(CompressionError) as over:
        snappy_decompress(framed, max_size=99_999)
    assert over.value.limit == 99_999


@pytest.mark.parametrize(
    "header",
    [b"", b"\x80", b"\xff\xff\xff\xff\x7f", b"\x80\x80\x80\x80\x80\x01"],
    ids=["empty", "cut", "over-32-bits", "six-bytes"],
)
def test_bad_snappy_length_headers_are_corrupt(header: bytes) -> None:
    with pytest.raises(CompressionError) as info:
        snappy_decompress(header + b"data")
    assert info.value.limit is None


def test_bounds_must_be_non_negative_ints() -> None:
    for decompress_ in (gzip_decompress, snappy_decompress):
        with pytest.raises(ValueError, match="bound"):
            decompress_(b"x", max_size=-1)


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
    for codec in (Compression.GZIP, Compression.SNAPPY):
        with pytest.raises(CompressionError):
            decompress(codec, compress(codec, b"payload" * 10), max_size=69)
    with pytest.raises(UnknownCodecError):
        decompress_buffer(3, b"x")


def test_gzip_level_is_zlibs_and_6_is_javas() -> None:
    """Every level writes one member 0.7.2 reads; the default is level 6, byte for byte
    what Java's GZIPOutputStream writes; a level changes the deflate data only."""
    data = b"hello kafka, hello level " * 400
    assert gzip_compress(data) == gzip_compress(data, 6) == compress("gzip", data, level=None)
    sizes = {}
    for level in range(10):
        out = compress("gzip", data, level=level)
        deflater = zlib.compressobj(level, zlib.DEFLATED, -15)
        assert out[10:-8] == deflater.compress(data) + deflater.flush()
        assert out[:10] == gzip_compress(data)[:10]
        assert gzip_decompress(out) == data
        sizes[level] = len(out)
    assert sizes[0] > sizes[1] > sizes[9]


@pytest.mark.parametrize("level", [-1, 10, True, 1.0, "1"])
def test_gzip_level_out_of_range_is_refused(level: object) -> None:
    with pytest.raises(ValueError, match="0 to 9"):
        gzip_compress(b"x", level)  # type: ignore[arg-type]


def test_a_level_with_another_codec_is_refused() -> None:
    with pytest.raises(ValueError, match="snappy has no compression levels"):
        compress("snappy", b"x", level=1)
    with pytest.raises(ValueError, match="needs gzip"):
        encode_message_set([b"x"], compression_level=1)
    wrapper = encode_message_set([b"x" * 500], compression="gzip", compression_level=1)
    (message,) = decode_message_set(wrapper, shallow=True).messages
    inner = encode_message_set([b"x" * 500])
    assert message.value == gzip_compress(inner, 1) != gzip_compress(inner)

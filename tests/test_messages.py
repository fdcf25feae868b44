"""Messages and message sets (PROTOCOL §6-§8): validation, offsets, wrappers."""

from __future__ import annotations

import struct
import zlib
from types import ModuleType
from typing import NamedTuple

import pytest

from aiokafka07.errors import (
    CompressionError,
    InvalidMessageError,
    InvalidMessageSizeError,
    KafkaError,
    ProtocolError,
    UnknownCodecError,
    UnknownMagicError,
)
from aiokafka07.protocol import (
    Compression,
    Message,
    crc32,
    decode_message_set,
    decode_messages_into,
    encode_message_set,
    encode_wrapper,
    entry_size,
    gzip_compress,
)
from aiokafka07.protocol.messages import (
    MAX_WRAPPER_DEPTH,
    SetSummary,
    count_messages,
    summarize_message_set,
)


def raw_entry(
    payload: bytes, *, magic: int = 1, attributes: int = 0, crc: int | None = None
) -> bytes:
    """An entry built by hand, independently of the encoder under test."""
    crc = zlib.crc32(payload) if crc is None else crc
    if magic == 0:
        body = struct.pack(">BI", 0, crc) + payload
    else:
        body = struct.pack(">BBI", magic, attributes, crc) + payload
    return struct.pack(">i", len(body)) + body


def test_magic1_entry_layout(impl: ModuleType) -> None:
    assert encode_message_set([b"hello"]) == bytes.fromhex("0000000b01003610a68668656c6c6f")
    assert encode_message_set([b"hello", b""]) == raw_entry(b"hello") + raw_entry(b"")


def test_magic0_entry_layout(impl: ModuleType) -> None:
    assert encode_message_set([b"m0-a"], magic=0) == bytes.fromhex("0000000900d6fc1e736d302d61")


def test_encoder_accepts_any_bytes_like_and_iterables(impl: ModuleType) -> None:
    expected = raw_entry(b"ab") + raw_entry(b"cd") + raw_entry(b"ef")
    got = encode_message_set(iter([b"ab", bytearray(b"cd"), memoryview(b"xefx")[1:3]]))
    assert got == expected


def test_encoder_rejects_non_bytes(impl: ModuleType) -> None:
    with pytest.raises(TypeError):
        encode_message_set(["text"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="magic"):
        encode_message_set([b"x"], magic=2)


def test_offsets_are_next_offsets(impl: ModuleType) -> None:
    data = encode_message_set([b"a", b"bb", b"ccc"])
    decoded = decode_message_set(data, base_offset=1000)
    assert decoded.messages == [
        Message(1000 + 11, b"a", 1, 0),
        Message(1000 + 11 + 12, b"bb", 1, 0),
        Message(1000 + 11 + 12 + 13, b"ccc", 1, 0),
    ]
    assert decoded.valid_bytes == len(data)


def test_empty_and_tiny_buffers_are_empty_sets(impl: ModuleType) -> None:
    for data in (b"", b"\x00", b"\x00\x00\x00"):
        assert decode_message_set(data) == ([], 0)


def test_partial_tail_is_dropped_at_every_cut(impl: ModuleType) -> None:
    first = raw_entry(b"first")
    second = raw_entry(b"second message")
    for cut in range(len(second)):
        decoded = decode_message_set(first + second[:cut])
        assert [m.value for m in decoded.messages] == [b"first"]
        assert decoded.valid_bytes == len(first)


def test_partial_first_entry_is_an_error_with_the_size_needed(impl: ModuleType) -> None:
    entry = raw_entry(b"x" * 100)
    for cut in range(4, len(entry)):
        with pytest.raises(InvalidMessageSizeError) as info:
            decode_message_set(entry[:cut])
        assert info.value.size == 106
        assert info.value.available == cut - 4
        assert info.value.position == 0
        assert info.value.code == 4


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        (struct.pack(">i", -1) + b"\x01\x00", InvalidMessageSizeError),
        (struct.pack(">i", 0), InvalidMessageSizeError),
        (struct.pack(">i", 4) + b"\x00\x00\x00\x00", InvalidMessageSizeError),  # magic 0, N<5
        (struct.pack(">i", 5) + b"\x01\x00\x00\x00\x00", InvalidMessageSizeError),  # magic 1, N<6
        (raw_entry(b"x", magic=2), UnknownMagicError),
        (raw_entry(b"x", crc=0xDEADBEEF), InvalidMessageError),
        (raw_entry(b"x", attributes=3), UnknownCodecError),
    ],
)
def test_bad_entries_raise_typed_errors_with_position(
    impl: ModuleType, entry: bytes, error: type[ProtocolError]
) -> None:
    good = raw_entry(b"good")
    with pytest.raises(error) as info:
        decode_message_set(good + entry, base_offset=500)
    assert isinstance(info.value, KafkaError)
    assert info.value.position == len(good)
    assert str(len(good)) in str(info.value)
    # The messages before the bad entry are not lost.
    assert info.value.decoded.messages == [Message(500 + len(good), b"good", 1, 0)]
    assert info.value.decoded.valid_bytes == len(good)


def test_attribute_bits_above_the_codec_are_ignored(impl: ModuleType) -> None:
    decoded = decode_message_set(raw_entry(b"x", attributes=0xFC))
    assert decoded.messages == [Message(11, b"x", 1, 0xFC)]
    assert decoded.messages[0].compression is Compression.NONE


def test_crc_does_not_cover_the_attributes(impl: ModuleType) -> None:
    data = bytearray(encode_message_set([b"x"]))
    data[5] |= 0x10
    assert decode_message_set(bytes(data)).messages[0].attributes == 0x10


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY])
def test_wrapper_offsets_follow_0_7_2(impl: ModuleType, codec: Compression) -> None:
    plain = encode_message_set([b"p0"])
    wrapper = encode_message_set([b"a", b"b", b"c"], compression=codec)
    data = plain + wrapper + plain
    start, end = len(plain), len(plain) + len(wrapper)
    decoded = decode_message_set(data, base_offset=100)
    assert [(m.offset, m.value) for m in decoded.messages] == [
        (100 + start, b"p0"),
        (100 + start, b"a"),
        (100 + start, b"b"),
        (100 + end, b"c"),
        (100 + end + len(plain), b"p0"),
    ]
    assert decoded.valid_bytes == len(data)


def test_single_message_wrapper_reports_its_end(impl: ModuleType) -> None:
    wrapper = encode_message_set([b"only"], compression="gzip")
    assert decode_message_set(wrapper).messages == [Message(len(wrapper), b"only", 1, 0)]


def test_empty_wrapper_yields_nothing(impl: ModuleType) -> None:
    empty = encode_wrapper(Compression.GZIP, b"")
    tail = encode_message_set([b"after"])
    decoded = decode_message_set(empty + tail)
    assert decoded.messages == [Message(len(empty) + len(tail), b"after", 1, 0)]
    assert encode_message_set([], compression="snappy") == b""


def test_nested_wrappers_expand_with_outer_offsets(impl: ModuleType) -> None:
    inner = encode_message_set([b"x", b"y"], compression="snappy")
    outer = encode_wrapper("gzip", encode_message_set([b"w"]) + inner + encode_message_set([b"z"]))
    decoded = decode_message_set(outer, base_offset=7)
    assert [(m.offset, m.value) for m in decoded.messages] == [
        (7, b"w"),
        (7, b"x"),
        (7, b"y"),
        (7 + len(outer), b"z"),
    ]


def test_wrapper_nesting_is_bounded(impl: ModuleType) -> None:
    data = encode_message_set([b"core"])
    for _ in range(MAX_WRAPPER_DEPTH + 1):
        data = encode_wrapper("gzip", data)
    with pytest.raises(CompressionError, match="nested"):
        decode_message_set(data)


def test_shallow_mode_keeps_wrappers(impl: ModuleType) -> None:
    wrapper = encode_message_set([b"a", b"b"], compression="gzip")
    (msg,) = decode_message_set(wrapper, base_offset=10, shallow=True).messages
    assert msg.offset == 10 + len(wrapper)
    assert msg.compression is Compression.GZIP
    assert encode_wrapper(msg.compression, encode_message_set([b"a", b"b"])) == wrapper


def test_corrupt_inner_data_is_reported_at_the_wrapper(impl: ModuleType) -> None:
    good = encode_message_set([b"ok"])
    inner = raw_entry(b"a") + raw_entry(b"b", crc=1)
    bad_inner_crc = encode_wrapper("gzip", inner)
    with pytest.raises(InvalidMessageError, match="wrapper at position 12") as info:
        decode_message_set(good + bad_inner_crc)
    assert info.value.position == len(good)
    assert info.value.decoded.messages == [Message(len(good), b"ok", 1, 0)]

    garbage = raw_entry(b"not gzip at all", attributes=1)
    with pytest.raises(CompressionError):
        decode_message_set(garbage)


def test_inner_set_with_partial_first_entry_is_an_error(impl: ModuleType) -> None:
    """Corrupt data, never "the fetch is too small": ``available`` is None, so no
    consumer grows its fetch size for it (the issue's 41,079 fetches in 10 s)."""
    wrapper = raw_entry(gzip_compress(raw_entry(b"abc")[:-1]), attributes=1)
    for data in (wrapper, encode_message_set([b"before"]) + wrapper):
        with pytest.raises(InvalidMessageSizeError, match="compressed message set") as info:
            decode_message_set(data)
        assert info.value.available is None
        assert info.value.position == len(data) - len(wrapper)
    with pytest.raises(InvalidMessageSizeError) as counted:
        count_messages(wrapper)
    assert counted.value.available is None


def test_inner_set_partial_tail_is_dropped(impl: ModuleType) -> None:
    inner = raw_entry(b"abc") + raw_entry(b"def")[:-2]
    wrapper = raw_entry(gzip_compress(inner), attributes=1)
    assert decode_message_set(wrapper).messages == [Message(len(wrapper), b"abc", 1, 0)]


def test_accepts_bytearray_and_memoryview(impl: ModuleType) -> None:
    data = encode_message_set([b"a", b"b"]) + b"\x00\x00"
    expected = decode_message_set(data)
    assert decode_message_set(bytearray(data)) == expected
    assert decode_message_set(memoryview(b"xx" + data)[2:]) == expected


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    value: bytes
    magic: int
    attributes: int


def test_decode_into_custom_records_with_prefix(impl: ModuleType) -> None:
    data = encode_message_set([b"a"]) + encode_message_set([b"b", b"c"], compression="gzip")
    out: list[Record] = []
    valid = decode_messages_into(out, data, 50, message_type=Record, prefix=("t", 3))
    assert valid == len(data)
    assert out == [
        Record("t", 3, 61, b"a", 1, 0),
        Record("t", 3, 61, b"b", 1, 0),
        Record("t", 3, 50 + len(data), b"c", 1, 0),
    ]
    assert all(type(r) is Record for r in out)


def test_base_offset_must_fit_int64(impl: ModuleType) -> None:
    data = encode_message_set([b"a"])
    top = (1 << 63) - 1 - len(data)
    assert decode_message_set(data, top).messages[0].offset == (1 << 63) - 1
    with pytest.raises(ValueError, match="int64"):
        decode_message_set(data, top + 1)


def test_crc32_matches_zlib(impl: ModuleType) -> None:
    for n in (0, 1, 7, 8, 9, 63, 64, 65, 1000):
        data = bytes(range(256)) * 4
        assert crc32(data[:n]) == zlib.crc32(data[:n])
        assert crc32(memoryview(data)[3 : 3 + n]) == zlib.crc32(data[3 : 3 + n])


def test_entry_size() -> None:
    assert entry_size(100) == 110
    assert entry_size(100, magic=0) == 109
    assert len(encode_message_set([b"x" * 100])) == entry_size(100)


# -- the bound on decompressed bytes --------------------------------------------------------


def test_22_bytes_declaring_3_gib_are_a_typed_error(impl: ModuleType) -> None:
    """The issue's input: one snappy wrapper whose raw block declares 3,572,681,096 bytes."""
    data = bytes.fromhex("000000120102c11df6288893cba70d8c61af91886776")
    for run in (decode_message_set, count_messages):
        with pytest.raises(CompressionError) as info:
            run(data)
        assert info.value.limit == 64 << 20
        assert info.value.position == 0


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY])
def test_the_bound_counts_every_wrapper_of_a_set(impl: ModuleType, codec: Compression) -> None:
    inner = encode_message_set([b"v" * 1000])  # 1010 bytes decompressed
    wrapper = encode_wrapper(codec, inner)
    assert decode_message_set(wrapper, max_decompressed=len(inner)).messages
    # The first entry over the bound: a typed error naming the bound.
    with pytest.raises(CompressionError, match=str(len(inner) - 1)) as info:
        decode_message_set(wrapper, max_decompressed=len(inner) - 1)
    assert info.value.limit == len(inner) - 1
    assert info.value.decoded.messages == []
    # A later wrapper over what is left: decoding stops in front of it, like at a
    # partial tail, so a consumer fetches again from there with the whole bound.
    plain = encode_message_set([b"p"])
    data = plain + wrapper + wrapper + plain
    decoded = decode_message_set(data, max_decompressed=len(inner) * 2 - 1)
    assert [m.value for m in decoded.messages] == [b"p", b"v" * 1000]
    assert decoded.valid_bytes == len(plain + wrapper)
    rest = decode_message_set(data[decoded.valid_bytes :], max_decompressed=len(inner) * 2 - 1)
    assert [m.value for m in rest.messages] == [b"v" * 1000, b"p"]
    # Counting (the broker's check) refuses the whole set instead.
    assert count_messages(data, max_decompressed=len(inner) * 2) == 4
    with pytest.raises(CompressionError):
        count_messages(data, max_decompressed=len(inner) * 2 - 1)


def test_nested_wrappers_share_the_bound(impl: ModuleType) -> None:
    """A wrapper of wrappers cannot multiply the bound: inner output counts too."""
    leaf = encode_message_set([bytes(10_000)], compression="gzip")  # ~60 bytes
    outer = encode_wrapper("gzip", leaf * 50)  # 50 x 10 KB inside ~3 KB
    total = len(leaf) * 50 + 50 * entry_size(10_000)
    assert len(decode_message_set(outer, max_decompressed=total).messages) == 50
    assert count_messages(outer, max_decompressed=total) == 50
    for run in (decode_message_set, count_messages):
        with pytest.raises(CompressionError) as info:
            run(outer, max_decompressed=total - 1)
        assert info.value.limit == total - 1


def test_the_bound_must_be_a_non_negative_int(impl: ModuleType) -> None:
    with pytest.raises(ValueError, match="max_decompressed"):
        decode_message_set(b"", max_decompressed=-1)


def test_summary_checks_the_top_level_without_decoding(impl: ModuleType) -> None:
    wrapper = encode_message_set([b"a", b"bb"], compression="snappy")
    data = encode_message_set([b"x" * 50, b"y"]) + wrapper + encode_message_set([b"z"])[:-1]
    assert summarize_message_set(data) == SetSummary(
        valid_bytes=len(data) - entry_size(1) + 1,
        messages=3,
        wrappers=1,
        largest_payload=max(50, len(wrapper) - 10),
    )
    assert count_messages(data) == 4
    assert summarize_message_set(b"") == SetSummary(0, 0, 0, 0)
    with pytest.raises(InvalidMessageError) as info:
        summarize_message_set(encode_message_set([b"ok"]) + raw_entry(b"x", crc=1))
    assert info.value.position == entry_size(2)
    with pytest.raises(InvalidMessageSizeError) as partial:
        summarize_message_set(raw_entry(b"abc")[:-1])
    assert partial.value.available == 8

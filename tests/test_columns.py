"""Message sets decoded into column buffers (aiokafka07.protocol.columns): the same
messages, offsets, errors and valid byte counts as the record decoder, on both codec
implementations, for valid sets and for corrupt ones."""

from __future__ import annotations

import random
import struct
import zlib
from types import ModuleType
from typing import Any

import pytest

from aiokafka07.errors import CompressionError, InvalidMessageError, ProtocolError
from aiokafka07.protocol import decode_message_set, encode_message_set, encode_wrapper
from aiokafka07.protocol.columns import MessageColumns, decode_columns_into


def rows(columns: MessageColumns) -> list[tuple[int, bytes]]:
    """(offset, value) per message, read from the buffers as Arrow would read them."""
    n = len(columns)
    offsets = struct.unpack(f"={n}q", columns.offsets)
    ends = struct.unpack(f"={n + 1}i", columns.value_ends)
    assert ends[0] == 0
    assert ends[-1] == len(columns.values)
    return [(offsets[i], bytes(columns.values[ends[i] : ends[i + 1]])) for i in range(n)]


def outcome(decode: Any) -> tuple[list[tuple[int, bytes]], int, Any]:
    """(messages, valid bytes, error) of one decode, whichever form it has."""
    try:
        found, valid = decode()
    except ProtocolError as exc:
        if exc.decoded is None:
            raise
        decoded = exc.decoded.messages
        if isinstance(decoded, MessageColumns):
            found = rows(decoded)
        else:
            found = [(m.offset, m.value) for m in decoded]
        return found, exc.decoded.valid_bytes, (type(exc), str(exc), exc.position)
    return found, valid, None


def both(data: bytes, base: int) -> tuple[Any, Any]:
    def records() -> tuple[list[tuple[int, bytes]], int]:
        decoded = decode_message_set(data, base)
        return [(m.offset, m.value) for m in decoded.messages], decoded.valid_bytes

    def columnar() -> tuple[list[tuple[int, bytes]], int]:
        columns = MessageColumns()
        valid = decode_columns_into(columns, data, base)
        return rows(columns), valid

    return outcome(records), outcome(columnar)


def entry(payload: bytes, *, magic: int = 1, attributes: int = 0, crc: int | None = None) -> bytes:
    crc = zlib.crc32(payload) if crc is None else crc
    head = struct.pack(">BI", 0, crc) if magic == 0 else struct.pack(">BBI", 1, attributes, crc)
    return struct.pack(">i", len(head) + len(payload)) + head + payload


def corpus(seed: int, count: int) -> list[bytes]:
    """Sets of plain (magic 0 and 1, empty payloads too), gzip, snappy and nested
    entries; half of them corrupted by overwritten bytes or a cut."""
    rng = random.Random(seed)
    sets = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randrange(1, 6)):
            payloads = [rng.randbytes(rng.randrange(0, 40)) for _ in range(rng.randrange(0, 6))]
            kind = rng.choice(["magic0", "magic1", "gzip", "snappy", "nested"])
            if kind == "magic0":
                parts.append(encode_message_set(payloads, magic=0))
            elif kind == "magic1":
                parts.append(encode_message_set(payloads))
            elif kind == "nested":
                inner = encode_message_set(payloads, compression="snappy")
                parts.append(encode_wrapper("gzip", encode_message_set([b"n"]) + inner))
            else:
                parts.append(encode_message_set(payloads, compression=kind))
        data = bytearray(b"".join(parts))
        if data and rng.random() < 0.5:
            for _ in range(rng.randrange(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        if data and rng.random() < 0.3:
            del data[rng.randrange(len(data)) :]
        sets.append(bytes(data))
    return sets


def test_columns_hold_what_the_record_decoder_gives(impl: ModuleType) -> None:
    kinds = {"values": 0, "errors": 0}
    for i, data in enumerate(corpus(21, 600)):
        records, columnar = both(data, 1000 * i)
        assert columnar == records, data.hex()
        kinds["errors" if records[2] else "values"] += 1
    assert kinds["values"] > 100  # both kinds were compared
    assert kinds["errors"] > 100


def test_wrapper_offsets_and_empty_payloads(impl: ModuleType) -> None:
    plain = entry(b"") + entry(b"", magic=0) + entry(b"x", magic=0)
    wrapper = encode_message_set([b"a", b"", b"c"], compression="gzip")
    data = plain + wrapper + plain
    columns = MessageColumns()
    assert decode_columns_into(columns, data, 100) == len(data)
    start, end = 100 + len(plain), 100 + len(plain) + len(wrapper)
    assert len(plain) == 10 + 9 + 10
    assert rows(columns) == [
        (100 + 10, b""),
        (100 + 19, b""),
        (start, b"x"),
        (start, b"a"),
        (start, b""),
        (end, b"c"),
        (end + 10, b""),
        (end + 19, b""),
        (end + len(plain), b"x"),
    ]


def test_decoding_appends_to_the_columns(impl: ModuleType) -> None:
    columns = MessageColumns()
    first = encode_message_set([b"one", b"two"])
    second = encode_message_set([b"three"], compression="snappy")
    decode_columns_into(columns, first, 0)
    decode_columns_into(columns, second, len(first))
    assert rows(columns) == [
        (len(first) // 2, b"one"),
        (len(first), b"two"),
        (len(first) + len(second), b"three"),
    ]


def test_a_bad_wrapper_leaves_the_messages_before_it(impl: ModuleType) -> None:
    good = encode_message_set([b"ok", b"fine"])
    bad = encode_wrapper("gzip", entry(b"a") + entry(b"b", crc=1))
    columns = MessageColumns()
    with pytest.raises(InvalidMessageError, match="wrapper") as info:
        decode_columns_into(columns, good + bad, 0)
    assert info.value.decoded is not None
    assert info.value.decoded.messages is columns
    assert rows(columns) == [(12, b"ok"), (len(good), b"fine")]


def test_the_decompression_bound_holds(impl: ModuleType) -> None:
    data = encode_message_set([b"z" * 10_000], compression="gzip")
    with pytest.raises(CompressionError) as info:
        decode_columns_into(MessageColumns(), data, 0, max_decompressed=1000)
    assert info.value.limit == 1000


def test_buffers_that_do_not_fit_together_are_refused(impl: ModuleType) -> None:
    data = encode_message_set([b"a"])
    scan = impl.scan_columns
    with pytest.raises(ValueError, match="one int32 more"):
        scan(data, 0, 0, None, bytearray(), bytearray(), bytearray())
    with pytest.raises(ValueError, match="one int32 more"):
        scan(data, 0, 0, None, bytearray(8), bytearray(4), bytearray())
    with pytest.raises(TypeError):
        scan(data, 0, 0, None, b"", bytearray(4), bytearray())
    with pytest.raises(ValueError, match="outside"):
        scan(data, len(data) + 1, 0, None, bytearray(), bytearray(4), bytearray())
    columns = MessageColumns()
    with pytest.raises(ValueError, match="shallow"):
        columns.scan(data, 0, 0, None, True)


@pytest.mark.parametrize("held", ["offsets", "value_ends", "values"])
def test_columns_held_by_a_view_are_not_resized(impl: ModuleType, held: str) -> None:
    """Arrow holds the buffers through views; decoding into them then fails loudly
    rather than move the memory under the view, and leaves the columns as they were."""
    columns = MessageColumns()
    decode_columns_into(columns, encode_message_set([b"a"]), 0)
    view = memoryview(getattr(columns, held))
    with pytest.raises(BufferError):
        decode_columns_into(columns, encode_message_set([b"b"]), 0)
    view.release()
    assert rows(columns) == [(11, b"a")]
    decode_columns_into(columns, encode_message_set([b"c"]), 11)
    assert rows(columns) == [(11, b"a"), (22, b"c")]

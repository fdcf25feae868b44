"""The ``kafka07`` source's planning arithmetic on real encoded message sets (no Spark JVM):
``offset_seq``, message boundaries from a few bytes, cuts inside segments, user schemas."""

from __future__ import annotations

import array
import asyncio
import itertools
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow")

from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from aiokafka07.protocol import Compression, _accel, decode_messages_into, encode_message_set
from aiokafka07.records import ConsumerRecord
from aiokafka07.spark.boundaries import (
    MAX_FETCHES,
    Fetch,
    check_boundary,
    cut_after,
    first_entry,
    resync,
)
from aiokafka07.spark.options import OptionError
from aiokafka07.spark.planning import split_range, wanted_cuts
from aiokafka07.spark.reader import SCHEMA_DDL, columns_for

MAX_ENTRY = 64 << 20

# A log as top-level entries: (codec, payloads); a plain entry holds one payload.
payload = st.binary(min_size=0, max_size=60)
entries = st.lists(
    st.one_of(
        st.tuples(st.just(Compression.NONE), st.lists(payload, min_size=1, max_size=1)),
        st.tuples(
            st.sampled_from([Compression.GZIP, Compression.SNAPPY]),
            st.lists(payload, min_size=1, max_size=6),
        ),
    ),
    min_size=1,
    max_size=12,
)


def build(log: list[tuple[Compression, list[bytes]]]) -> tuple[bytes, list[int], list[int]]:
    """The log's bytes, its entry boundaries, and each message's expected ``offset_seq``
    (0 when it ends its entry, else its index in the wrapper plus one)."""
    data = b""
    boundaries = [0]
    expected: list[int] = []
    for codec, payloads in log:
        data += encode_message_set(payloads, compression=codec)
        boundaries.append(len(data))
        expected += [i + 1 for i in range(len(payloads) - 1)] + [0]
    return data, boundaries, expected


def decode(data: bytes, base: int) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    decode_messages_into(out, data, base, message_type=ConsumerRecord, prefix=("t", 0, 0))
    return out


def seqs(records: list[ConsumerRecord], fetched_at: int) -> list[int]:
    """The reader's ``offset_seq`` column (the codec's, as a RecordBatch's)."""
    offsets = array.array("q", [r.offset for r in records])
    return list(array.array("i", _accel.impl.offset_seq(bytearray(offsets), fetched_at)))


@given(entries, st.data())
def test_offset_seq_makes_rows_unique_ordered_and_independent_of_where_a_read_starts(
    log: list[tuple[Compression, list[bytes]]], data: st.DataObject
) -> None:
    raw, boundaries, expected = build(log)
    records = decode(raw, 0)
    seq = seqs(records, 0)
    assert seq == expected
    keys = [(r.offset, s) for r, s in zip(records, seq, strict=True)]
    assert keys == sorted(keys)  # log order
    assert len(set(keys)) == len(keys)  # unique
    # Read as several fetches, each from an entry boundary (ranges, micro-batches,
    # fetch sizes): every message gets the same (offset, offset_seq).
    cuts = sorted(data.draw(st.sets(st.sampled_from(boundaries))) | {0, len(raw)})
    pieces = []
    for low, high in itertools.pairwise(cuts):
        part = decode(raw[low:high], low)
        pieces += [(r.offset, s) for r, s in zip(part, seqs(part, low), strict=True)]
    assert pieces == keys


def test_offset_seq_of_an_uncompressed_message_before_a_wrapper() -> None:
    """The case a wrapper index alone gets wrong: the message before a wrapper at S
    reports S, as do the wrapper's messages but its last."""
    raw, _, _ = build([(Compression.NONE, [b"a"]), (Compression.GZIP, [b"b", b"c", b"d"])])
    records = decode(raw, 0)
    s = records[0].offset
    assert [r.offset for r in records] == [s, s, s, len(raw)]
    assert seqs(records, 0) == [0, 1, 2, 0]
    assert seqs(records[1:], s) == [1, 2, 0]  # a read that starts at the wrapper


@given(entries)
def test_first_entry_accepts_every_boundary(log: list[tuple[Compression, list[bytes]]]) -> None:
    raw, boundaries, _ = build(log)
    for b in boundaries[:-1]:
        assert first_entry(raw[b:], MAX_ENTRY).ok
        size = boundaries[boundaries.index(b) + 1] - b
        assert first_entry(raw[b : b + size - 1], MAX_ENTRY).need == size  # fetch more


@given(entries, st.data())
def test_resync_finds_a_chain_of_valid_entries_from_inside_a_message(
    log: list[tuple[Compression, list[bytes]]], data: st.DataObject
) -> None:
    raw, boundaries, _ = build(log)
    position = data.draw(st.integers(0, len(raw) - 1))
    found = resync(raw[position:], MAX_ENTRY)
    if position in boundaries:
        assert found.position == 0
    if found.position is not None:
        # Whole valid entries from there on: from a boundary, or from valid messages
        # carried inside an entry (snappy keeps incompressible data verbatim).
        ends = [position + end for end in found.ends]
        assert ends == sorted(ends)
        assert all(position + found.position < end <= len(raw) for end in ends)


def in_memory(raw: bytes, fetched: list[int]) -> Fetch:
    """A log held in bytes, fetched like a broker serves one segment."""

    async def fetch(offset: int, size: int) -> bytes:
        fetched.append(size)
        return raw[offset : offset + size]

    return fetch


@given(entries, st.data())
def test_a_cut_inside_a_segment_is_the_first_boundary_past_the_largest_entry(
    log: list[tuple[Compression, list[bytes]]], data: st.DataObject
) -> None:
    raw, boundaries, _ = build(log)
    largest = max(b - a for a, b in itertools.pairwise(boundaries))
    max_entry = data.draw(st.integers(largest, largest + 100))
    position = data.draw(st.integers(0, len(raw) - 1))
    before = data.draw(st.integers(position + 1, len(raw)))
    fetched: list[int] = []
    cut = asyncio.run(cut_after(in_memory(raw, fetched), position, before, max_entry))
    wanted = [b for b in boundaries if position + max_entry <= b < before]
    assert cut == (wanted[0] if wanted else None)
    assert len(fetched) <= MAX_FETCHES


async def test_check_boundary_names_what_is_there() -> None:
    raw, boundaries, _ = build([(Compression.NONE, [b"x" * 20])] * 10)
    fetched: list[int] = []
    assert await check_boundary(in_memory(raw, fetched), boundaries[3], MAX_ENTRY) is None
    reason = await check_boundary(in_memory(raw, fetched), 5, MAX_ENTRY)  # "message 5"
    assert reason is not None
    assert "not a message" in reason or "magic" in reason or "more than the log" in reason


def test_wanted_cuts_divide_stretches_without_a_known_boundary() -> None:
    # One 1000-byte stretch, pieces of at most 300: four equal pieces.
    assert wanted_cuts(0, 1000, [0, 1000], 300) == [(250, 1000), (500, 1000), (750, 1000)]
    # A segment start at 400 leaves stretches of 400 and 600; searched from 100 before.
    assert wanted_cuts(0, 1000, [0, 400, 1000], 300, lead=100) == [(100, 400), (600, 1000)]
    assert wanted_cuts(100, 300, [0, 1000], 300) == []
    # With the found boundaries added, split_range cuts there.
    assert split_range(0, 1000, [0, 252, 503, 751, 1000], 300) == [
        (0, 252),
        (252, 503),
        (503, 751),
        (751, 1000),
    ]


def test_a_user_schema_selects_columns_or_fails_naming_the_column() -> None:
    picked = StructType([StructField("value", BinaryType()), StructField("OFFSET", LongType())])
    arrow: Any = columns_for(picked)
    assert arrow.names == ["value", "OFFSET"]
    with pytest.raises(OptionError, match="'key string'"):
        columns_for(StructType([StructField("key", StringType())]))
    with pytest.raises(OptionError, match="'offset string'"):
        columns_for(StructType([StructField("offset", StringType())]))
    assert "offset_seq int" in SCHEMA_DDL

"""Record batches (aiokafka07.RecordBatch) from the group consumer's ``getmany_batches``
and the SimpleConsumer's ``record_batches``, against embedded brokers and a real
ZooKeeper: the same messages, offsets and positions as records (compressed wrappers too),
commits, seeks, pauses and a rebalance exactly as with ``getmany``; and the Arrow
PyCapsule hand-over, read through ctypes without pyarrow, and by pyarrow without a copy
(the same buffer addresses)."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import itertools
import random
import struct
import sys
from types import ModuleType
from typing import Any

import pytest

from aiokafka07 import ConsumerRecord, Producer, RecordBatch, SimpleConsumer, arrow
from aiokafka07.connection import BrokerAddress, BrokerConnection
from aiokafka07.errors import ConsumerStoppedError, IllegalStateError, InvalidMessageError
from aiokafka07.group.consumer import Consumer
from aiokafka07.protocol import LATEST, decode_message_set, encode_message_set, encode_wrapper
from aiokafka07.protocol.columns import MessageColumns, decode_columns_into
from aiokafka07.record_batch import FetchedColumns
from aiokafka07.records import TopicPartition
from aiokafka07.zookeeper import ZooKeeper

from .groups import (
    ONE_BY_TWO,
    TOPIC,
    committed_offsets,
    flip_payload_byte,
    log_ends,
    member,
    partitions_of,
    produce,
    source_of,
    value_for,
    wait_converged,
    wait_registered,
)
from .wire import eventually

TP0, TP1 = TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 0, 1)


def of(values: list[bytes], tp: TopicPartition) -> list[bytes]:
    return [v for v in values if source_of(v) == tp.name]


async def drain_batches(
    consumer: Consumer, count: int, *partitions: TopicPartition, **options: Any
) -> dict[TopicPartition, list[RecordBatch]]:
    """Batches until ``count`` messages came (of ``partitions``, if given)."""
    got: dict[TopicPartition, list[RecordBatch]] = {}
    total = 0
    while total < count:
        taken = await consumer.getmany_batches(*partitions, timeout_ms=5000, **options)
        assert taken, f"only {total} of {count} messages within 5 s"
        for tp, batch in taken.items():
            assert len(batch), "an empty batch was handed out"
            got.setdefault(tp, []).append(batch)
            total += len(batch)
    return got


async def drain_records(consumer: Consumer, count: int) -> dict[TopicPartition, list[Any]]:
    got: dict[TopicPartition, list[ConsumerRecord]] = {}
    total = 0
    while total < count:
        taken = await consumer.getmany(timeout_ms=5000)
        assert taken, f"only {total} of {count} records within 5 s"
        for tp, records in taken.items():
            got.setdefault(tp, []).extend(records)
            total += len(records)
    return got


def rows(batches: list[RecordBatch]) -> list[tuple[int, int, bytes]]:
    """(offset, offset_seq, value) of every message of ``batches``, read without Arrow."""
    return [
        (offset, seq, value)
        for b in batches
        for offset, seq, value in zip(b.offsets, b.offset_seqs, b.values, strict=True)
    ]


# -- the group consumer ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])
async def test_batches_hold_exactly_the_records_getmany_hands_out(
    kafka_cluster: Any, zookeeper: str, codec: str
) -> None:
    async with (
        kafka_cluster(1, num_partitions=2) as cluster,
        Producer(zookeeper=zookeeper, compression=codec, batch_size=5) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        values = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 30, "b", pad=10)
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        ends = await log_ends(cluster, TOPIC)
        async with member(zookeeper, group="records", auto_commit=False) as records_member:
            records = await drain_records(records_member, len(values))
        async with member(zookeeper, group="batches", auto_commit=False) as batch_member:
            batches = await drain_batches(batch_member, len(values))
            for tp in (TP0, TP1):
                assert await batch_member.position(tp) == ends[tp.name]
        assert set(batches) == set(records) == {TP0, TP1}
        for tp in (TP0, TP1):
            expected = records[tp]
            got = rows(batches[tp])
            assert [(o, v) for o, _, v in got] == [(r.offset, r.value) for r in expected]
            assert [v for _, _, v in got] == of(values, tp)
            assert [r for b in batches[tp] for r in b.to_records()] == expected
            for b in batches[tp]:
                assert (b.topic, b.broker_id, b.partition) == tp
                assert b.nbytes == sum(len(v) for v in b.values)
                assert b.last_offset == b.offsets[-1]
            # (offset, offset_seq) is unique and in log order across fetches, and the same
            # as for one fetch of the whole partition.
            pairs = [(o, s) for o, s, _ in got]
            assert pairs == sorted(set(pairs))
            whole = RecordBatch.from_records(
                expected, topic=TOPIC, broker_id=0, partition=tp.partition, base_offset=0
            )
            assert list(whole.offset_seqs) == [s for _, s, _ in got]
            if codec == "none":
                assert {s for _, s, _ in got} == {0}
            else:  # the messages of a wrapper share its start: 1, 2, ... tell them apart
                assert max(s for _, s, _ in got) >= 2


async def test_position_and_commit_follow_each_batch_and_records_continue_after_it(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with (
        kafka_cluster(1, num_partitions=2) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        values = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 20, "p")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        ends = await log_ends(cluster, TOPIC)
        async with member(zookeeper, auto_commit=False) as consumer:
            await eventually(lambda: consumer.metrics.buffered_bytes >= 2 * 20 * 10)
            # A fetch decoded as records before batches were asked for: a batch of it is
            # the same, and then the fetchers decode into columns.
            first = (await consumer.getmany_batches(TP0, timeout_ms=5000, max_bytes=30))[TP0]
            assert 1 <= len(first) < 20  # max_bytes cut the fetch
            assert first.nbytes <= 30
            assert list(first.values) == of(values, TP0)[: len(first)]
            assert await consumer.position(TP0) == first.last_offset
            await consumer.commit()
            committed = await committed_offsets(zk, "g", TOPIC)
            assert committed == {"0-0": str(first.last_offset), "0-1": "0"}
            # getmany goes on right after the batch: nothing lost, nothing twice.
            rest = await consumer.getmany(TP0, timeout_ms=5000, max_records=3)
            assert [r.value for r in rest[TP0]] == of(values, TP0)[len(first) : len(first) + 3]
            assert rest[TP0][0].offset > first.last_offset
            seen = len(first) + 3
            # Alternating batches and records to the end, both partitions.
            got0, got1 = list(first.values) + [r.value for r in rest[TP0]], []
            turn = 0
            while seen < len(values):
                turn += 1
                if turn % 2:
                    taken = await consumer.getmany_batches(timeout_ms=5000, max_bytes=40)
                    pieces = {tp: list(b.values) for tp, b in taken.items()}
                    for tp, batch in taken.items():
                        assert await consumer.position(tp) == batch.last_offset
                else:
                    records = await consumer.getmany(timeout_ms=5000, max_records=4)
                    pieces = {tp: [r.value for r in rs] for tp, rs in records.items()}
                assert pieces
                got0 += pieces.get(TP0, [])
                got1 += pieces.get(TP1, [])
                seen += sum(len(p) for p in pieces.values())
            assert got0 == of(values, TP0)
            assert got1 == of(values, TP1)
            assert {tp.name: await consumer.position(tp) for tp in (TP0, TP1)} == ends
            await consumer.commit()
            assert await committed_offsets(zk, "g", TOPIC) == {k: str(v) for k, v in ends.items()}
            assert await consumer.getmany_batches(timeout_ms=100) == {}  # nothing more: empty


async def test_seek_discards_what_was_fetched_and_pause_brings_nothing(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with (
        kafka_cluster(1, num_partitions=2),
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        values = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 10, "s")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        async with member(zookeeper, auto_commit=False) as consumer:
            consumer.pause(TP0)
            got = await drain_batches(consumer, 10)
            assert list(got) == [TP1]  # nothing of the paused partition
            assert [v for b in got[TP1] for v in b.values] == of(values, TP1)
            assert await consumer.getmany_batches(TP0, timeout_ms=200) == {}
            assert await consumer.position(TP0) == 0
            consumer.resume(TP0)
            first = (await consumer.getmany_batches(TP0, timeout_ms=5000, max_bytes=1))[TP0]
            assert len(first) == 1  # at least one message, even over max_bytes
            assert list(first.values) == of(values, TP0)[:1]
            # A seek drops what was fetched before it: reading starts again at 0.
            consumer.seek(TP0, 0)
            assert await consumer.position(TP0) == 0
            again = await drain_batches(consumer, 10, TP0)
            assert [v for b in again[TP0] for v in b.values] == of(values, TP0)
            assert again[TP0][0].base_offset == 0
            # Seeking to where a batch ended goes on after it.
            middle = again[TP0][0].offsets[4] if len(again[TP0][0]) > 4 else None
            if middle is not None:
                consumer.seek(TP0, middle)
                rest = await drain_batches(consumer, 5, TP0)
                assert [v for b in rest[TP0] for v in b.values] == of(values, TP0)[5:]


async def test_a_second_member_joining_loses_and_repeats_nothing(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """Batches committed as they are handed out; a second member joins mid-way: every
    message is handed out exactly once over both members."""
    registrations = {0: 2, 1: 2}
    async with (
        kafka_cluster(2, num_partitions=2) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        values = await produce(producer, TOPIC, partitions_of(registrations), 20, "r")
        await wait_registered(zk, TOPIC, registrations)
        seen: list[bytes] = []

        async def take(consumer: Consumer, at_least: int) -> None:
            taken = 0
            while taken < at_least:
                batches = await consumer.getmany_batches(timeout_ms=200, max_bytes=60)
                if not batches:
                    continue
                for batch in batches.values():
                    seen.extend(batch.values)
                    taken += len(batch)
                await consumer.commit(
                    {tp: b.last_offset for tp, b in batches.items() if b.last_offset}
                )

        first = member(zookeeper, auto_commit=False)
        second = member(zookeeper, auto_commit=False)
        try:
            await first.start()
            await take(first, 30)
            await second.start()
            await wait_converged(zk, "g", [first, second], {TOPIC: registrations})
            while len(seen) < len(values):
                before = len(seen)
                for consumer in (first, second):
                    batches = await consumer.getmany_batches(timeout_ms=100)
                    for batch in batches.values():
                        seen.extend(batch.values)
                    if batches:
                        await consumer.commit(
                            {tp: b.last_offset for tp, b in batches.items() if b.last_offset}
                        )
                if len(seen) == before:
                    await asyncio.sleep(0.05)
            assert sorted(seen) == sorted(values)  # each exactly once
            assert len(seen) == len(values)
            ends = await log_ends(cluster, TOPIC)
            assert await committed_offsets(zk, "g", TOPIC) == {k: str(v) for k, v in ends.items()}
        finally:
            await asyncio.gather(first.close(), second.close())


async def test_a_corrupt_entry_comes_after_the_good_batch_once(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """The messages before a corrupt entry come as a batch, then the error once, then
    nothing until a seek; the same after a seek, when the fetch was decoded into columns."""
    tp = TopicPartition(TOPIC, 0, 0)
    async with (
        kafka_cluster(1, num_partitions=1) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        values = []
        for i in range(5):  # one entry each
            values.append(value_for("k", 0, 0, i))
            await producer.send_and_wait(TOPIC, values[-1], partition=(0, 0))
        await wait_registered(zk, TOPIC, {0: 1})
        entry = 4 + 6 + len(values[0])
        flip_payload_byte(cluster, TOPIC, 0, 2 * entry)
        async with member(zookeeper, auto_commit=False) as consumer:
            for _ in range(2):  # as fetched (records or columns), then after a seek (columns)
                first = await consumer.getmany_batches(timeout_ms=5000)
                assert list(first[tp].values) == values[:2]
                assert first[tp].last_offset == 2 * entry
                with pytest.raises(InvalidMessageError, match=rf"{TOPIC}/0-0.* {2 * entry}"):
                    await consumer.getmany_batches(timeout_ms=5000)
                assert await consumer.position(tp) == 2 * entry
                assert await consumer.getmany_batches(timeout_ms=200) == {}
                consumer.seek(tp, 0)
            consumer.seek(tp, 3 * entry)  # past the corrupt entry: the rest
            rest = await drain_batches(consumer, 2)
            assert [v for b in rest[tp] for v in b.values] == values[3:]


async def test_getmany_batches_refuses_what_it_cannot_hand_out(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=2):
        for options in ({"shallow": True}, {"value_deserializer": bytes.decode}):
            async with member(zookeeper, auto_commit=False, **options) as consumer:
                with pytest.raises(IllegalStateError, match="getmany"):
                    await consumer.getmany_batches(timeout_ms=10)
        async with member(zookeeper, auto_commit=False) as consumer:
            for bad in (0, -1, 1.5, True, "10"):
                with pytest.raises(ValueError, match="max_bytes"):
                    await consumer.getmany_batches(max_bytes=bad)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="TopicPartition"):
                await consumer.getmany_batches(("events", 0, 0))  # type: ignore[arg-type]
            await consumer.stop()
            with pytest.raises(ConsumerStoppedError):
                await consumer.getmany_batches(timeout_ms=10)


# -- the SimpleConsumer ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])
async def test_simple_consumer_record_batches_match_its_messages(
    kafka_cluster: Any, codec: str
) -> None:
    async with kafka_cluster(1, zookeeper=None, num_partitions=1) as cluster:
        broker = cluster.broker(0)
        values = [f"m{i:03d}".encode() * 3 for i in range(50)]
        conn = await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port))
        try:
            for start in range(0, len(values), 7):  # sets (wrappers) of 7
                compression = None if codec == "none" else codec
                await conn.produce(
                    TOPIC, 0, values[start : start + 7], compression=compression, confirm=True
                )
        finally:
            await conn.close()
        async with SimpleConsumer(broker.host, broker.port, broker_id=0, fetch_size=300) as sc:
            (end,) = await sc.offsets_before(TOPIC, 0, LATEST)
            messages = [m async for m in sc.messages(TOPIC, 0, 0)]
            batches = [b async for b in sc.record_batches(TOPIC, 0, 0)]
            assert len(batches) > 1  # several fetches
            assert [(o, v) for o, _, v in rows(batches)] == [(m.offset, m.value) for m in messages]
            assert [v for _, _, v in rows(batches)] == values
            assert batches[-1].next_offset == end
            for before, after in itertools.pairwise(batches):
                assert after.base_offset == before.next_offset
            pairs = [(o, s) for o, s, _ in rows(batches)]
            assert pairs == sorted(set(pairs))
            # end_offset: only messages that end at or before it; at the log end: nothing.
            middle = messages[len(messages) // 2].offset
            cut = [b async for b in sc.record_batches(TOPIC, 0, 0, end_offset=middle)]
            assert all(o <= middle for b in cut for o in b.offsets)
            assert [b async for b in sc.record_batches(TOPIC, 0, end)] == []


# -- the Arrow hand-over ----------------------------------------------------------------------


SAMPLE = (
    encode_message_set([b"plain-1", b""])
    + encode_wrapper("gzip", encode_message_set([b"gz-a", b"gz-b", b"gz-c"]))
    + encode_wrapper("snappy", encode_message_set([b"sn-a", b"sn-b"]))
    + encode_message_set([b"last"])
)


def sample_columns() -> FetchedColumns:
    """Plain messages, a gzip and a snappy wrapper, an empty value, fetched at 1000."""
    columns = MessageColumns()
    assert decode_columns_into(columns, SAMPLE, 1000) == len(SAMPLE)
    return FetchedColumns(TOPIC, 3, 1, columns, 1000)


def test_a_batch_reads_like_the_record_decoder_without_arrow() -> None:
    columns = sample_columns()
    batch = columns.batch(0, len(columns))
    expected = decode_message_set(SAMPLE, 1000).messages
    assert len(batch) == len(expected) == 8
    assert list(batch.offsets) == [m.offset for m in expected]
    assert list(batch.values) == [m.value for m in expected]
    assert batch.values[-1] == b"last"
    assert batch.values[1] == b""
    assert bytes(batch.values.view(0)) == b"plain-1"
    # gz wrapper: its first two messages report its start (1, 2), the last its end (0).
    assert list(batch.offset_seqs) == [0, 0, 1, 2, 0, 1, 0, 0]
    assert batch.offsets.readonly
    assert batch.offsets.format == "q"
    part = columns.batch(3, 6)
    assert list(part.values) == [b"gz-b", b"gz-c", b"sn-a"]
    assert part.base_offset == batch.offsets[2]
    assert part.last_offset == batch.offsets[5]
    assert list(part.offset_seqs) == [2, 0, 1]  # as in the whole fetch
    empty = columns.batch(4, 4)
    assert len(empty) == 0
    assert empty.last_offset is None
    assert empty.next_offset == empty.base_offset == batch.offsets[3]
    with pytest.raises(IndexError):
        columns.batch(5, 9)
    with pytest.raises(IndexError):
        part.values.view(3)
    # The buffers are frozen: nothing can resize them under an exported array.
    with pytest.raises(BufferError):
        columns._buffers[2].extend(b"more")


_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _capsule_pointer(capsule: object, name: bytes) -> int:
    address: int = _get_pointer(capsule, name)
    return address


def _metadata(address: int) -> dict[bytes, bytes]:
    (count,) = struct.unpack("=i", ctypes.string_at(address, 4))
    pos, out = address + 4, {}
    for _ in range(count):
        pair = []
        for _ in range(2):
            (size,) = struct.unpack("=i", ctypes.string_at(pos, 4))
            pair.append(ctypes.string_at(pos + 4, size))
            pos += 4 + size
        out[pair[0]] = pair[1]
    return out


def test_the_capsules_read_through_ctypes_point_at_the_batch_buffers(impl: ModuleType) -> None:
    """The PyCapsule interface without pyarrow, on both implementations (C, ctypes): the
    structs as the C data interface defines them, read with ctypes; the release callbacks
    let go of what they hold (the batch, counted by its references)."""
    gc.collect()  # what earlier tests left is released first
    baseline = arrow.exported()
    columns = sample_columns()
    batch = columns.batch(2, 7)
    refs = sys.getrefcount(batch)
    schema_capsule, array_capsule = batch.__arrow_c_array__()
    schema = arrow.ArrowSchema.from_address(_capsule_pointer(schema_capsule, b"arrow_schema"))
    assert ctypes.string_at(schema.format) == b"+s"
    assert schema.n_children == 3
    assert _metadata(schema.metadata) == {b"topic": TOPIC.encode(), b"broker_id": b"3",
                                          b"partition": b"1"}  # fmt: skip
    children = (ctypes.c_void_p * 3).from_address(schema.children)
    fields = [arrow.ArrowSchema.from_address(c) for c in children]
    assert [(ctypes.string_at(f.name), ctypes.string_at(f.format), f.flags) for f in fields] == [
        (b"offset", b"l", 0),
        (b"offset_seq", b"i", 0),
        (b"value", b"z", 0),
    ]
    array = arrow.ArrowArray.from_address(_capsule_pointer(array_capsule, b"arrow_array"))
    assert (array.length, array.null_count, array.offset, array.n_children) == (5, 0, 0, 3)
    kids = [
        arrow.ArrowArray.from_address(c) for c in (ctypes.c_void_p * 3).from_address(array.children)
    ]
    addresses = batch.buffer_addresses()
    assert [(k.length, k.offset, k.n_buffers) for k in kids] == [(5, 2, 2), (5, 2, 2), (5, 2, 3)]
    buffers = [list((ctypes.c_void_p * k.n_buffers).from_address(k.buffers)) for k in kids]
    assert buffers == [
        [None, addresses["offset"]],
        [None, addresses["offset_seq"]],
        [None, addresses["value_ends"], addresses["value"]],
    ]
    # Read the columns as a C consumer would, from the pointers and the offset.
    offsets = struct.unpack("=7q", ctypes.string_at(buffers[0][1], 56))[2:]
    assert list(offsets) == list(batch.offsets)
    ends = struct.unpack("=8i", ctypes.string_at(buffers[2][1], 32))[2:]
    values = [ctypes.string_at(buffers[2][2] + a, b - a) for a, b in itertools.pairwise(ends)]
    assert values == list(batch.values)
    assert sys.getrefcount(batch) == refs + 4  # the struct array and its three children
    # The consumer releases: everything held is let go, release becomes NULL.
    release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    release(array.release)(ctypes.addressof(array))
    release(schema.release)(ctypes.addressof(schema))
    assert array.release is None
    assert schema.release is None
    assert sys.getrefcount(batch) == refs  # the children were released with their parent
    del schema_capsule, array_capsule, schema, array, kids, fields
    gc.collect()
    # A capsule dropped unconsumed releases its struct itself.
    capsules = batch.__arrow_c_array__(), batch.__arrow_c_schema__()
    assert sys.getrefcount(batch) > refs
    del capsules
    gc.collect()
    assert sys.getrefcount(batch) == refs
    assert arrow.exported() == baseline  # (the ctypes twin's own count)


def test_pyarrow_takes_a_batch_without_a_copy(impl: ModuleType) -> None:
    pa = pytest.importorskip("pyarrow")
    gc.collect()  # what earlier tests left is released first
    baseline = arrow.exported()
    columns = sample_columns()
    batch = columns.batch(1, 8)
    refs = sys.getrefcount(batch)
    addresses = batch.buffer_addresses()
    table = pa.record_batch(batch)
    assert table.schema.names == ["offset", "offset_seq", "value"]
    assert [f.nullable for f in table.schema] == [False, False, False]
    assert table.schema.metadata == {b"topic": TOPIC.encode(), b"broker_id": b"3",
                                     b"partition": b"1"}  # fmt: skip
    assert table.column("offset").to_pylist() == list(batch.offsets)
    assert table.column("offset_seq").to_pylist() == list(batch.offset_seqs)
    assert table.column("value").to_pylist() == list(batch.values)
    # The same memory: Arrow's buffers start where the batch's do (at row 0; the slice
    # starts at row 1 through the arrays' offset).
    offset_column, value_column = table.column("offset"), table.column("value")
    assert offset_column.offset == value_column.offset == 1
    assert offset_column.buffers()[1].address == addresses["offset"]
    assert value_column.buffers()[1].address == addresses["value_ends"]
    assert value_column.buffers()[2].address == addresses["value"]
    assert table.column("offset_seq").buffers()[1].address == addresses["offset_seq"]
    whole = pa.table(columns.batch(0, len(columns)))
    assert whole.num_rows == len(columns)
    assert whole.column("value").chunk(0).buffers()[2].address == addresses["value"]
    assert sys.getrefcount(batch) > refs  # held by Arrow's arrays
    del table, whole, offset_column, value_column
    gc.collect()
    assert sys.getrefcount(batch) == refs  # released by pyarrow
    # Arrow keeps the buffers alive after the batch and its columns are gone.
    kept = pa.record_batch(sample_columns().batch(0, 8))
    gc.collect()
    assert kept.column("value").to_pylist()[-1] == b"last"
    del kept
    gc.collect()
    assert arrow.exported() == baseline
    empty = pa.record_batch(
        RecordBatch.from_records([], topic=TOPIC, broker_id=None, partition=0, base_offset=7)
    )
    assert empty.num_rows == 0
    assert empty.schema.metadata[b"broker_id"] == b""


async def test_pyarrow_reads_consumer_batches_in_place(kafka_cluster: Any, zookeeper: str) -> None:
    pa = pytest.importorskip("pyarrow")
    async with (
        kafka_cluster(1, num_partitions=2),
        Producer(zookeeper=zookeeper, compression="snappy", batch_size=4) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        values = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 12, "a")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        async with member(zookeeper, auto_commit=False) as consumer:
            got = await drain_batches(consumer, len(values))
        for tp, batches in got.items():
            tables = [pa.record_batch(b) for b in batches]
            for b, t in zip(batches, tables, strict=True):
                assert t.column("value").buffers()[2].address == b.buffer_addresses()["value"]
            table = pa.Table.from_batches(tables)
            assert table.column("value").to_pylist() == of(values, tp)


def test_the_stream_capsule_hands_out_the_batch_once_then_ends(impl: ModuleType) -> None:
    """``__arrow_c_stream__`` read through ctypes, on both implementations: the schema, one
    array pointing at the batch's buffers, then the end (a released array); releasing
    lets go of everything."""
    gc.collect()  # what earlier tests left is released first
    baseline = arrow.exported()
    columns = sample_columns()
    batch = columns.batch(1, 4)
    refs = sys.getrefcount(batch)
    capsule = batch.__arrow_c_stream__()
    stream = arrow.ArrowArrayStream.from_address(_capsule_pointer(capsule, b"arrow_array_stream"))
    call = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    schema, array, end = arrow.ArrowSchema(), arrow.ArrowArray(), arrow.ArrowArray()
    assert call(stream.get_schema)(ctypes.addressof(stream), ctypes.addressof(schema)) == 0
    assert ctypes.string_at(schema.format) == b"+s"
    assert schema.n_children == 3
    assert call(stream.get_next)(ctypes.addressof(stream), ctypes.addressof(array)) == 0
    assert (array.length, array.n_children) == (3, 3)
    offsets = arrow.ArrowArray.from_address((ctypes.c_void_p * 3).from_address(array.children)[0])
    assert offsets.offset == 1
    data = (ctypes.c_void_p * 2).from_address(offsets.buffers)[1]
    assert data == batch.buffer_addresses()["offset"]
    assert call(stream.get_next)(ctypes.addressof(stream), ctypes.addressof(end)) == 0
    assert end.release is None  # the end of the stream
    release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    for struct_ in (array, schema, stream):
        release(struct_.release)(ctypes.addressof(struct_))
        assert struct_.release is None
    del capsule
    gc.collect()
    assert sys.getrefcount(batch) == refs
    assert arrow.exported() == baseline
    pa = pytest.importorskip("pyarrow")
    table = pa.RecordBatchReader.from_stream(batch).read_all()
    assert table.column("value").to_pylist() == list(batch.values)
    assert table.column("value").chunk(0).buffers()[2].address == batch.buffer_addresses()["value"]
    del table
    gc.collect()
    assert sys.getrefcount(batch) == refs
    assert arrow.exported() == baseline


def test_offset_seq_follows_the_entries_on_both_implementations(impl: ModuleType) -> None:
    """``offset_seq`` from the offsets alone matches the entries they came from: 0 for a
    plain message and a wrapper's last, 1, 2, ... for a wrapper's others; the same from
    any fetch position that is an entry boundary."""
    rng = random.Random(38)
    for _ in range(50):
        parts, expected = [], []
        for _ in range(rng.randrange(1, 8)):
            count = rng.randrange(1, 5)
            payloads = [rng.randbytes(rng.randrange(0, 9)) for _ in range(count)]
            if rng.random() < 0.5:
                parts.append(encode_message_set(payloads))
                expected += [0] * count
            else:
                codec = rng.choice(["gzip", "snappy"])
                parts.append(encode_wrapper(codec, encode_message_set(payloads)))
                expected += [*range(1, count), 0]
        base = rng.choice([0, 1000])
        columns = MessageColumns()
        decode_columns_into(columns, b"".join(parts), base)
        got = impl.offset_seq(columns.offsets, base)
        assert list(memoryview(got).cast("i")) == expected
        # From the second entry's start (a later fetch): the same for what follows.
        if len(parts) > 1:
            rest = MessageColumns()
            decode_columns_into(rest, b"".join(parts[1:]), base + len(parts[0]))
            tail = impl.offset_seq(rest.offsets, base + len(parts[0]))
            assert list(memoryview(tail).cast("i")) == expected[-len(rest) :]
    assert impl.offset_seq(b"", 0) == bytearray()
    with pytest.raises(ValueError, match="int64"):
        impl.offset_seq(b"1234567", 0)

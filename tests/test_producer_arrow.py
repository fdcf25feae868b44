"""Producer.send_arrow (issue 38, item 2): Arrow arrays of binary or string values into the
producer, encoded straight from their buffers.

The codec's ``encode_arrow`` on both implementations (C and its ctypes twin) against the
codec's ``encode_message_set`` of the same values, cut as ``BatchBuilder`` cuts a batch;
then round trips through a real embedded broker: what the log holds is the array's values,
byte for byte, whatever the format, slice, compression or cut. Arrays come from
:class:`tests.arrow_values.ArrowValues` (no pyarrow needed) and, where installed, pyarrow.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
from array import array
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka07 import arrow, default_partition
from aiokafka07.errors import (
    ArrowValuesError,
    KafkaConnectionError,
    MessageTooLargeError,
    ProducerClosedError,
)
from aiokafka07.producer import Producer
from aiokafka07.protocol import _pure, encode_message_set
from aiokafka07.testing import KafkaCluster

from .arrow_values import ArrowValues, released
from .conftest import IMPLEMENTATIONS
from .test_producer import all_values, read_logs, shallow_log
from .wire import eventually

OK, RELEASED, FORMAT, SHAPE, NULL, OFFSETS, TOO_LARGE = range(7)


def cut(values: list[bytes], max_count: int, max_bytes: int) -> list[list[bytes]]:
    """The values cut as BatchBuilder.append cuts a batch (the reference)."""
    chunks: list[list[bytes]] = []
    chunk: list[bytes] = []
    size = 0
    for value in values:
        if len(chunk) >= max_count or (chunk and size + len(value) > max_bytes):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(value)
        size += len(value)
    if chunk:
        chunks.append(chunk)
    return chunks


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
@given(
    values=st.lists(st.binary(max_size=40), max_size=60),
    skipped=st.lists(st.binary(max_size=10), max_size=5),
    format=st.sampled_from("zuZU"),
    max_count=st.integers(1, 70),
    max_bytes=st.integers(1, 400),
)
def test_encode_arrow_is_encode_message_set_of_the_values_cut_as_batches(
    impl: ModuleType,
    values: list[bytes],
    skipped: list[bytes],
    format: str,
    max_count: int,
    max_bytes: int,
) -> None:
    gc.collect(0)  # as below: young garbage of earlier tests is released first
    exported = arrow.exported()
    source = ArrowValues(values, format, skipped=skipped)
    schema, array = source.__arrow_c_array__()
    status, index, size, got_format, chunks = impl.encode_arrow(
        schema, array, 1, 0, max_count, max_bytes, 1000
    )
    assert (status, index, size, got_format) == (OK, 0, 0, format)
    expected = [
        (len(chunk), sum(map(len, chunk)), encode_message_set(chunk))
        for chunk in cut(values, max_count, max_bytes)
    ]
    assert chunks == expected
    # The same bytes as the other twin, and the array was moved out and released.
    assert released(array)
    del schema, array
    gc.collect(0)  # the young generation: a full pass per example took most of its time
    assert arrow.exported() == exported
    twin = _pure if impl is not _pure else IMPLEMENTATIONS[0]
    assert (
        twin.encode_arrow(*source.__arrow_c_array__(), 1, 0, max_count, max_bytes, 1000)[4]
        == chunks
    )


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_encode_arrow_refuses_before_encoding(impl: ModuleType) -> None:
    def encode(source: Any, max_message: int = 100) -> tuple[Any, ...]:
        result: tuple[Any, ...] = impl.encode_arrow(
            *source.__arrow_c_array__(), 1, 0, 10, 1000, max_message
        )
        return result

    gc.collect()  # what earlier tests left is released first

    exported = arrow.exported()
    # A null (a 0.7 message has none), at its index from the slice's start.
    nulls = ArrowValues([b"a", b"b", b"c"], skipped=[b"x"], nulls=frozenset([2]))
    assert encode(nulls) == (NULL, 2, 0, "z", None)
    # A value over max_message, named by index and size; the ones before it are fine.
    assert encode(ArrowValues([b"ab", b"abcdef", b"a"]), 5) == (TOO_LARGE, 1, 6, "z", None)
    # Not binary or string: the schema's format says what it is.
    assert encode(ArrowValues([b"ab"], "i")) == (FORMAT, 0, 0, "i", None)
    assert encode(ArrowValues([b"ab"], "vz")) == (FORMAT, 0, 0, "vz", None)
    # Offsets that go backwards (a corrupt array): refused, never read past.
    corrupt = ArrowValues([b"ab", b"cd"])
    corrupt.offsets[4:8] = (3).to_bytes(4, "little")
    corrupt.offsets[8:12] = (1).to_bytes(4, "little")
    assert encode(corrupt) == (OFFSETS, 1, 0, "z", None)
    # The same capsules twice: the array was moved out by the first call.
    schema, array = ArrowValues([b"ab"]).__arrow_c_array__()
    assert impl.encode_arrow(schema, array, 1, 0, 10, 1000, 100)[0] == OK
    assert impl.encode_arrow(schema, array, 1, 0, 10, 1000, 100) == (RELEASED, 0, 0, None, None)
    # Capsules swapped, or not capsules at all.
    schema, array = ArrowValues([b"ab"]).__arrow_c_array__()
    assert impl.encode_arrow(array, schema, 1, 0, 10, 1000, 100)[0] == RELEASED
    assert impl.encode_arrow(b"x", None, 1, 0, 10, 1000, 100)[0] == RELEASED
    del schema, array
    gc.collect()
    assert arrow.exported() == exported  # every refused array was released too
    # (The capsules outlive the call: the ctypes exports' destructors cannot run while
    # an exception is being raised.)
    capsules = ArrowValues([]).__arrow_c_array__()
    with pytest.raises(ValueError, match="magic"):
        impl.encode_arrow(*capsules, 2, 0, 10, 1000, 100)


async def test_send_arrow_round_trip_formats_slices_and_cuts(
    cluster: KafkaCluster, impl: ModuleType
) -> None:
    """Every format, a slice (offset != 0), an empty value, an empty array, and an array
    cut into several message sets by batch_size and batch_bytes: the log holds the values
    in order, byte for byte; confirm on (the default), one result per set."""
    values = [os.urandom(n % 50) for n in range(300)]
    async with Producer(brokers=cluster.broker_list, batch_size=60, batch_bytes=1500) as p:
        sent: list[bytes] = []
        for format in "zuZU":
            future = await p.send_arrow(
                "arrow", ArrowValues(values, format, skipped=[b"not me"]), partition=(0, 0)
            )
            results = await asyncio.wait_for(future, 10)
            chunks = cut(values, 60, 1500)
            assert {len(c) for c in chunks[:-1]} > {60}  # both limits cut
            assert len(results) == len(chunks)
            assert all(r.confirmed and (r.broker_id, r.partition) == (0, 0) for r in results)
            sent += values
        empty = await p.send_arrow("arrow", ArrowValues([]), partition=(0, 0))
        assert await empty == []
        assert p.metrics.messages_sent == len(sent)
        assert p.metrics.bytes_sent == sum(map(len, sent))
    assert (await read_logs(cluster, "arrow"))[(0, 0)] == sent


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
async def test_send_arrow_compressed_split_at_max_message_size(
    cluster: KafkaCluster, codec: str
) -> None:
    """Compressed: one wrapper per message set, split in halves (at entry boundaries)
    while a wrapper would exceed max.message.size, as the producer's own batches."""
    values = [os.urandom(100) for _ in range(64)]  # incompressible: ~6.8 KB a wrapper
    async with Producer(brokers=cluster.broker_list, compression=codec, max_message_size=2000) as p:
        await (await p.send_arrow("packed", ArrowValues(values), partition=(0, 1)))
        small = [b"x" * 20] * 50  # one wrapper
        await (await p.send_arrow("packed", ArrowValues(small, "u"), partition=(0, 1)))
    logs = await read_logs(cluster, "packed")
    assert logs[(0, 1)] == values + small
    entries = await shallow_log(cluster, "packed", 1)
    assert all(entry.attributes != 0 for entry in entries)  # every entry a wrapper
    assert len(entries) > 4  # the 64 went as several wrappers, each under 2000 bytes
    assert all(len(entry.value) <= 2000 for entry in entries)


async def test_send_arrow_refusals_write_nothing(cluster: KafkaCluster, impl: ModuleType) -> None:
    async with Producer(brokers=cluster.broker_list, max_message_size=100) as p:
        with pytest.raises(MessageTooLargeError, match="index 2") as too_large:
            await p.send_arrow("refused", ArrowValues([b"a", b"b", b"c" * 101]))
        assert (too_large.value.index, too_large.value.size) == (2, 101)
        with pytest.raises(ArrowValuesError, match="index 1 is null") as null:
            await p.send_arrow("refused", ArrowValues([b"a", b"b"], nulls=frozenset([1])))
        assert null.value.index == 1
        with pytest.raises(TypeError, match="not a list"):  # ArrowValuesError is a TypeError
            await p.send_arrow("refused", [b"a", b"b"])
        with pytest.raises(ArrowValuesError, match="format 'l'") as format:
            await p.send_arrow("refused", ArrowValues([b"a"], "l"))
        assert format.value.format == "l"
        with pytest.raises(ValueError, match="topic"):
            await p.send_arrow("bad topic/", ArrowValues([b"a"]))
        assert p.metrics.messages_sent == 0
        await p.send_and_wait("refused", b"only me", partition=(0, 0))
    assert all_values(await read_logs(cluster, "refused")) == [b"only me"]
    with pytest.raises(ProducerClosedError):
        await p.send_arrow("refused", ArrowValues([b"a"]))


async def test_send_arrow_key_routes_the_whole_array(cluster: KafkaCluster) -> None:
    async with Producer(brokers=cluster.broker_list, batch_size=10) as p:
        future = await p.send_arrow("keyed", ArrowValues([b"%d" % i for i in range(25)]), key=7)
        results = await future
        assert len(results) == 3
        assert len({(r.broker_id, r.partition) for r in results}) == 1
    # (Static mode: the broker picks the partition of each produce, so order across them
    # is not kept.)
    logs = await read_logs(cluster, "keyed")
    assert sorted(all_values(logs)) == sorted(b"%d" % i for i in range(25))


async def test_send_arrow_takes_pyarrow_arrays(cluster: KafkaCluster, impl: ModuleType) -> None:
    pa = pytest.importorskip("pyarrow")
    texts = ["ünïcode", "", "plain", "\U0001f600"] * 50
    arrays = [
        pa.array([t.encode() for t in texts], pa.binary()),
        pa.array(texts, pa.string()),
        pa.array(texts, pa.large_string()),
        pa.array([t.encode() for t in texts], pa.large_binary()).slice(3, 100),
    ]
    async with Producer(brokers=cluster.broker_list, compression="snappy") as p:
        for values in arrays:
            await (await p.send_arrow("pa", values, partition=(0, 0)))
        with pytest.raises(ArrowValuesError, match="null"):
            await p.send_arrow("pa", pa.array([b"a", None]))
        with pytest.raises(ArrowValuesError, match="format 'l'"):
            await p.send_arrow("pa", pa.array([1, 2]))
    expected = [t.encode() for t in texts] * 3 + [t.encode() for t in texts][3:103]
    assert (await read_logs(cluster, "pa"))[(0, 0)] == expected


async def test_send_arrow_takes_streams(cluster: KafkaCluster, impl: ModuleType) -> None:
    """An object with ``__arrow_c_stream__`` only (a pyarrow ChunkedArray): its arrays in
    order; a refusal names the value by its index across the arrays; a stream of structs
    (a RecordBatchReader's) is refused by its format. Every stream is released."""
    pa = pytest.importorskip("pyarrow")
    gc.collect()  # what earlier tests left is released first
    exported = arrow.exported()
    chunked = pa.chunked_array([pa.array([b"a", b"bb"]), pa.array([], pa.binary()), [b"ccc"]])
    assert not hasattr(chunked, "__arrow_c_array__")
    async with Producer(brokers=cluster.broker_list, max_message_size=10) as p:
        results = await (await p.send_arrow("streamed", chunked, partition=(0, 0)))
        assert len(results) == 2  # one message set per non-empty array
        with pytest.raises(ArrowValuesError, match="index 3 is null") as null:
            await p.send_arrow("streamed", pa.chunked_array([[b"x", b"y"], [b"z", None]]))
        assert null.value.index == 3
        with pytest.raises(MessageTooLargeError, match="index 2") as too_large:
            await p.send_arrow("streamed", pa.chunked_array([[b"x", b"y"], [b"z" * 11]]))
        assert too_large.value.index == 2
        reader = pa.RecordBatchReader.from_batches(
            pa.schema([("value", pa.binary())]), [pa.record_batch([pa.array([b"v"])], ["value"])]
        )
        with pytest.raises(ArrowValuesError, match=r"format '\+s'"):
            await p.send_arrow("streamed", reader)
    assert (await read_logs(cluster, "streamed"))[(0, 0)] == [b"a", b"bb", b"ccc"]
    gc.collect()
    assert arrow.exported() == exported


async def test_send_arrow_sets_are_retried_until_the_broker_is_back(cluster: KafkaCluster) -> None:
    """The same guarantees as send_batch's: sets written while the broker is away are
    retried (encoded once, sent as they were) and delivered once it is back, each once.
    (Retried sets may land in another order, as separate send_batch() calls may: each
    is retried on its own.)"""
    brokers = cluster.broker_list
    await cluster.stop_broker(0)
    values = [b"r%03d" % i for i in range(35)]
    async with Producer(brokers=brokers, batch_size=10, retry_backoff_ms=50) as p:
        future = await p.send_arrow("retried", ArrowValues(values, "u"), partition=(0, 1))
        await asyncio.sleep(0.5)
        assert not future.done()
        assert p.metrics.retries > 0
        await cluster.start_broker(0)
        results = await asyncio.wait_for(future, 30)
        assert len(results) == 4
        assert p.metrics.messages_sent == 35
    logs = (await read_logs(cluster, "retried"))[(0, 1)]
    assert sorted(logs) == values
    # Each set is in the log whole, its messages in their order.
    for part in (values[i : i + 10] for i in range(0, 35, 10)):
        assert any(logs[i : i + len(part)] == part for i in range(len(logs)))


async def test_send_arrow_fails_as_one_future_naming_the_sets_delivered() -> None:
    """A broker that refuses connections: every set fails within its retries; the one
    future fails with the first set's error, a note saying none was delivered, and
    close() counts every message."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = sock.getsockname()[1]
        p = Producer(brokers=f"0:127.0.0.1:{port}", batch_size=10, retries=1, retry_backoff_ms=50)
        await p.start()
        future = await p.send_arrow("lost", ArrowValues([b"x"] * 25), partition=(0, 0))
        with pytest.raises(KafkaConnectionError) as failed:
            await asyncio.wait_for(future, 30)
        assert "0 of the array's 3 message sets were delivered" in "".join(
            getattr(failed.value, "__notes__", [])
        ) or not hasattr(failed.value, "add_note")
        with pytest.raises(ProducerClosedError, match="25"):
            await p.close()
    assert p.metrics.messages_failed == 25
    assert p.metrics.queued_messages == 0


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
@given(
    values=st.lists(st.binary(max_size=30), min_size=1, max_size=40),
    picks=st.lists(st.integers(0, 10**6), max_size=50),
    format=st.sampled_from("zuZU"),
    max_count=st.integers(1, 20),
    max_bytes=st.integers(1, 200),
)
def test_encode_arrow_of_selected_rows(
    impl: ModuleType,
    values: list[bytes],
    picks: list[int],
    format: str,
    max_count: int,
    max_bytes: int,
) -> None:
    """``rows`` (per-message keys: the rows of one partition) selects values in its order,
    any row any number of times; a row outside the array raises IndexError."""
    rows = [pick % len(values) for pick in picks]
    source = ArrowValues(values, format, skipped=[b"skip"])
    selected = [values[row] for row in rows]
    status, _, _, _, chunks = impl.encode_arrow(
        *source.__arrow_c_array__(), 1, 0, max_count, max_bytes, 1000, array("q", rows)
    )
    assert status == OK
    assert chunks == [
        (len(chunk), sum(map(len, chunk)), encode_message_set(chunk))
        for chunk in cut(selected, max_count, max_bytes)
    ]
    capsules = source.__arrow_c_array__()
    with pytest.raises(IndexError):
        impl.encode_arrow(*capsules, 1, 0, 10, 100, 1000, array("q", [*rows, len(values)]))


async def test_send_arrow_keys_route_each_message_as_send_would(
    kafka_cluster: Any, zookeeper: str, impl: ModuleType
) -> None:
    """``keys=``: each message goes where ``send(key=...)`` puts it (the Java 0.7.2
    partitioner's choice), the messages of a partition in their order; str keys from a
    string array, bytes keys from a binary one."""
    async with kafka_cluster(2, num_partitions=2, flush="shipped") as cluster:
        async with Producer(zookeeper=zookeeper, batch_size=7) as p:
            for broker_id in (0, 1):
                for partition in (0, 1):
                    await p.send("arrow-keys", b"seed", partition=(broker_id, partition))
            await p.flush()  # one wait for the shipped flush, not one per seed
            await eventually(lambda: len(p.cluster.partitions("arrow-keys")) == 4)
            candidates = p.cluster.partitions("arrow-keys")
            texts = [f"user-{i % 13}" for i in range(60)]
            values = [b"v%02d" % i for i in range(60)]
            results = await (
                await p.send_arrow(
                    "arrow-keys",
                    ArrowValues(values),
                    keys=ArrowValues([t.encode() for t in texts], "u"),
                )
            )
            raw = [b"\x00\xff%d" % (i % 5) for i in range(20)]
            await (
                await p.send_arrow("arrow-keys", ArrowValues(values[:20]), keys=ArrowValues(raw))
            )
            assert len({(r.broker_id, r.partition) for r in results}) > 1
            with pytest.raises(ArrowValuesError, match="3 keys for 2 values"):
                await p.send_arrow(
                    "arrow-keys", ArrowValues([b"a", b"b"]), keys=ArrowValues([b"k"] * 3)
                )
            with pytest.raises(ArrowValuesError, match="not both"):
                await p.send_arrow(
                    "arrow-keys", ArrowValues([b"a"]), keys=ArrowValues([b"k"]), key="k"
                )
            with pytest.raises(ArrowValuesError, match="keys: the value at index 1 is null"):
                await p.send_arrow(
                    "arrow-keys",
                    ArrowValues([b"a", b"b"]),
                    keys=ArrowValues([b"k", b"l"], nulls=frozenset([1])),
                )
        logs = await read_logs(cluster, "arrow-keys")
    expected: dict[tuple[int, int], list[bytes]] = {c: [b"seed"] for c in candidates}
    for text, value in zip(texts, values, strict=True):
        expected[candidates[default_partition(text, 4)]].append(value)
    for key, value in zip(raw, values[:20], strict=True):
        expected[candidates[default_partition(key, 4)]].append(value)
    assert {where: logs.get(where, []) for where in candidates} == expected

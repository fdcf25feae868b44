"""Fetch-size growth that cannot spin (aiokafka07.fetch_size), in every consumer.

The decision itself is tested as a pure function. Then each consumer (SimpleConsumer,
the group consumer, ``aiokafka07 consume``) meets, against an embedded broker, the two
inputs that used to make them fetch forever: a start offset inside a message, whose
"size" is larger than the whole log, and a compressed wrapper whose inner set starts
with a partial entry. Each must end in a typed error naming the offset within seconds,
after a counted handful of requests. (The Spark source: tests/test_spark.py.)
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka07.connection import BrokerAddress, BrokerConnection
from aiokafka07.errors import (
    CompressionError,
    InvalidMessageSizeError,
    KafkaError,
    MessageTooLargeError,
    ProtocolError,
)
from aiokafka07.fetch_size import MAX_REFETCHES, FetchSizer, decompression_bound
from aiokafka07.group.consumer import Consumer
from aiokafka07.protocol import decode_message_set, encode_message_set, encode_wrapper, entry_size
from aiokafka07.records import ConsumerRecord
from aiokafka07.simple import SimpleConsumer
from aiokafka07.testing import KafkaCluster
from aiokafka07.testing.hostile import INNER_PARTIAL_WRAPPER
from aiokafka07.zookeeper import ZooKeeper

from .test_cli_common import run_cli
from .wire import eventually

# -- the decision ---------------------------------------------------------------------------


def test_a_short_answer_means_the_offset_is_not_a_message() -> None:
    """Fewer bytes than asked: the broker sent all the segment holds from there."""
    sizer = FetchSizer("t", 0, 1024, 1 << 20)
    assert not sizer.needs_log_end(800)
    with pytest.raises(InvalidMessageSizeError, match=r"t/0 at offset 5: .*only 800 bytes"):
        sizer.grow(5, 13_847_471, 800, None)
    with pytest.raises(InvalidMessageSizeError, match="cut entry"):
        sizer.grow(5, None, 3, None)


def test_an_entry_past_the_log_end_is_not_a_message() -> None:
    sizer = FetchSizer("t", "0-1", 1024, 64 << 20)
    assert sizer.needs_log_end(1024)
    with pytest.raises(InvalidMessageSizeError, match=r"t/0-1 at offset 5: .*log ends at 8000000"):
        sizer.grow(5, 13_847_471, 1024, 8_000_000)
    assert sizer.size == 1024


def test_a_large_message_grows_the_fetch_once_up_to_the_limit() -> None:
    sizer = FetchSizer("t", 0, 1024, 1 << 20)
    assert sizer.grow(100, 3000, 1024, 10_000) == 3004
    assert sizer.grow(200, 5000, 3004, None) == 6008  # twice the size if that is more
    assert sizer.grow(300, (1 << 20) - 4, 6008, None) == 1 << 20
    with pytest.raises(MessageTooLargeError) as info:
        sizer.grow(400, 1 << 20, 1 << 20, 1 << 30)
    assert (info.value.offset, info.value.size) == (400, 1 << 20)
    assert f"offset 400 is {1 << 20} bytes" in str(info.value)


def test_refetches_at_one_offset_are_bounded() -> None:
    sizer = FetchSizer("t", 0, 16, 1 << 20)
    for _ in range(MAX_REFETCHES):
        sizer.grow(7, 10, sizer.size, None)  # a broker that keeps answering full
    with pytest.raises(InvalidMessageSizeError, match=f"after {MAX_REFETCHES + 1} fetches"):
        sizer.grow(7, 10, sizer.size, None)
    sizer.grow(8, 10, sizer.size, None)  # another offset starts counting again


def test_only_an_incomplete_first_entry_is_a_matter_of_size() -> None:
    entry = encode_message_set([b"x" * 100])
    with pytest.raises(ProtocolError) as partial:
        decode_message_set(entry[:50])
    assert FetchSizer.incomplete_first(partial.value) == 106
    inner_partial = encode_wrapper("gzip", struct.pack(">i", 100) + b"abc")
    with pytest.raises(ProtocolError) as inner:
        decode_message_set(inner_partial)
    assert FetchSizer.incomplete_first(inner.value) is None
    corrupt = bytearray(entry)
    corrupt[-1] ^= 1
    with pytest.raises(ProtocolError) as crc:
        decode_message_set(bytes(corrupt))
    assert FetchSizer.incomplete_first(crc.value) is None


def test_sizes_are_checked() -> None:
    with pytest.raises(ValueError, match="fetch size"):
        FetchSizer("t", 0, 0, 10)
    with pytest.raises(ValueError, match="fetch size"):
        FetchSizer("t", 0, 11, 10)


@given(
    st.integers(1, 1 << 16),
    st.integers(0, 1 << 20),
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(0, 1 << 24)),
            st.booleans(),
            st.one_of(st.none(), st.integers(0, 1 << 26)),
        ),
        min_size=1,
        max_size=20,
    ),
)
def test_any_answers_end_in_a_typed_error_within_the_bound(
    size: int, extra: int, answers: list[tuple[int | None, bool, int | None]]
) -> None:
    """Whatever a broker answers at one offset, the consumer fetches there at most
    1 + MAX_REFETCHES times, never beyond max_fetch_size, and stops with a KafkaError."""
    sizer = FetchSizer("t", 0, size, size + extra)
    fetches = 1
    try:
        for declared, full, log_end in answers:
            received = sizer.size if full else sizer.size // 2
            sizer.grow(1000, declared, received, log_end)
            fetches += 1
            assert sizer.size <= size + extra
    except KafkaError:
        pass
    assert fetches <= 1 + MAX_REFETCHES


# -- against a broker -----------------------------------------------------------------------

#: Read as an entry size, the first four payload bytes say 13,847,695: more than the log.
BOGUS = b"\x00\xd3\x4c\x8f"
MID = 4 + 6  # an offset inside the first message: where its payload starts


async def produce(cluster: KafkaCluster, topic: str, payloads: list[bytes]) -> None:
    broker = cluster.broker(0)
    conn = await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port))
    try:
        await conn.produce(topic, 0, payloads, confirm=True)
    finally:
        await conn.close()


async def hostile_topics(cluster: KafkaCluster) -> int:
    """``mid``: messages whose payloads begin with BOGUS. ``inner``: one good message,
    then a gzip wrapper whose inner set starts with a partial entry, then a good one.
    Returns the wrapper's offset."""
    await produce(cluster, "mid", [BOGUS + b"payload %d" % i for i in range(50)])
    await produce(cluster, "inner", INNER_PARTIAL_SET)
    return write_inner_partial_wrapper(cluster.broker(0).config.log_dir, "inner")


#: Payloads to produce before :func:`write_inner_partial_wrapper`.
INNER_PARTIAL_SET = [b"first", bytes(len(INNER_PARTIAL_WRAPPER) - entry_size(0)), b"last"]


def write_inner_partial_wrapper(log_dir: Path, topic: str) -> int:
    """Write INNER_PARTIAL_WRAPPER over the second entry of partition 0 of ``topic``
    (produced as INNER_PARTIAL_SET; no broker takes such a wrapper on produce); return
    its offset."""
    at = entry_size(len(b"first"))
    segment = next((log_dir / f"{topic}-0").glob("*.kafka"))
    with segment.open("r+b") as f:
        f.seek(at)
        f.write(INNER_PARTIAL_WRAPPER)
    return at


@pytest.fixture
async def cluster(kafka_cluster: Any) -> Any:
    async with kafka_cluster(1, zookeeper=None) as running:
        yield running


def requests(cluster: KafkaCluster) -> int:
    return cluster.broker(0).requests_handled


async def drain(records: AsyncIterator[ConsumerRecord], into: list[bytes]) -> None:
    """Append every value to ``into`` (kept when the iterator raises)."""
    async for record in records:
        into.append(record.value)


async def until_error(member: Consumer, into: list[bytes]) -> None:
    """getmany until it raises, appending what it hands out to ``into``."""
    while True:
        for batch in (await member.getmany(timeout_ms=5000)).values():
            into += [r.value for r in batch]


@pytest.mark.parametrize("fetch_size", [1 << 20, 256], ids=["fetch-larger-than-log", "small"])
async def test_simple_consumer_mid_message_offset(cluster: KafkaCluster, fetch_size: int) -> None:
    """The issue's ``batches("pv", 0, 5)``: a fetch size larger than the log learns it
    from the short answer (1 fetch); a smaller one asks OFFSETS for the log end (1 fetch
    + 1 OFFSETS). No growth, no loop."""
    await hostile_topics(cluster)
    broker = cluster.broker(0)
    async with SimpleConsumer(broker.host, broker.port, fetch_size=fetch_size) as consumer:
        before = requests(cluster)
        with pytest.raises(InvalidMessageSizeError, match=f"mid/0 at offset {MID}: ") as info:
            await asyncio.wait_for(consumer.batches("mid", 0, MID).__anext__(), 5)
        assert "not the offset of a message" in str(info.value)
        assert requests(cluster) - before == (1 if fetch_size > 1000 else 2)
        # The same offset through messages(), and with an end offset past the entry.
        with pytest.raises(InvalidMessageSizeError):
            await asyncio.wait_for(consumer.messages("mid", 0, MID).__anext__(), 5)
        ends_later = consumer.messages("mid", 0, MID, end_offset=MID + 100)
        with pytest.raises(InvalidMessageSizeError):
            await asyncio.wait_for(ends_later.__anext__(), 5)


async def test_simple_consumer_inner_partial_entry(cluster: KafkaCluster) -> None:
    at = await hostile_topics(cluster)
    broker = cluster.broker(0)
    async with SimpleConsumer(broker.host, broker.port) as consumer:
        got: list[bytes] = []
        before = requests(cluster)
        with pytest.raises(InvalidMessageSizeError, match=f"inner/0 at offset {at}: ") as info:
            await asyncio.wait_for(drain(consumer.messages("inner", 0, 0), got), 5)
        assert got == [b"first"]  # what came before the bad wrapper, once
        assert "compressed wrapper" in str(info.value)
        assert requests(cluster) - before == 1


async def test_group_consumer_mid_message_offset_and_inner_partial_entry(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """A committed offset inside a message, and a corrupt wrapper: each partition stops
    with the typed error through getmany, and is not fetched again (no spin)."""
    async with kafka_cluster(1, num_partitions=1) as cluster, ZooKeeper(zookeeper) as zk:
        at = await hostile_topics(cluster)
        for topic in ("mid", "inner"):
            await eventually(lambda t=topic: zk.exists(f"/brokers/topics/{t}/0"))
        await zk.write_persistent("/consumers/g/offsets/mid/0-0", str(MID))
        for topic, offset, error in (("mid", MID, InvalidMessageSizeError), ("inner", at, None)):
            async with Consumer(topic, group="g", zookeeper=zookeeper, fetch_size=256) as member:
                got: list[bytes] = []
                with pytest.raises(InvalidMessageSizeError) as info:
                    await asyncio.wait_for(until_error(member, got), 5)
                assert f"{topic}/0-0 at offset {offset}: " in str(info.value)
                assert got == ([] if error else [b"first"])
                settled = requests(cluster)
                await asyncio.sleep(0.5)  # 5 fetch backoffs: the partition stays halted
                assert requests(cluster) - settled <= 1


@pytest.mark.parametrize(
    ("topic", "offset", "expected"),
    [("mid", MID, "not the offset of a message"), ("inner", 0, "compressed")],
)
async def test_console_consumer_mid_message_offset_and_inner_partial_entry(
    cluster: KafkaCluster, topic: str, offset: int, expected: str
) -> None:
    at = await hostile_topics(cluster)
    broker = cluster.broker(0)
    code, out, err = await run_cli(
        "consume",
        topic,
        "--brokers",
        f"0:{broker.host}:{broker.port}",
        "--offset",
        str(offset),
        "--fetch-size",
        "256",
        timeout=20,
    )
    assert code == 1, err
    assert out == (b"" if topic == "mid" else b"first\n")
    assert f"at offset {MID if topic == 'mid' else at}: " in err, err
    assert expected in err
    assert "Traceback" not in err


async def test_group_consumer_message_larger_than_max_fetch_size(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=1) as cluster, ZooKeeper(zookeeper) as zk:
        await produce(cluster, "big", [b"small", b"B" * 5000, b"after"])
        await eventually(lambda: zk.exists("/brokers/topics/big/0"))
        options = {"fetch_size": 100, "max_fetch_size": 4096}
        async with Consumer("big", group="g", zookeeper=zookeeper, **options) as member:
            got: list[bytes] = []
            with pytest.raises(MessageTooLargeError) as info:
                await asyncio.wait_for(until_error(member, got), 5)
            assert got == [b"small"]
            assert (info.value.offset, info.value.size) == (entry_size(5), 5006)


# -- the decompression bound in consumers --------------------------------------------------


def test_consumers_bound_defaults_to_the_largest_fetch_and_at_least_64_mib() -> None:
    assert decompression_bound(1 << 20) == 64 << 20
    assert decompression_bound(100 << 20) == 100 << 20
    assert decompression_bound(1 << 20, 5000) == 5000
    with pytest.raises(ValueError, match="max_decompressed_bytes"):
        decompression_bound(1 << 20, 0)
    assert SimpleConsumer(max_fetch_size=128 << 20).max_decompressed_bytes == 128 << 20
    assert Consumer("t", group="g", zookeeper="127.0.0.1:1").max_decompressed_bytes == 64 << 20


async def test_simple_consumer_reads_wrappers_past_the_bound_one_fetch_at_a_time(
    cluster: KafkaCluster,
) -> None:
    """Wrappers of 10 KB decompressed, a bound of 25 KB: each fetch decodes what fits
    and the next starts at the wrapper that did not; a wrapper alone over the bound is
    a CompressionError naming where it is."""
    values = [b"%05d" % i + bytes(10_000) for i in range(10)]
    broker = cluster.broker(0)
    conn = await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port))
    for value in values:
        await conn.produce("packed", 0, [value], compression="gzip")
    await conn.produce("packed", 0, [bytes(30_000)], compression="gzip", confirm=True)
    await conn.close()
    options = {"max_decompressed_bytes": 25_000}
    async with SimpleConsumer(broker.host, broker.port, **options) as consumer:
        got: list[bytes] = []
        before = requests(cluster)
        with pytest.raises(CompressionError, match=r"packed/0 at offset \d+: .*25000") as info:
            await asyncio.wait_for(drain(consumer.messages("packed", 0, 0), got), 5)
        assert got == values
        assert info.value.limit == 25_000
        assert requests(cluster) - before <= 6  # 2 wrappers a fetch, then the big one

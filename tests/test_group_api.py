"""The group consumer's aiokafka-style API, method by method, against an embedded broker
and a real ZooKeeper: stop and ConsumerStoppedError, commit of given offsets, seeks to the
beginning / end / committed offsets, pause and resume, getmany / getone of chosen
partitions, position, highwater, beginning and end offsets, metrics and value
deserializers (the deprecated seconds-based ``request_timeout``: test_units)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from aiokafka07 import ConsumerRecord, Producer
from aiokafka07.errors import (
    ConsumerStoppedError,
    DeserializationError,
    IllegalStateError,
)
from aiokafka07.group.consumer import COMMIT_PARTITIONS, Consumer
from aiokafka07.records import TopicPartition
from aiokafka07.testing import KafkaCluster
from aiokafka07.zookeeper import ZooKeeper

from .deprecations import no_deprecation, overload_says, warns_once
from .groups import (
    ONE_BY_TWO,
    TOPIC,
    committed_offsets,
    log_ends,
    member,
    partitions_of,
    produce,
    running_cluster,
    source_of,
    wait_registered,
)
from .wire import eventually

TP0, TP1 = TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 0, 1)
ELSEWHERE = TopicPartition(TOPIC, 7, 0)  # not owned by anyone


def of(values: list[bytes], tp: TopicPartition) -> list[bytes]:
    return [v for v in values if source_of(v) == tp.name]


async def drain(
    consumer: Consumer, count: int, *partitions: TopicPartition
) -> list[ConsumerRecord]:
    """``count`` records via getmany (of ``partitions``, if given)."""
    got: list[ConsumerRecord] = []
    while len(got) < count:
        batch = await consumer.getmany(*partitions, timeout_ms=5000)
        assert batch, f"only {len(got)} of {count} records within 5 s"
        got += [r for records in batch.values() for r in records]
    return got


async def started(zookeeper: str, **options: Any) -> Consumer:
    consumer = member(zookeeper, auto_commit=False, **options)
    await consumer.start()
    return consumer


@dataclass
class Scene:
    """A broker with two partitions holding ``produced`` (their log ``ends``), and a
    started member without auto-commit owning both."""

    cluster: KafkaCluster
    producer: Producer
    zk: ZooKeeper
    produced: list[bytes]
    ends: dict[str, int]
    consumer: Consumer


@contextlib.asynccontextmanager
async def scene(kafka_cluster: Any, zookeeper: str, per_partition: int) -> AsyncIterator[Scene]:
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), per_partition, "v")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        ends = await log_ends(cluster, TOPIC)
        consumer = await started(zookeeper)
        try:
            yield Scene(cluster, producer, zk, produced, ends, consumer)
        finally:
            await consumer.close()


async def test_stop_ends_iteration_and_getone_getmany_raise_consumer_stopped(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=2), Producer(zookeeper=zookeeper) as producer:
        await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 1, "s")
        consumer = await started(zookeeper)
        await drain(consumer, 2)
        waiting = asyncio.create_task(consumer.getone())  # nothing more comes
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await consumer.stop()
        with pytest.raises(ConsumerStoppedError):
            await asyncio.wait_for(waiting, 5)  # woken by the stop
        with pytest.raises(ConsumerStoppedError):
            await consumer.getone()
        with pytest.raises(ConsumerStoppedError):
            await consumer.getmany(timeout_ms=100)
        with pytest.raises(ConsumerStoppedError):
            consumer.streams[0].next_nowait()
        with pytest.raises(ConsumerStoppedError):
            await consumer.commit()
        with pytest.raises(ConsumerStoppedError):
            await consumer.start()
        assert [r async for r in consumer] == []  # iteration just ends
        assert [r async for r in consumer.streams[0]] == []
        assert consumer.closed
        await consumer.stop()  # twice is fine


async def test_commit_of_given_offsets_commits_exactly_those(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with scene(kafka_cluster, zookeeper, 10) as sc:
        zk, produced, ends, consumer = sc.zk, sc.produced, sc.ends, sc.consumer
        got = await drain(consumer, len(produced))
        third = [r for r in got if r.partition == 0][2]
        await consumer.commit({TP0: third.offset})  # not where it stands: exactly this
        assert await committed_offsets(zk, "g", TOPIC) == {"0-0": str(third.offset), "0-1": "0"}
        assert await consumer.committed(TP0) == third.offset
        assert consumer.metrics.partitions[TP0].committed == third.offset
        assert await consumer.position(TP0) == ends["0-0"]  # a commit does not seek
        await consumer.commit({TP0: 0, TP1: 5})  # lower offsets are written too
        assert await committed_offsets(zk, "g", TOPIC) == {"0-0": "0", "0-1": "5"}
        with pytest.raises(IllegalStateError):
            await consumer.commit({ELSEWHERE: 1})
        for bad in (-1, "10", True, 1.5):
            with pytest.raises(ValueError, match="cannot commit"):
                await consumer.commit({TP0: bad})  # type: ignore[dict-item]
        assert await committed_offsets(zk, "g", TOPIC) == {"0-0": "0", "0-1": "5"}
        await consumer.commit([TP1])  # partitions: their positions
        assert await committed_offsets(zk, "g", TOPIC) == {"0-0": "0", "0-1": str(ends["0-1"])}
        await consumer.commit()  # everything owned
        assert await committed_offsets(zk, "g", TOPIC) == {k: str(v) for k, v in ends.items()}


async def test_commit_of_partitions_keyword_still_commits_owned_positions_with_a_warning(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """``commit(partitions=...)``, the keyword before ``offsets``, keeps working for one
    release as it did: the positions of the partitions given that the member owns (others
    are skipped), ``None`` every owned position; with one DeprecationWarning naming
    ``offsets=``, at the caller's line."""
    async with scene(kafka_cluster, zookeeper, 10) as sc:
        zk, produced, ends, consumer = sc.zk, sc.produced, sc.ends, sc.consumer
        await drain(consumer, len(produced))
        assert await committed_offsets(zk, "g", TOPIC) == {"0-0": "0", "0-1": "0"}
        with warns_once(*COMMIT_PARTITIONS, __file__):
            await consumer.commit(partitions=[TP0, ELSEWHERE])  # type: ignore[call-overload]
        assert await committed_offsets(zk, "g", TOPIC) == {"0-0": str(ends["0-0"]), "0-1": "0"}
        with warns_once(*COMMIT_PARTITIONS, __file__):
            await consumer.commit(partitions=None)  # type: ignore[call-overload]
        assert await committed_offsets(zk, "g", TOPIC) == {k: str(v) for k, v in ends.items()}
        with no_deprecation():
            with pytest.raises(IllegalStateError):
                await consumer.commit(offsets=[TP0, ELSEWHERE])  # the new form refuses
            with pytest.raises(TypeError, match="not both"):
                await consumer.commit([TP0], partitions=[TP1])  # type: ignore[call-overload]
        await consumer.close()
        with warns_once(*COMMIT_PARTITIONS, __file__), pytest.raises(ConsumerStoppedError):
            await consumer.commit(partitions=[TP0])  # type: ignore[call-overload]
    overload_says(Consumer.commit, *COMMIT_PARTITIONS)


async def test_seek_to_beginning_end_and_committed(kafka_cluster: Any, zookeeper: str) -> None:
    async with scene(kafka_cluster, zookeeper, 5) as sc:
        produced, ends, consumer = sc.produced, sc.ends, sc.consumer
        got = await drain(consumer, len(produced))
        await consumer.seek_to_beginning(TP0)
        assert await consumer.position(TP0) == 0
        assert [r.value for r in await drain(consumer, 5, TP0)] == of(produced, TP0)
        await consumer.seek_to_beginning()  # all owned
        assert [r.value for r in await drain(consumer, 5, TP1)] == of(produced, TP1)
        await consumer.seek_to_end()
        assert {tp.name: await consumer.position(tp) for tp in (TP0, TP1)} == ends
        assert await consumer.getmany(timeout_ms=200) == {}
        middle = [r for r in got if r.partition == 1][1]
        await consumer.commit({TP1: middle.offset, TP0: 0})
        assert await consumer.seek_to_committed(TP1) == {TP1: middle.offset}
        assert await consumer.position(TP1) == middle.offset
        assert [r.value for r in await drain(consumer, 3, TP1)] == of(produced, TP1)[2:]
        assert await consumer.seek_to_committed() == {TP0: 0, TP1: middle.offset}
        assert [r.value for r in await drain(consumer, 5, TP0)] == of(produced, TP0)
        with pytest.raises(IllegalStateError):
            await consumer.seek_to_beginning(ELSEWHERE)
        with pytest.raises(IllegalStateError):
            consumer.seek(ELSEWHERE, 0)
        with pytest.raises(ValueError, match="non-negative"):
            consumer.seek(TP0, -1)


async def test_pause_holds_back_a_partition_until_resume(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with scene(kafka_cluster, zookeeper, 10) as sc:
        producer, produced, consumer = sc.producer, sc.produced, sc.consumer
        # Both partitions fetched and buffered, nothing handed out yet.
        await eventually(lambda: consumer.metrics.buffered_bytes >= 2 * 10 * 20)
        consumer.pause(TP0)
        consumer.pause(TP0)  # twice is fine
        assert consumer.paused() == {TP0}
        assert consumer.metrics.partitions[TP0].paused
        first = await drain(consumer, 10)
        assert [r.value for r in first] == of(produced, TP1)  # nothing of TP0
        later = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 5, "q")
        second = await drain(consumer, 5)
        assert [r.value for r in second] == of(later, TP1)
        await asyncio.sleep(0.2)
        assert await consumer.getmany(timeout_ms=100) == {}
        assert await consumer.position(TP0) == 0
        consumer.resume(TP0)
        assert consumer.paused() == set()
        rest = await drain(consumer, 15)
        assert [r.value for r in rest] == of(produced, TP0) + of(later, TP0)
        with pytest.raises(IllegalStateError):
            consumer.pause(ELSEWHERE)


async def test_getmany_and_getone_of_chosen_partitions(kafka_cluster: Any, zookeeper: str) -> None:
    async with scene(kafka_cluster, zookeeper, 10) as sc:
        produced, consumer = sc.produced, sc.consumer
        await eventually(lambda: consumer.metrics.buffered_bytes > 0)
        batch = await consumer.getmany(TP1, timeout_ms=5000, max_records=3)
        assert list(batch) == [TP1]
        assert [r.value for r in batch[TP1]] == of(produced, TP1)[:3]
        one = await asyncio.wait_for(consumer.getone(TP0), 5)
        assert one.value == of(produced, TP0)[0]
        assert await consumer.position(TP0) == one.offset
        rest = await drain(consumer, 16, TP0, TP1)
        assert [r.value for r in rest if r.partition == 0] == of(produced, TP0)[1:]
        assert [r.value for r in rest if r.partition == 1] == of(produced, TP1)[3:]
        for bad in (0, -1):
            with pytest.raises(ValueError, match="max_records"):
                await consumer.getmany(max_records=bad)
        with pytest.raises(TypeError, match="TopicPartition"):
            await consumer.getmany(("events", 0, 0))  # type: ignore[arg-type]


async def test_position_highwater_offsets_and_metrics(kafka_cluster: Any, zookeeper: str) -> None:
    async with scene(kafka_cluster, zookeeper, 5) as sc:
        cluster, producer, produced, ends, consumer = (
            sc.cluster,
            sc.producer,
            sc.produced,
            sc.ends,
            sc.consumer,
        )
        assert {await consumer.position(tp) for tp in (TP0, TP1)} == {0}
        await drain(consumer, len(produced))
        # A fetch that came back short reached the log end: highwater is exact.
        await eventually(lambda: consumer.highwater(TP0) == ends["0-0"])
        metrics = consumer.metrics
        assert set(metrics.partitions) == consumer.assignment() == {TP0, TP1}
        assert metrics.partitions[TP1].position == ends["0-1"]
        assert metrics.partitions[TP1].committed == 0
        assert metrics.partitions[TP0].lag == 0
        assert metrics.records == len(produced)
        assert metrics.rebalances == consumer.rebalances == 1
        assert metrics.generation == 1
        assert metrics.fetcher_crashes == metrics.listener_errors == 0
        assert await consumer.beginning_offsets([TP0, TP1]) == {TP0: 0, TP1: 0}
        assert await consumer.end_offsets([TP0, TP1]) == {
            TP0: ends["0-0"],
            TP1: ends["0-1"],
        }
        consumer.pause(TP0)  # so what comes next stays unread
        more = await produce(producer, TOPIC, [(0, 0)], 3, "i")
        new_end = (await log_ends(cluster, TOPIC))["0-0"]
        assert (await consumer.end_offsets([TP0]))[TP0] == new_end
        assert consumer.highwater(TP0) == new_end
        assert consumer.metrics.partitions[TP0].lag == new_end - ends["0-0"] > 0
        consumer.resume(TP0)
        assert [r.value for r in await drain(consumer, 3)] == more
        assert consumer.metrics.lag == 0
        for call in (consumer.highwater, consumer.pause, consumer.resume):
            with pytest.raises(IllegalStateError):
                call(ELSEWHERE)
        with pytest.raises(IllegalStateError):
            await consumer.position(ELSEWHERE)


async def test_value_deserializer_and_a_value_it_cannot_read(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with running_cluster(kafka_cluster, zookeeper, 1, 1) as (_, producer, zk):
        for value in (b"1", b"2", b"x", b"4"):
            await producer.send_and_wait(TOPIC, value, partition=(0, 0))
        await wait_registered(zk, TOPIC, {0: 1})
        consumer = await started(zookeeper, value_deserializer=int, consumer_timeout_ms=300)
        try:
            values: list[int] = []

            async def iterate() -> None:
                async for record in consumer:
                    values.append(record.value)  # type: ignore[arg-type]

            with pytest.raises(DeserializationError) as info:
                await iterate()
            assert values == [1, 2]  # the ones before it, then the error
            assert info.value.record.value == b"x"
            assert isinstance(info.value.__cause__, ValueError)
            assert "events/0-0 at offset " in str(info.value)
            assert await consumer.getmany(timeout_ms=200) == {}  # halted until a seek
            consumer.seek(TP0, info.value.record.offset)  # skip it
            assert (await asyncio.wait_for(consumer.getone(), 5)).value == 4
        finally:
            await consumer.close()

"""The Producer against embedded brokers and a real ZooKeeper: routing, batching,
compression, backpressure and faults. What was sent is read back from the brokers' logs."""

from __future__ import annotations

import asyncio
import collections
import gc
import os
from typing import Any

import pytest

from aiokafka07 import SimpleConsumer
from aiokafka07.errors import (
    DeliveryUnknownError,
    InvalidConfigError,
    InvalidPartitionError,
    MessageTooLargeError,
    ProduceNotConfirmedError,
    ProducerClosedError,
    QueueFullError,
)
from aiokafka07.partitioner import java_hash_code, java_partition_index
from aiokafka07.producer import Producer
from aiokafka07.producer.accumulator import future_maker
from aiokafka07.producer.legacy import SEND_BATCH_OF_VALUES
from aiokafka07.protocol import decode_message_set, encode_message_set, gzip_compress
from aiokafka07.testing import KafkaCluster, ZooKeeperServer, expire_session
from aiokafka07.zookeeper import ZooKeeper

from .deprecations import no_deprecation, overload_says, warns_once
from .wire import eventually

Logs = dict[tuple[int, int], list[bytes]]


async def read_logs(cluster: KafkaCluster, topic: str) -> Logs:
    """Every message of ``topic`` on every running broker, per (broker, partition)."""
    logs: Logs = {}
    for broker in cluster.running:
        async with SimpleConsumer(broker.host, broker.port, broker_id=broker.broker_id) as c:
            for partition in range(broker.config.partitions_for(topic)):
                values = [m.value async for m in c.messages(topic, partition, 0)]
                if values:
                    logs[(broker.broker_id, partition)] = values
    return logs


def all_values(logs: Logs) -> list[bytes]:
    return [v for values in logs.values() for v in values]


async def test_static_mode_delivers_everything_once(kafka_cluster: Any) -> None:
    async with kafka_cluster(2, zookeeper=None, num_partitions=3, flush="shipped") as cluster:
        # The broker picks one partition per produced batch: small batches show the spread.
        async with Producer(brokers=cluster.broker_list, linger_ms=2, batch_size=50) as producer:
            futures = [await producer.send("static", b"m%d" % i) for i in range(3000)]
            results = await asyncio.gather(*futures)
        assert {r.partition for r in results} == {-1}  # the broker picks (0.7.2 broker.list)
        assert {r.broker_id for r in results} == {0, 1}
        logs = await read_logs(cluster, "static")
        assert sorted(all_values(logs)) == sorted(b"m%d" % i for i in range(3000))
        assert len(logs) == 6  # both brokers spread over their 3 partitions
        assert producer.metrics.messages_sent == 3000


async def test_keys_land_where_a_java_producer_puts_them(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with kafka_cluster(2, num_partitions=2, first_id=9, flush="shipped") as cluster:
        # Register the topic on both brokers (ids 9 and 10: numeric order 9 < 10).
        async with Producer(zookeeper=zookeeper) as producer:
            for broker_id in (9, 10):
                for partition in (0, 1):
                    await producer.send_and_wait("keyed", b"seed", partition=(broker_id, partition))
            await eventually(lambda: len(producer.cluster.partitions("keyed")) == 4)
            candidates = producer.cluster.partitions("keyed")
            assert candidates == [(9, 0), (9, 1), (10, 0), (10, 1)]
            keys = [f"user-{i}" for i in range(200)] + ["日本", "\U0001f600", "hello"]
            sent = {key: await producer.send("keyed", key.encode(), key=key) for key in keys}
            results = {key: await future for key, future in sent.items()}
        for key, result in results.items():
            expected = candidates[java_partition_index(java_hash_code(key), 4)]
            assert (result.broker_id, result.partition) == expected, key
        logs = await read_logs(cluster, "keyed")
        for (broker_id, partition), values in logs.items():
            for value in values:
                if value != b"seed":
                    key = value.decode()
                    assert (results[key].broker_id, results[key].partition) == (
                        broker_id,
                        partition,
                    )


async def test_new_topic_goes_to_partition_0_of_every_live_broker(
    kafka_cluster: Any, zookeeper: str
) -> None:
    # Keyless messages keep a random target per batch: small batches show the spread.
    # A topic no broker has registered yet goes to partition 0 of every live broker
    # (spec ZOOKEEPER.md 6.3); once a broker registers it (on its first write), the
    # producer's watch merges that broker's real partitions in, while the brokers that
    # have not registered it stay in rotation through their partition 0.
    async with (
        kafka_cluster(3, num_partitions=4, flush="shipped") as cluster,
        Producer(zookeeper=zookeeper, batch_size=5) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        first = await (await producer.send("fresh", b"x0"))
        assert first.partition == 0  # nothing was registered before it
        results = await asyncio.gather(
            *[await producer.send("fresh", b"x%d" % i) for i in range(1, 600)]
        )
        results.insert(0, first)
        registered = {
            int(broker): int(await zk.get_data(f"/brokers/topics/fresh/{broker}") or 0)
            for broker in await zk.get_children("/brokers/topics/fresh")
        }
        for r in results:
            # Beyond partition 0 only where the broker registered that many partitions.
            assert r.partition == 0 or r.partition < registered.get(r.broker_id, 0), r
        assert {r.broker_id for r in results} == {0, 1, 2}
        logs = await read_logs(cluster, "fresh")
        assert len(all_values(logs)) == 600
        assert {key for key, values in logs.items() if values} == {
            (r.broker_id, r.partition) for r in results
        }


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
async def test_compression_round_trips_through_the_broker(kafka_cluster: Any, codec: str) -> None:
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        async with Producer(
            brokers=cluster.broker_list, compression=codec, compressed_topics=["z"]
        ) as p:
            values = [b"compressible %d " % i * 5 for i in range(500)]
            await asyncio.gather(*[await p.send("z", v) for v in values])
            await asyncio.gather(*[await p.send("plain", v) for v in values[:10]])
        broker = cluster.broker(0)
        async with SimpleConsumer(broker.host, broker.port) as c:
            got = [m async for m in c.messages("z", 0, 0)]
            plain = await c.fetch("plain", 0, 0)
        assert [m.value for m in got] == values
        assert len({m.offset for m in got}) < len(got)  # wrappers: inner messages share offsets
        assert all(m.attributes == 0 for m in plain.messages)  # only compressed_topics compress


async def test_per_partition_order_is_kept(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None, num_partitions=2, flush="shipped") as cluster:
        async with Producer(brokers=cluster.broker_list, batch_size=37, max_in_flight=4) as p:
            futures = [
                await p.send("ordered", b"%06d" % i, partition=(0, i % 2)) for i in range(5000)
            ]
            await asyncio.gather(*futures)
        logs = await read_logs(cluster, "ordered")
        for partition in (0, 1):
            assert logs[(0, partition)] == [b"%06d" % i for i in range(partition, 5000, 2)]


async def test_backpressure_and_oversized_messages(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        async with Producer(
            brokers=cluster.broker_list,
            max_buffered_messages=50,
            linger_ms=500,  # far longer than the few loop turns below, however busy
            max_message_size=100,
        ) as p:
            with pytest.raises(MessageTooLargeError):
                await p.send("bp", b"x" * 101)
            futures = [p.send_nowait("bp", b"%d" % i) for i in range(50)]
            with pytest.raises(QueueFullError):
                p.send_nowait("bp", b"one too many")
            waiter = asyncio.ensure_future(p.send("bp", b"waits"))
            for _ in range(3):
                await asyncio.sleep(0)  # the waiter runs, and finds no room
            assert not waiter.done()  # blocked until the linger flush makes room
            futures.append(await asyncio.wait_for(waiter, 5))
            await asyncio.gather(*futures)
        assert len(all_values(await read_logs(cluster, "bp"))) == 51


async def test_new_broker_receives_and_stopped_broker_stops(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with (
        kafka_cluster(2, num_partitions=1, flush="shipped") as cluster,
        Producer(zookeeper=zookeeper, linger_ms=1) as p,
    ):
        await asyncio.gather(*[await p.send("route", b"seed") for _ in range(50)])
        await eventually(lambda: len(p.cluster.partitions("route")) == 2)
        new = cluster.add_broker(2)
        await cluster.start_broker(2)
        await eventually(lambda: 2 in p.cluster.brokers, timeout=15)
        # A registered topic reaches a new broker once that broker registers it too (0.7.2:
        # ZOOKEEPER §6.2), which it does on its first write of the topic.
        await p.send_and_wait("route", b"first", partition=(2, 0))

        async def reaches_new_broker() -> bool:
            results = await asyncio.gather(*[await p.send("route", b"after") for _ in range(30)])
            return any(r.broker_id == 2 for r in results)

        await eventually(reaches_new_broker, timeout=15)
        await cluster.stop_broker(1)
        await eventually(lambda: 1 not in p.cluster.brokers, timeout=15)
        results = await asyncio.gather(*[await p.send("route", b"late") for _ in range(100)])
        assert {r.broker_id for r in results} <= {0, 2}
        assert new.running


async def test_broker_killed_during_load_loses_nothing(kafka_cluster: Any, zookeeper: str) -> None:
    """A broker killed mid-send and restarted mid-send: every message ends, every one is
    confirmed (retried elsewhere), none is missing from the logs, and the restarted
    broker takes messages again."""
    async with kafka_cluster(3, num_partitions=2, flush="shipped") as cluster:
        async with Producer(zookeeper=zookeeper, linger_ms=1, retry_backoff_ms=50, retries=10) as p:
            await asyncio.gather(*[await p.send("load", b"warm") for _ in range(30)])
            futures = []
            for i in range(9000):
                futures.append(await p.send("load", b"v%05d" % i))
                if i == 2000:
                    await cluster.crash_broker(1)
                if i == 5000:
                    await cluster.start_broker(1)
                    await p.cluster.wait_for(lambda c: 1 in c.brokers, timeout_ms=15_000)
                if i % 500 == 0:
                    await asyncio.sleep(0.01)
            _, pending = await asyncio.wait(futures, timeout=60)
            assert not pending  # every message ended
            results = [f.result() for f in futures]  # and none failed

            # The restarted broker takes messages again; keyless ones too, once it has
            # registered the topic (0.7.2: on its first write of it, ZOOKEEPER §6.2).
            assert (await p.send_and_wait("load", b"pinned", partition=(1, 0))).confirmed

            async def reaches_restarted_broker() -> bool:
                later = await asyncio.gather(*[await p.send("load", b"later") for _ in range(30)])
                return any(r.broker_id == 1 for r in later)

            await eventually(reaches_restarted_broker, timeout=20)
        assert all(r.confirmed for r in results)
        values = collections.Counter(all_values(await read_logs(cluster, "load")))
        missing = [i for i in range(9000) if values[b"v%05d" % i] == 0]
        assert missing == []  # at least once: duplicates allowed, losses not


async def test_routing_survives_session_expiry(
    kafka_cluster: Any, zookeeper: str, zookeeper_server: ZooKeeperServer
) -> None:
    async with (
        kafka_cluster(2, flush="shipped") as cluster,
        Producer(zookeeper=zookeeper, linger_ms=1) as p,
    ):
        await asyncio.gather(*[await p.send("exp", b"a") for _ in range(20)])
        zk = p.cluster.zookeeper  # type: ignore[attr-defined]
        await expire_session(
            zookeeper_server.connect_string, zk.session_id, zk.client.session.password
        )
        await cluster.stop_broker(0)
        await eventually(lambda: set(p.cluster.brokers) == {1}, timeout=20)
        results = await asyncio.gather(*[await p.send("exp", b"b") for _ in range(50)])
        assert {r.broker_id for r in results} == {1}


async def test_close_under_load_delivers_everything_accepted(kafka_cluster: Any) -> None:
    async with kafka_cluster(2, zookeeper=None, flush="shipped") as cluster:
        p = Producer(brokers=cluster.broker_list, linger_ms=1000)
        await p.start()
        futures = [await p.send("closing", b"%d" % i) for i in range(20000)]
        await p.close()
        assert all(f.done() and not f.exception() for f in futures)
        assert len(all_values(await read_logs(cluster, "closing"))) == 20000
        with pytest.raises(ProducerClosedError):
            await p.send("closing", b"late")


async def test_close_names_what_was_not_delivered(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        p = Producer(
            brokers=cluster.broker_list, retries=1, retry_backoff_ms=10, connect_timeout_ms=500
        )
        await p.start()
        await cluster.stop_broker(0)
        futures = [await p.send("gone", b"x") for _ in range(10)]
        with pytest.raises(ProducerClosedError) as info:
            await p.close()
        assert info.value.undelivered == 10
        assert "gone" in str(info.value)
        assert all(f.exception() is not None for f in futures)


async def test_static_mode_refuses_a_partitioner() -> None:
    with pytest.raises(ValueError, match="partitioner"):
        Producer(brokers="0:127.0.0.1:1", partitioner=lambda key, n: 0)


@pytest.mark.parametrize("policy", ["fail", "retry"])
async def test_unconfirmed_batches_fail_or_retry_as_chosen(kafka_cluster: Any, policy: str) -> None:
    async with kafka_cluster(1, zookeeper=None, num_partitions=2, flush="shipped") as cluster:
        p = Producer(
            brokers=cluster.broker_list, on_unconfirmed=policy, retries=2, retry_backoff_ms=5
        )
        await p.start()
        # Partition 7 does not exist: the broker refuses the produce by closing the socket.
        doomed = await p.send("refused", b"x", partition=(0, 7))
        ok = await p.send("refused", b"fine", partition=(0, 1))
        # Settled from the broker afterwards: it has no partition 7, so that entry is not
        # in its log; sent alone once more (the view may have changed), it fails so.
        with pytest.raises(InvalidPartitionError, match="no partition 7") as info:
            await doomed
        assert isinstance(info.value.__cause__, ProduceNotConfirmedError)
        with pytest.raises(ProducerClosedError) as closed:
            await p.close()
        assert "refused/0-7" in str(closed.value)
        if policy == "fail":
            # Both entries went in one MULTIPRODUCE that was never confirmed. The good
            # one's log end cannot tell (the broker lived on, it may not have flushed):
            # at most once means it fails, as unknown.
            assert p.metrics.retries == 1
            assert (closed.value.undelivered, closed.value.unknown) == (2, 1)
            with pytest.raises(DeliveryUnknownError):
                await ok
        else:
            # Retried entries go alone: the good one is delivered.
            assert (await ok).partition == 1
            assert (closed.value.undelivered, closed.value.unknown) == (1, 0)
            assert p.metrics.retries == 1 + 1
            assert all_values(await read_logs(cluster, "refused")).count(b"fine") == 1


async def test_a_refusal_ending_pipelined_requests_isolates_each_of_them(
    kafka_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused request closes the connection under the requests pipelined with it;
    which one the broker refused cannot be known, so each goes alone: a good entry is
    delivered after one retry although every request holds one entry (max_request_bytes
    1), and the bad one's refusals never take it down again. (Without jitter both
    retries fall due together, so without isolation they would be pipelined again.)"""
    monkeypatch.setattr("aiokafka07.backoff.random.uniform", lambda low, high: 1.0)
    async with kafka_cluster(1, zookeeper=None, num_partitions=2, flush="shipped") as cluster:
        p = Producer(
            brokers=cluster.broker_list,
            max_request_bytes=1,
            linger_ms=50,
            retries=1,
            retry_backoff_ms=5,
        )
        await p.start()
        doomed = await p.send("refused", b"x", partition=(0, 7))
        ok = await p.send("refused", b"fine", partition=(0, 1))
        assert (await ok).partition == 1
        with pytest.raises(InvalidPartitionError, match="no partition 7"):
            await doomed
        with pytest.raises(ProducerClosedError) as closed:
            await p.close()
        assert closed.value.undelivered == 1
        assert p.metrics.retries == 2
        assert all_values(await read_logs(cluster, "refused")).count(b"fine") == 1


async def shallow_log(cluster: KafkaCluster, topic: str, partition: int) -> list[Any]:
    """The top-level entries (compressed wrappers undecompressed) of one partition of
    broker 0."""
    broker = cluster.broker(0)
    async with SimpleConsumer(broker.host, broker.port) as c:
        conn = await c.connection()
        answer = await conn.fetch(topic, partition, 0, 16 << 20)
    assert answer.error_code == 0
    return decode_message_set(answer.message_set, shallow=True).messages


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
async def test_incompressible_message_at_the_size_limit_is_delivered(
    kafka_cluster: Any, codec: str
) -> None:
    """Random bytes grow when compressed: a wrapper around a message of max.message.size
    bytes exceeds the limit, and the broker would drop it silently. It goes uncompressed
    instead (its payload fits), and so does any other message whose wrapper is too big."""
    big = os.urandom(1_000_000)
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        async with Producer(brokers=cluster.broker_list, compression=codec) as p:
            result = await p.send_and_wait("big", big, partition=(0, 0))
            assert result.confirmed
            small = [b"small %d " % i * 10 for i in range(20)]
            futures = [await p.send("big", v, partition=(0, 0)) for v in small[:10]]
            futures.append(await p.send("big", big, partition=(0, 0)))
            futures += [await p.send("big", v, partition=(0, 0)) for v in small[10:]]
            await asyncio.gather(*futures)
        logs = await read_logs(cluster, "big")
        assert logs[(0, 0)] == [big, *small[:10], big, *small[10:]]
        entries = await shallow_log(cluster, "big", 0)
        assert all(len(e.value) <= 1_000_000 for e in entries)
        assert [len(e.value) for e in entries if e.attributes == 0].count(1_000_000) == 2
        assert any(e.attributes != 0 for e in entries)  # the small ones stay compressed


async def test_errors_at_accept_leave_nothing_queued(kafka_cluster: Any, zookeeper: str) -> None:
    """A key the default partitioner cannot hash, or a partitioner that raises, fails
    send() at once and leaves the buffer as it was (a full-looking buffer would block
    every later send())."""

    def broken(key: Any, n: int) -> int:
        raise RuntimeError("partitioner bug")

    async with kafka_cluster(1, num_partitions=2, flush="shipped"):
        async with Producer(zookeeper=zookeeper, max_buffered_messages=3, linger_ms=1) as p:
            for _ in range(5):
                with pytest.raises(TypeError, match="float key"):
                    await p.send("keys", b"x", key=3.5)
                with pytest.raises(TypeError, match="float key"):
                    p.send_nowait("keys", b"x", key=3.5)
            assert (p.metrics.queued_messages, p.metrics.queued_bytes) == (0, 0)
            result = await asyncio.wait_for(p.send_and_wait("keys", b"ok", key="k"), 5)
            assert result.confirmed
        async with Producer(
            zookeeper=zookeeper, partitioner=broken, max_buffered_messages=3, linger_ms=1
        ) as p:
            for _ in range(5):
                with pytest.raises(RuntimeError, match="partitioner bug"):
                    await p.send("keys", b"x", key="k")
            assert (p.metrics.queued_messages, p.metrics.queued_bytes) == (0, 0)
            await asyncio.wait_for(p.send_and_wait("keys", b"keyless"), 5)
            assert p.metrics.queued_messages == 0


async def test_partitioner_failing_on_a_retry_fails_the_message(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """A message routed again for a retry whose partitioner raises is failed with that
    error: never left pending, never counted as queued."""
    calls = 0

    def flaky(key: Any, n: int) -> int:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("partitioner bug")
        return n - 1  # (0, 2), which the broker does not have: it refuses the produce

    async with kafka_cluster(1, num_partitions=1, flush="shipped"), ZooKeeper(zookeeper) as zk:
        # A registration claiming 3 partitions where the broker has 1 (a misconfiguration).
        await zk.write_persistent("/brokers/topics/flaky/0", "3")
        p = Producer(zookeeper=zookeeper, partitioner=flaky, retry_backoff_ms=5)
        await p.start()
        await eventually(lambda: len(p.cluster.partitions("flaky")) == 3)
        future = await p.send("flaky", b"x", key="k")
        with pytest.raises(RuntimeError, match="partitioner bug"):
            await asyncio.wait_for(future, 5)
        with pytest.raises(ProducerClosedError) as closed:
            await p.close()
        assert closed.value.undelivered == 1
        assert (p.metrics.queued_messages, p.metrics.queued_bytes) == (0, 0)


@pytest.mark.parametrize("topics", [[], ()])
async def test_empty_compressed_topics_compresses_every_topic(
    kafka_cluster: Any, topics: Any
) -> None:
    # CONFIG §2.1: an empty compressed.topics means all topics.
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        async with Producer(
            brokers=cluster.broker_list, compression="gzip", compressed_topics=topics
        ) as p:
            values = [b"compress me %d" % i for i in range(50)]
            await asyncio.gather(*[await p.send("any", v, partition=(0, 0)) for v in values])
        assert all_values(await read_logs(cluster, "any")) == values
        entries = await shallow_log(cluster, "any", 0)
        assert entries
        assert all(e.attributes == 1 for e in entries)


async def test_invalid_numbers_are_named() -> None:
    with pytest.raises(ValueError, match="retries"):
        Producer(brokers="0:127.0.0.1:1", retries=-1)
    with pytest.raises(ValueError, match="batch_size"):
        Producer(brokers="0:127.0.0.1:1", batch_size=0)


async def test_send_and_wait_hurries_only_its_own_batch(kafka_cluster: Any) -> None:
    """With a long linger and another task producing, send_and_wait() still returns at
    once: it seals the batch its message is in, not the shared last one."""
    # Flushed per request, so each send_and_wait() is confirmed at once: with 0.7.2's
    # shipped flush each waits 1-2 s, time enough for the other task to fill a batch.
    async with kafka_cluster(1, zookeeper=None, num_partitions=2, flush="every-message") as cluster:
        # A 30 s linger: the other task's batches linger all through the test, however
        # busy the machine, and send_and_wait() returning in seconds is its own doing.
        async with Producer(brokers=cluster.broker_list, linger_ms=30_000) as p:
            others: list[asyncio.Future[Any]] = []
            stop = asyncio.Event()

            async def other_task() -> None:
                while not stop.is_set():
                    others.append(await p.send("busy", b"background", partition=(0, 1)))
                    await asyncio.sleep(0.001)

            task = asyncio.create_task(other_task())
            loop = asyncio.get_running_loop()
            for i in range(5):
                started = loop.time()
                result = await asyncio.wait_for(p.send_and_wait("now", b"%d" % i), 5)
                assert result.confirmed
                assert loop.time() - started < 10
            assert others
            assert not any(f.done() for f in others)  # still lingering
            stop.set()
            await task
        assert all(f.done() and not f.exception() for f in others)


async def test_create_batch_and_send_batch(kafka_cluster: Any, zookeeper: str) -> None:
    async with kafka_cluster(1, num_partitions=2, flush="shipped") as cluster:
        async with Producer(
            zookeeper=zookeeper, compression="gzip", batch_size=50, value_serializer=str.encode
        ) as p:
            await p.send_and_wait("batched", "seed", partition=(0, 1))
            await p.cluster.wait_for(lambda c: len(c.partitions("batched")) == 2, timeout_ms=10_000)
            assert await p.partitions_for("batched") == [(0, 0), (0, 1)]
            batch = p.create_batch()
            positions = [batch.append(f"v{i}") for i in range(60)]
            assert positions[:50] == list(range(50))
            assert positions[50:] == [None] * 10  # full at batch_size
            assert batch.record_count() == 50
            assert batch.size() == sum(len(f"v{i}") for i in range(50))
            with pytest.raises(ValueError, match="no key or timestamp"):
                batch.append("x", key="k")
            future = await p.send_batch(batch, "batched", partition=(0, 0))
            assert batch.append("late") is None  # sent: closed
            result = await asyncio.wait_for(future, 5)
            assert (result.broker_id, result.partition, result.confirmed) == (0, 0, True)
            keyed = p.create_batch()
            keyed.append("k1")
            keyed_result = await (await p.send_batch(keyed, "batched", key="user-1"))
            candidates = await p.partitions_for("batched")
            index = java_partition_index(java_hash_code("user-1"), len(candidates))
            assert (keyed_result.broker_id, keyed_result.partition) == candidates[index]
        logs = await read_logs(cluster, "batched")
        assert logs[(0, 0)][:50] == [b"v%d" % i for i in range(50)]
        assert b"k1" in logs[candidates[index]]
        entries = await shallow_log(cluster, "batched", 0)
        assert entries[0].attributes == 1  # the 50 messages went as one gzip wrapper
        with pytest.raises(ProducerClosedError):
            await p.send_batch(p.create_batch(), "batched")


async def test_send_batch_of_values_still_sends_each_value_with_a_deprecation_warning(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """``send_batch(topic, values, key=None, partition=None)``, the form before
    ``create_batch()``, keeps working for one release: each value goes as ``send()`` sends
    it and its future is returned (keyed values where the key routes, pinned ones to the
    partition), with one DeprecationWarning naming ``create_batch()`` and
    ``send_batch(batch, topic)``, at the caller's line."""
    async with kafka_cluster(1, num_partitions=2, flush="shipped") as cluster:
        async with Producer(zookeeper=zookeeper) as p:
            await p.send_and_wait("legacy", b"seed", partition=(0, 1))
            await p.cluster.wait_for(lambda c: len(c.partitions("legacy")) == 2, timeout_ms=10_000)
            with warns_once(*SEND_BATCH_OF_VALUES, __file__):
                keyed = await p.send_batch("legacy", [b"k1", b"k2", b"k3"], key="user-1")
            with warns_once(*SEND_BATCH_OF_VALUES, __file__):
                pinned = await p.send_batch("legacy", [b"p1", b"p2"], None, (0, 0))
            with warns_once(*SEND_BATCH_OF_VALUES, __file__):
                named = await p.send_batch(topic="legacy", values=[b"n1"], partition=(0, 1))
            assert [len(keyed), len(pinned), len(named)] == [3, 2, 1]  # a future per value
            candidates = await p.partitions_for("legacy")
            routed = candidates[java_partition_index(java_hash_code("user-1"), len(candidates))]
            assert {(r.broker_id, r.partition) for r in await asyncio.gather(*keyed)} == {routed}
            assert {(r.broker_id, r.partition) for r in await asyncio.gather(*pinned)} == {(0, 0)}
            assert [(r.broker_id, r.partition) for r in await asyncio.gather(*named)] == [(0, 1)]
            # What fits neither form is still a TypeError, and warns nothing.
            with no_deprecation():
                with pytest.raises(TypeError, match="BatchBuilder"):
                    await p.send_batch(42, [b"x"])  # type: ignore[call-overload]
                with pytest.raises(TypeError, match="multiple values for argument 'key'"):
                    await p.send_batch("legacy", [b"x"], "k", key="k")  # type: ignore[call-overload]
                with pytest.raises(TypeError, match="keyword only"):
                    await p.send_batch(p.create_batch(), "legacy", "k")  # type: ignore[call-overload]
                batch = p.create_batch()
                batch.append(b"b1")
                await (await p.send_batch(batch, "legacy", partition=(0, 0)))
        logs = await read_logs(cluster, "legacy")
        assert [v for v in logs[routed] if v.startswith(b"k")] == [b"k1", b"k2", b"k3"]
        assert logs[(0, 0)][-3:] == [b"p1", b"p2", b"b1"]
        assert logs[(0, 1)][-1:] == [b"n1"]
    overload_says(Producer.send_batch, *SEND_BATCH_OF_VALUES)


async def test_stop_is_close_and_a_string_is_one_compressed_topic(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        p = Producer(brokers=cluster.broker_list, compression="gzip", compressed_topics="abc")
        assert p.compressed_topics == frozenset({"abc"})
        await p.start()
        await asyncio.gather(*[await p.send(t, b"v" * 50, partition=(0, 0)) for t in "abc"])
        await asyncio.gather(*[await p.send("abc", b"v" * 50, partition=(0, 0))])
        await p.stop()
        with pytest.raises(ProducerClosedError):
            await p.send("abc", b"late")
        for topic in "abc":  # "a", "b", "c" are not compressed topics
            assert [e.attributes for e in await shallow_log(cluster, topic, 0)] == [0]
        assert [e.attributes for e in await shallow_log(cluster, "abc", 0)] == [1]


async def test_metrics_are_a_snapshot_that_counts_the_hot_path(kafka_cluster: Any) -> None:
    async with (
        kafka_cluster(1, zookeeper=None, flush="shipped") as cluster,
        Producer(brokers=cluster.broker_list, linger_ms=60_000) as p,
    ):
        for i in range(250):
            await p.send("snap", b"%03d" % i)
        before = p.metrics
        assert (before.queued_messages, before.queued_bytes) == (250, 750)
        await p.flush()
        after = p.metrics
        assert (after.queued_messages, after.messages_sent) == (0, 250)
        assert before.queued_messages == 250  # a snapshot: it did not change


async def test_batching_recovers_after_a_broker_crash_and_restart(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """Messages for 16 partitions of two brokers; broker 1 crashes mid-send and comes
    back. The messages of that phase take about as many batches and requests as as many
    did before the crash. A retry used to split a batch into one batch per message with
    a key or a partition, and each batch of a failed request went alone, one request
    each: this phase took 3,601 batches in 2,838 requests, against 963 in 129 before."""
    targets = [(b, p) for b in (0, 1) for p in range(8)]
    async with (
        kafka_cluster(2, num_partitions=8, flush="shipped") as cluster,
        Producer(zookeeper=zookeeper, retries=20, retry_backoff_ms=50) as producer,
    ):
        sent = 0

        async def send(count: int, *, crash_at: int | None = None) -> tuple[int, int]:
            nonlocal sent
            before = producer.metrics
            futures = []
            for i in range(count):
                # Pinned: the messages for broker 1 wait for it (keys would move).
                target = targets[sent % len(targets)]
                futures.append(await producer.send("rec", b"v%06d" % sent, partition=target))
                sent += 1
                if i % 500 == 0:
                    await asyncio.sleep(0.005)
                if i == crash_at:
                    await cluster.crash_broker(1)
                elif (
                    crash_at is not None
                    and not cluster.broker(1).running
                    and producer.metrics.retries > 1000  # retried while it was away
                ):
                    await cluster.start_broker(1)
            if crash_at is not None and not cluster.broker(1).running:
                # The loop may end before the crash cost 1000 retries (a loaded machine, a
                # fast producer): the producer goes on retrying in the background.
                await eventually(lambda: producer.metrics.retries > 1000, timeout=60)
                await cluster.start_broker(1)
            results = await asyncio.wait_for(asyncio.gather(*futures), 120)
            assert len(results) == count  # every one delivered
            after = producer.metrics
            return (
                after.batches_sent - before.batches_sent,
                after.requests_sent - before.requests_sent,
            )

        batches, requests = await send(30_000)
        crash_batches, crash_requests = await send(30_000, crash_at=5_000)
        assert crash_batches <= 1.5 * batches, (crash_batches, batches)
        assert crash_requests <= 3 * requests, (crash_requests, requests)


async def test_retries_wait_for_a_broker_while_the_view_has_none(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """Messages accepted just before the topic's only broker leaves the view (crashed:
    its ZooKeeper registration gone at once) are not failed at the first retry that finds
    no live broker (``NoBrokersError``): they wait at the backoff's pace, as retries do
    for a broker that left, and go out when it is back. Before, a retry that could not be
    routed failed its messages at once: one lost registration, as during a ZooKeeper
    session's expiry under load, dropped them with most of their retries unspent."""
    async with (
        kafka_cluster(1, flush="shipped") as cluster,
        Producer(zookeeper=zookeeper, retries=30, retry_backoff_ms=50, linger_ms=300) as p,
    ):
        await p.send_and_wait("away", b"first")  # the topic is registered
        futures = [await p.send("away", b"v%03d" % i) for i in range(200)]  # lingering
        keyed = [await p.send("away", b"k%03d" % i, key=f"k{i}") for i in range(100)]
        await cluster.crash_broker(0)
        await eventually(lambda: not p.cluster.brokers, timeout=15)
        await eventually(lambda: p.metrics.retries >= 300, timeout=15)  # both kinds retried
        await asyncio.sleep(0.3)  # more retries while nothing can be routed
        assert not any(f.done() for f in futures + keyed)
        await cluster.start_broker(0)
        results = await asyncio.wait_for(asyncio.gather(*futures, *keyed), 60)
        assert {r.broker_id for r in results} == {0}
        values = set(all_values(await read_logs(cluster, "away")))
    # (The crash may have taken "first" with it: a crash does not flush.)
    assert values >= {*(b"v%03d" % i for i in range(200)), *(b"k%03d" % i for i in range(100))}


async def test_gzip_compression_level_is_used_and_checked(kafka_cluster: Any) -> None:
    """The wrappers a producer writes with ``compression_level`` are deflated at that
    level (the stored payload is gzip_compress(inner set, level)); a level is gzip's
    only, 0 to 9, refused at construction otherwise."""
    for bad in (10, -1, True):
        with pytest.raises(InvalidConfigError, match="compression_level"):
            Producer(brokers="0:127.0.0.1:1", compression="gzip", compression_level=bad)
    with pytest.raises(InvalidConfigError, match=r"gzip only.*snappy"):
        Producer(brokers="0:127.0.0.1:1", compression="snappy", compression_level=1)
    with pytest.raises(InvalidConfigError, match=r"gzip only.*none"):
        Producer(brokers="0:127.0.0.1:1", compression_level=1)
    values = [b"level one, a little bigger %d " % i * 4 for i in range(40)]
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        for topic, level in (("level-1", 1), ("level-default", None)):
            async with Producer(
                brokers=cluster.broker_list, compression="gzip", compression_level=level
            ) as p:
                batch = p.create_batch()
                for value in values:
                    assert batch.append(value) is not None
                await (await p.send_batch(batch, topic, partition=(0, 0)))  # one wrapper
            (wrapper,) = await shallow_log(cluster, topic, 0)
            inner = encode_message_set(values)
            assert wrapper.value == gzip_compress(inner, 6 if level is None else level)
        assert all_values(await read_logs(cluster, "level-1")) == values


async def test_a_cancelled_send_took_nothing(kafka_cluster: Any) -> None:
    """send() yields to the sender (after a batch was sealed) before it takes the message,
    never after: a send() cancelled at that yield raises CancelledError and its message is
    not sent. (A message accepted and then cancelled would be delivered while its caller
    got no future: a duplicate-or-loss ambiguity for the caller.)"""
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        async with Producer(brokers=cluster.broker_list, batch_size=1) as p:
            first = await p.send("cancelled", b"one", partition=(0, 0))  # seals its batch
            second = asyncio.ensure_future(p.send("cancelled", b"two", partition=(0, 0)))
            await asyncio.sleep(0)  # it runs to its first await: the yield to the sender
            assert not second.done()
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
            await first
            await (await p.send("cancelled", b"three", partition=(0, 0)))
        assert all_values(await read_logs(cluster, "cancelled")) == [b"one", b"three"]


async def _send_keyless(broker_list: str, topic: str, count: int) -> list[asyncio.Future[Any]]:
    """``count`` keyless sends (the hot path) through a new producer, all delivered."""
    async with Producer(brokers=broker_list, linger_ms=1) as p:
        futures = [await p.send(topic, b"%d" % i) for i in range(count)]
        await asyncio.gather(*futures)
    return futures


async def test_send_futures_belong_to_the_running_loop(kafka_cluster: Any) -> None:
    """On a loop that keeps asyncio's own ``create_future`` the hot path makes the same
    future without calling it (``future_maker``): an ``asyncio.Future`` of the running
    loop, delivered like any other."""
    loop = asyncio.get_running_loop()
    async with kafka_cluster(1, zookeeper=None, flush="shipped") as cluster:
        futures = await _send_keyless(cluster.broker_list, "loop", 300)
        assert all_values(await read_logs(cluster, "loop")) == [b"%d" % i for i in range(300)]
    assert {type(f) for f in futures} == {asyncio.Future}
    assert all(f.get_loop() is loop and f.result().topic == "loop" for f in futures)


async def test_pending_futures_stay_off_the_collector_until_they_are_completed(
    kafka_cluster: Any,
) -> None:
    """With the accelerator, a message's future is not tracked by the cyclic garbage
    collector while the producer holds it pending (confirm mode holds it until the
    broker's flush), on the hot path (keyless) and the general one (keyed), nor are the
    lists of a batch a request took; all are tracked again by the time the batch is
    completed, a cancelled future included."""
    from aiokafka07.producer import batch

    accelerated = batch.track_futures is not batch._leave_tracked
    # Flushed only on the broker's timer (a minute away): the futures stay pending.
    async with (
        kafka_cluster(
            1,
            zookeeper=None,
            flush="shipped",
            log_default_flush_interval_ms=60_000,
            log_default_flush_scheduler_interval_ms=60_000,
        ) as cluster,
        Producer(brokers=cluster.broker_list, linger_ms=1) as p,
    ):
        keyless = [await p.send("gc", b"keyless %d" % i) for i in range(20)]
        keyed = [await p.send("gc", b"keyed %d" % i, partition=(0, 0)) for i in range(20)]
        cancelled = keyless.pop()
        cancelled.cancel()
        await asyncio.sleep(0.2)
        pending = keyless + keyed
        assert not any(f.done() for f in pending)
        assert [gc.is_tracked(f) for f in pending] == [not accelerated] * len(pending)
        # The lists of the batches requests took (values, futures) are off it too.
        taken = [b for entry in p._sender._requests.values() for b in entry.batches]
        lists = [items for b in taken for items in (b.values, b.futures)]
        assert taken
        assert [gc.is_tracked(x) for x in lists] == [not accelerated] * len(lists)
        # The producer closes: the broker flushes as it stops, so all are delivered.
        task = asyncio.ensure_future(p.flush())
        await cluster.stop_broker(0)
        await cluster.start_broker(0)
        await asyncio.wait_for(task, 30)
    assert all(f.done() for f in pending)
    assert all(gc.is_tracked(f) for f in [*pending, cancelled])
    assert all(gc.is_tracked(x) for x in lists)


def _loop_with_own_futures(
    base: type[asyncio.AbstractEventLoop],
) -> tuple[type[asyncio.AbstractEventLoop], list[asyncio.Future[Any]]]:
    """A subclass of the loop class ``base`` with a ``create_future`` of its own, and the
    list of every future its loops made."""
    made: list[asyncio.Future[Any]] = []

    class OwnFutures(base):  # type: ignore[valid-type,misc]
        def create_future(self) -> asyncio.Future[Any]:
            future: asyncio.Future[Any] = super().create_future()
            made.append(future)
            return future

    return OwnFutures, made


def test_a_loop_that_makes_its_own_futures_makes_every_message_future(tmp_path: Any) -> None:
    """A loop whose class has a ``create_future`` of its own (a subclass instrumenting
    futures, say) is asked for every message's future, on the hot path too."""
    own_futures, made = _loop_with_own_futures(asyncio.SelectorEventLoop)

    async def main() -> list[asyncio.Future[Any]]:
        async with KafkaCluster(1, zookeeper=None, log_root=tmp_path) as cluster:
            return await _send_keyless(cluster.broker_list, "own", 300)

    loop = own_futures()
    try:
        futures = loop.run_until_complete(main())
    finally:
        loop.close()
    assert len(futures) == 300
    made_ids = {id(f) for f in made}
    assert all(id(f) in made_ids for f in futures)


def test_uvloop_futures_are_made_without_create_future(tmp_path: Any) -> None:
    """On uvloop, whose ``create_future`` is ``asyncio.Future(loop=self)`` (its source,
    checked here as behaviour: a plain pending ``asyncio.Future`` of the loop), the hot
    path makes the same future with one kept ``{"loop": loop}``; a subclass of uvloop's
    loop with a ``create_future`` of its own is asked for every message's future."""
    uvloop = pytest.importorskip("uvloop")
    own_futures, made = _loop_with_own_futures(uvloop.Loop)

    async def main(run: str) -> tuple[Any, asyncio.Future[Any], list[asyncio.Future[Any]]]:
        loop = asyncio.get_running_loop()
        plain = loop.create_future()
        maker = future_maker(loop)
        async with KafkaCluster(1, zookeeper=None, log_root=tmp_path / run) as cluster:
            futures = await _send_keyless(cluster.broker_list, "uv", 300)
            assert all_values(await read_logs(cluster, "uv")) == [b"%d" % i for i in range(300)]
        assert {type(f) for f in futures} == {asyncio.Future}
        assert all(f.get_loop() is loop for f in futures)
        return maker, plain, futures

    maker, plain, futures = uvloop.run(main("uvloop"))
    assert type(plain) is asyncio.Future
    assert not plain.done()
    assert maker == (asyncio.futures.Future, {"loop": plain.get_loop()})
    assert not made
    loop = own_futures()
    try:
        maker, plain, futures = loop.run_until_complete(main("own"))
    finally:
        loop.close()
    assert maker[1] is None
    assert plain is made[0]
    made_ids = {id(f) for f in made}
    assert len(futures) == 300
    assert all(id(f) in made_ids for f in futures)

"""The embedded broker over real sockets and a real ZooKeeper: registration, produce
semantics, restarts, crashes and many pipelining connections."""

from __future__ import annotations

import asyncio
import os
import random
import re
import socket
import struct
import time
from typing import Any

import pytest

from aiokafka07.broker import Broker, BrokerConfig
from aiokafka07.errors import ZNodeConflictError
from aiokafka07.protocol import (
    FetchRequest,
    decode_fetch_response,
    decode_message_set,
    decode_multifetch_response,
    decode_offsets_response,
    encode_fetch_request,
    encode_message_set,
    encode_multifetch_request,
    encode_multiproduce_request,
    encode_offsets_request,
    encode_produce_request,
)
from aiokafka07.testing import ZooKeeperServer, expire_session
from aiokafka07.zookeeper import ZooKeeper

from .wire import EOF_MARK, RawConnection, eventually


async def fetch_values(
    conn: RawConnection, topic: str, partition: int, offset: int = 0
) -> list[bytes]:
    await conn.send(encode_fetch_request(topic, partition, offset, 1 << 20))
    frame = await conn.frame()
    assert frame != EOF_MARK
    return [m.value for m in decode_fetch_response(frame[4:]).decode(offset).messages]


async def latest(conn: RawConnection, topic: str, partition: int) -> int:
    await conn.send(encode_offsets_request(topic, partition, -1, 1))
    return decode_offsets_response((await conn.frame())[4:]).offsets[0]


# -- ZooKeeper registration --------------------------------------------------------------


async def test_registrations_have_the_0_7_2_paths_and_values(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with (
        kafka_cluster(2, num_partitions=3, topic_partitions={"big": 5}) as cluster,
        ZooKeeper(zookeeper) as zk,
    ):
        for broker in cluster.running:
            value = await zk.get_data(f"/brokers/ids/{broker.broker_id}")
            pattern = rf"127\.0\.0\.1-\d{{13}}:127\.0\.0\.1:{broker.port}"
            assert re.fullmatch(pattern, value or "")
            assert re.fullmatch(pattern, broker.registration())
        assert await zk.get_data("/brokers") is None
        assert await zk.get_data("/brokers/ids") is None

        conn = await RawConnection.open(cluster.broker(0).host, cluster.broker(0).port)
        await conn.send(encode_produce_request("clicks", 1, encode_message_set([b"x"])))
        await conn.send(encode_produce_request("big", 4, b""))  # an empty set creates the topic
        assert await eventually(lambda: zk.exists("/brokers/topics/big/0"))
        assert await eventually(lambda: zk.exists("/brokers/topics/clicks/0"))
        assert await zk.get_data("/brokers/topics/clicks/0") == "3"
        assert await zk.get_data("/brokers/topics/big/0") == "5"
        assert await zk.get_data("/brokers/topics/clicks") is None
        assert await zk.get_children("/brokers/topics/clicks") == ["0"]  # not broker 1
        await conn.close()

        await cluster.stop_broker(0)
        assert not await zk.exists("/brokers/ids/0")
        assert not await zk.exists("/brokers/topics/clicks/0")
        assert await zk.exists("/brokers/topics/clicks")  # the parent is persistent

        # On start-up a broker registers the topics it has on disk.
        await cluster.start_broker(0)
        assert await zk.get_data("/brokers/topics/clicks/0") == "3"
        assert await zk.get_data("/brokers/topics/big/0") == "5"


async def test_crashed_broker_vanishes_from_zookeeper(kafka_cluster: Any, zookeeper: str) -> None:
    async with kafka_cluster(2) as cluster, ZooKeeper(zookeeper) as zk:
        assert sorted(await zk.get_children("/brokers/ids")) == ["0", "1"]
        await cluster.crash_broker(1)
        assert await zk.get_children("/brokers/ids") == ["0"]


async def test_registrations_come_back_after_session_expiry(
    kafka_cluster: Any, zookeeper: str, zookeeper_server: ZooKeeperServer
) -> None:
    async with kafka_cluster(1) as cluster, ZooKeeper(zookeeper) as zk:
        broker = cluster.broker(0)
        conn = await RawConnection.open(broker.host, broker.port)
        await conn.send(encode_produce_request("events", 0, encode_message_set([b"a"])))
        assert await eventually(lambda: zk.exists("/brokers/topics/events/0"))
        before = await zk.get_data("/brokers/ids/0")
        session = broker.zookeeper.client.session  # type: ignore[union-attr]
        old_id = session.session_id
        await expire_session(zookeeper_server.connect_string, old_id, session.password)

        async def re_registered() -> bool:
            value = (
                await zk.get_data("/brokers/ids/0") if await zk.exists("/brokers/ids/0") else None
            )
            return value is not None and value != before and session.session_id != old_id

        await eventually(re_registered, timeout=20)
        assert await eventually(lambda: zk.exists("/brokers/topics/events/0"))
        # The broker kept serving throughout.
        assert await fetch_values(conn, "events", 0) == [b"a"]
        await conn.close()


async def test_broker_refuses_to_start_on_a_conflicting_id(zookeeper: str, tmp_path: Any) -> None:
    async with ZooKeeper(zookeeper) as zk:
        await zk.create_ephemeral("/brokers/ids/5", "10.9.9.9-1:10.9.9.9:9092")
        broker = Broker(BrokerConfig(broker_id=5, log_dir=tmp_path, port=0, zk_connect=zookeeper))
        with pytest.raises(ZNodeConflictError, match="/brokers/ids/5"):
            await broker.start()
        assert not broker.running
        assert await zk.get_data("/brokers/ids/5") == "10.9.9.9-1:10.9.9.9:9092"


# -- produce semantics -------------------------------------------------------------------


async def test_multiproduce_skips_too_large_entries_and_aborts_on_errors(
    kafka_cluster: Any,
) -> None:
    async with kafka_cluster(1, zookeeper=None, num_partitions=2, max_message_size=100) as cluster:
        broker = cluster.broker(0)
        conn = await RawConnection.open(broker.host, broker.port)
        ok = encode_message_set([b"ok"])
        big = encode_message_set([b"x" * 101])
        await conn.send(encode_multiproduce_request([("t", 0, ok), ("t", 1, big), ("t", 1, ok)]))
        assert await fetch_values(conn, "t", 0) == [b"ok"]
        assert await fetch_values(conn, "t", 1) == [b"ok"]  # the too-large entry was skipped

        # An invalid partition aborts the rest; what came before stays; the socket closes.
        await conn.send(encode_multiproduce_request([("t", 0, ok), ("t", 9, ok), ("t", 1, ok)]))
        assert await conn.closed_by_peer()
        conn = await RawConnection.open(broker.host, broker.port)
        assert await fetch_values(conn, "t", 0) == [b"ok", b"ok"]
        assert await fetch_values(conn, "t", 1) == [b"ok"]

        # A message over max.message.size drops the whole produce, silently.
        await conn.send(encode_produce_request("t", 0, ok + big))
        assert await latest(conn, "t", 0) == 2 * len(ok)
        await conn.close()


async def test_compressed_sets_are_validated_deeply(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None) as cluster:
        broker = cluster.broker(0)
        conn = await RawConnection.open(broker.host, broker.port)
        good = encode_message_set([b"a", b"b"], compression="snappy")
        await conn.send(encode_produce_request("z", 0, good))
        assert await fetch_values(conn, "z", 0) == [b"a", b"b"]
        inner = bytearray(encode_message_set([b"a"]))
        inner[-1] ^= 0xFF  # corrupt the inner message; the wrapper's own CRC is fine
        from aiokafka07.protocol import encode_wrapper

        await conn.send(encode_produce_request("z", 0, encode_wrapper("gzip", bytes(inner))))
        assert await conn.closed_by_peer()
        conn = await RawConnection.open(broker.host, broker.port)
        assert await latest(conn, "z", 0) == len(good)
        await conn.close()


async def test_partition_minus_one_spreads_over_all_partitions(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None, num_partitions=3) as cluster:
        broker = cluster.broker(0)
        broker.rng = random.Random(7)
        conn = await RawConnection.open(broker.host, broker.port)
        for i in range(60):
            await conn.send(encode_produce_request("spread", -1, encode_message_set([b"%d" % i])))
        counts = [len(await fetch_values(conn, "spread", p)) for p in range(3)]
        assert sum(counts) == 60
        assert all(c > 5 for c in counts)
        await conn.close()


# -- restarts, crashes, segments --------------------------------------------------------


async def test_data_survives_restart_and_crash(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None) as cluster:
        broker = cluster.broker(0)
        conn = await RawConnection.open(broker.host, broker.port)
        await conn.send(encode_produce_request("keep", 0, encode_message_set([b"1", b"2"])))
        assert await fetch_values(conn, "keep", 0) == [b"1", b"2"]
        await cluster.restart_broker(0)
        assert await conn.closed_by_peer()
        conn = await RawConnection.open(broker.host, broker.port)
        assert await fetch_values(conn, "keep", 0) == [b"1", b"2"]
        await conn.send(encode_produce_request("keep", 0, encode_message_set([b"3"])))
        assert await latest(conn, "keep", 0) == 3 * 11  # answered: the produce was processed
        await cluster.crash_broker(0)
        assert await conn.closed_by_peer()
        await cluster.start_broker(0)
        conn = await RawConnection.open(broker.host, broker.port)
        assert await fetch_values(conn, "keep", 0) == [b"1", b"2", b"3"]
        await conn.close()


async def test_a_count_reached_during_a_flush_is_flushed_when_it_ends(
    kafka_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fsync on, a count-based flush runs in a worker thread, one per log at a time.
    Appends that reach the count again while one runs are flushed when it ends, not at
    the time-based flusher's next pass (a minute away here): a producer that waits for
    them (confirm mode) sends nothing that would bring "the next append"."""
    real = os.fsync
    slow = True

    def fsync(fd: int) -> None:
        nonlocal slow
        if slow:  # the first flush's fsync takes long enough for the next append to land
            slow = False
            time.sleep(0.3)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    async with kafka_cluster(
        1,
        zookeeper=None,
        log_flush_fsync=True,
        log_flush_interval=2,
        log_default_flush_scheduler_interval_ms=60_000,
    ) as cluster:
        broker = cluster.broker(0)
        conn = await RawConnection.open(broker.host, broker.port)
        two = encode_message_set([b"a", b"b"])  # 22 bytes: the count, each time
        await conn.send(encode_produce_request("t", 0, two))
        await asyncio.sleep(0.05)  # the first flush is under way
        await conn.send(encode_produce_request("t", 0, two))
        assert await latest(conn, "t", 0) in (0, 22)  # the second is not flushed yet

        async def both_flushed() -> bool:
            return await latest(conn, "t", 0) == 44

        await eventually(both_flushed, 5)
        await conn.close()


async def test_fetches_stop_at_segment_ends(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None, log_file_size=100) as cluster:
        broker = cluster.broker(0)
        conn = await RawConnection.open(broker.host, broker.port)
        one = encode_message_set([b"p" * 40])  # 50 bytes
        for _ in range(5):
            await conn.send(encode_produce_request("seg", 0, one))
        assert await latest(conn, "seg", 0) == 250
        # Rolled once the active segment exceeded 100 bytes: segments at 0 and 150.
        names = sorted(p.name for p in (broker.config.log_dir / "seg-0").iterdir())
        assert names == [f"{0:020d}.kafka", f"{150:020d}.kafka"]
        assert len(await fetch_values(conn, "seg", 0, 0)) == 3  # not past offset 150
        assert len(await fetch_values(conn, "seg", 0, 150)) == 2
        await conn.send(encode_offsets_request("seg", 0, -1, 10))
        assert decode_offsets_response((await conn.frame())[4:]).offsets == (250, 150, 0)
        await conn.close()


async def test_stop_leaves_no_task_behind(tmp_path: Any) -> None:
    before = asyncio.all_tasks()
    broker = Broker(BrokerConfig(broker_id=0, log_dir=tmp_path, port=0, enable_zookeeper=False))
    await broker.start()
    conns = [await RawConnection.open(broker.host, broker.port) for _ in range(5)]
    await conns[0].send(encode_produce_request("t", 0, encode_message_set([b"x"])))
    await broker.stop()
    assert asyncio.all_tasks() - before == set()
    for conn in conns:
        assert await conn.closed_by_peer()


async def test_stop_ends_connections_accepted_before_their_handler_ran(tmp_path: Any) -> None:
    """A connection the server accepted whose handler has not run yet when the broker
    stops: the shutdown missed it, and stop() did not return within 10 s (since Python
    3.12 Server.wait_closed() waits for every connection, until the client goes away).
    Stopped 0 to 7 event-loop iterations after the connect, one of which falls in that
    window."""
    config = BrokerConfig(broker_id=0, log_dir=tmp_path, port=0, enable_zookeeper=False)
    for iterations in range(8):
        before = asyncio.all_tasks()
        broker = Broker(config)
        await broker.start()
        with socket.create_connection((broker.host, broker.port)):  # stays open
            for _ in range(iterations):
                await asyncio.sleep(0)
            await asyncio.wait_for(broker.stop(), 10)
            assert asyncio.all_tasks() - before == set(), iterations


# -- load -------------------------------------------------------------------------------


async def _pipeline_client(host: str, port: int, client: int, rounds: int) -> None:
    """Pipeline produce, fetch and offsets for ``rounds`` batches, then check every answer."""
    conn = await RawConnection.open(host, port)
    topic = f"load-{client}"
    sets = [
        encode_message_set([b"%d:%d:%d" % (client, k, j) for j in range(k % 5 + 1)])
        for k in range(rounds)
    ]
    requests, offset = [], 0
    for k, message_set in enumerate(sets):
        requests.append(encode_produce_request(topic, k % 2, message_set))
        requests.append(encode_offsets_request(topic, k % 2, -1, 1))
        if k % 2 == 0:
            requests.append(encode_fetch_request(topic, 0, offset, 1 << 16))
            offset += len(message_set)
    requests.append(
        encode_multifetch_request(
            [FetchRequest(topic, 0, 0, 1 << 22), FetchRequest(topic, 1, 0, 1 << 22)]
        )
    )
    await conn.send(b"".join(requests))

    ends = [0, 0]
    for k, message_set in enumerate(sets):
        ends[k % 2] += len(message_set)
        answer = decode_offsets_response((await conn.frame())[4:])
        assert answer.offsets == (ends[k % 2],), (client, k)
        if k % 2 == 0:
            fetched = decode_fetch_response((await conn.frame())[4:]).decode(
                ends[0] - len(message_set)
            )
            assert [m.value for m in fetched.messages] == [
                m.value for m in decode_message_set(message_set).messages
            ]
    multi = decode_multifetch_response((await conn.frame())[4:], count=2)
    for partition in (0, 1):
        values = [
            m.value for m in decode_message_set(multi.responses[partition].message_set).messages
        ]
        expected = [
            m.value
            for k, s in enumerate(sets)
            if k % 2 == partition
            for m in decode_message_set(s).messages
        ]
        assert values == expected
    await conn.close()


async def test_many_connections_pipelining_mixed_requests(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None, num_partitions=2) as cluster:
        broker = cluster.broker(0)
        await asyncio.gather(
            *(_pipeline_client(broker.host, broker.port, c, 150) for c in range(24))
        )
        assert broker.requests_handled >= 24 * (150 * 2 + 75 + 1)


async def test_garbage_closes_only_that_connection(kafka_cluster: Any) -> None:
    async with kafka_cluster(1, zookeeper=None) as cluster:
        broker = cluster.broker(0)
        good = await RawConnection.open(broker.host, broker.port)
        for garbage in (
            b"\x00\x00\x00\x02\x00\x09",
            struct.pack(">i", -1),
            b"\x00\x00\x00\x03\x00\x01\xff",
        ):
            bad = await RawConnection.open(broker.host, broker.port)
            await bad.send(garbage)
            assert await bad.closed_by_peer()
        await good.send(encode_produce_request("g", 0, encode_message_set([b"fine"])))
        assert await fetch_values(good, "g", 0) == [b"fine"]
        await good.close()

"""``aiokafka07 mirror`` between two clusters (two ZooKeeper chroots), and the two library
pieces it stands on: the group consumer's shallow iteration and the producer's
``send_message``. Compressed sets must arrive byte for byte, and nothing may be lost or
repeated across Ctrl-C and restarts."""

from __future__ import annotations

import asyncio
import collections
import re
import signal
from collections.abc import Callable

from aiokafka07 import Producer
from aiokafka07.connection import BrokerConnection
from aiokafka07.group import Consumer
from aiokafka07.protocol import Compression, decode_message_set, encode_message_set
from aiokafka07.records import ConsumerRecord
from aiokafka07.testing import KafkaCluster

from .test_cli_common import one_error_line, run_cli, start_cli, stop_cli
from .test_cli_produce_consume import committed, registered
from .wire import address_of, eventually

Entries = collections.Counter[tuple[int, int, bytes]]


async def log_bytes(cluster: KafkaCluster, topic: str, broker_id: int, partition: int) -> bytes:
    async with await BrokerConnection.open(address_of(cluster, broker_id)) as conn:
        return bytes((await conn.fetch(topic, partition, 0, 1 << 22)).message_set)


async def entries(cluster: KafkaCluster, topic: str) -> Entries:
    """Every top-level entry stored for ``topic`` as (magic, attributes, payload)."""
    found: Entries = collections.Counter()
    for broker_id, broker in cluster.brokers.items():
        for partition in range(broker.config.num_partitions):
            data = await log_bytes(cluster, topic, broker_id, partition)
            for m in decode_message_set(data, shallow=True).messages:
                found[(m.magic, m.attributes, m.value)] += 1
    return found


async def log_ends(cluster: KafkaCluster, topic: str) -> dict[str, int]:
    ends = {}
    for broker_id, broker in cluster.brokers.items():
        async with await BrokerConnection.open(address_of(cluster, broker_id)) as conn:
            for partition in range(broker.config.num_partitions):
                offsets = await conn.offsets(topic, partition, -1, 1)
                if offsets[0]:
                    ends[f"{broker_id}-{partition}"] = offsets[0]
    return ends


async def produce_sets(cluster: KafkaCluster, topic: str, tag: str) -> None:
    """On every partition: a gzip set, a snappy set, two plain messages and a magic-0 one."""
    for broker_id, broker in cluster.brokers.items():
        async with await BrokerConnection.open(address_of(cluster, broker_id)) as conn:
            for partition in range(broker.config.num_partitions):
                values = [f"{tag} {broker_id}-{partition} {i}".encode() for i in range(10)]
                await conn.produce(topic, partition, values, compression="gzip")
                await conn.produce(topic, partition, values[:5], compression="snappy")
                await conn.produce(topic, partition, values[5:7])
                old = encode_message_set([values[7]], magic=0)
                await conn.produce_message_set(topic, partition, old, confirm=True)


async def test_shallow_records_are_sent_on_byte_for_byte(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1) as cluster:
        await produce_sets(cluster, "src", "a")
        await registered(zookeeper, cluster, "src")
        expected = await entries(cluster, "src")
        records: list[ConsumerRecord] = []
        shallow = Consumer("src", group="copy", zookeeper=zookeeper, shallow=True,
                           auto_offset_reset="smallest", consumer_timeout_ms=500)  # fmt: skip
        async with shallow:
            records = [record async for record in shallow]
        assert [r.compression for r in records] == [
            Compression.GZIP, Compression.SNAPPY, Compression.NONE, Compression.NONE,
            Compression.NONE,
        ]  # fmt: skip
        assert records[-1].magic == 0
        # The producer's own codec never touches an entry sent as it is.
        async with Producer(zookeeper=zookeeper, compression="snappy") as producer:
            for record in records:
                await producer.send_message("dst", record, partition=(0, 0))
            await producer.send("dst", b"compressed by the producer", partition=(0, 0))
        source = await log_bytes(cluster, "src", 0, 0)
        copy = await log_bytes(cluster, "dst", 0, 0)
        assert copy.startswith(source)  # identical bytes: same wrappers, same CRCs
        tail = decode_message_set(copy[len(source) :], shallow=True).messages
        assert [m.compression for m in tail] == [Compression.SNAPPY]
        assert sum(expected.values()) == len(records)


async def test_mirror_keeps_sets_and_loses_nothing_across_ctrl_c(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    target_zookeeper = f"{zookeeper}-target"
    async with (
        kafka_cluster(2, num_partitions=2) as source,
        kafka_cluster(1, zookeeper=target_zookeeper, num_partitions=2) as target,
    ):
        mirror = ["mirror", "m", "--source-zookeeper", zookeeper, "--target-zookeeper",
                  target_zookeeper, "--commit-interval-ms", "200", "--group", "mm"]  # fmt: skip

        async def copied() -> bool:
            return await entries(target, "m") == await entries(source, "m")

        async def committed_everything() -> None:
            assert await committed(zookeeper, "mm", "m") == await log_ends(source, "m")

        await produce_sets(source, "m", "first")
        await registered(zookeeper, source, "m")
        proc = await start_cli(*mirror, "--progress", "--progress-interval-ms", "200")
        await eventually(copied, timeout=30)
        # Progress reports, read as they come up to one that says it is all caught up.
        assert proc.stderr is not None
        caught_up = re.compile(rb"^mirrored \d+ messages, .* msg/s.*waiting for the target$", re.M)
        reports = b""
        while not caught_up.search(reports):
            line = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert line, reports.decode()  # the mirror must not end on its own
            reports += line
        code, _, err = await stop_cli(proc, signal.SIGINT)
        err = reports.decode() + err
        assert code == 0, err
        assert "Traceback" not in err
        assert "mirrored 20 messages (" in err  # the summary: 5 entries on each of 4 partitions
        await committed_everything()

        # Ctrl-C while sets keep arriving, then a restart: every set exactly once.
        stopped = asyncio.Event()

        async def keep_producing() -> int:
            """Rounds of sets until the mirror was stopped, and three more: how many."""
            rounds = after = 0
            while after < 3:
                await produce_sets(source, "m", f"second {rounds}")
                rounds += 1
                after += stopped.is_set()
                await asyncio.sleep(0.1)
            return rounds

        async def copying() -> bool:
            return sum((await entries(target, "m")).values()) > 40

        proc = await start_cli(*mirror)
        producing = asyncio.create_task(keep_producing())
        await eventually(copying, timeout=30)
        code, _, err = await stop_cli(proc, signal.SIGINT)
        stopped.set()
        assert code == 0, err
        rounds = await producing
        assert not await copied()  # stopped mid-stream
        proc = await start_cli(*mirror)
        await eventually(copied, timeout=30)
        code, _, err = await stop_cli(proc, signal.SIGTERM)
        assert code == 0, err
        await committed_everything()
        assert sum((await entries(target, "m")).values()) == 20 * (1 + rounds)

        # The target is down: the mirror gives up at once (no broker of a static target
        # answers), and commits nothing it did not deliver.
        before = await committed(zookeeper, "mm", "m")
        await produce_sets(source, "m", "lost?")
        dead_target = target.broker_list
        await target.stop_broker(0)
        code, _, err = await run_cli("mirror", "m", "--source-zookeeper", zookeeper,
                                     "--target-brokers", dead_target, "--group", "mm",
                                     "--commit-interval-ms", "200")  # fmt: skip
        assert code == 1
        line = one_error_line(err, "mirror")
        assert "cannot connect to broker 0" in line
        assert "no broker of --target-brokers answers; nothing was sent" in line
        assert await committed(zookeeper, "mm", "m") == before
        await target.start_broker(0)

        # --recompress none: the messages inside, stored plain, to a static broker list.
        await produce_sets(source, "r", "third")
        await registered(zookeeper, source, "r")
        proc = await start_cli("mirror", "r", "--source-zookeeper", zookeeper, "--target-brokers",
                               target.broker_list, "--recompress", "none", "-q")  # fmt: skip

        async def recompressed() -> bool:
            return sum((await entries(target, "r")).values()) >= 4 * 17

        await eventually(recompressed, timeout=30)
        code, _, err = await stop_cli(proc, signal.SIGINT)
        assert code == 0, err
        assert err == ""
        stored = await entries(target, "r")
        assert {(magic, attributes) for magic, attributes, _ in stored} == {(1, 0)}
        values = sorted(value for _, _, value in stored.elements())
        expected = sorted(
            f"third {b}-{p} {i}".encode()
            for b in (0, 1) for p in (0, 1) for i in [*range(10), *range(5), 5, 6, 7]
        )  # fmt: skip
        assert values == expected

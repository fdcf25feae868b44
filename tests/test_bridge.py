"""The bridge to a modern Kafka cluster: 0.7 topics copied exactly once through SIGKILLs.

The 0.7 side is real: ZooKeeper and embedded brokers. The target is librdkafka's mock
cluster (a test double that speaks the modern protocol on loopback TCP, from the
confluent-kafka wheel) in a process of its own, read back by confluent-kafka's consumer,
a client independent of the bridge's aiokafka. The bridge runs in a process of its own,
which the tests SIGKILL at random points and start again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiokafka07 import SimpleConsumer
from aiokafka07.bridge import Bridge, BridgeMetrics, key_before, runner
from aiokafka07.bridge.collector import METRICS as BRIDGE_METRICS
from aiokafka07.bridge.collector import BridgeCollector
from aiokafka07.bridge.runner import _registered  # what the bridge reads at its start
from aiokafka07.connection import BrokerAddress
from aiokafka07.group import Consumer
from aiokafka07.producer import Producer
from aiokafka07.protocol import LATEST
from aiokafka07.records import TopicPartition
from aiokafka07.testing import KafkaCluster
from aiokafka07.testing.process import start_broker_process, stop_broker_process
from aiokafka07.znodes import GroupRegistry, broker_path
from aiokafka07.zookeeper import ZooKeeper

from .wire import eventually

pytest.importorskip("aiokafka", reason="the bridge extra (aiokafka) is not installed")
confluent_kafka = pytest.importorskip(
    "confluent_kafka", reason="confluent-kafka (the mock cluster) has no wheel here"
)

HERE = Path(__file__).parent
MOCK = HERE / "mock_target.py"
BRIDGE = HERE / "bridge_process.py"
TARGET_PARTITIONS = 4  # the mock cluster's default (tests/mock_target.py)
CHECKPOINTS = "aiokafka07-bridge-checkpoints"

#: topic -> (partition, key, value, offset, headers) of every record read.
Copied = dict[str, list[tuple[int, bytes | None, bytes, int, object]]]


@contextlib.asynccontextmanager
async def mock_cluster(topics: list[str]) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """The mock cluster in its own process, with ``topics``; yields its bootstrap and
    the process (:func:`set_broker` takes its brokers down and up)."""
    specs = [*topics, CHECKPOINTS]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(MOCK),
        *specs,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        word, _, bootstrap = line.decode().strip().partition(" ")
        assert word == "ready", f"mock cluster did not start: {line!r}"
        yield bootstrap, process
    finally:
        if process.returncode is None:
            process.kill()
        await asyncio.wait_for(process.wait(), 30)


@contextlib.asynccontextmanager
async def mock_target(topics: list[str]) -> AsyncIterator[str]:
    """The mock cluster in its own process, with ``topics``; yields its bootstrap."""
    async with mock_cluster(topics) as (bootstrap, _):
        yield bootstrap


async def set_broker(mock: asyncio.subprocess.Process, state: str, broker_id: int) -> None:
    """Take a broker of the mock cluster ``down`` or bring it ``up``."""
    assert mock.stdin is not None
    assert mock.stdout is not None
    mock.stdin.write(f"{state} {broker_id}\n".encode())
    await mock.stdin.drain()
    answer = await asyncio.wait_for(mock.stdout.readline(), 30)
    assert answer == b"ok\n", answer


async def start_bridge(
    zookeeper: str, bootstrap: str, topics: list[str], *, keyless: bool = False
) -> asyncio.subprocess.Process:
    """The bridge process, once every topic is registered by a broker (a bridge started
    while none holds a topic refuses to start: brokers re-register after a session of
    theirs expired, which a loaded machine can cause)."""
    async with ZooKeeper(zookeeper) as zk:

        async def registered() -> bool:
            for topic in topics:  # stops at the first topic not registered yet
                if not await _registered(zk, topic):
                    return False
            return True

        await eventually(registered, 60)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(BRIDGE),
        *(["--keyless"] if keyless else []),
        zookeeper,
        bootstrap,
        *topics,
        stdout=asyncio.subprocess.PIPE,
    )


async def copied_beyond(process: asyncio.subprocess.Process, messages: int, timeout: float) -> int:
    """Wait until the bridge process reports more than ``messages`` written in this run
    (a line per committed transaction); return the messages it found already copied at
    recovery and skipped."""
    assert process.stdout is not None
    while True:
        line = await asyncio.wait_for(process.stdout.readline(), timeout)
        assert line, f"bridge process ended (status {await process.wait()})"
        _, written, skipped = line.split()
        if int(written) > messages:
            return int(skipped)


def until_every_end(consumer: Any, topics: list[str]) -> Iterator[Any]:
    """The records ``consumer`` polls until every partition of ``topics`` reported its
    end (at most 60 idle polls of 1 s in a row)."""
    pending = {(t, p) for t in topics for p in range(TARGET_PARTITIONS)}
    idle = 0
    while pending:
        message = consumer.poll(1.0)
        if message is None:
            idle += 1
            assert idle < 60, f"no end of partition from {pending}"
            continue
        idle = 0
        if message.error() is not None:
            assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, (
                message.error()
            )
            pending.discard((message.topic(), message.partition()))
            continue
        yield message


def read_target(bootstrap: str, topics: list[str]) -> Copied:
    """Every record of ``topics`` on the target, by confluent-kafka's consumer."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    copied: Copied = {t: [] for t in topics}
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING)
                for t in topics
                for p in range(TARGET_PARTITIONS)
            ]
        )
        for message in until_every_end(consumer, topics):
            copied[message.topic()].append(
                (
                    message.partition(),
                    message.key(),
                    message.value(),
                    message.offset(),
                    message.headers(),
                )
            )
    finally:
        consumer.close()
    return copied


async def produce(
    zookeeper: str, topics: list[str], per_topic: int, keys: int, *, start: int = 0
) -> dict[str, list[bytes]]:
    sent: dict[str, list[bytes]] = {t: [] for t in topics}
    # Retries enough to ride out a moment without live brokers in the producer's view (a
    # ZooKeeper session expiring on a loaded machine takes the brokers' registrations with
    # it until they register again).
    async with Producer(
        zookeeper=zookeeper, compression="gzip", linger_ms=5, retries=20, retry_backoff_ms=100
    ) as producer:
        futures = []
        for i in range(start, start + per_topic):
            for topic in topics:
                key = f"k{i % keys}"
                value = f"{key}:{topic}:{i}".encode()
                sent[topic].append(value)
                futures.append(await producer.send(topic, value, key=key))
        await asyncio.gather(*futures)
    return sent


def check_exactly_once(sent: dict[str, list[bytes]], copied: Copied) -> None:
    for topic, values in sent.items():
        got = collections.Counter(record[2] for record in copied[topic])
        duplicated = {v: n for v, n in got.items() if n > 1}
        missing = set(values) - set(got)
        extra = set(got) - set(values)
        where = [r[:1] + r[3:] for r in copied[topic] if r[2] in list(duplicated)[:2]]
        assert not duplicated, f"{topic}: {len(duplicated)} duplicated, e.g. {where}"
        assert not missing, f"{topic}: {len(missing)} missing, e.g. {sorted(missing)[:3]}"
        assert not extra, f"{topic}: unexpected {sorted(extra)[:3]}"
        placement: dict[bytes, set[int]] = collections.defaultdict(set)
        for partition, key, value, _, _ in copied[topic]:
            assert key == value.split(b":", 1)[0], (key, value)
            placement[key].add(partition)
        split = {k: p for k, p in placement.items() if len(p) > 1}
        assert not split, f"{topic}: keys in several partitions: {split}"


async def bridge_through_kills(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    *,
    topics: list[str],
    per_topic: int,
    kills: int,
    seed: int,
) -> None:
    print(f"seed {seed}")  # shown when the test fails
    rng = random.Random(seed)
    async with kafka_cluster(2, num_partitions=2) as _, mock_target(topics) as bootstrap:
        loop = asyncio.get_running_loop()
        began = loop.time()
        sent = await produce(zookeeper, topics, per_topic, keys=97)
        print(f"produced at {loop.time() - began:.1f} s")
        total = per_topic * len(topics)
        # Each run is killed once it has written a random share of what is left, a few
        # milliseconds into its next transaction (sent, not yet committed, or committed).
        skipped = 0
        for _ in range(kills):
            bridge = await start_bridge(zookeeper, bootstrap, topics)
            try:
                skipped += await copied_beyond(bridge, int(total * rng.uniform(0.1, 0.3)), 120)
                await asyncio.sleep(rng.uniform(0, 0.02))
            finally:
                bridge.send_signal(signal.SIGKILL)
                await bridge.wait()
                print(f"killed at {loop.time() - began:.1f} s")
        bridge = await start_bridge(zookeeper, bootstrap, topics)
        try:
            while True:
                copied = await asyncio.to_thread(read_target, bootstrap, topics)
                written = sum(len(v) for v in copied.values())
                print(f"{written} read at {loop.time() - began:.1f} s")
                if written >= total:
                    break
                skipped += await copied_beyond(bridge, 0, 120)
        finally:
            bridge.send_signal(signal.SIGKILL)
            await bridge.wait()
        print(f"{skipped} found copied at recovery")
        check_exactly_once(sent, await asyncio.to_thread(read_target, bootstrap, topics))


async def test_bridge_copies_exactly_once_through_sigkills(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    await bridge_through_kills(
        kafka_cluster,
        zookeeper,
        topics=["orders", "payments", "users"],
        per_topic=2000,
        kills=2,
        seed=int(os.environ.get("BRIDGE_SEED", random.randrange(1 << 30))),
    )


@pytest.mark.slow
async def test_bridge_moves_200k_messages_exactly_once_through_two_sigkills(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """The issue's acceptance run: 200k keyed messages over 3 topics, two SIGKILLs."""
    await bridge_through_kills(
        kafka_cluster,
        zookeeper,
        topics=["big-orders", "big-payments", "big-users"],
        per_topic=66_667,
        kills=2,
        seed=random.randrange(1 << 30),
    )


async def test_bridge_copies_exactly_once_through_a_07_broker_restart(
    zookeeper: str, tmp_path: Path
) -> None:
    """A 0.7 broker SIGKILLed while the bridge reads it and started again on its port:
    the bridge's readers reconnect and continue from the position after the last
    message they queued, and what is produced after the restart is copied too."""
    topics = ["restarts"]
    # A short ZooKeeper session: the killed broker's registration goes within 2 s.
    settings = {"zk.sessiontimeout.ms": "2000"}
    brokers: dict[int, tuple[asyncio.subprocess.Process, BrokerAddress]] = {}
    try:
        for broker_id in (0, 1):
            brokers[broker_id] = await start_broker_process(
                tmp_path / f"b{broker_id}",
                broker_id=broker_id,
                partitions=2,
                zookeeper=zookeeper,
                settings=settings,
            )
        async with mock_target(topics) as bootstrap:
            sent = await produce(zookeeper, topics, 3000, keys=97)
            bridge = await start_bridge(zookeeper, bootstrap, topics)
            try:
                await copied_beyond(bridge, 1000, 120)
                process, address = brokers[1]
                process.kill()
                await process.wait()
                async with ZooKeeper(zookeeper) as zk:
                    assert await zk.wait_deleted(broker_path(1), 30), "registration stayed"
                brokers[1] = await start_broker_process(
                    tmp_path / "b1",
                    broker_id=1,
                    partitions=2,
                    zookeeper=zookeeper,
                    port=address.port,
                    settings=settings,
                )
                more = await produce(zookeeper, topics, 3000, keys=97, start=3000)
                sent["restarts"] += more["restarts"]
                await wait_copied(bridge, bootstrap, topics, "restarts", 6000)
            finally:
                bridge.send_signal(signal.SIGKILL)
                await bridge.wait()
            check_exactly_once(sent, await asyncio.to_thread(read_target, bootstrap, topics))
    finally:
        for process, _ in brokers.values():
            await stop_broker_process(process)


async def test_bridge_copies_exactly_once_through_target_broker_restarts(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """Each broker of the target in turn down for a second (connections closed, new ones
    refused, its partitions and coordinator roles unavailable) and up again while the
    bridge writes: everything arrives exactly once."""
    topics = ["downtime"]
    async with (
        kafka_cluster(2, num_partitions=2) as _,
        mock_cluster(topics) as (bootstrap, mock),
    ):
        sent = await produce(zookeeper, topics, 3000, keys=97)
        bridge = await start_bridge(zookeeper, bootstrap, topics)
        try:
            await copied_beyond(bridge, 500, 120)
            for broker_id in (1, 2, 3):
                await set_broker(mock, "down", broker_id)
                await asyncio.sleep(1.0)  # the outage (not a wait for an outcome)
                await set_broker(mock, "up", broker_id)
            more = await produce(zookeeper, topics, 3000, keys=97, start=3000)
            sent["downtime"] += more["downtime"]
            await wait_copied(bridge, bootstrap, topics, "downtime", 6000)
        finally:
            bridge.send_signal(signal.SIGKILL)
            await bridge.wait()
        check_exactly_once(sent, await asyncio.to_thread(read_target, bootstrap, topics))


async def wait_copied(
    bridge: asyncio.subprocess.Process, bootstrap: str, topics: list[str], topic: str, count: int
) -> None:
    """Until the target holds ``count`` records of ``topic`` (each wait bounded by the
    bridge's progress)."""
    while len((await asyncio.to_thread(read_target, bootstrap, topics))[topic]) < count:
        await copied_beyond(bridge, 0, 120)


async def run_tool(*argv: str, timeout: float = 120) -> tuple[int, str]:
    return await run_tool_named("bridge", *argv, timeout=timeout)


async def run_tool_named(*argv: str, timeout: float = 120) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiokafka07",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def translate_offsets(zookeeper: str, bootstrap: str) -> tuple[int, str]:
    """``aiokafka07 bridge offsets`` for group ``app`` and topic ``events``."""
    return await run_tool_named(
        "bridge", "offsets", "--group", "app", "-z", zookeeper, "--bootstrap-servers",
        bootstrap, "--consumer-option", "check_crcs=false", "events",
    )  # fmt: skip


async def test_tool_errors_are_one_line(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1) as _, mock_target(["present"]) as bootstrap:
        await produce(zookeeper, ["present", "absent"], 10, keys=3)
        status, out = await run_tool(
            "--zookeeper", zookeeper, "--bootstrap-servers", "127.0.0.1:9", "present"
        )
        assert status == 1, out
        assert out.startswith("aiokafka07 bridge: error: target 127.0.0.1:9 unreachable"), out
        assert len(out.strip().splitlines()) == 1, out
        status, out = await run_tool(
            "--zookeeper", zookeeper, "--bootstrap-servers", bootstrap, "absent"
        )
        assert status == 1, out
        assert "topic absent does not exist on the target" in out, out
        assert len(out.strip().splitlines()) == 1, out
        # A record over the target producer's max_request_size (messages here: ~20 B).
        status, out = await run_tool(
            "--zookeeper",
            zookeeper,
            "--bootstrap-servers",
            bootstrap,
            "--producer-option",
            "max_request_size=10",
            "--consumer-option",
            "check_crcs=false",
            "present",
        )
        assert status == 1, out
        assert "a record is too large for the target" in out, out
        assert len(out.strip().splitlines()) == 1, out


async def test_tool_stops_after_the_transaction_on_ctrl_c(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    topics = ["clicks"]
    async with kafka_cluster(2, num_partitions=2) as _, mock_target(topics) as bootstrap:
        sent = await produce(zookeeper, topics, 20000, keys=50)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "aiokafka07",
            "bridge",
            "--zookeeper",
            zookeeper,
            "--bootstrap-servers",
            bootstrap,
            "--name",
            "test",  # as tests/bridge_process.py, which continues the work
            "--key-separator",
            ":",
            "--batch-size",
            "1000",
            "--consumer-option",
            "check_crcs=false",  # the mock cluster's control batches fail aiokafka's check
            "--progress",  # lines (stderr is not a terminal)
            *topics,
            stderr=asyncio.subprocess.PIPE,
        )
        try:

            async def some_copied() -> bool:
                copied = await asyncio.to_thread(read_target, bootstrap, topics)
                return len(copied["clicks"]) > 0

            await eventually(some_copied, timeout=120)
            process.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(process.communicate(), 120)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, err
        # The summary names the lag in total and per 0.7 broker-partition, and (a first
        # run) that recovery skipped nothing.
        *_, summary, recovery = err.decode().strip().splitlines()
        assert recovery == "recovery skipped nothing: no message was found already on the target"
        assert re.match(r"bridged \d+ messages .*, lag ([\d.]+ (B|KiB|MiB)|\?): ", summary), err
        assert re.search(r"clicks/[01]-[01] ", summary), summary
        copied = await asyncio.to_thread(read_target, bootstrap, topics)
        # A clean stop leaves whole transactions only: a multiple of the batch size or the
        # messages that were there (each transaction takes what is queued, up to 1000).
        assert 0 < len(copied["clicks"]) <= 20000
        # A run after a clean stop finds nothing written past the last checkpoint.
        bridge = await start_bridge(zookeeper, bootstrap, topics)
        try:
            skipped = 0
            while True:
                copied = await asyncio.to_thread(read_target, bootstrap, topics)
                if len(copied["clicks"]) >= 20000:
                    break
                skipped += await copied_beyond(bridge, 0, 120)
            assert skipped == 0
        finally:
            bridge.send_signal(signal.SIGKILL)
            await bridge.wait()
        check_exactly_once(sent, await asyncio.to_thread(read_target, bootstrap, topics))


def read_as_group(bootstrap: str, topics: list[str], group: str) -> list[bytes]:
    """What a consumer of ``group`` on the target reads from its committed offsets."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "log_level": 0,
        }
    )
    try:
        wanted = [
            confluent_kafka.TopicPartition(t, p) for t in topics for p in range(TARGET_PARTITIONS)
        ]
        committed = consumer.committed(wanted, timeout=30)
        assert all(tp.error is None and tp.offset >= 0 for tp in committed), committed
        # Assigned by offset alone: with the leader epoch the mock cluster reports on a
        # commit, librdkafka's offset validation against it fails ("log truncation").
        consumer.assign(
            [confluent_kafka.TopicPartition(tp.topic, tp.partition, tp.offset) for tp in committed]
        )
        return [message.value() for message in until_every_end(consumer, topics)]
    finally:
        consumer.close()


async def unconsumed_on_07(
    cluster: KafkaCluster, zookeeper: str, group: str, topic: str
) -> list[bytes]:
    """What the 0.7 group would read next: every message from its committed offsets on."""
    values: list[bytes] = []
    async with ZooKeeper(zookeeper) as zk:
        registry = GroupRegistry(zk, group)
        committed = await registry.offsets(topic)
    for broker_id, broker in cluster.brokers.items():
        async with SimpleConsumer(broker.host, broker.port, broker_id=broker_id) as c:
            for partition in range(broker.config.num_partitions):
                name = f"{broker_id}-{partition}"
                (end,) = await c.offsets_before(topic, partition, LATEST)
                start = committed.get(name, 0)
                async for record in c.messages(topic, partition, start, end_offset=end):
                    values.append(record.value)
    return values


async def log_ends(cluster: KafkaCluster, topic: str) -> dict[TopicPartition, int]:
    """The 0.7 log end of every broker-partition of ``topic``."""
    ends = {}
    for broker_id, broker in cluster.brokers.items():
        async with SimpleConsumer(broker.host, broker.port, broker_id=broker_id) as c:
            for partition in range(broker.config.num_partitions):
                (end,) = await c.offsets_before(topic, partition, LATEST)
                ends[TopicPartition(topic, broker_id, partition)] = end
    return ends


def in_process_bridge(
    zookeeper: str, bootstrap: str, topics: list[str], name: str, **options: Any
) -> Bridge:
    """A bridge in the test's process: keys before ":", small batches, and aiokafka's CRC
    check off (the mock cluster's control batches fail it)."""
    return Bridge(
        zookeeper,
        bootstrap,
        topics,
        name=name,
        key=key_before(b":"),
        batch_size=100,
        linger_ms=10,
        consumer_options={"check_crcs": False},
        **options,
    )


async def test_metrics_report_the_lag_of_every_broker_partition(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    topics = ["metered"]
    async with kafka_cluster(2, num_partitions=2) as cluster, mock_target(topics) as bootstrap:
        await produce(zookeeper, topics, 2000, keys=20)
        ends = await log_ends(cluster, "metered")
        bridge = in_process_bridge(zookeeper, bootstrap, topics, "metered", lag_interval_ms=50)
        seen: list[BridgeMetrics] = []
        stop = asyncio.Event()
        task = asyncio.ensure_future(bridge.run(stop, on_batch=seen.append))
        try:

            async def caught_up() -> bool:
                assert not task.done(), task
                metrics = bridge.metrics
                return metrics.messages == 2000 and metrics.lag_bytes == 0

            await eventually(caught_up, timeout=120)
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
        metrics = bridge.metrics
        assert set(metrics.partitions) == set(ends)
        for source, lag in metrics.partitions.items():
            assert lag.log_end == ends[source], source
            assert lag.position.offset == ends[source], source
            assert lag.lag_bytes == 0, source
        # On the way, each snapshot's lag was the log ends minus the copied offsets.
        behind = [m for m in seen if m.lag_bytes]
        assert behind, [m.lag_bytes for m in seen]
        for snapshot in behind:
            assert snapshot.lag_bytes == sum(
                ends[s] - lag.position.offset for s, lag in snapshot.partitions.items()
            )


async def test_a_bridge_started_at_latest_copies_only_what_comes_after(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """``start="latest"``: broker-partitions without a checkpoint begin at their log end
    (read by one probe per broker), so only messages produced after the start are
    copied, every one of them once."""
    topics = ["later"]
    async with kafka_cluster(2, num_partitions=2) as cluster, mock_target(topics) as bootstrap:
        await produce(zookeeper, topics, 300, keys=10)
        ends = await log_ends(cluster, "later")
        bridge = in_process_bridge(zookeeper, bootstrap, topics, "later", start="latest")
        stop = asyncio.Event()
        task = asyncio.ensure_future(bridge.run(stop))
        try:

            async def started() -> bool:
                assert not task.done(), task
                return len(bridge.metrics.partitions) == len(ends)

            await eventually(started, timeout=120)
            assert {s: lag.position.offset for s, lag in bridge.metrics.partitions.items()} == (
                ends
            )
            after = await produce(zookeeper, topics, 200, keys=10, start=300)

            async def copied() -> bool:
                assert not task.done(), task
                return bridge.metrics.messages == 200

            await eventually(copied, timeout=120)
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
        check_exactly_once(after, await asyncio.to_thread(read_target, bootstrap, topics))


def not_copied_gauge(bridge: Bridge) -> float:
    """``kafka07_bridge_topics_not_copied`` as the bridge's collector serves it."""
    (family,) = [
        f for f in BridgeCollector(bridge).collect() if f.name == "kafka07_bridge_topics_not_copied"
    ]
    (sample,) = family.samples
    return float(sample.value)


def create_target_topic(bootstrap: str, topic: str) -> None:
    """Create ``topic`` on the target, as ``tests/mock_target.py`` creates its topics: a
    client's metadata request for it (the mock's CreateTopics goes nowhere)."""
    client = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    created = client.list_topics(topic=topic, timeout=30).topics[topic]
    assert created.error is None, created.error
    assert len(created.partitions) == TARGET_PARTITIONS


async def produce_to(
    zookeeper: str, topic: str, broker_id: int, count: int, *, start: int, keys: int = 10
) -> list[bytes]:
    """``count`` messages into the partitions of one broker (values as :func:`produce`
    writes them, keys before ":"), the first of them registering the topic on that
    broker if none was there."""
    sent = []
    async with Producer(zookeeper=zookeeper, linger_ms=5, retries=20) as producer:
        futures = []
        for i in range(start, start + count):
            value = f"k{i % keys}:{topic}:{i}".encode()
            sent.append(value)
            futures.append(await producer.send(topic, value, partition=(broker_id, i % 2)))
        await asyncio.gather(*futures)
    return sent


@pytest.mark.parametrize("start", ["earliest", "latest"])
async def test_broker_partitions_registered_while_the_bridge_runs_are_copied_too(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str, start: str
) -> None:
    """A broker that registers a bridged topic while the bridge runs (here: its first
    message for the topic): the bridge ends its transaction in progress, recovers, and
    copies the new broker-partitions from their log start (with ``start="latest"`` too:
    everything in them came after the run began), exactly once with the rest. Before,
    the bridge read the registrations once, at its start, and never copied them."""
    topic = "grows"
    async with kafka_cluster(2, num_partitions=2) as _, mock_target([topic]) as bootstrap:
        before = await produce_to(zookeeper, topic, 0, 300, start=0)
        bridge = in_process_bridge(zookeeper, bootstrap, [topic], f"grows-{start}", start=start)
        stop = asyncio.Event()
        task = asyncio.ensure_future(bridge.run(stop))
        try:

            async def copying(count: int, partitions: int) -> bool:
                assert not task.done(), task
                metrics = bridge.metrics
                return (
                    metrics.phase == "copying"
                    and metrics.messages == count
                    and len(metrics.partitions) == partitions
                )

            copied_before = 300 if start == "earliest" else 0
            await eventually(lambda: copying(copied_before, 2), timeout=120)
            assert {s.broker_id for s in bridge.metrics.partitions} == {0}
            assert bridge.metrics.recoveries == 1
            added = await produce_to(zookeeper, topic, 1, 300, start=300)
            more = await produce_to(zookeeper, topic, 0, 100, start=600)
            await eventually(lambda: copying(copied_before + 400, 4), timeout=120)
            assert {s.broker_id for s in bridge.metrics.partitions} == {0, 1}
            # One recovery at the start, one when broker 1 registered the topic.
            assert bridge.metrics.recoveries == 2
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
        sent = {topic: (before if start == "earliest" else []) + added + more}
        check_exactly_once(sent, await asyncio.to_thread(read_target, bootstrap, [topic]))


async def test_a_topic_the_whitelist_chooses_later_is_copied_once_the_target_has_it(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a whitelist, a topic registered while the bridge runs is copied too (from its
    log start, exactly once), and one the target lacks is logged as an error once while
    the rest goes on being copied, then copied once the target has it."""
    caplog.set_level(logging.INFO, logger="aiokafka07.bridge")
    monkeypatch.setattr(runner, "TOPIC_RECHECK", 0.2)  # the target gives no event
    async with kafka_cluster(1, num_partitions=2) as _, mock_target(["wl-a", "wl-b"]) as bootstrap:
        # Before the start: not copied (start="latest"); check_exactly_once finds any.
        await produce_to(zookeeper, "wl-a", 0, 200, start=0)
        bridge = Bridge(
            zookeeper,
            bootstrap,
            whitelist="wl-.*",
            name="whitelist",
            key=key_before(b":"),
            batch_size=100,
            linger_ms=10,
            start="latest",
            consumer_options={"check_crcs": False},
        )
        stop = asyncio.Event()
        task = asyncio.ensure_future(bridge.run(stop))
        try:

            async def copying(topics: set[str]) -> bool:
                assert not task.done(), task
                metrics = bridge.metrics
                return metrics.phase == "copying" and {s.topic for s in metrics.partitions} == (
                    topics
                )

            await eventually(lambda: copying({"wl-a"}), timeout=120)
            # wl-c is missing on the target (the mock cluster has wl-a and wl-b).
            lacking = await produce_to(zookeeper, "wl-c", 0, 50, start=0)
            refused = "topic wl-c is registered in the 0.7 cluster and chosen by the bridge's"

            def logged_refusal() -> bool:
                assert not task.done(), task
                return any(refused in r.getMessage() for r in caplog.records)

            await eventually(logged_refusal, timeout=120)
            # As a metric too: the snapshot names it, the collector counts it.
            assert set(bridge.metrics.topics_not_copied) == {"wl-c"}
            assert "does not exist on the target" in bridge.metrics.topics_not_copied["wl-c"]
            assert not_copied_gauge(bridge) == 1
            added = await produce_to(zookeeper, "wl-b", 0, 300, start=0)
            more = await produce_to(zookeeper, "wl-a", 0, 100, start=200)
            await eventually(lambda: copying({"wl-a", "wl-b"}), timeout=120)

            async def copied() -> bool:
                assert not task.done(), task
                topics = bridge.metrics.topics
                return topics["wl-a"].messages == 100 and topics["wl-b"].messages == 300

            await eventually(copied, timeout=120)
            errors = [r for r in caplog.records if refused in r.getMessage()]
            assert len(errors) == 1, errors  # once, through the plan that added wl-b
            assert errors[0].levelno == logging.ERROR
            # Once the target has wl-c, it is copied too, from its log start.
            await asyncio.to_thread(create_target_topic, bootstrap, "wl-c")
            await eventually(lambda: copying({"wl-a", "wl-b", "wl-c"}), timeout=120)

            async def copied_c() -> bool:
                assert not task.done(), task
                return bridge.metrics.topics["wl-c"].messages == 50

            await eventually(copied_c, timeout=120)
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
        assert any("topic wl-c can be copied now" in r.getMessage() for r in caplog.records)
        assert bridge.metrics.topics_not_copied == {}
        assert not_copied_gauge(bridge) == 0
        sent = {"wl-a": more, "wl-b": added, "wl-c": lacking}
        topics = ["wl-a", "wl-b", "wl-c"]
        check_exactly_once(sent, await asyncio.to_thread(read_target, bootstrap, topics))


async def test_group_offsets_switch_over_without_loss_or_repeat(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    topics = ["events"]
    async with kafka_cluster(2, num_partitions=2) as cluster, mock_target(topics) as bootstrap:
        sent = await produce(zookeeper, topics, 3000, keys=40)
        # The 0.7 group consumes part of it, commits, and stays a member for now.
        consumer = Consumer(*topics, group="app", zookeeper=zookeeper, auto_commit=False)
        await consumer.start()
        try:
            taken = 0
            while taken < 1000:
                batches = await consumer.getmany(timeout_ms=1000, max_records=200)
                taken += sum(len(r) for r in batches.values())
            await consumer.commit()
            bridge = await start_bridge(zookeeper, bootstrap, topics, keyless=True)
            try:
                while (
                    len((await asyncio.to_thread(read_target, bootstrap, topics))["events"]) < 3000
                ):
                    await copied_beyond(bridge, 0, 120)
            finally:
                bridge.send_signal(signal.SIGKILL)
                await bridge.wait()
            status, out = await translate_offsets(zookeeper, bootstrap)
            assert status == 1, out
            assert "live members" in out, out
        finally:
            await consumer.close(commit=False)
        status, out = await translate_offsets(zookeeper, bootstrap)
        assert status == 0, out
        assert "committed 4 offsets for group app" in out, out
        expected = await unconsumed_on_07(cluster, zookeeper, "app", "events")
        assert 0 < len(expected) < len(sent["events"])
        got = await asyncio.to_thread(read_as_group, bootstrap, topics, "app")
        assert sorted(got) == sorted(expected)


def test_topics_and_filters_are_taken_as_the_group_consumer_takes_them() -> None:
    """A whitelist or blacklist is normalised as 0.7.2 does (``"a, b"`` is a or b, quotes
    and spaces dropped) and matched against whole names; a bad regex, a bad topic name or
    a bad number is refused at construction with a typed error, before anything connects."""
    from aiokafka07.bridge import Bridge
    from aiokafka07.errors import InvalidConfigError, InvalidTopicError
    from aiokafka07.group.subscription import InvalidTopicFilterError

    zk, target = "127.0.0.1:1", "127.0.0.1:2"
    registered = {"clicks", "views", "clicks2", "other"}
    assert Bridge(zk, target, whitelist=" 'clicks, views' ")._chosen(registered) == [
        "clicks",
        "views",
    ]
    assert Bridge(zk, target, blacklist="click.*")._chosen(registered) == ["other", "views"]
    with pytest.raises(InvalidTopicFilterError):
        Bridge(zk, target, whitelist="(")
    with pytest.raises(InvalidTopicError):
        Bridge(zk, target, ["bad/name"])
    with pytest.raises(InvalidConfigError, match="batch_size"):
        Bridge(zk, target, ["t"], batch_size=0)


# -- the metrics endpoint (aiokafka07 bridge --metrics-port) ------------------------------


def found_past_checkpoint(bootstrap: str, copied: Copied, name: str) -> int:
    """What a recovery of bridge ``name`` finds, counted independently of the bridge:
    the records ``copied`` (:func:`read_target`) at or past the offsets its last
    checkpoint record names (tests/bridge_process.py's first run writes no
    ``pending``), the checkpoint read by confluent-kafka's consumer."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "checkpoint-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "log_level": 0,
        }
    )
    last = None
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(CHECKPOINTS, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        for message in until_partition_eof(consumer):
            if message.key() == name.encode():
                last = message.value()
    finally:
        consumer.close()
    assert last is not None, "no checkpoint written"
    doc = json.loads(last)
    assert doc["pending"] == [], doc
    ends = {(t, p): o for t, p, o in doc["targets"]}
    return sum(
        offset >= ends.get((topic, partition), 0)
        for topic, records in copied.items()
        for partition, _, _, offset, _ in records
    )


def until_partition_eof(consumer: Any) -> Iterator[Any]:
    """The records of the one partition ``consumer`` is assigned, up to its end."""
    idle = 0
    while True:
        message = consumer.poll(1.0)
        if message is None:
            idle += 1
            assert idle < 60, "no end of partition"
            continue
        if message.error() is not None:
            assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
            return
        yield message


async def killed_in_a_transaction(
    zookeeper: str, bootstrap: str, topics: list[str], transaction: int
) -> tuple[int, int]:
    """Run tests/bridge_process.py until the target acknowledged the records of its
    ``transaction``-th transaction (its log says so before the checkpoint and the
    commit), SIGKILL it at once; return the records then on the target and how many
    of them lie past the last checkpoint (:func:`found_past_checkpoint`)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(BRIDGE), zookeeper, bootstrap, *topics,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    sign = f"transaction {transaction}: ".encode()
    try:
        assert process.stderr is not None
        while True:
            line = await asyncio.wait_for(process.stderr.readline(), 120)
            assert line, f"bridge process ended (status {await process.wait()})"
            if sign in line:
                break
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    copied = await asyncio.to_thread(read_target, bootstrap, topics)
    found = await asyncio.to_thread(found_past_checkpoint, bootstrap, copied, "test")
    return sum(len(records) for records in copied.values()), found


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def metrics_url(process: asyncio.subprocess.Process) -> str:
    """The ``http://127.0.0.1:PORT`` a bridge started with ``--metrics-port 0`` says it
    serves, on the first line of its stderr."""
    assert process.stderr is not None
    line = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
    found = re.match(r"aiokafka07 bridge: serving (http://127\.0\.0\.1:\d+)/metrics", line)
    assert found, line
    return found.group(1)


async def scrape(session: Any, url: str) -> Samples:
    """``/metrics`` as {(sample name, sorted labels): value}, after 0.1 s (a scrape
    every 0.1 s at most when polled: not to load the bridge, nor the machine)."""
    from prometheus_client.parser import text_string_to_metric_families

    await asyncio.sleep(0.1)
    async with session.get(f"{url}/metrics", timeout=aiohttp_timeout()) as answer:
        assert answer.status == 200
        text = await answer.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def aiohttp_timeout() -> Any:
    import aiohttp

    return aiohttp.ClientTimeout(total=10)


def lags(samples: Samples) -> dict[tuple[int, int], float]:
    """``kafka07_bridge_lag_bytes`` by (broker, partition)."""
    return {
        (int(dict(labels)["broker"]), int(dict(labels)["partition"])): value
        for (name, labels), value in samples.items()
        if name == "kafka07_bridge_lag_bytes"
    }


async def test_metrics_endpoint_through_a_sigkill_a_restart_and_a_stopped_broker(
    zookeeper: str, tmp_path: Path
) -> None:
    """``aiokafka07 bridge --metrics-port 0``, started after a bridge was SIGKILLed
    mid-run, against 0.7 broker processes: what it copied and skipped per topic adds up
    with what was there before it (skipped equal to what recovery finds past the last
    checkpoint, counted independently), the lag of every broker-partition reaches 0,
    transactions count up as more is produced, a SIGSTOPped broker's partitions lose
    their lag samples (never 0) and are counted unknown, /health says it copies, and the
    closing lines name what recovery skipped."""
    import aiohttp

    topics = ["metered"]
    first_count = 5000  # enough for 4 runs killed in their second transaction (of 500)
    key = (("topic", "metered"),)
    copied_key = ("kafka07_bridge_messages_copied_total", key)
    brokers: dict[int, tuple[asyncio.subprocess.Process, BrokerAddress]] = {}
    try:
        for broker_id in (0, 1):
            # Every message set flushed at once: readable (and copied) without waiting
            # for the flush scheduler.
            brokers[broker_id] = await start_broker_process(
                tmp_path / f"b{broker_id}",
                broker_id=broker_id,
                partitions=2,
                zookeeper=zookeeper,
                settings={"log.flush.interval": "1"},
            )
        async with mock_target(topics) as bootstrap, aiohttp.ClientSession() as session:
            sent = await produce(zookeeper, topics, first_count, keys=97)
            # Bridges killed once the target acknowledged the records of their second
            # transaction, before its commit (a race the kill may lose: then it is tried
            # again, 4 times at most; with none found, the rest of the test still runs,
            # for "nothing").
            for attempt in range(4):
                before, found = await killed_in_a_transaction(zookeeper, bootstrap, topics, 2)
                print(f"kill {attempt}: {before} on the target, {found} past the checkpoint")
                if found:
                    break
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aiokafka07", "bridge", "--zookeeper", zookeeper,
                "--bootstrap-servers", bootstrap, "--name", "test", "--key-separator", ":",
                "--batch-size", "500", "--linger-ms", "20", "--lag-interval-ms", "100",
                "--consumer-option", "check_crcs=false", "--metrics-port", "0", *topics,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                url = await metrics_url(process)

                async def caught_up() -> Samples | None:
                    assert process.returncode is None
                    samples = await scrape(session, url)
                    copied = samples.get(copied_key)
                    skipped = samples.get(("kafka07_bridge_recovery_skipped_total", key))
                    if copied is None or skipped is None or before + copied < first_count:
                        return None
                    if set(lags(samples).values()) != {0}:
                        return None
                    return samples

                samples = await eventually(caught_up, timeout=120)
                # Every series the bridge declares is served (the alert rules name them).
                assert set(BRIDGE_METRICS) <= {name for name, _ in samples}
                assert samples[copied_key] == first_count - before
                assert samples[("kafka07_bridge_recovery_skipped_total", key)] == found
                assert sorted(lags(samples)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
                assert samples[("kafka07_bridge_topic_lag_bytes", key)] == 0
                assert samples[("kafka07_bridge_partitions_unknown", key)] == 0
                assert samples[("kafka07_bridge_copying", ())] == 1
                assert samples[("kafka07_bridge_recoveries_total", ())] == 1
                assert samples[("kafka07_bridge_transactions_aborted_total", ())] == 0
                assert ("process_start_time_seconds", ()) in samples
                committed = samples[("kafka07_bridge_transactions_committed_total", ())]
                stamp = samples[("kafka07_bridge_last_commit_timestamp_seconds", ())]
                assert committed >= 1
                async with session.get(f"{url}/health", timeout=aiohttp_timeout()) as answer:
                    assert answer.status == 200
                    health = await answer.json()
                print(json.dumps(health, indent=2))
                assert health["phase"] == "copying", health
                assert health["lag_bytes"] == 0, health
                assert health["partitions_unknown"] == 0, health

                # More produced: the transactions count up, the copied count by as many.
                more = await produce(zookeeper, topics, 200, keys=97, start=first_count)
                sent["metered"] += more["metered"]

                async def copied_more() -> Samples | None:
                    samples = await scrape(session, url)
                    copied = samples[copied_key]
                    if copied < first_count + 200 - before or set(lags(samples).values()) != {0}:
                        return None
                    return samples

                samples = await eventually(copied_more, timeout=60)
                assert samples[copied_key] == first_count + 200 - before
                assert samples[("kafka07_bridge_transactions_committed_total", ())] > committed
                assert samples[("kafka07_bridge_last_commit_timestamp_seconds", ())] > stamp
                assert samples[("kafka07_bridge_last_commit_age_seconds", ())] >= 0

                # A SIGSTOPped 0.7 broker: its partitions' lag is unknown, not 0.
                stopped = brokers[1][0]
                stopped.send_signal(signal.SIGSTOP)
                try:

                    async def unknown() -> Samples | None:
                        samples = await scrape(session, url)
                        if samples[("kafka07_bridge_partitions_unknown", key)] != 2:
                            return None
                        return samples

                    samples = await eventually(unknown, timeout=30)
                    assert sorted(lags(samples)) == [(0, 0), (0, 1)]
                    assert ("kafka07_bridge_topic_lag_bytes", key) not in samples
                    async with session.get(f"{url}/health", timeout=aiohttp_timeout()) as answer:
                        health = await answer.json()
                    assert health["lag_bytes"] is None, health
                    assert health["partitions_unknown"] == 2, health
                finally:
                    stopped.send_signal(signal.SIGCONT)

                async def known_again() -> bool:
                    samples = await scrape(session, url)
                    return (
                        samples[("kafka07_bridge_partitions_unknown", key)] == 0
                        and len(lags(samples)) == 4
                    )

                await eventually(known_again, timeout=30)
                process.send_signal(signal.SIGINT)
                _, err = await asyncio.wait_for(process.communicate(), 60)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            assert process.returncode == 0, err
            closing = err.decode().strip().splitlines()
            print("\n".join([url, *closing[-2:]]))  # shown when the test fails
            assert closing[-2].startswith(f"bridged {first_count + 200 - before} messages"), closing
            if found:
                assert closing[-1] == (
                    f"recovery skipped {found} message{'s' if found > 1 else ''} found already "
                    f"on the target (metered {found})"
                ), closing
            else:
                assert closing[-1] == (
                    "recovery skipped nothing: no message was found already on the target"
                ), closing
            check_exactly_once(sent, await asyncio.to_thread(read_target, bootstrap, topics))
    finally:
        for process_, _ in brokers.values():
            process_.send_signal(signal.SIGCONT)
            await stop_broker_process(process_)


async def test_a_topic_no_live_broker_holds_fails_the_start_naming_it(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """The broker-partitions are read once, at the start: a topic no live broker holds
    (its brokers down, or their sessions expired and not registered again yet) fails the
    run with the topic and the connect string, where it copied nothing for ever (seen in
    the suite: a bridge started while the brokers re-registered after their ZooKeeper
    sessions expired said "copying ... from 0 broker-partitions" and stayed so)."""
    from aiokafka07.errors import BridgeError

    async with kafka_cluster(1) as _, mock_target(["present", "ghost"]) as bootstrap:
        await produce(zookeeper, ["present"], 10, keys=3)
        bridge = in_process_bridge(zookeeper, bootstrap, ["present", "ghost"], "ghost")
        with pytest.raises(BridgeError, match="no live broker holds ghost in ZooKeeper") as e:
            await asyncio.wait_for(bridge.run(), 60)
        assert repr(zookeeper) in str(e.value)
        assert "present" not in str(e.value)
        assert bridge.metrics.phase == "failed"


async def test_a_failed_transaction_is_aborted_and_counted(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """A write that fails (a record over the producer's max_request_size) aborts its
    transaction before the error ends the run: counted in
    ``kafka07_bridge_transactions_aborted_total``, with nothing committed, and /health
    answers 503 ``failed`` (the endpoint outlives the run in an embedding application)."""
    import aiohttp

    from aiokafka07.bridge.server import BridgeMetricsServer
    from aiokafka07.errors import BridgeError

    topics = ["oversized"]
    async with kafka_cluster(1) as _, mock_target(topics) as bootstrap:
        await produce(zookeeper, topics, 10, keys=3)
        bridge = in_process_bridge(
            zookeeper, bootstrap, topics, "oversized", producer_options={"max_request_size": 10}
        )
        async with BridgeMetricsServer(bridge, port=0) as server, aiohttp.ClientSession() as s:
            with pytest.raises(BridgeError, match="too large"):
                await asyncio.wait_for(bridge.run(), 120)
            samples = await scrape(s, server.url)
            async with s.get(f"{server.url}/health", timeout=aiohttp_timeout()) as answer:
                status, health = answer.status, await answer.json()
    assert samples[("kafka07_bridge_transactions_aborted_total", ())] == 1
    assert samples[("kafka07_bridge_transactions_committed_total", ())] == 0
    assert samples[("kafka07_bridge_messages_copied_total", (("topic", "oversized"),))] == 0
    assert samples[("kafka07_bridge_recoveries_total", ())] == 1
    assert samples[("kafka07_bridge_copying", ())] == 0
    assert ("kafka07_bridge_last_commit_timestamp_seconds", ()) not in samples
    assert ("kafka07_bridge_last_commit_age_seconds", ()) not in samples
    assert (status, health["phase"]) == (503, "failed"), health


def test_metrics_port_without_prometheus_client_is_a_one_line_error() -> None:
    """``--metrics-port`` where prometheus_client cannot be imported (hidden, as if not
    installed): exit 1 before anything connects, naming the extra and its install."""
    script = """
import sys
sys.modules["prometheus_client"] = None  # import fails: as if not installed
from aiokafka07.cli import main
sys.exit(main(["bridge", "--zookeeper", "127.0.0.1:1", "--bootstrap-servers", "127.0.0.1:1",
               "--metrics-port", "0", "t"]))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "aiokafka07 bridge: error: --metrics-port needs prometheus-client and aiohttp, the "
        "exporter extra"
    ), lines
    assert "python -m pip install -e '.[bridge,exporter]'" in lines[0], lines


@pytest.mark.slow  # a broker process, the mock target's and the bridge's
async def test_as_a_service_cluster_label_and_the_sigterm_line(
    zookeeper: str, tmp_path: Path
) -> None:
    """``aiokafka07 bridge --metrics-port 0 --metrics-cluster NAME``, against a 0.7 broker
    process, run as a service runs it: every series served carries ``cluster="NAME"``
    (the process collector's too), /health answers 200 while it copies, and SIGTERM
    stops it cleanly (exit 0) with a line that says so and how many transactions it
    committed, before the summary and recovery lines."""
    import aiohttp

    topics = ["served"]
    broker, _ = await start_broker_process(
        tmp_path / "b0",
        broker_id=0,
        partitions=2,
        zookeeper=zookeeper,
        settings={"log.flush.interval": "1"},
    )
    try:
        async with mock_target(topics) as bootstrap, aiohttp.ClientSession() as session:
            await produce(zookeeper, topics, 200, keys=7)
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aiokafka07", "bridge", "--zookeeper", zookeeper,
                "--bootstrap-servers", bootstrap, "--batch-size", "100", "--linger-ms", "20",
                "--lag-interval-ms", "100", "--consumer-option", "check_crcs=false",
                "--metrics-port", "0", "--metrics-cluster", "eu-1", *topics,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                url = await metrics_url(process)
                copied_key = (
                    "kafka07_bridge_messages_copied_total",
                    (("cluster", "eu-1"), ("topic", "served")),
                )

                async def copied() -> Samples | None:
                    assert process.returncode is None
                    samples = await scrape(session, url)
                    return samples if samples.get(copied_key) == 200 else None

                samples = await eventually(copied, timeout=60)
                assert {dict(labels).get("cluster") for _, labels in samples} == {"eu-1"}
                assert ("process_start_time_seconds", (("cluster", "eu-1"),)) in samples
                async with session.get(f"{url}/health", timeout=aiohttp_timeout()) as answer:
                    assert answer.status == 200
                process.send_signal(signal.SIGTERM)
                _, err = await asyncio.wait_for(process.communicate(), 60)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        assert process.returncode == 0, err
        stopped, summary, recovery = err.decode().strip().splitlines()[-3:]
        print("\n".join((stopped, summary, recovery)))  # shown when the test fails
        committed = int(
            samples[("kafka07_bridge_transactions_committed_total", (("cluster", "eu-1"),))]
        )
        assert re.fullmatch(
            r"aiokafka07 bridge: stopped by SIGTERM after [0-9.]+ s: (\d+) transactions? "
            r"committed, 0 aborted; the next run continues after the last one",
            stopped,
        ), stopped
        assert int(stopped.split(": ")[2].split()[0]) >= committed >= 1
        assert summary.startswith("bridged 200 messages"), summary
        assert recovery.startswith("recovery skipped nothing"), recovery
    finally:
        await stop_broker_process(broker)

"""What the group-consumer tests share: members with short timers, producing tagged values,
reading the group's znodes with a separate session, waiting for convergence, collecting and
counting what members hand out, and a member in a process of its own."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from aiokafka07 import LATEST, ConsumerRecord, Producer, SimpleConsumer
from aiokafka07.errors import ZooKeeperError
from aiokafka07.group import assign_group
from aiokafka07.group.consumer import Consumer
from aiokafka07.records import TopicPartition
from aiokafka07.testing import KafkaCluster, ZooKeeperServer
from aiokafka07.zookeeper import ZooKeeper

from .wire import eventually

TOPIC = "events"

#: Short timers so groups converge and commit within a fraction of a second.
FAST: dict[str, Any] = {
    "auto_offset_reset": "smallest",
    "auto_commit_interval_ms": 100,
    "fetch_backoff_ms": 10,
    "rebalance_backoff_ms": 20,
}

Registrations = dict[str, dict[int, int]]


def member(zookeeper: str, *topics: str, group: str = "g", **options: Any) -> Consumer:
    if not topics and "whitelist" not in options and "blacklist" not in options:
        topics = (TOPIC,)
    return Consumer(*topics, group=group, zookeeper=zookeeper, **{**FAST, **options})


@contextlib.asynccontextmanager
async def running_cluster(
    kafka_cluster: Any, zookeeper: str, brokers: int, partitions: int
) -> AsyncIterator[tuple[KafkaCluster, Producer, ZooKeeper]]:
    """``brokers`` embedded brokers with ``partitions`` partitions per topic each, flushing
    as 0.7.2's shipped ``server.properties`` (what real clusters run: a message is read,
    and confirmed, 1-2 s after it is written), a producer and a separate ZooKeeper session
    to read the group's znodes with: what a test starts."""
    async with (
        kafka_cluster(
            brokers, zookeeper=zookeeper, num_partitions=partitions, flush="shipped"
        ) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        yield cluster, producer, zk


def partitions_of(registrations: dict[int, int]) -> list[tuple[int, int]]:
    return [(b, p) for b, count in sorted(registrations.items()) for p in range(count)]


def value_for(tag: str, broker: int, partition: int, i: int) -> bytes:
    return f"{tag}:{broker}-{partition}:{i:06d}".encode()


def source_of(value: bytes) -> str:
    """The "b-p" a test value was produced to."""
    return value.decode().split(":")[1]


def sequence_of(value: bytes) -> int:
    """The produce order of a test value."""
    return int(value.decode().split(":")[2].rstrip("."))


_sequence = itertools.count()


async def produce(
    producer: Producer,
    topic: str,
    partitions: Iterable[tuple[int, int]],
    count: int,
    tag: str,
    pad: int = 0,
) -> list[bytes]:
    """``count`` messages to each of ``partitions``; all delivered when this returns."""
    targets = list(partitions)
    values: list[bytes] = []
    futures = []
    for _ in range(count):
        for broker, partition in targets:
            value = value_for(tag, broker, partition, next(_sequence)) + b"." * pad
            values.append(value)
            futures.append(await producer.send(topic, value, partition=(broker, partition)))
    await asyncio.gather(*futures)
    return values


async def produce_sets(
    producer: Producer,
    topic: str,
    partitions: Iterable[tuple[int, int]],
    count: int,
    tag: str,
    pad: int = 0,
) -> dict[str, list[bytes]]:
    """``count`` messages to each of ``partitions`` as ONE message set per partition
    (``send_batch``): the broker appends and shows each set at once, so a consumer's fetch
    from before the set takes it whole. Returns "b-p" → the set's values, in order; all
    delivered when this returns."""
    sets: dict[str, list[bytes]] = {}
    futures = []
    for broker, partition in partitions:
        batch = producer.create_batch()
        values = [
            value_for(tag, broker, partition, next(_sequence)) + b"." * pad for _ in range(count)
        ]
        for value in values:
            if batch.append(value) is None:
                raise AssertionError(f"{count} messages do not fit in one batch")
        futures.append(await producer.send_batch(batch, topic, partition=(broker, partition)))
        sets[f"{broker}-{partition}"] = values
    await asyncio.gather(*futures)
    return sets


@contextlib.asynccontextmanager
async def own_zookeeper() -> AsyncIterator[ZooKeeperServer]:
    """A ZooKeeper server of the test's own (for a test that stops it with SIGSTOP)."""
    server = ZooKeeperServer()
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.close)


async def topic_registrations(zk: ZooKeeper, topic: str) -> dict[int, int]:
    result: dict[int, int] = {}
    for child in await zk.get_children(f"/brokers/topics/{topic}"):
        with contextlib.suppress(ZooKeeperError):
            result[int(child)] = int(await zk.get_data(f"/brokers/topics/{topic}/{child}") or 0)
    return result


async def wait_registered(zk: ZooKeeper, topic: str, expected: dict[int, int]) -> None:
    async def check() -> bool:
        return await topic_registrations(zk, topic) == expected

    await eventually(check, 10)


async def children_data(zk: ZooKeeper, path: str) -> dict[str, str | None]:
    result: dict[str, str | None] = {}
    for child in await zk.get_children(path):
        with contextlib.suppress(ZooKeeperError):
            result[child] = await zk.get_data(f"{path}/{child}")
    return result


async def owner_nodes(
    zk: ZooKeeper, group: str, topics: Iterable[str]
) -> dict[tuple[str, str], str]:
    owners: dict[tuple[str, str], str] = {}
    for topic in topics:
        for name, value in (await children_data(zk, f"/consumers/{group}/owners/{topic}")).items():
            owners[(topic, name)] = value or ""
    return owners


async def log_ends(cluster: KafkaCluster, topic: str) -> dict[str, int]:
    """The log end offset ("b-p" → next offset) of every partition on every running broker."""
    ends: dict[str, int] = {}
    for broker in cluster.running:
        async with SimpleConsumer(broker.host, broker.port, broker_id=broker.broker_id) as c:
            for partition in range(broker.config.partitions_for(topic)):
                (end,) = await c.offsets_before(topic, partition, LATEST, 1)
                ends[f"{broker.broker_id}-{partition}"] = end
    return ends


async def committed_offsets(zk: ZooKeeper, group: str, topic: str) -> dict[str, str | None]:
    return await children_data(zk, f"/consumers/{group}/offsets/{topic}")


def expected_owners(
    members: Sequence[Consumer], registrations: Registrations
) -> dict[tuple[str, str], str]:
    """(topic, "b-p") → thread id, from :func:`assign_group` over ``members``."""
    plan = assign_group({c.consumer_id: c.topic_subscription for c in members}, registrations)
    return {
        (topic, name): thread
        for topic, ranges in plan.items()
        for thread, names in ranges.items()
        for name in names
    }


async def group_state(
    zk: ZooKeeper, group: str, members: Sequence[Consumer], registrations: Registrations
) -> list[str]:
    """What differs from a converged group (empty when converged)."""
    problems: list[str] = []
    ids = sorted(await zk.get_children(f"/consumers/{group}/ids"))
    if ids != sorted(c.consumer_id for c in members):
        problems.append(f"ids {ids}")
    wanted = expected_owners(members, registrations)
    for c in members:
        mine = {
            TopicPartition.parse(topic, name): thread
            for (topic, name), thread in wanted.items()
            if thread.rsplit("-", 1)[0] == c.consumer_id
        }
        if c.assignment() != set(mine):
            problems.append(f"{c.consumer_id} owns {sorted(c.assignment())}, not {sorted(mine)}")
        elif {tp: c.metrics.partitions[tp].thread for tp in mine} != mine:
            problems.append(f"{c.consumer_id}: wrong threads")
    owners = await owner_nodes(zk, group, registrations)
    if owners != wanted:
        problems.append(f"owner nodes {owners} != {wanted}")
    return problems


async def wait_converged(
    zk: ZooKeeper,
    group: str,
    members: Sequence[Consumer],
    registrations: Registrations,
    timeout: float = 15.0,
) -> None:
    """Until every partition has exactly the owner :func:`assign_group` gives it, in
    ZooKeeper and in the members' ``assignment()``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        problems = await group_state(zk, group, members, registrations)
        if not problems:
            return
        if loop.time() > deadline:
            raise AssertionError(f"group {group} did not converge: {problems}")
        await asyncio.sleep(0.02)


async def leave(members: Sequence[Consumer], collectors: Iterable[Collector]) -> None:
    """Close every member, then stop every collector (the usual test teardown)."""
    await asyncio.gather(*(m.close() for m in members))
    for c in collectors:
        await c.stop()


async def assert_committed_at_log_ends(zk: ZooKeeper, cluster: KafkaCluster) -> None:
    """Everything was consumed and committed: the group's offsets are the log ends."""
    offsets = await committed_offsets(zk, "g", TOPIC)
    assert {k: int(v or -1) for k, v in offsets.items()} == await log_ends(cluster, TOPIC)


class Collector:
    """Drains an async iterator of records in a task of its own."""

    def __init__(self, source: AsyncIterator[ConsumerRecord]) -> None:
        self.records: list[ConsumerRecord] = []
        self.task = asyncio.create_task(self._run(source))

    async def _run(self, source: AsyncIterator[ConsumerRecord]) -> None:
        async for record in source:
            self.records.append(record)

    def values(self) -> list[bytes]:
        return [r.value for r in self.records]

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def delivered(
    collectors: Iterable[Collector], extra: Iterable[bytes] = ()
) -> collections.Counter[bytes]:
    counts: collections.Counter[bytes] = collections.Counter(extra)
    for collector in collectors:
        counts.update(collector.values())
    return counts


async def wait_delivered(
    collectors: Sequence[Collector], expected: Iterable[bytes], timeout: float = 15.0
) -> None:
    wanted = set(expected)

    def check() -> bool:
        for collector in collectors:
            if collector.task.done() and not collector.task.cancelled():
                collector.task.result()  # a failed iterator fails the test at once
        return wanted <= set(delivered(collectors))

    try:
        await eventually(check, timeout)
    except AssertionError:
        missing = wanted - set(delivered(collectors))
        raise AssertionError(
            f"{len(missing)} never delivered, e.g. {sorted(missing)[:5]}"
        ) from None


def assert_records_match_sources(records: Iterable[ConsumerRecord], topic: str = TOPIC) -> None:
    """Every record says where it came from; per partition, values come in produce order."""
    by_partition: dict[str, list[int]] = collections.defaultdict(list)
    for r in records:
        assert r.topic == topic
        name = f"{r.broker_id}-{r.partition}"
        assert source_of(r.value) == name, r
        by_partition[name].append(sequence_of(r.value))
    for name, sequence in by_partition.items():
        assert sequence == sorted(sequence), f"{name} out of order"


async def crash(consumer: Consumer) -> None:
    """Die like a killed process: no commit, no release, no unregister; the ZooKeeper
    session ends (so its ephemeral nodes vanish at once)."""
    consumer.closed = consumer._delivery.closed = True
    for stream in consumer.streams:
        stream.close()
    await consumer._supervisor.aclose()
    await consumer._zk.close()
    await consumer._pool.close()


class OwnershipSampler:
    """Samples a group while it rebalances: no partition is ever in the assignment of two
    live members, and the owner node of a partition a member held throughout a sample
    holds no other thread id."""

    def __init__(self, zk: ZooKeeper, group: str, topic: str, members: list[Consumer]) -> None:
        self.zk = zk
        self.group = group
        self.topic = topic
        self.members = members  # the live ones: remove a member before crashing it
        self.violations: list[str] = []
        self.samples = 0
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            live = [c for c in self.members if not c.closed]
            before = {c.consumer_id: dict(c._assignment.partitions) for c in live}
            holders: dict[TopicPartition, str] = {}
            for cid, held_now in before.items():
                for tp in held_now:
                    if tp in holders:
                        self.violations.append(f"{tp} owned by {holders[tp]} and {cid}")
                    holders[tp] = cid
            owners = await owner_nodes(self.zk, self.group, [self.topic])
            for c in live:
                if c.closed or c not in self.members:
                    continue  # left (or crashed) during the sample
                for tp, owned in before[c.consumer_id].items():
                    held = c._assignment.get(tp) is owned
                    node = owners.get((self.topic, tp.name))
                    # (None: released a moment before the member forgets the partition.)
                    if held and node is not None and node != owned.thread:
                        self.violations.append(f"{tp} held by {owned.thread}, node says {node}")
            self.samples += 1
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


TWO_BY_THREE: dict[int, int] = {0: 3, 1: 3}


ONE_BY_TWO: dict[int, int] = {0: 2}


def flip_payload_byte(cluster: KafkaCluster, topic: str, partition: int, offset: int) -> None:
    """Corrupt the entry at ``offset`` on disk (its CRC no longer matches)."""
    directory = cluster.broker(0).config.log_dir / f"{topic}-{partition}"
    (segment,) = directory.glob("*.kafka")
    with segment.open("r+b") as f:
        f.seek(offset + 4 + 6)  # size, magic, attributes, CRC: the payload's first byte
        byte = f.read(1)
        f.seek(offset + 4 + 6)
        f.write(bytes([byte[0] ^ 0xFF]))


class RecordingListener:
    """Records the sets it is told about; each callback awaits before recording."""

    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.consumer: Consumer | None = None
        self.owned_during_revoke: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        assert self.consumer is not None
        self.owned_during_revoke.append(self.consumer.assignment())
        await asyncio.sleep(0.05)
        self.events.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await asyncio.sleep(0.05)
        self.events.append(("assigned", assigned))


class OffsetsWhenAssigned:
    """Records every assignment, and the group's committed offsets at that moment."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk
        self.consumer: Consumer | None = None
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.offsets: list[dict[str, str | None]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.offsets.append(await committed_offsets(self.zk, "g", TOPIC))
        self.events.append(("assigned", assigned))


def parts_names(parts: Iterable[tuple[int, int]]) -> list[str]:
    return [f"{b}-{p}" for b, p in parts]


MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")


class RemoteRecord(NamedTuple):
    """A record a :class:`RemoteMember` was handed; ``line`` numbers its output lines,
    ``at`` is the ``time.monotonic()`` at which it was handed out."""

    line: int
    at: float
    name: str  # "b-p"
    offset: int
    value: bytes


class RemoteEvent(NamedTuple):
    """An ``assigned`` / ``revoked`` call of a :class:`RemoteMember`'s listener."""

    line: int
    at: float
    kind: str
    names: set[str]  # "b-p"


class RemoteMember:
    """``tests/group_member.py`` in a process of its own, its output parsed as it comes:
    ``records`` handed out and ``assigned`` / ``revoked`` ``events``, each with its line
    number and when it happened (``time.monotonic()``, the same clock as the test's)."""

    def __init__(self, directory: Path) -> None:
        self.stderr_path = directory / "member.err"
        self.records: list[RemoteRecord] = []
        self.events: list[RemoteEvent] = []
        self.lines = 0
        self.process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stderr: Any = None

    async def start(
        self, zookeeper: str, topic: str, *, group: str = "g", session_timeout_ms: int = 1000
    ) -> str:
        """Start it; return its consumer id once it took part in its first rebalance."""
        self._stderr = self.stderr_path.open("wb")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, str(MEMBER_SCRIPT), zookeeper, group, topic,
            "--session-timeout-ms", str(session_timeout_ms),
            stdout=asyncio.subprocess.PIPE, stderr=self._stderr,
        )  # fmt: skip
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read(ready))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), 30)
        except asyncio.TimeoutError:
            raise AssertionError(self.stderr_path.read_text()) from None

    async def _read(self, ready: asyncio.Future[str]) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            self.lines += 1
            kind, *fields = raw.decode().split()
            if kind == "ready":
                ready.set_result(fields[0])
            elif kind == "record":
                at, name, offset, value = fields
                self.records.append(
                    RemoteRecord(self.lines, float(at), name, int(offset), value.encode())
                )
            else:
                at, *names = fields
                self.events.append(RemoteEvent(self.lines, float(at), kind, set(names)))

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def values(self) -> list[bytes]:
        return [r.value for r in self.records]

    async def kill(self) -> int:
        """SIGKILL: no commit, no release; its session expires by itself."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.kill()
        return await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None:
            await self.kill()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._stderr is not None:
            self._stderr.close()


async def converged_with(
    zk: ZooKeeper, local: Consumer, remote_id: str, registrations: Registrations
) -> bool:
    """Whether ``local`` and a remote member (same subscription) own exactly what the
    0.7.2 assignment gives each, in ZooKeeper and in ``local.assignment()``."""
    if sorted(await zk.get_children("/consumers/g/ids")) != sorted([local.consumer_id, remote_id]):
        return False
    subscription = local.topic_subscription
    assert subscription is not None
    members = {local.consumer_id: subscription, remote_id: subscription}
    plan = assign_group(members, registrations)[TOPIC]
    wanted = {(TOPIC, name): thread for thread, names in plan.items() for name in names}
    mine = {tp.name for tp in local.assignment()}
    return await owner_nodes(zk, "g", [TOPIC]) == wanted and mine == set(
        plan[f"{local.consumer_id}-0"]
    )

"""The balanced group consumer against embedded brokers and a real ZooKeeper.

What the group writes to ZooKeeper is read back with a separate session and compared with
0.7.2's exact paths and values; assignments are compared with :func:`assign_group`; what
the members hand out is compared with what was produced (per partition, in order, and how
many times). Faults: members that crash or lose their session, brokers that stop.
"""

from __future__ import annotations

import asyncio
import collections
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from aiokafka07 import ConsumerRecord, Producer, SimpleConsumer
from aiokafka07.errors import (
    ConsumerStoppedError,
    InvalidMessageError,
    InvalidPartitionError,
    KafkaError,
    OffsetOutOfRangeError,
)
from aiokafka07.group import assign_group
from aiokafka07.group.consumer import Consumer
from aiokafka07.records import TopicPartition
from aiokafka07.testing import ZooKeeperServer, expire_session
from aiokafka07.zookeeper import ZooKeeper

from .groups import (
    ONE_BY_TWO,
    TOPIC,
    TWO_BY_THREE,
    Collector,
    OffsetsWhenAssigned,
    OwnershipSampler,
    RecordingListener,
    RemoteMember,
    assert_committed_at_log_ends,
    assert_records_match_sources,
    committed_offsets,
    converged_with,
    crash,
    delivered,
    flip_payload_byte,
    leave,
    log_ends,
    member,
    owner_nodes,
    partitions_of,
    parts_names,
    produce,
    running_cluster,
    source_of,
    value_for,
    wait_converged,
    wait_delivered,
    wait_registered,
)
from .wire import client_tasks, eventually

# -- 1. identities, registrations, owners and offsets ----------------------------------------


async def test_registration_owner_and_offset_znodes(kafka_cluster: Any, zookeeper: str) -> None:
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (cluster, producer, zk):
        values = {p: [value_for("r", 0, p, i) + b"x" * (i * 7) for i in range(3)] for p in (0, 1)}
        for p, vs in values.items():
            for v in vs:
                await producer.send_and_wait(TOPIC, v, partition=(0, p))
        await wait_registered(zk, TOPIC, {0: 2})

        before_ms = int(time.time() * 1000)
        consumer = member(zookeeper, group="g1", auto_commit=False)
        after_ms = int(time.time() * 1000)
        cid = consumer.consumer_id
        match = re.fullmatch(rf"g1_{re.escape(socket.gethostname())}-(\d+)-([0-9a-f]{{8}})", cid)
        assert match, cid
        assert before_ms <= int(match.group(1)) <= after_ms
        async with consumer:
            assert await zk.get_children("/consumers/g1/ids") == [cid]
            assert await zk.get_data(f"/consumers/g1/ids/{cid}") == '{ "events": 1 }'
            assert await owner_nodes(zk, "g1", [TOPIC]) == {
                (TOPIC, "0-0"): f"{cid}-0",
                (TOPIC, "0-1"): f"{cid}-0",
            }
            got: list[ConsumerRecord] = []
            while len(got) < 6:
                for records in (await consumer.getmany(timeout_ms=5000)).values():
                    got.extend(records)
            assert len(got) == 6
            # 0.7.2 offsets: each record carries the NEXT offset (entry = 4 + 6 + value).
            for p in (0, 1):
                mine = [r for r in got if r.partition == p]
                assert [r.value for r in mine] == values[p]
                ends = []
                end = 0
                for v in values[p]:
                    end += 4 + 6 + len(v)
                    ends.append(end)
                assert [r.offset for r in mine] == ends
                assert all(r.broker_id == 0 and r.topic == TOPIC for r in mine)
            await consumer.commit()
            offsets = await committed_offsets(zk, "g1", TOPIC)
            assert {k: int(v or -1) for k, v in offsets.items()} == await log_ends(cluster, TOPIC)
            assert offsets == {
                "0-0": str(sum(10 + len(v) for v in values[0])),
                "0-1": str(sum(10 + len(v) for v in values[1])),
            }
            assert await consumer.committed(TopicPartition(TOPIC, 0, 1)) == int(
                offsets["0-1"] or -1
            )

        # A whitelist registers the normalised filter and the stream count, and both of
        # its thread ids own partitions.
        async with member(zookeeper, group="g2", whitelist=" events, other ", streams=2) as w:
            wid = w.consumer_id
            assert await zk.get_data(f"/consumers/g2/ids/{wid}") == "*2*events|other"
            assert await owner_nodes(zk, "g2", [TOPIC]) == {
                (TOPIC, "0-0"): f"{wid}-0",
                (TOPIC, "0-1"): f"{wid}-1",
            }
        # Leaving removed the ids and owner nodes.
        assert await zk.get_children("/consumers/g2/ids") == []
        assert await zk.get_children(f"/consumers/g2/owners/{TOPIC}") == []


# -- 2. groups converge; exactly once while stable; joins, leaves and resumes -------------------


@pytest.mark.parametrize("size", [1, 2, 3, 4])
async def test_group_converges_and_delivers_exactly_once(
    kafka_cluster: Any, zookeeper: str, size: int
) -> None:
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (cluster, producer, zk):
        early = await produce(producer, TOPIC, parts, 5, "early")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        members = [member(zookeeper) for _ in range(size)]
        await asyncio.gather(*(m.start() for m in members))
        collectors = [Collector(m) for m in members]
        try:
            await wait_converged(zk, "g", members, registrations)
            # Every partition has exactly one owner, and the owners are the members.
            owned = [tp for m in members for tp in m.assignment()]
            assert sorted(owned) == sorted(TopicPartition(TOPIC, b, p) for b, p in parts)
            late = await produce(producer, TOPIC, parts, 20, "late")
            await wait_delivered(collectors, early + late)
            await asyncio.sleep(0.2)  # room for a duplicate to show up
            counts = delivered(collectors)
            assert counts == collections.Counter(early + late)
            for m, c in zip(members, collectors, strict=True):
                assert_records_match_sources(c.records)
                sources = {(r.broker_id, r.partition) for r in c.records}
                assert sources == {(tp.broker_id, tp.partition) for tp in m.assignment()}
                # position() is the offset of the last record handed out (a next offset).
                for tp in m.assignment():
                    last = [r for r in c.records if (r.broker_id, r.partition) == tp[1:]][-1]
                    assert await m.position(tp) == last.offset
        finally:
            await leave(members, collectors)
        # Leaving committed the next offsets = the log ends, and removed every ephemeral.
        ends = await log_ends(cluster, TOPIC)
        offsets = await committed_offsets(zk, "g", TOPIC)
        assert {k: int(v or -1) for k, v in offsets.items()} == ends
        assert await zk.get_children("/consumers/g/ids") == []
        assert await zk.get_children(f"/consumers/g/owners/{TOPIC}") == []

        # A new member resumes exactly at the committed offsets: nothing is redelivered.
        async with member(zookeeper) as again:
            collector = Collector(again)
            more = await produce(producer, TOPIC, parts, 3, "more")
            await wait_delivered([collector], more)
            await asyncio.sleep(0.1)
            assert sorted(collector.values()) == sorted(more)
            await collector.stop()


async def test_joins_and_leaves_converge_without_loss_or_duplicates(
    kafka_cluster: Any, zookeeper: str
) -> None:
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, parts, 10, "a")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        members: list[Consumer] = []
        collectors: list[Collector] = []

        async def join() -> Consumer:
            m = member(zookeeper)
            await m.start()
            members.append(m)
            collectors.append(Collector(m))
            return m

        first = await join()
        sampler = OwnershipSampler(zk, "g", TOPIC, members)
        try:
            await wait_converged(zk, "g", members, registrations)
            await wait_delivered(collectors, produced)
            for step in range(3):  # three joins, data flowing during each rebalance
                produced += await produce(producer, TOPIC, parts, 10, f"j{step}")
                await join()
                await wait_converged(zk, "g", members, registrations)
            assert [len(m.assignment()) for m in members] == [2, 2, 1, 1]
            produced += await produce(producer, TOPIC, parts, 10, "b")
            await wait_delivered(collectors, produced)
            # Leaves: the first member, then the third.
            for leaver in (first, members[2]):
                produced += await produce(producer, TOPIC, parts, 10, f"l{len(members)}")
                await leaver.close()
                members.remove(leaver)
                await wait_converged(zk, "g", members, registrations)
            produced += await produce(producer, TOPIC, parts, 10, "z")
            await wait_delivered(collectors, produced)
            await asyncio.sleep(0.2)
            assert delivered(collectors) == collections.Counter(produced)
            for c in collectors:
                assert_records_match_sources(c.records)
            assert sampler.samples >= 3
            assert sampler.violations == []
        finally:
            await sampler.stop()
            await leave(members, collectors)
        await assert_committed_at_log_ends(zk, cluster)


# -- 3. a member crashes ----------------------------------------------------------------------


async def test_crashed_member_is_taken_over_without_loss(
    kafka_cluster: Any, zookeeper: str
) -> None:
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        produced = await produce(producer, TOPIC, parts, 10, "a")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        members = [member(zookeeper) for _ in range(3)]
        await asyncio.gather(*(m.start() for m in members))
        collectors = {m.consumer_id: Collector(m) for m in members}
        live = list(members)
        sampler = OwnershipSampler(zk, "g", TOPIC, live)
        try:
            await wait_converged(zk, "g", live, registrations)
            await wait_delivered(list(collectors.values()), produced)
            victim = live[1]
            victim_partitions = {tp.name for tp in victim.assignment()}
            assert len(victim_partitions) == 2
            produced += await produce(producer, TOPIC, parts, 30, "b")
            await eventually(lambda: len(collectors[victim.consumer_id].records) > 25)
            live.remove(victim)
            await crash(victim)
            await collectors[victim.consumer_id].stop()
            # Its session is gone with its registration and owner nodes.
            owners = await owner_nodes(zk, "g", [TOPIC])
            assert not any(v.startswith(victim.consumer_id) for v in owners.values())
            assert victim.consumer_id not in await zk.get_children("/consumers/g/ids")
            await wait_converged(zk, "g", live, registrations)
            produced += await produce(producer, TOPIC, parts, 10, "c")
            await wait_delivered(list(collectors.values()), produced)
            await asyncio.sleep(0.2)
            counts = delivered(collectors.values())
            assert set(counts) == set(produced)  # at least once
            duplicated = {v for v, n in counts.items() if n > 1}
            # Only what the victim was handed but had not committed comes twice.
            assert {source_of(v) for v in duplicated} <= victim_partitions
            assert all(counts[v] == 2 for v in duplicated)
            assert sampler.samples >= 3
            assert sampler.violations == []
        finally:
            await sampler.stop()
            await asyncio.gather(*(m.close() for m in live))
            for c in collectors.values():
                await c.stop()


# -- 4. a member's ZooKeeper session expires ---------------------------------------------------


async def test_session_expiry_restarts_every_partition_from_its_committed_offset(
    kafka_cluster: Any, zookeeper: str, zookeeper_server: ZooKeeperServer
) -> None:
    """After an expiry the member's in-memory positions are not trusted (another member
    may have owned the partitions meanwhile): kept partitions included, each restarts
    from ZooKeeper's committed offset, so what comes again is exactly the member's own
    uncommitted work, and nothing is committed from the stale positions."""
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (cluster, producer, zk):
        first = await produce(producer, TOPIC, parts, 10, "a")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        listener = OffsetsWhenAssigned(zk)
        # Alone, without auto-commit. (A short session: the expiry shows at the next ping.)
        consumer = member(zookeeper, auto_commit=False, session_timeout_ms=1500, listener=listener)
        listener.consumer = consumer
        async with consumer:
            collector = Collector(consumer)
            await wait_delivered([collector], first)
            # Commit the middle of half the partitions; the rest stays at the start (0).
            middle = {}
            for tp in sorted(consumer.assignment())[::2]:
                mine = [r for r in collector.records if (r.broker_id, r.partition) == tp[1:]]
                middle[tp] = mine[4].offset
            await consumer.commit(middle)
            committed = {tp: middle.get(tp, 0) for tp in consumer.assignment()}
            assert {TopicPartition.parse(TOPIC, k): int(v or -1) for k, v in (
                await committed_offsets(zk, "g", TOPIC)).items()} == committed  # fmt: skip
            uncommitted = [
                r.value
                for r in collector.records
                if r.offset > committed[TopicPartition(TOPIC, r.broker_id or 0, r.partition)]
            ]
            old_session = consumer._zk.session_id
            assert old_session is not None
            await expire_session(
                zookeeper_server.connect_string, old_session, consumer._zk.client.session.password
            )
            await eventually(lambda: consumer._zk.session_id not in (None, old_session))
            await wait_converged(zk, "g", [consumer], registrations)
            # Exactly the uncommitted records come again, once each.
            again = uncommitted
            await eventually(
                lambda: (
                    collector.values().count(again[-1]) == 2
                    and len(collector.records) >= len(first) + len(again)
                )
            )
            await asyncio.sleep(0.2)  # room for more to show up
            counts = delivered([collector])
            assert {v for v, n in counts.items() if n == 2} == set(again)
            assert set(counts.values()) == {1, 2}
            # Nothing was committed from the stale positions: when the partitions were
            # assigned again, ZooKeeper still held what was committed before the expiry.
            assert listener.offsets[-1] == {tp.name: str(o) for tp, o in committed.items()}
            assert consumer.metrics.session_expiries == 1
            everything = {TopicPartition(TOPIC, b, p) for b, p in parts}
            assert ("revoked", everything) in listener.events
            assert listener.events[-1] == ("assigned", everything)
            second = await produce(producer, TOPIC, parts, 10, "b")
            await wait_delivered([collector], second)
            await collector.stop()
            await consumer.close(commit=True)  # (without auto-commit close() does not)
        await assert_committed_at_log_ends(zk, cluster)


async def test_session_expiry_in_a_group_loses_nothing(
    kafka_cluster: Any, zookeeper: str, zookeeper_server: ZooKeeperServer
) -> None:
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, parts, 10, "a")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        members = [member(zookeeper, session_timeout_ms=1500) for _ in range(2)]
        await asyncio.gather(*(m.start() for m in members))
        collectors = [Collector(m) for m in members]
        try:
            await wait_converged(zk, "g", members, registrations)
            await wait_delivered(collectors, produced)
            expiring = members[0]
            old_session = expiring._zk.session_id
            assert old_session is not None
            produced += await produce(producer, TOPIC, parts, 10, "b")
            await expire_session(
                zookeeper_server.connect_string, old_session, expiring._zk.client.session.password
            )
            produced += await produce(producer, TOPIC, parts, 10, "c")
            await eventually(lambda: expiring._zk.session_id not in (None, old_session))
            await wait_converged(zk, "g", members, registrations)
            produced += await produce(producer, TOPIC, parts, 10, "d")
            await wait_delivered(collectors, produced)
            assert set(delivered(collectors)) == set(produced)
            for c in collectors:
                assert_records_match_sources(c.records)
        finally:
            await leave(members, collectors)
        await assert_committed_at_log_ends(zk, cluster)


# -- 5. a broker stops and comes back ---------------------------------------------------------


async def test_stopped_broker_partitions_leave_and_return(
    kafka_cluster: Any, zookeeper: str
) -> None:
    both = {0: 2, 1: 2}
    async with running_cluster(kafka_cluster, zookeeper, 2, 2) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, partitions_of(both), 5, "a")
        await wait_registered(zk, TOPIC, both)
        members = [member(zookeeper) for _ in range(2)]
        await asyncio.gather(*(m.start() for m in members))
        collectors = [Collector(m) for m in members]
        try:
            await wait_converged(zk, "g", members, {TOPIC: both})
            await wait_delivered(collectors, produced)
            await cluster.stop_broker(1)
            await wait_registered(zk, TOPIC, {0: 2})
            await wait_converged(zk, "g", members, {TOPIC: {0: 2}})
            assert {tp.broker_id for m in members for tp in m.assignment()} == {0}
            produced += await produce(producer, TOPIC, partitions_of({0: 2}), 5, "b")
            await wait_delivered(collectors, produced)
            await cluster.start_broker(1)
            await wait_registered(zk, TOPIC, both)
            await wait_converged(zk, "g", members, {TOPIC: both})
            await producer.cluster.wait_for(
                lambda c: len(c.partitions(TOPIC)) == 4, timeout_ms=10_000
            )
            produced += await produce(producer, TOPIC, partitions_of(both), 5, "c")
            await wait_delivered(collectors, produced)
            await asyncio.sleep(0.2)
            assert delivered(collectors) == collections.Counter(produced)
            for c in collectors:
                assert_records_match_sources(c.records)
        finally:
            await leave(members, collectors)


# -- 6. auto_offset_reset ----------------------------------------------------------------------


@pytest.mark.parametrize("reset", ["smallest", "largest"])
async def test_auto_offset_reset_without_committed_offsets(
    kafka_cluster: Any, zookeeper: str, reset: str
) -> None:
    parts = partitions_of(ONE_BY_TWO)
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (cluster, producer, zk):
        old = await produce(producer, TOPIC, parts, 5, "old")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        ends = await log_ends(cluster, TOPIC)
        async with member(zookeeper, auto_offset_reset=reset, auto_commit=False) as consumer:
            start = {name: 0 if reset == "smallest" else end for name, end in ends.items()}
            assert {tp.name: await consumer.position(tp) for tp in consumer.assignment()} == start
            collector = Collector(consumer)
            new = await produce(producer, TOPIC, parts, 3, "new")
            await wait_delivered([collector], new)
            await asyncio.sleep(0.1)
            assert sorted(collector.values()) == sorted(old + new if reset == "smallest" else new)
            await collector.stop()


async def test_auto_offset_reset_error_raises_out_of_range_from_iteration(
    kafka_cluster: Any, zookeeper: str
) -> None:
    parts = partitions_of(ONE_BY_TWO)
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (_, producer, zk):
        await produce(producer, TOPIC, parts, 5, "a")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        # A committed offset past the log end: the broker answers OffsetOutOfRange.
        await zk.write_persistent(f"/consumers/g/offsets/{TOPIC}/0-0", "1000000")
        await zk.write_persistent(f"/consumers/g/offsets/{TOPIC}/0-1", "0")
        async with member(zookeeper, auto_offset_reset="error", consumer_timeout_ms=5000) as c:
            with pytest.raises(OffsetOutOfRangeError) as info:
                async for _ in c:
                    pass
            assert info.value.offset == 1_000_000
            # Nothing was reset: the bad offset stays where it was.
            assert await c.position(TopicPartition(TOPIC, 0, 0)) == 1_000_000
            assert await zk.get_data(f"/consumers/g/offsets/{TOPIC}/0-0") == "1000000"


async def test_auto_offset_reset_error_without_offsets_fails_start_and_leaves_the_group(
    kafka_cluster: Any, zookeeper: str
) -> None:
    parts = partitions_of(ONE_BY_TWO)
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (_, producer, zk):
        produced = await produce(producer, TOPIC, parts, 5, "a")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        tasks_before = asyncio.all_tasks()
        with pytest.raises(OffsetOutOfRangeError):
            async with member(zookeeper, auto_offset_reset="error"):
                pass
        # A member that could not start must not stay registered and own partitions
        # (nobody else in the group could ever claim them).
        assert await zk.get_children("/consumers/g/ids") == []
        assert await owner_nodes(zk, "g", [TOPIC]) == {}
        # (A ping of the test's own or the producer's ZooKeeper session may be pending:
        # seen on a loaded machine. The member's session, had it leaked, would show.)
        assert client_tasks(tasks_before) == set()
        async with member(zookeeper) as other:
            await wait_converged(zk, "g", [other], {TOPIC: ONE_BY_TWO}, timeout=5)
            collector = Collector(other)
            await wait_delivered([collector], produced)
            await collector.stop()


async def test_default_auto_offset_reset_is_smallest(kafka_cluster: Any, zookeeper: str) -> None:
    """0.7.2's autooffset.reset defaults to smallest (CONFIG §3): a new group reads the
    data that is already there."""
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (_, producer, zk):
        old = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 3, "old")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        async with Consumer(TOPIC, group="fresh", zookeeper=zookeeper) as consumer:
            assert consumer.auto_offset_reset == "smallest"
            assert {await consumer.position(tp) for tp in consumer.assignment()} == {0}
            got = [(await asyncio.wait_for(consumer.getone(), 10)).value for _ in old]
        assert sorted(got) == sorted(old)


# -- 6b. corrupt data and broker errors reach the application ---------------------------------


async def test_corrupt_message_comes_after_the_good_ones_once(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """Messages before a corrupt entry are handed out once; then the error is raised
    once (getmany, getone, iteration), and the partition waits for a seek past it."""
    tp = TopicPartition(TOPIC, 0, 0)
    async with running_cluster(kafka_cluster, zookeeper, 1, 1) as (cluster, producer, zk):
        values = []
        for i in range(5):  # one entry each
            values.append(value_for("k", 0, 0, i))
            await producer.send_and_wait(TOPIC, values[-1], partition=(0, 0))
        await wait_registered(zk, TOPIC, {0: 1})
        entry = 4 + 6 + len(values[0])
        flip_payload_byte(cluster, TOPIC, 0, 2 * entry)
        async with member(zookeeper, auto_commit=False) as consumer:
            # getmany hands out what came before the corrupt entry, and keeps the error
            # for the next call instead of losing those records.
            first = await consumer.getmany(timeout_ms=5000)
            assert [r.value for r in first[tp]] == values[:2]
            with pytest.raises(InvalidMessageError, match=rf"{TOPIC}/0-0.* {2 * entry}"):
                await consumer.getmany(timeout_ms=5000)
            assert await consumer.position(tp) == 2 * entry
            # No more fetching of that partition: no redelivery, no pile of errors.
            await asyncio.sleep(0.3)  # 30 fetch backoffs
            assert consumer.streams[0].pending == 0
            assert await consumer.getmany(timeout_ms=200) == {}
            # A seek fetches again: the same two messages once, then the error, which
            # iteration raises too.
            consumer.seek(tp, 0)
            got: list[bytes] = []

            async def iterate() -> None:
                async for record in consumer:
                    got.append(record.value)

            with pytest.raises(InvalidMessageError):
                await iterate()
            assert got == values[:2]
            consumer.consumer_timeout_ms = 200
            assert [r async for r in consumer] == []
            # Skipping the corrupt entry gets the rest.
            consumer.seek(tp, 3 * entry)
            rest = [await asyncio.wait_for(consumer.getone(), 5) for _ in range(2)]
            assert [r.value for r in rest] == values[3:]


async def test_broker_error_codes_reach_the_application(kafka_cluster: Any, zookeeper: str) -> None:
    """A registration claiming more partitions than the broker has: FETCH of the missing
    one gets error 3, which the application sees once as InvalidPartitionError; the
    other partition goes on."""
    good, missing = TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 0, 1)
    async with running_cluster(kafka_cluster, zookeeper, 1, 1) as (_, producer, zk):
        first = await produce(producer, TOPIC, [(0, 0)], 3, "e")
        await wait_registered(zk, TOPIC, {0: 1})
        await zk.write_persistent(f"/brokers/topics/{TOPIC}/0", "2")
        # (A committed offset: OFFSETS for a partition the broker lacks closes the socket.)
        await zk.write_persistent(f"/consumers/g/offsets/{TOPIC}/0-1", "0")
        async with member(zookeeper, consumer_timeout_ms=300) as consumer:
            assert consumer.assignment() == {good, missing}
            got: list[bytes] = []
            errors: list[KafkaError] = []
            for _ in range(10):  # until the consumer timeout ends an iteration
                try:
                    async for record in consumer:
                        got.append(record.value)
                    break
                except KafkaError as exc:
                    errors.append(exc)
            assert sorted(got) == sorted(first)
            assert len(errors) == 1, errors
            assert isinstance(errors[0], InvalidPartitionError)
            assert f"{TOPIC}/0-1" in str(errors[0])
            assert errors[0].code == 3
            second = await produce(producer, TOPIC, [(0, 0)], 3, "f")
            batch = await consumer.getmany(timeout_ms=5000)
            assert [r.value for r in batch[good]] == second
            assert await consumer.getmany(timeout_ms=200) == {}


# -- 7. compressed data, several streams, topic filters ----------------------------------------


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
async def test_compressed_data_carries_0_7_2_offsets(
    kafka_cluster: Any, zookeeper: str, codec: str
) -> None:
    async with (
        kafka_cluster(1, num_partitions=1) as cluster,
        Producer(zookeeper=zookeeper, compression=codec, batch_size=5) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        values = await produce(producer, TOPIC, [(0, 0)], 40, "z", pad=20)
        await wait_registered(zk, TOPIC, {0: 1})
        (end,) = (await log_ends(cluster, TOPIC)).values()
        async with member(zookeeper, auto_commit=False) as consumer:
            got: list[ConsumerRecord] = []
            while len(got) < len(values):
                got.append(await asyncio.wait_for(consumer.getone(), 10))
            await consumer.close(commit=True)
        assert [r.value for r in got] == values
        # Inside a wrapper starting at S and ending at E: S, S, ..., S, E; the next
        # wrapper starts at E.
        wrappers: list[list[int]] = []  # indexes into got, one list per wrapper
        wrapper_start, current = 0, []
        for index, r in enumerate(got):
            current.append(index)
            if r.offset != wrapper_start:
                assert r.offset > wrapper_start
                wrappers.append(current)
                wrapper_start, current = r.offset, []
        assert current == []  # the last record ends a wrapper
        assert wrapper_start == end
        assert len(wrappers) < len(values)  # several messages share a wrapper
        starts = [0] + [got[w[-1]].offset for w in wrappers[:-1]]
        for start, indexes in zip(starts, wrappers, strict=True):
            assert [got[i].offset for i in indexes[:-1]] == [start] * (len(indexes) - 1)
        # Each wrapper start is a valid fetch position: fetching there gets its first
        # message.
        broker = cluster.broker(0)
        async with SimpleConsumer(broker.host, broker.port) as simple:
            for start, indexes in zip(starts, wrappers, strict=True):
                result = await simple.fetch(TOPIC, 0, start)
                assert result.messages[0].value == got[indexes[0]].value
        # Closing with commit=True committed the end of the last wrapper.
        assert await zk.get_data(f"/consumers/g/offsets/{TOPIC}/0-0") == str(end)

        # Stopping inside a wrapper commits its start: the whole wrapper comes again.
        number = next(n for n in range(1, len(wrappers)) if len(wrappers[n]) >= 3)
        first = wrappers[number][0]
        await zk.write_persistent(f"/consumers/g/offsets/{TOPIC}/0-0", "0")
        async with member(zookeeper, auto_commit=False) as consumer:
            for i in range(first + 2):  # up to the second message of that wrapper
                assert (await asyncio.wait_for(consumer.getone(), 10)).value == values[i]
            assert await consumer.position(TopicPartition(TOPIC, 0, 0)) == starts[number] > 0
            await consumer.close(commit=True)
        assert await zk.get_data(f"/consumers/g/offsets/{TOPIC}/0-0") == str(starts[number])
        async with member(zookeeper, auto_commit=False) as consumer:
            again = [await asyncio.wait_for(consumer.getone(), 10) for _ in range(3)]
            assert [r.value for r in again] == values[first : first + 3]


async def test_streams_iterate_the_partitions_of_their_thread(
    kafka_cluster: Any, zookeeper: str
) -> None:
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        produced = await produce(producer, TOPIC, parts, 5, "s")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        async with member(zookeeper, streams=2) as consumer:
            assert len(consumer.streams) == 2
            cid = consumer.consumer_id
            assert await zk.get_data(f"/consumers/g/ids/{cid}") == '{ "events": 2 }'
            await wait_converged(zk, "g", [consumer], registrations)
            collectors = [Collector(stream) for stream in consumer.streams]
            await wait_delivered(collectors, produced)
            await asyncio.sleep(0.1)
            assert delivered(collectors) == collections.Counter(produced)
            plan = assign_group({cid: consumer.topic_subscription}, registrations)[TOPIC]
            for i, collector in enumerate(collectors):
                names = {f"{r.broker_id}-{r.partition}" for r in collector.records}
                assert names == set(plan[f"{cid}-{i}"])
                assert len(names) == 3
                assert_records_match_sources(collector.records)
            for collector in collectors:
                await collector.stop()


async def test_whitelist_spreads_over_streams_and_picks_up_new_topics(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (_, producer, zk):
        produced: list[bytes] = []
        for topic in ("wa", "wb", "other"):
            produced += await produce(producer, topic, partitions_of(ONE_BY_TWO), 4, topic)
            await wait_registered(zk, topic, ONE_BY_TWO)
        async with member(zookeeper, whitelist="w.*", streams=2) as consumer:
            cid = consumer.consumer_id
            assert await zk.get_data(f"/consumers/g/ids/{cid}") == "*2*w.*"
            registrations = {"wa": ONE_BY_TWO, "wb": ONE_BY_TWO}
            await wait_converged(zk, "g", [consumer], registrations)
            assert await zk.get_children("/consumers/g/owners") == ["wa", "wb"]
            collectors = [Collector(stream) for stream in consumer.streams]
            wanted = [v for v in produced if not v.startswith(b"other")]
            await wait_delivered(collectors, wanted)
            # KAFKA-550 fixed: each stream gets the partitions of its own thread id.
            for i, collector in enumerate(collectors):
                assert {(r.topic, r.broker_id, r.partition) for r in collector.records} == {
                    ("wa", 0, i),
                    ("wb", 0, i),
                }
            # A topic created later is picked up (watched /brokers/topics).
            late = await produce(producer, "wc", partitions_of(ONE_BY_TWO), 4, "wc")
            registrations["wc"] = ONE_BY_TWO
            await wait_converged(zk, "g", [consumer], registrations)
            await wait_delivered(collectors, late)
            await asyncio.sleep(0.1)
            counts = delivered(collectors)
            assert counts == collections.Counter(wanted + late)
            for collector in collectors:
                await collector.stop()


# -- 8. the consuming API, manual commits, rebalance listeners ---------------------------------


async def test_getmany_getone_position_seek_and_manual_commit(
    kafka_cluster: Any, zookeeper: str
) -> None:
    tp0, tp1 = TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 0, 1)
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 10, "m")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        ends = await log_ends(cluster, TOPIC)
        per_partition = {p: [v for v in produced if source_of(v) == f"0-{p}"] for p in (0, 1)}
        consumer = member(zookeeper, auto_commit=False, consumer_timeout_ms=300)
        async with consumer:
            assert consumer.assignment() == {tp0, tp1}
            assert await consumer.committed(tp0) == 0  # the start, committed on claiming
            first = await consumer.getone()
            assert isinstance(first, ConsumerRecord)
            batch = await consumer.getmany(timeout_ms=2000, max_records=5)
            assert 1 <= sum(len(records) for records in batch.values()) <= 5
            got = [first]
            while True:
                for tp, records in batch.items():
                    assert all((r.topic, r.broker_id, r.partition) == tp for r in records)
                    got += records
                if len(got) >= len(produced):
                    break
                batch = await consumer.getmany(timeout_ms=5000)
            assert sorted(r.value for r in got) == sorted(produced)
            loop = asyncio.get_running_loop()
            started = loop.time()
            assert await consumer.getmany(timeout_ms=150) == {}
            assert loop.time() - started >= 0.14
            for tp in (tp0, tp1):
                last = [r for r in got if r.partition == tp.partition][-1]
                assert await consumer.position(tp) == last.offset == ends[tp.name]

            # Commit one chosen partition only.
            await consumer.commit([tp0])
            assert await consumer.committed(tp0) == ends["0-0"]
            assert await consumer.committed(tp1) == 0
            assert await committed_offsets(zk, "g", TOPIC) == {"0-0": str(ends["0-0"]), "0-1": "0"}

            # seek: to the next offset of the second message, then to the start.
            second = [r for r in got if r.partition == 0][1]
            consumer.seek(tp0, second.offset)
            assert await consumer.position(tp0) == second.offset
            assert (await consumer.getone()).value == per_partition[0][2]
            consumer.seek(tp0, 0)
            assert await consumer.position(tp0) == 0
            started = loop.time()
            rest = [r async for r in consumer]  # ends after consumer_timeout_ms of silence
            assert loop.time() - started >= 0.29
            assert [r.value for r in rest] == per_partition[0]
            assert await consumer.position(tp0) == ends["0-0"]
            with pytest.raises(KafkaError):
                consumer.seek(TopicPartition(TOPIC, 7, 0), 0)
            await consumer.close(commit=True)
        # close(commit=True) committed every position (without it: nothing, as
        # auto_commit is off).
        offsets = await committed_offsets(zk, "g", TOPIC)
        assert offsets == {name: str(end) for name, end in ends.items()}


async def test_commit_racing_consumption_does_not_lose_progress(
    kafka_cluster: Any, zookeeper: str
) -> None:
    tp = TopicPartition(TOPIC, 0, 0)
    async with running_cluster(kafka_cluster, zookeeper, 1, 1) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, [(0, 0)], 10, "r")
        await wait_registered(zk, TOPIC, {0: 1})
        (end,) = (await log_ends(cluster, TOPIC)).values()
        async with member(zookeeper, auto_commit=False) as consumer:
            first = await consumer.getone()
            commit = asyncio.create_task(consumer.commit())  # writes first.offset ...
            await asyncio.sleep(0)  # ... and waits for ZooKeeper's answer
            rest = await consumer.getmany(timeout_ms=5000)  # meanwhile, consume the rest
            await commit
            assert [first.value] + [r.value for r in rest[tp]] == produced
            assert await consumer.position(tp) == end
            await consumer.commit()
            assert await consumer.committed(tp) == end
        assert await zk.get_data(f"/consumers/g/offsets/{TOPIC}/0-0") == str(end)


async def test_records_handed_out_while_closing_are_committed(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """Whatever a stream hands out until its iterator ends is covered by close()'s commit
    (0.7.2 clears the queues before committing), so the next owner does not get it again."""
    async with running_cluster(kafka_cluster, zookeeper, 1, 1) as (_, producer, zk):
        produced = await produce(producer, TOPIC, [(0, 0)], 200, "x")
        await wait_registered(zk, TOPIC, {0: 1})
        consumer = member(zookeeper, auto_commit=False, fetch_size=300)  # ~10 per chunk
        await consumer.start()
        handed_out = [await consumer.getone()]
        await eventually(lambda: consumer.streams[0].buffered_bytes > 4000)  # most of it
        closing = asyncio.create_task(consumer.close(commit=True))
        stopped = False
        while not closing.done():  # an application task still iterating meanwhile
            try:
                if not stopped and (record := consumer.streams[0].next_nowait()):
                    handed_out.append(record)
            except ConsumerStoppedError:
                stopped = True  # closing hands out nothing more
            await asyncio.sleep(0)
        await closing
        assert stopped
        assert [r.value for r in handed_out] == produced[: len(handed_out)]
        committed = int(await zk.get_data(f"/consumers/g/offsets/{TOPIC}/0-0") or -1)
        assert committed == handed_out[-1].offset
        # The next member starts right after the last record handed out.
        if len(handed_out) < len(produced):
            async with member(zookeeper) as successor:
                following = await asyncio.wait_for(successor.getone(), 10)
                assert following.value == produced[len(handed_out)]


async def test_rebalance_listener_is_awaited_with_revoked_and_assigned_sets(
    kafka_cluster: Any, zookeeper: str
) -> None:
    registrations = {TOPIC: TWO_BY_THREE}
    everything = {TopicPartition(TOPIC, b, p) for b, p in partitions_of(TWO_BY_THREE)}
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        await produce(producer, TOPIC, partitions_of(TWO_BY_THREE), 1, "l")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        listener = RecordingListener()
        first = member(zookeeper, listener=listener)
        listener.consumer = first
        async with first:
            # start() returned after the first rebalance, listener included.
            assert listener.events == [("assigned", everything)]
            async with member(zookeeper) as second:
                await wait_converged(zk, "g", [first, second], registrations)
                await eventually(lambda: len(listener.events) == 2)
                assert listener.events[1] == ("revoked", second.assignment())
                assert listener.owned_during_revoke == [everything]  # still owned meanwhile
                moved = second.assignment()
                assert first.assignment() == everything - moved
            await wait_converged(zk, "g", [first], registrations)
            await eventually(lambda: len(listener.events) == 3)
            assert listener.events[2] == ("assigned", moved)


# -- 9. bounded prefetch -------------------------------------------------------------------------


async def test_prefetch_is_bounded_while_nothing_is_consumed(
    kafka_cluster: Any, zookeeper: str
) -> None:
    limit, fetch_size = 4096, 1024
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 400, "p", pad=80)
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        backlog = sum((await log_ends(cluster, TOPIC)).values())
        assert backlog > 15 * limit
        async with member(
            zookeeper, max_prefetch_bytes=limit, fetch_size=fetch_size, streams=2
        ) as consumer:
            # One partition per stream here; the bound is per stream (README).
            assert [
                len([p for p in consumer.metrics.partitions.values() if p.stream == s.index])
                for s in consumer.streams
            ] == [1, 1]

            def buffered() -> list[int]:
                return [stream.buffered_bytes for stream in consumer.streams]

            await eventually(lambda: min(buffered()) >= limit)
            peaks = [0, 0]
            for _ in range(30):  # 0.3 s of fetch loops that find no room
                peaks = [max(a, b) for a, b in zip(peaks, buffered(), strict=True)]
                await asyncio.sleep(0.01)
            # At most one more fetch of the stream's partition once the limit is reached.
            assert all(limit <= peak <= limit + fetch_size for peak in peaks), peaks
            got: list[bytes] = []
            while len(got) < len(produced):
                for records in (await consumer.getmany(timeout_ms=5000, max_records=50)).values():
                    got += [r.value for r in records]
                assert max(buffered()) <= limit + fetch_size
        assert sorted(got) == sorted(produced)


# -- 10. close -------------------------------------------------------------------------------------


async def test_close_leaves_no_task_and_no_znode_and_commits(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, partitions_of(TWO_BY_THREE), 5, "c")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        tasks_before = asyncio.all_tasks()
        consumer = member(zookeeper, auto_commit=False, streams=2)
        await consumer.start()
        collectors = [Collector(stream) for stream in consumer.streams]
        whole = Collector(consumer)  # the consumer's own iterator, too
        await wait_delivered([*collectors, whole], produced)
        assert await zk.get_children("/consumers/g/ids") == [consumer.consumer_id]
        await consumer.close(commit=True)  # (auto_commit is off: commit only when told)
        # Iterators end; no task of the consumer (or of its ZooKeeper client) is left.
        for collector in [*collectors, whole]:
            await asyncio.wait_for(collector.task, 2)
        assert client_tasks(tasks_before) == set()
        assert await zk.get_children("/consumers/g/ids") == []
        assert await zk.get_children(f"/consumers/g/owners/{TOPIC}") == []
        await assert_committed_at_log_ends(zk, cluster)
        await consumer.close()  # twice is fine


async def test_close_leaves_in_one_transaction_as_0_7_2_does(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """ZOOKEEPER §5.4: shutdown closes the session, and the server deletes the ``ids``
    registration and every owner node with it, in one transaction: the rest of the group
    sees one change, and does not start rebalancing while the member is still leaving
    (deleting the nodes one by one first made its session's close queue behind the
    others' reads and claims). Both parents' last child change is that transaction."""
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        await produce(producer, TOPIC, partitions_of(TWO_BY_THREE), 1, "t")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        consumer = member(zookeeper, auto_commit=False)
        await consumer.start()
        owners = f"/consumers/g/owners/{TOPIC}"

        async def owns_all() -> bool:
            return len(await zk.get_children(owners)) == len(partitions_of(TWO_BY_THREE))

        await eventually(owns_all)
        await consumer.close()
        assert await zk.get_children("/consumers/g/ids") == []
        assert await zk.get_children(owners) == []
        _, ids = await zk.client.get("/consumers/g/ids")
        _, owned = await zk.client.get(owners)
        assert ids.last_modified_children == owned.last_modified_children  # (pzxid)


async def test_close_commits_only_with_auto_commit_unless_told(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """ZOOKEEPER §5.4: shutdown commits if autocommit.enable; close(commit=...) decides
    explicitly."""
    async with running_cluster(kafka_cluster, zookeeper, 1, 1) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, [(0, 0)], 5, "c")
        await wait_registered(zk, TOPIC, {0: 1})
        (end,) = (await log_ends(cluster, TOPIC)).values()
        path = f"/consumers/g/offsets/{TOPIC}/0-0"

        async def consume_all(consumer: Consumer) -> None:
            got = [await asyncio.wait_for(consumer.getone(), 10) for _ in produced]
            assert [r.value for r in got] == produced

        consumer = member(zookeeper, auto_commit=False)
        await consumer.start()
        await consume_all(consumer)
        await consumer.close()
        assert await zk.get_data(path) == "0"  # the start, committed when claimed
        consumer = member(zookeeper, auto_commit=False)
        await consumer.start()
        await consume_all(consumer)
        await consumer.close(commit=True)
        assert await zk.get_data(path) == str(end)
        await zk.write_persistent(path, "0")
        consumer = member(zookeeper, auto_commit_interval_ms=60_000)
        await consumer.start()
        await consume_all(consumer)
        await consumer.close()
        assert await zk.get_data(path) == str(end)
        await zk.write_persistent(path, "0")
        consumer = member(zookeeper, auto_commit_interval_ms=60_000)
        await consumer.start()
        await consume_all(consumer)
        await consumer.close(commit=False)
        assert await zk.get_data(path) == "0"


# -- a member in another process, killed ----------------------------------------------------------


async def test_killed_member_process_is_taken_over(
    kafka_cluster: Any, zookeeper: str, tmp_path: Path
) -> None:
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        produced = await produce(producer, TOPIC, parts, 10, "a")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        local = member(zookeeper)
        await local.start()
        collector = Collector(local)
        remote = RemoteMember(tmp_path)

        def counts() -> collections.Counter[bytes]:
            return delivered([collector], remote.values())

        try:
            remote_id = await remote.start(zookeeper, TOPIC, session_timeout_ms=1000)
            await eventually(lambda: converged_with(zk, local, remote_id, registrations), 15)
            remote_partitions = set(parts_names(parts)) - {tp.name for tp in local.assignment()}
            assert len(remote_partitions) == 3
            await eventually(lambda: set(produced) <= set(counts()), 15)
            produced += await produce(producer, TOPIC, parts, 30, "b")
            await eventually(lambda: any(v.startswith(b"b:") for v in remote.values()), 15)
            # SIGKILL: no commit, no release; the session expires after 1 s
            assert await remote.kill() == -signal.SIGKILL
            await wait_converged(zk, "g", [local], registrations)
            produced += await produce(producer, TOPIC, parts, 5, "c")
            await eventually(lambda: set(produced) <= set(counts()), 15)
            await asyncio.sleep(0.1)
            total = counts()
            assert set(total) == set(produced)  # at least once
            duplicated = {v for v, n in total.items() if n > 1}
            assert {source_of(v) for v in duplicated} <= remote_partitions
            assert all(total[v] == 2 for v in duplicated)
        finally:
            await remote.stop()
            await local.close()
            await collector.stop()


async def test_eight_members_converge_and_deliver_exactly_once(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """The largest group the issue asks for: 8 members over 2 brokers x 6 partitions (the
    first four in thread-id order get 2 partitions, the others 1), then 3 leave at once."""
    layout = {0: 6, 1: 6}
    registrations = {TOPIC: layout}
    parts = partitions_of(layout)
    async with running_cluster(kafka_cluster, zookeeper, 2, 6) as (_, producer, zk):
        produced = await produce(producer, TOPIC, parts, 5, "e")
        await wait_registered(zk, TOPIC, layout)
        members = [member(zookeeper) for _ in range(8)]
        await asyncio.gather(*(m.start() for m in members))
        collectors = [Collector(m) for m in members]
        sampler = OwnershipSampler(zk, "g", TOPIC, members)
        try:
            await wait_converged(zk, "g", members, registrations)
            assert sorted(len(m.assignment()) for m in members) == [1] * 4 + [2] * 4
            await wait_delivered(collectors, produced)
            leaving = members[:3]
            await asyncio.gather(*(m.close() for m in leaving))
            for m in leaving:
                members.remove(m)
            produced += await produce(producer, TOPIC, parts, 5, "f")
            await wait_converged(zk, "g", members, registrations)
            await wait_delivered(collectors, produced)
            await asyncio.sleep(0.2)
            assert delivered(collectors) == collections.Counter(produced)
            assert sampler.violations == []
        finally:
            await sampler.stop()
            await leave(members, collectors)

"""What a group member consumes, and how it changes while it runs, against embedded brokers
and a real ZooKeeper: partitions that appear after the member subscribed are read from
their beginning; subscribe() / unsubscribe() / subscription() on a running member;
assign() without a group; topics(), partitions_for_topic(), offsets_for_times() and
last_poll_timestamp()."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from aiokafka07.connection import BrokerConnection
from aiokafka07.errors import IllegalStateError
from aiokafka07.group.consumer import Consumer
from aiokafka07.records import TopicPartition
from aiokafka07.zookeeper import ZooKeeper

from .groups import (
    ONE_BY_TWO,
    TOPIC,
    Collector,
    committed_offsets,
    log_ends,
    member,
    partitions_of,
    produce,
    running_cluster,
    source_of,
    wait_converged,
    wait_delivered,
    wait_registered,
)
from .wire import address_of, eventually

# -- partitions that appear after the subscription ------------------------------------------


async def test_partitions_that_appear_after_subscribing_are_read_from_their_beginning(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """With "largest", a partition registered when the member subscribed starts at its
    end; one registered later (a topic created later, for a filter or a static topic, or
    a broker that joins with a topic) is read from its first message."""
    async with running_cluster(kafka_cluster, zookeeper, 1, 1) as (cluster, producer, zk):
        before = await produce(producer, "old", [(0, 0)], 3, "before")
        await wait_registered(zk, "old", {0: 1})
        largest = {"auto_offset_reset": "largest"}
        async with (
            member(zookeeper, whitelist="old|new", **largest) as filtered,
            member(zookeeper, "later", group="g2", **largest) as static,
        ):
            by_filter, by_name = Collector(filtered), Collector(static)
            after = await produce(producer, "old", [(0, 0)], 2, "after")
            created = await produce(producer, "new", [(0, 0)], 2, "new")
            named = await produce(producer, "later", [(0, 0)], 2, "later")
            # A broker that joins with "old": a partition of an existing topic.
            cluster.add_broker(1)
            await cluster.start_broker(1)
            joined = [b"joined:1-0:0", b"joined:1-0:1"]
            async with await BrokerConnection.open(address_of(cluster, 1)) as conn:
                await conn.produce("old", 0, joined, confirm=True)
            await wait_delivered([by_filter], after + created + joined)
            await wait_delivered([by_name], named)
            assert not set(before) & set(by_filter.values())
            for collector in (by_filter, by_name):
                await collector.stop()


# -- subscribe(), unsubscribe(), subscription() on a running member --------------------------


class Events:
    """A rebalance listener recording what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", assigned))


def tps(topic: str, *partitions: int) -> set[TopicPartition]:
    return {TopicPartition(topic, 0, p) for p in partitions}


async def test_subscribe_on_a_running_member_re_registers_and_the_group_rebalances(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (_, producer, zk):
        produced = {}
        for topic in ("ta", "tb"):
            produced[topic] = await produce(producer, topic, partitions_of(ONE_BY_TWO), 3, topic)
            await wait_registered(zk, topic, ONE_BY_TWO)
        registrations = {"ta": ONE_BY_TWO, "tb": ONE_BY_TWO}
        async with member(zookeeper, "ta") as a, member(zookeeper, "ta") as b:
            await wait_converged(zk, "g", [a, b], registrations)
            assert a.subscription() == {"ta"}
            ids = f"/consumers/g/ids/{a.consumer_id}"
            assert await zk.get_data(ids) == '{ "ta": 1 }'
            events = Events()
            # A running member changes its subscription: its ids node is created again
            # with the new value, and b (which watches only the ids children) rebalances.
            a.subscribe(["tb"], listener=events)
            assert a.subscription() == {"tb"}  # what was asked, at once
            await wait_converged(zk, "g", [a, b], registrations)
            assert await zk.get_data(ids) == '{ "tb": 1 }'
            assert a.assignment() == tps("tb", 0, 1)
            assert b.assignment() == tps("ta", 0, 1)
            assert ("assigned", tps("tb", 0, 1)) in events.events
            revoked = [p for kind, p in events.events if kind == "revoked"]
            assert len(revoked[0]) == 1
            assert revoked[0] <= tps("ta", 0, 1)  # what a owned of "ta"
            got = Collector(a)
            await wait_delivered([got], produced["tb"])
            await got.stop()
            # A pattern (0.7.2 whitelist): the registration is the filter.
            a.subscribe(pattern="t[ab]")
            await eventually(lambda: _value_is(zk, ids, "*1*t[ab]"))
            await wait_converged(zk, "g", [a, b], registrations)
            assert a.subscription() == {"ta", "tb"}
            # Unsubscribe: everything revoked and released, the ids node gone; b takes all.
            a.unsubscribe()
            assert a.subscription() == set()
            await wait_converged(zk, "g", [b], registrations)
            assert not await zk.exists(ids)
            assert a.assignment() == set()
            assert events.events[-1][0] == "revoked"
            # One way or the other: assign() and subscribe() exclude each other.
            a.assign([TopicPartition("ta", 0, 0)])
            with pytest.raises(IllegalStateError, match="unsubscribe"):
                a.subscribe(["ta"])
            await eventually(lambda: a.assignment() == tps("ta", 0))
            assert not await zk.exists(ids)  # by hand: not a member
            a.unsubscribe()  # (both at once: the manual assignment is dropped first)
            a.subscribe(["ta"])
            with pytest.raises(IllegalStateError, match="unsubscribe"):
                a.assign([TopicPartition("ta", 0, 0)])
            await wait_converged(zk, "g", [a, b], registrations)
            for bad_call in (
                lambda: a.subscribe(),
                lambda: a.subscribe(["ta"], pattern="t.*"),
            ):
                with pytest.raises(ValueError, match="subscribe"):
                    bad_call()
            with pytest.raises(TypeError):
                a.subscribe("ta")
            with pytest.raises(TypeError):
                a.subscribe(["ta"], listener=object())  # type: ignore[arg-type]
            # The 0.7 Subscription object: a new name; the old attribute use warns.
            assert a.topic_subscription is not None
            assert a.topic_subscription.registration() == '{ "ta": 1 }'
            with pytest.warns(DeprecationWarning, match="topic_subscription"):
                assert a.subscription.registration() == '{ "ta": 1 }'


async def _value_is(zk: ZooKeeper, path: str, value: str) -> bool:
    found, data = await zk.data_if_exists(path)
    return found and data == value


# -- assign(): partitions by hand, no group membership ----------------------------------------


async def test_assign_reads_partitions_without_group_membership(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (cluster, producer, zk):
        produced = await produce(producer, TOPIC, partitions_of(ONE_BY_TWO), 5, "m")
        await wait_registered(zk, TOPIC, ONE_BY_TWO)
        tp0, tp1 = TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 0, 1)
        # Without a group: nothing is written to ZooKeeper, nothing can be committed.
        async with Consumer(zookeeper=zookeeper, auto_offset_reset="smallest") as loose:
            assert loose.assignment() == set()
            with pytest.raises(IllegalStateError):
                loose.last_poll_timestamp(tp0)
            loose.assign([tp0, tp1])
            got = Collector(loose)
            await wait_delivered([got], produced)
            assert loose.assignment() == {tp0, tp1}
            assert loose.subscription() == {TOPIC}
            polled = loose.last_poll_timestamp(tp0)
            assert polled is not None
            assert abs(polled - time.time() * 1000) < 60_000
            with pytest.raises(IllegalStateError, match="group"):
                await loose.commit()
            with pytest.raises(IllegalStateError, match="group"):
                await loose.committed(tp0)
            with pytest.raises(IllegalStateError, match="group"):
                loose.subscribe([TOPIC])
            # A new assignment replaces it; a kept partition keeps its position.
            loose.assign([tp1])
            await eventually(lambda: loose.assignment() == {tp1})
            assert await loose.position(tp1) == (await log_ends(cluster, TOPIC))["0-1"]
            await got.stop()
        assert not await zk.exists("/consumers")
        # With a group: starts at the group's committed offsets and commits there, but
        # owns nothing (no ids, no owner nodes).
        async with member(zookeeper) as m:
            await Collector(m).stop()
            await m.commit({tp0: 0, tp1: 0})
        consumer = Consumer(group="g", zookeeper=zookeeper, auto_commit=False)
        consumer.assign([tp0])  # (before start: start applies it)
        async with consumer:
            first = await consumer.getone()
            assert first.value == produced_in(produced, "0-0")[0]
            await consumer.commit({tp0: first.offset})
            assert await committed_offsets(zk, "g", TOPIC) == {"0-0": str(first.offset), "0-1": "0"}
            assert await zk.get_children("/consumers/g/ids") == []
            assert await zk.get_children(f"/consumers/g/owners/{TOPIC}") == []


def produced_in(values: list[bytes], name: str) -> list[bytes]:
    return [v for v in values if source_of(v) == name]


# -- the cluster: topics(), partitions_for_topic(), offsets_for_times() ------------------------


async def test_topics_and_partitions_for_topic_from_zookeeper(
    kafka_cluster: Any, zookeeper: str
) -> None:
    async with running_cluster(kafka_cluster, zookeeper, 2, 2) as (_, producer, zk):
        for topic in ("one", "two"):
            await produce(producer, topic, [(0, 0), (1, 0)], 1, topic)
            await wait_registered(zk, topic, {0: 2, 1: 2})
        async with member(zookeeper, "one") as consumer:
            with pytest.raises(IllegalStateError):
                await Consumer(group="g", zookeeper=zookeeper).topics()
            both = {TopicPartition(t, b, p) for t in ("x",) for b in (0, 1) for p in (0, 1)}
            assert consumer.partitions_for_topic("one") == {tp._replace(topic="one") for tp in both}
            assert consumer.partitions_for_topic("two") is None  # not read yet
            assert await consumer.topics() == {"one", "two"}
            assert consumer.partitions_for_topic("two") == {tp._replace(topic="two") for tp in both}
            assert consumer.partitions_for_topic("nothere") is None


async def test_offsets_for_times_are_segment_starts(kafka_cluster: Any, zookeeper: str) -> None:
    """0.7 answers from segment files: the start of the newest segment last modified at
    or before the time; the oldest offset when every segment is newer; the log end for
    a time that has not come yet."""
    async with kafka_cluster(1, log_file_size=40) as cluster:
        address = address_of(cluster)
        async with await BrokerConnection.open(address) as conn:
            for i in range(3):
                await conn.produce("timed", 0, [b"x" * 40 + b"%d" % i], confirm=True)
        directory = cluster.broker(0).config.log_dir / "timed-0"
        segments = sorted(directory.glob("*.kafka"))
        assert len(segments) >= 3
        starts = [int(path.stem) for path in segments]
        for second, path in enumerate(segments, start=1):  # mtimes at 1000 s, 2000 s, ...
            os.utime(path, (second * 1000, second * 1000))
        tp = TopicPartition("timed", 0, 0)
        async with Consumer(zookeeper=zookeeper) as consumer:
            end = (await consumer.end_offsets([tp]))[tp]
            future = int(time.time() * 1000) + 3_600_000
            asked = {1_500_000: starts[0], 2_500_000: starts[1], 500_000: starts[0]}
            for ms, expected in asked.items():
                assert await consumer.offsets_for_times({tp: ms}) == {tp: expected}, ms
            assert await consumer.offsets_for_times({tp: future}) == {tp: end}
            with pytest.raises(ValueError, match="ms >= 0"):
                await consumer.offsets_for_times({tp: -1})

"""What a group member consumes, and how it changes while it runs, against embedded brokers
and a real ZooKeeper: partitions that appear after the member subscribed are read from
their beginning; subscribe() / unsubscribe() / subscription() on a running member;
assign() without a group; topics(), partitions_for_topic(), offsets_for_times() and
last_poll_timestamp()."""

from __future__ import annotations

from typing import Any

from aiokafka07.connection import BrokerConnection

from .groups import (
    Collector,
    member,
    produce,
    running_cluster,
    wait_delivered,
    wait_registered,
)
from .wire import address_of

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

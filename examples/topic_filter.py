"""A topic-filter consumer: every topic matching a whitelist regex, new ones included.

``Consumer(whitelist="metrics-.*", ...)`` registers a 0.7.2 wildcard subscription. The
member watches ``/brokers/topics`` in ZooKeeper, so a matching topic created later (a
0.7 broker creates a topic at its first message) is picked up by a rebalance without a
restart. Java 0.7.2 members with the same filter can share the group.

Without an argument this runs a demo on a local cluster: ``metrics-cpu``,
``metrics-mem`` and ``logs-app`` hold 20 messages each; the consumer gets the 40 of the
two metrics topics and none of ``logs-app``; then ``metrics-disk`` is created by
producing to it, and its 20 messages arrive too.

Run: ``python examples/topic_filter.py [ZOOKEEPER] [--whitelist REGEX]`` (with an address
it prints every matching record until Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib

from _local import address_argument, local_cluster

from aiokafka07 import Producer
from aiokafka07.group import Consumer

WHITELIST = "metrics-.*"
GROUP = "metrics-dashboard"
PER_TOPIC = 20


def member(zookeeper: str, whitelist: str) -> Consumer:
    return Consumer(
        group=GROUP, zookeeper=zookeeper, whitelist=whitelist, auto_offset_reset="smallest"
    )


async def produce(zookeeper: str, *topics: str) -> None:
    async with Producer(zookeeper=zookeeper) as producer:
        for topic in topics:
            for i in range(PER_TOPIC):
                await producer.send(topic, f"{topic} sample {i}")


async def take(consumer: Consumer, counts: collections.Counter[str], total: int) -> None:
    """Count records per topic until ``total`` records have arrived in all."""
    async for record in consumer:
        counts[record.topic] += 1
        if counts.total() >= total:
            return


def show(counts: collections.Counter[str]) -> str:
    return ", ".join(f"{topic} x{n}" for topic, n in sorted(counts.items()))


async def demo(zookeeper: str) -> None:
    await produce(zookeeper, "metrics-cpu", "metrics-mem", "logs-app")
    print(f"produced {PER_TOPIC} messages each to metrics-cpu, metrics-mem, logs-app")
    counts = collections.Counter[str]()
    async with member(zookeeper, WHITELIST) as consumer:
        await asyncio.wait_for(take(consumer, counts, 2 * PER_TOPIC), 20)
        print(f"whitelist {WHITELIST!r} got: {show(counts)}")

        await produce(zookeeper, "metrics-disk")  # a new topic, created by its first write
        print(f"created metrics-disk with {PER_TOPIC} messages")
        await asyncio.wait_for(take(consumer, counts, 3 * PER_TOPIC), 20)
        print(f"after a rebalance (rebalances so far: {consumer.rebalances}): {show(counts)}")

        late = await consumer.getmany(timeout_ms=500)  # anything else that would arrive
        counts.update(tp.topic for tp, records in late.items() for _ in records)
        topics = sorted({tp.topic for tp in consumer.assignment()})
        print(f"assigned topics: {', '.join(topics)}")
    print(f"final: {show(counts)}; logs-app x{counts['logs-app']} (not matched)")


async def follow(zookeeper: str, whitelist: str) -> None:
    async with member(zookeeper, whitelist) as consumer:
        async for record in consumer:
            print(f"{record.topic} {record.broker_id}-{record.partition}@{record.offset}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    address_argument(parser)
    parser.add_argument("--whitelist", default=WHITELIST, help="topic regex (0.7.2 syntax)")
    args = parser.parse_args()
    if args.zookeeper:
        await follow(args.zookeeper, args.whitelist)
        return
    topics = ["metrics-cpu", "metrics-mem", "logs-app"]
    async with local_cluster(None, brokers=2, partitions=2, topics=topics) as zookeeper:
        await demo(zookeeper)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the consumer has left the group
        asyncio.run(main())

"""Keys pick partitions exactly as a Java 0.7.2 producer picks them.

A 0.7 partition is a (broker, partition-on-that-broker) pair. The producer lists every
registered pair of the topic, sorted, and a keyed message goes to the pair at index
``abs(key.hashCode()) % n``, with Java's ``String.hashCode``. So every message of one key
lands in one partition (in order), and Java and Python producers agree on which one.

This sends three page views for each of a few users, prints where each key went next to
the Java hash and index that explain it, and reads the partitions back to show the
messages are there.

Run: ``python examples/keyed_producer.py [ZOOKEEPER]`` (no argument: a local cluster of
two brokers with two partitions each).
"""

from __future__ import annotations

import argparse
import asyncio
import collections

from _local import address_argument, local_cluster

from aiokafka07 import LATEST, Producer, SimpleConsumer, default_partition, java_hash_code

TOPIC = "page-views"
USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "sybil", "trent"]
VIEWS_PER_USER = 3


async def run(zookeeper: str) -> None:
    async with Producer(zookeeper=zookeeper) as producer:
        candidates = producer.cluster.partitions(TOPIC)
        names = [f"{broker}-{partition}" for broker, partition in candidates]
        print(f"{TOPIC} has {len(candidates)} partitions: {' '.join(names)}")

        # Where each partition ends now, so the read-back below sees only our messages.
        starts = {}
        for broker, partition in candidates:
            async with SimpleConsumer(*_address(producer, broker), broker_id=broker) as simple:
                (starts[broker, partition],) = await simple.offsets_before(TOPIC, partition, LATEST)

        futures = [
            await producer.send(TOPIC, f"{user} viewed page {i}", key=user)
            for i in range(VIEWS_PER_USER)
            for user in USERS
        ]
        results = await asyncio.gather(*futures)

        placed: dict[str, set[str]] = collections.defaultdict(set)
        for i, result in enumerate(results):
            placed[USERS[i % len(USERS)]].add(f"{result.broker_id}-{result.partition}")
        for user in USERS:
            (where,) = placed[user]  # every view of one user went to the same partition
            index = default_partition(user, len(candidates))
            print(
                f"key {user!r} -> {where} "
                f"(hashCode {java_hash_code(user)}, index {index} of {len(candidates)})"
            )

        print("read back:")
        for broker, partition in candidates:
            async with SimpleConsumer(*_address(producer, broker), broker_id=broker) as simple:
                fetched = await simple.fetch(TOPIC, partition, starts[broker, partition])
            counts = collections.Counter(m.value.decode().split()[0] for m in fetched.messages)
            found = ", ".join(f"{user} x{n}" for user, n in sorted(counts.items())) or "nothing"
            print(f"  {broker}-{partition}: {found}")


def _address(producer: Producer, broker: int) -> tuple[str, int]:
    address = producer.cluster.brokers[broker]
    return address.host, address.port


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    address_argument(parser)
    args = parser.parse_args()
    async with local_cluster(args.zookeeper, brokers=2, partitions=2, topics=[TOPIC]) as zk:
        await run(zk)


if __name__ == "__main__":
    asyncio.run(main())

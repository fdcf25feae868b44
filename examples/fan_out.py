"""Fan-out inside one group member: ``streams=N`` and one task per stream.

A member with ``streams=4`` registers four consumer threads, as a Java member with four
streams does, and the group's range assignment gives each thread its own partitions.
``consumer.streams[i]`` iterates the records of thread ``i``'s partitions only, so one
task per stream processes partitions in parallel while each partition stays in order;
a slow stream holds up only its own partitions (its prefetch is bounded per stream).

Without an argument this runs a demo on a local cluster (2 brokers x 4 partitions = 8
partitions): it produces 400 sensor readings, runs four stream tasks until they go idle,
and prints what each stream got from which partitions.

Run: ``python examples/fan_out.py [ZOOKEEPER]`` (with an address it consumes ``readings``
until Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import signal
from typing import Any

from _local import address_argument, local_cluster

from aiokafka07 import Producer
from aiokafka07.group import Consumer, Stream

TOPIC = "readings"
GROUP = "readings-fan-out"
STREAMS = 4
READINGS = 400


async def handle_stream(stream: Stream, seen: collections.Counter[str]) -> int:
    """Process one stream's records in order; return how many there were."""
    count = 0
    async for record in stream:
        # Records of one partition arrive in order, whatever the other streams do.
        seen[f"{record.broker_id}-{record.partition}"] += 1
        count += 1
    return count


async def consume(zookeeper: str, idle_ms: float | None) -> None:
    consumer = Consumer(
        TOPIC,
        group=GROUP,
        zookeeper=zookeeper,
        streams=STREAMS,
        auto_offset_reset="smallest",
        consumer_timeout_ms=idle_ms,  # None: each stream runs until the consumer closes
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    seen = [collections.Counter[str]() for _ in range(STREAMS)]
    async with consumer:
        work = asyncio.gather(
            *(handle_stream(s, c) for s, c in zip(consumer.streams, seen, strict=True))
        )
        stopping = asyncio.ensure_future(stop.wait())
        either: list[asyncio.Future[Any]] = [work, stopping]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
    # Leaving the block closed the consumer (committing what was handed out), which ends
    # every stream that was still waiting.
    counts = await work
    for index, (count, partitions) in enumerate(zip(counts, seen, strict=True)):
        where = ", ".join(f"{name} x{n}" for name, n in sorted(partitions.items()))
        print(f"stream {index}: {count} records from {where or 'no partition'}")
    print(f"total: {sum(counts)} records in {len(counts)} streams")


async def produce(zookeeper: str) -> None:
    async with Producer(zookeeper=zookeeper) as producer:
        for i in range(READINGS):
            await producer.send(TOPIC, f"sensor-{i % 10} reading {i}", key=f"sensor-{i % 10}")
    # Leaving the block flushed everything.
    print(f"produced {READINGS} readings")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    address_argument(parser)
    args = parser.parse_args()
    if args.zookeeper:
        await consume(args.zookeeper, None)  # until SIGINT / SIGTERM
        return
    async with local_cluster(None, brokers=2, partitions=4, topics=[TOPIC]) as zookeeper:
        await produce(zookeeper)
        await consume(zookeeper, idle_ms=1000)


if __name__ == "__main__":
    asyncio.run(main())

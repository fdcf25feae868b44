"""A worker service: a consumer-group member that commits only what it has processed.

* ``async for`` over a group :class:`~aiokafka07.group.Consumer` with ``auto_commit=False``;
  the worker commits after every ``COMMIT_EVERY`` processed orders and whenever it goes
  idle, so a restarted worker resumes right after the last processed order (at least
  once: orders processed after the last commit would be processed again after a crash).
* SIGTERM (what ``kill``, systemd and Kubernetes send) and Ctrl-C stop it gracefully: it
  finishes the order in hand, commits, and leaves the group, so the other members take
  over its partitions at once instead of after the ZooKeeper session timeout.

Without an argument this runs a demo on a local cluster: it produces 60 orders, runs a
worker that processes them and then gets SIGTERM, produces 15 more and runs a second
worker, which resumes at the committed offsets and sees only the new ones.

Run: ``python examples/worker.py [ZOOKEEPER]`` (with an address it processes ``orders``
as a member of the group ``order-workers`` until stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal

from _local import address_argument, local_cluster

from aiokafka07 import ConsumerRecord, Producer
from aiokafka07.group import Consumer

TOPIC = "orders"
GROUP = "order-workers"
COMMIT_EVERY = 20
#: How long an idle ``async for`` waits before the worker looks at the stop flag again.
IDLE_MS = 500


class Worker:
    """Adds up order amounts; stands for whatever a real worker does with a record."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.order_ids: list[int] = []
        self.total = 0.0
        self.committed: dict[str, int | None] = {}
        self._progress = asyncio.Event()

    def process(self, record: ConsumerRecord) -> None:
        order = json.loads(record.value)
        self.order_ids.append(order["id"])
        self.total += order["amount"]
        self._progress.set()

    async def until_processed(self, count: int) -> None:
        """Wait until ``count`` orders are processed (the demo uses it)."""
        while len(self.order_ids) < count:
            self._progress.clear()
            await self._progress.wait()

    async def run(self, zookeeper: str, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then commit and leave the group."""
        consumer = Consumer(
            TOPIC,
            group=GROUP,
            zookeeper=zookeeper,
            auto_commit=False,
            auto_offset_reset="smallest",  # a new group starts at the oldest order
            consumer_timeout_ms=IDLE_MS,  # lets `async for` end when idle (see below)
        )
        async with consumer:
            uncommitted = 0
            while not stop.is_set():
                async for record in consumer:  # ends after IDLE_MS without records
                    self.process(record)
                    uncommitted += 1
                    if uncommitted >= COMMIT_EVERY:
                        await consumer.commit()  # offsets of the records handed out so far
                        uncommitted = 0
                    if stop.is_set():
                        break  # the record in hand is done: stop here
                if uncommitted:  # idle or stopping: commit the rest
                    await consumer.commit()
                    uncommitted = 0
            for tp in sorted(consumer.assignment()):
                self.committed[f"{tp.topic}/{tp.name}"] = await consumer.committed(tp)
        # Leaving the block closed the consumer: it left the group and released its
        # partitions (with auto_commit off, close() does not commit: everything was
        # committed above).


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGTERM and SIGINT instead of dying mid-record."""
    loop = asyncio.get_running_loop()

    def handle(sig: signal.Signals) -> None:
        print(f"{sig.name}: finishing the current order, committing, leaving the group")
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, handle, sig)


def order(order_id: int) -> dict[str, object]:
    return {"id": order_id, "customer": f"c{order_id % 7}", "amount": (order_id * 37) % 100 + 0.5}


async def produce_orders(zookeeper: str, first: int, count: int) -> None:
    async with Producer(zookeeper=zookeeper) as producer:
        for order_id in range(first, first + count):
            value = order(order_id)
            await producer.send(TOPIC, json.dumps(value), key=value["customer"])
    print(f"produced orders {first}-{first + count - 1}")


def report(worker: Worker, seen_before: set[int]) -> None:
    ids = worker.order_ids
    repeated = len(ids) - len(set(ids)) + len(set(ids) & seen_before)
    span = f"ids {min(ids)}-{max(ids)}" if ids else "none"
    print(
        f"{worker.name} processed {len(ids)} orders ({span}, {len(set(ids))} distinct, "
        f"{repeated} repeated), total {worker.total:.2f}"
    )
    committed = ", ".join(f"{tp}={offset}" for tp, offset in worker.committed.items())
    print(f"{worker.name} committed {committed or 'nothing'}")


async def demo(zookeeper: str) -> None:
    await produce_orders(zookeeper, 0, 60)
    first, stop = Worker("worker-1"), asyncio.Event()
    stop_on_signals(stop)
    running = asyncio.create_task(first.run(zookeeper, stop))
    await asyncio.wait_for(first.until_processed(60), 20)
    os.kill(os.getpid(), signal.SIGTERM)  # as `kill <pid>` would
    await running
    report(first, set())

    await produce_orders(zookeeper, 60, 15)
    second, stop = Worker("worker-2"), asyncio.Event()
    stop_on_signals(stop)
    running = asyncio.create_task(second.run(zookeeper, stop))
    await asyncio.wait_for(second.until_processed(15), 20)
    await asyncio.sleep(IDLE_MS / 1000)  # anything already processed would show up now
    os.kill(os.getpid(), signal.SIGTERM)
    await running
    report(second, set(first.order_ids))


async def serve(zookeeper: str) -> None:
    worker, stop = Worker(f"worker-{os.getpid()}"), asyncio.Event()
    stop_on_signals(stop)
    await worker.run(zookeeper, stop)
    report(worker, set())


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    address_argument(parser)
    args = parser.parse_args()
    if args.zookeeper:
        logging.basicConfig(level=logging.WARNING)
        logging.getLogger("aiokafka07").setLevel(logging.INFO)  # joins, rebalances, commits
        await serve(args.zookeeper)
        return
    async with local_cluster(None, topics=[TOPIC]) as zookeeper:
        await demo(zookeeper)


if __name__ == "__main__":
    asyncio.run(main())

"""A group member in a process of its own, for tests that kill it with SIGKILL.

``python tests/group_member.py <zookeeper> <group> <topic> [--session-timeout-ms N]``
prints ``ready <consumer id>`` once it took part in its first rebalance, then
``record <value>`` for every record it is handed (flushed at once, so whatever it was
handed before it died has reached the pipe).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from aiokafka07.group.consumer import Consumer


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("zookeeper")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--session-timeout-ms", type=int, default=1000)
    args = parser.parse_args(argv)
    consumer = Consumer(
        args.topic,
        group=args.group,
        zookeeper=args.zookeeper,
        auto_offset_reset="smallest",
        auto_commit_interval_ms=100,
        fetch_backoff_ms=10,
        rebalance_backoff_ms=20,
        session_timeout_ms=args.session_timeout_ms,
    )
    await consumer.start()
    sys.stdout.write(f"ready {consumer.consumer_id}\n")
    sys.stdout.flush()
    async for record in consumer:
        sys.stdout.write(f"record {record.value.decode()}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())

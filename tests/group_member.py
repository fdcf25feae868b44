"""A group member in a process of its own, for tests that kill it or stop it with signals.

``python tests/group_member.py <zookeeper> <group> <topic> [--session-timeout-ms N]``
prints ``ready <consumer id>`` once it took part in its first rebalance, then a line per
event, flushed at once (so whatever it was handed before it died has reached the pipe),
each with the ``time.monotonic()`` at which it happened (the system-wide CLOCK_MONOTONIC:
the test compares it with its own clock, to tell what happened before a SIGSTOP from what
happened after the SIGCONT, whenever the line was read):

* ``record <time> <b-p> <offset> <value>`` for every record it is handed;
* ``assigned <time> <b-p> ...`` / ``revoked <time> <b-p> ...`` from its rebalance listener.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from aiokafka07.group.consumer import Consumer
from aiokafka07.records import TopicPartition


def say(*words: str) -> None:
    sys.stdout.write(" ".join(words) + "\n")
    sys.stdout.flush()


def now() -> str:
    return repr(time.monotonic())


class Listener:
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        say("revoked", now(), *sorted(tp.name for tp in revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        say("assigned", now(), *sorted(tp.name for tp in assigned))


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
        listener=Listener(),
    )
    await consumer.start()
    say("ready", consumer.consumer_id)
    async for record in consumer:
        say(
            "record",
            now(),
            f"{record.broker_id}-{record.partition}",
            str(record.offset),
            record.value.decode(),
        )


if __name__ == "__main__":
    asyncio.run(main())

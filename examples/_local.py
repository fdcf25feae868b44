"""Shared by the examples: use the cluster you name, or start a throw-away one on loopback.

Every example takes an optional ZooKeeper connect string (``host:port[/chroot]``). Without
one it runs against a local cluster started here: a real ZooKeeper server (Debian's
``zookeeper`` package, see :mod:`aiokafka07.testing.zookeeper_server`) and embedded
brokers registered in it, all removed again when the example ends. Group consumers keep
their membership and offsets in ZooKeeper, so a ZooKeeper is needed either way.

Not an example itself (the leading underscore keeps it out of the example runs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable

from aiokafka07.testing import KafkaCluster, ZooKeeperServer
from aiokafka07.testing.zookeeper_server import ZooKeeperNotInstalled

__all__ = ["address_argument", "local_cluster"]


def address_argument(parser: argparse.ArgumentParser) -> None:
    """Add the optional positional ``zookeeper`` argument every example takes."""
    parser.add_argument(
        "zookeeper",
        nargs="?",
        help="ZooKeeper connect string of a running Kafka 0.7 cluster "
        "(default: start a local throw-away cluster and run a short demo)",
    )


@contextlib.asynccontextmanager
async def local_cluster(
    zookeeper: str | None,
    *,
    brokers: int = 2,
    partitions: int = 2,
    topics: Iterable[str] = (),
) -> AsyncIterator[str]:
    """Yield a ZooKeeper connect string: ``zookeeper`` itself when given, else the one of
    a local cluster of ``brokers`` embedded brokers with ``partitions`` partitions per
    topic, started here and stopped on exit.

    ``topics`` exist on every local broker from the start, as on a cluster that has been
    running for a while. (A 0.7 broker creates a topic at its first message; until the
    brokers register it, producers know only partition 0 of each broker.)
    """
    if zookeeper is not None:
        yield zookeeper
        return
    server = ZooKeeperServer()
    try:
        await asyncio.to_thread(server.start)
    except ZooKeeperNotInstalled as exc:
        server.close()
        raise SystemExit(
            f"{exc}\nOr pass the ZooKeeper connect string of a running Kafka 0.7 cluster."
        ) from exc
    try:
        cluster = KafkaCluster(brokers, zookeeper=server.connect_string, num_partitions=partitions)
        for broker in cluster.brokers.values():
            for topic in topics:
                # An empty partition log: the broker opens it and registers the topic.
                (broker.config.log_dir / f"{topic}-0").mkdir(parents=True)
        async with cluster:
            print(
                f"local cluster: ZooKeeper {server.connect_string}, brokers "
                f"{', '.join(f'{b}:{h}:{p}' for b, h, p in cluster.bootstrap)}, "
                f"{partitions} partitions per topic"
            )
            yield server.connect_string
    finally:
        await asyncio.to_thread(server.close)

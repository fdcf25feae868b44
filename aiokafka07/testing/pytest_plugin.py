"""pytest fixtures for code that talks to Kafka 0.7 (loaded automatically by pytest).

* ``zookeeper_server`` (session): one real ZooKeeper server from Debian's ``zookeeper``
  package on a free loopback port with its own data directory; installed with apt-get
  first when missing and running as root.
* ``zookeeper`` (test): a connect string with a fresh chroot on that server, so every
  test sees an empty ZooKeeper.
* ``kafka_cluster`` (test): a factory of :class:`~aiokafka07.testing.KafkaCluster` on
  loopback, registered in the test's ``zookeeper`` (or static with ``zookeeper=None``)::

      async def test_something(kafka_cluster):
          async with kafka_cluster(2, num_partitions=4) as cluster:
              assert len(cluster.running) == 2
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .cluster import KafkaCluster
from .zookeeper_server import ZooKeeperServer, ensure_zookeeper_installed

__all__ = ["kafka_cluster", "zookeeper", "zookeeper_server"]

_chroots = itertools.count()


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper server shared by the test session."""
    ensure_zookeeper_installed()
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def zookeeper(zookeeper_server: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """``host:port/chroot`` with a chroot no other test uses."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"{zookeeper_server.connect_string}/t{next(_chroots)}-{name}"


@pytest.fixture
def kafka_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., KafkaCluster]:
    """Factory: ``kafka_cluster(size=1, zookeeper=True, num_partitions=1, ...)``.

    ``zookeeper=True`` uses the test's ``zookeeper`` chroot, a string uses that connect
    string, ``None`` runs the brokers without ZooKeeper. Other keyword arguments are
    :class:`~aiokafka07.broker.BrokerConfig` fields.
    """

    def make(size: int = 1, *, zookeeper: bool | str | None = True, **kwargs: Any) -> KafkaCluster:
        connect: str | None
        connect = request.getfixturevalue("zookeeper") if zookeeper is True else zookeeper or None
        log_root = tmp_path_factory.mktemp("kafka-logs")
        return KafkaCluster(size, zookeeper=connect, log_root=log_root, **kwargs)

    return make

"""pytest fixtures for code that talks to Kafka 0.7 (loaded automatically by pytest).

* ``zookeeper_installed`` (session): the classpath of Debian's ``zookeeper`` package. When
  it is missing, the fixture fails with what to run; it installs the package with apt-get
  itself (as root on Debian) only when the project opts in, with
  ``aiokafka07_install_zookeeper = true`` in its pytest configuration or
  ``--aiokafka07-install-zookeeper`` on the command line. The plugin is loaded in every
  project that installs aiokafka07, so it never touches the machine unasked.
* ``zookeeper_server`` (session): one real ZooKeeper server from that package on a free
  loopback port with its own data directory.
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
from .zookeeper_server import ZooKeeperNotInstalled, ZooKeeperServer, ensure_zookeeper_installed

__all__ = ["kafka_cluster", "zookeeper", "zookeeper_installed", "zookeeper_server"]

_chroots = itertools.count()

INSTALL_OPTION = "--aiokafka07-install-zookeeper"
INSTALL_INI = "aiokafka07_install_zookeeper"


def pytest_addoption(parser: pytest.Parser) -> None:
    help_ = (
        "let aiokafka07's fixtures install Debian's zookeeper package with apt-get when it "
        "is missing (as root on Debian only)"
    )
    parser.addoption(INSTALL_OPTION, action="store_true", default=False, help=help_)
    parser.addini(INSTALL_INI, help_, type="bool", default=False)


def install_opted_in(config: pytest.Config) -> bool:
    """Whether the project (ini) or the command line allowed installing ZooKeeper."""
    return bool(config.getoption(INSTALL_OPTION) or config.getini(INSTALL_INI))


@pytest.fixture(scope="session")
def zookeeper_installed(pytestconfig: pytest.Config) -> str:
    """The classpath of Debian's zookeeper package; installed first only if opted in."""
    install = install_opted_in(pytestconfig)
    try:
        return ensure_zookeeper_installed(install=install)
    except ZooKeeperNotInstalled as exc:
        if install:
            raise
        raise ZooKeeperNotInstalled(
            f"{exc} Or let the fixtures install it (as root): {INSTALL_OPTION}, or "
            f"{INSTALL_INI} = true in the pytest configuration."
        ) from None


@pytest.fixture(scope="session")
def zookeeper_server(zookeeper_installed: str) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper server shared by the test session."""
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

"""Test support: a real ZooKeeper server and clusters of embedded brokers, on loopback.

``pytest`` picks up the fixtures in :mod:`aiokafka07.testing.pytest_plugin`
automatically once aiokafka07 is installed: ``zookeeper_server``, ``zookeeper`` (a fresh
chroot per test) and ``kafka_cluster`` (a factory of embedded broker clusters). The
classes work outside pytest too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import KafkaCluster
    from .zookeeper_server import ZooKeeperServer, ensure_zookeeper_installed, expire_session

__all__ = ["KafkaCluster", "ZooKeeperServer", "ensure_zookeeper_installed", "expire_session"]

_WHERE = {
    "KafkaCluster": "cluster",
    "ZooKeeperServer": "zookeeper_server",
    "ensure_zookeeper_installed": "zookeeper_server",
    "expire_session": "zookeeper_server",
}


def __getattr__(name: str) -> Any:
    # Lazy, so importing one helper does not start loading the others.
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

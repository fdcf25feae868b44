"""A cluster of embedded 0.7.2-compatible brokers on loopback, for tests and local work.

``flush`` names how the brokers flush (:mod:`aiokafka07.testing.flush`): by default
``"every-message"``, so that a test reads what it wrote at once; ``"shipped"`` runs
0.7.2's shipped ``server.properties`` (a flush every 10,000 messages or about every
second), what real clusters run. No fsync either way. Pass any :class:`BrokerConfig`
field (Python names) to change a setting.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..broker import Broker, BrokerConfig
from .flush import FlushName, flush_fields

__all__ = ["KafkaCluster"]

TEST_DEFAULTS: dict[str, Any] = {
    "socket_send_buffer": 1 << 20,
    "socket_receive_buffer": 1 << 20,
}


class KafkaCluster:
    """``size`` brokers with ids ``first_id ...``, sharing one ZooKeeper (or none).

    Use as an async context manager. Brokers keep their port and log directory across
    :meth:`stop_broker` / :meth:`start_broker`, like a restarted broker process.
    ``flush``: ``"every-message"`` (the default: a produce is readable at once) or
    ``"shipped"`` (0.7.2's ``server.properties``); see :mod:`aiokafka07.testing.flush`.
    """

    def __init__(
        self,
        size: int = 1,
        *,
        zookeeper: str | None = None,
        log_root: str | Path | None = None,
        num_partitions: int = 1,
        topic_partitions: dict[str, int] | None = None,
        first_id: int = 0,
        flush: FlushName = "every-message",
        **broker_settings: Any,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one broker")
        self.zookeeper = zookeeper
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if log_root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="aiokafka07-cluster-")
            log_root = self._tmp.name
        self.log_root = Path(log_root)
        self.flush = flush
        self._settings = {
            **TEST_DEFAULTS,
            **flush_fields(flush),
            "num_partitions": num_partitions,
            "topic_partition_count_map": dict(topic_partitions or {}),
            **broker_settings,
        }
        self.brokers: dict[int, Broker] = {}
        for broker_id in range(first_id, first_id + size):
            self.add_broker(broker_id)

    def add_broker(self, broker_id: int | None = None, **settings: Any) -> Broker:
        """Add a broker (not started) with the cluster's settings and ``settings``."""
        if broker_id is None:
            broker_id = max(self.brokers, default=-1) + 1
        if broker_id in self.brokers:
            raise ValueError(f"broker {broker_id} already exists")
        config = BrokerConfig(
            broker_id=broker_id,
            log_dir=self.log_root / f"broker-{broker_id}",
            port=0,
            enable_zookeeper=self.zookeeper is not None,
            zk_connect=self.zookeeper,
            **{**self._settings, **settings},
        )
        broker = Broker(config)
        self.brokers[broker_id] = broker
        return broker

    async def __aenter__(self) -> KafkaCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start every broker that is not running."""
        for broker_id in self.brokers:
            await self.start_broker(broker_id)

    async def stop(self) -> None:
        """Stop every running broker cleanly and remove the temporary log root."""
        for broker in self.brokers.values():
            await broker.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def broker(self, broker_id: int) -> Broker:
        return self.brokers[broker_id]

    async def start_broker(self, broker_id: int) -> Broker:
        """Start (or restart) a broker on its previous port with its log directory."""
        broker = self.brokers[broker_id]
        if not broker.running:
            await broker.start()
            # Keep the picked port for restarts, like a configured port.
            broker.config.port = broker.port
        return broker

    async def stop_broker(self, broker_id: int) -> None:
        await self.brokers[broker_id].stop()

    async def crash_broker(self, broker_id: int) -> None:
        """Drop the broker like a killed process (no flush, sockets and session gone)."""
        await self.brokers[broker_id].crash()

    async def restart_broker(self, broker_id: int) -> Broker:
        await self.stop_broker(broker_id)
        return await self.start_broker(broker_id)

    @property
    def running(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.running]

    @property
    def broker_list(self) -> str:
        """The static ``broker.list`` form ``id:host:port,...`` of the running brokers."""
        return ",".join(f"{b.broker_id}:{b.host}:{b.port}" for b in self.running)

    @property
    def bootstrap(self) -> list[tuple[int, str, int]]:
        """(broker id, host, port) of every running broker."""
        return [(b.broker_id, b.host, b.port) for b in self.running]

"""A local cluster of real processes on loopback: a ZooKeeper server (Debian's package) and
embedded brokers, each in a process of its own, with their data under one directory.

What ``aiokafka07 cluster`` runs for development and ``aiokafka07 demo`` runs for its
pipeline. Every process is in a session of its own, so a Ctrl-C at the terminal reaches
only the program that started them, which stops them in order: brokers first (cleanly:
logs flushed, registrations removed), then ZooKeeper. Should that program die instead,
the brokers stop when their standard input closes and ZooKeeper's watchdog kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..connection import BrokerAddress
from .flush import flush_properties
from .process import start_broker_process, stop_broker_process
from .zookeeper_server import ZooKeeperServer

__all__ = ["PROMPT_FLUSH", "LocalCluster", "local_cluster"]

#: Broker settings that make every produced message visible to consumers at once: a
#: flush (a write to the file, no fsync) per produce request, instead of 0.7.2's shipped
#: flush every 10,000 messages or about every second (:mod:`.flush`).
PROMPT_FLUSH = flush_properties("every-message")

#: How often :meth:`LocalCluster.wait_for_failure` looks at the ZooKeeper process.
_POLL_INTERVAL = 0.5


@dataclass
class LocalCluster:
    """The running cluster: where its data is, and how clients reach it."""

    root: Path
    #: ZooKeeper connect string (with the chroot, if any), or None in static mode.
    zookeeper: str | None
    brokers: dict[int, BrokerAddress]
    processes: dict[int, asyncio.subprocess.Process] = field(repr=False)
    server: ZooKeeperServer | None = field(repr=False)

    @property
    def broker_list(self) -> str:
        """0.7.2's ``broker.list``: ``id:host:port,...``."""
        return ",".join(f"{b}:{a.host}:{a.port}" for b, a in sorted(self.brokers.items()))

    def connection(self) -> dict[str, str]:
        """The cluster options of the producer, consumer and data source."""
        if self.zookeeper is not None:
            return {"zookeeper": self.zookeeper}
        return {"brokers": self.broker_list}

    def log_file(self, broker_id: int) -> Path:
        """Where broker ``broker_id`` logs (INFO)."""
        return self.root / f"broker-{broker_id}.log"

    async def wait_for_failure(self) -> str:
        """Wait until a broker process or ZooKeeper ends by itself; say which, and how."""
        waits = {
            asyncio.ensure_future(process.wait()): broker_id
            for broker_id, process in self.processes.items()
        }
        try:
            while True:
                done, _ = await asyncio.wait(
                    waits, timeout=_POLL_INTERVAL, return_when=asyncio.FIRST_COMPLETED
                )
                for ended in done:
                    broker_id = waits[ended]
                    return (
                        f"broker {broker_id} exited with status {ended.result()} "
                        f"(its log: {self.log_file(broker_id)})"
                    )
                if self.server is not None and not self.server.running:
                    return f"ZooKeeper exited (its log: {self.server.log_path})"
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)


@contextlib.asynccontextmanager
async def local_cluster(
    root: str | Path,
    *,
    brokers: int = 2,
    partitions: int = 1,
    zookeeper: bool = True,
    zookeeper_port: int = 0,
    chroot: str = "",
    port: int = 0,
    settings: Mapping[str, str] | None = None,
    topics: Iterable[str] = (),
) -> AsyncIterator[LocalCluster]:
    """Start ZooKeeper (unless ``zookeeper`` is false: static mode) and ``brokers`` broker
    processes with ``partitions`` partitions per topic; stop them all on exit.

    Ports: ``zookeeper_port`` for ZooKeeper, ``port``, ``port + 1``, ... for the brokers;
    0 picks free ones. Brokers register under ``chroot`` (e.g. ``"/demo"``). ``settings``
    are further ``server.properties`` keys. ``topics`` exist on every broker from the
    start, as on a cluster that has been running a while (0.7 creates a topic at its first
    message, and until then producers know only partition 0 of each broker). Data lives
    under ``root`` (``zookeeper/``, ``broker-<id>/`` and each broker's log file), which is
    kept: removing it is the caller's choice.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    server: ZooKeeperServer | None = None
    processes: dict[int, asyncio.subprocess.Process] = {}
    try:
        connect: str | None = None
        if zookeeper:
            server = ZooKeeperServer(port=zookeeper_port, data_dir=root / "zookeeper")
            starting = asyncio.ensure_future(asyncio.to_thread(server.start))
            try:
                await asyncio.shield(starting)
            except asyncio.CancelledError:
                # The thread cannot be stopped: let it finish, so that close() below
                # finds the server it started.
                with contextlib.suppress(Exception):
                    await starting
                raise
            connect = server.connect_string + chroot

        async def start(broker_id: int) -> BrokerAddress:
            log_dir = root / f"broker-{broker_id}"
            for topic in topics:
                # An empty partition log: the broker opens it at start-up and registers it.
                (log_dir / f"{topic}-0").mkdir(parents=True, exist_ok=True)
            process, address = await start_broker_process(
                log_dir,
                broker_id=broker_id,
                partitions=partitions,
                zookeeper=connect,
                port=port + broker_id if port else 0,
                settings=settings,
                log_file=root / f"broker-{broker_id}.log",
            )
            processes[broker_id] = process
            return address

        # All of them, even when one fails, so that none is left starting behind our back.
        started = await asyncio.gather(*(start(b) for b in range(brokers)), return_exceptions=True)
        for result in started:
            if isinstance(result, BaseException):
                raise result
        addresses = [a for a in started if isinstance(a, BrokerAddress)]
        yield LocalCluster(root, connect, dict(enumerate(addresses)), processes, server)
    finally:
        # Each step is bounded: a broker gets 10 s for its clean stop, ZooKeeper too.
        await asyncio.gather(*(stop_broker_process(p) for p in processes.values()))
        if server is not None:
            await asyncio.to_thread(server.close)

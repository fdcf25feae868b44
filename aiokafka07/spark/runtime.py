"""One event loop per Python worker process, reused by every Spark task it runs.

Spark calls data sources from plain threads and reuses Python worker processes across
tasks. Each process gets one asyncio loop in a daemon thread; tasks submit coroutines to
it and wait for the answer. Connection pools and ZooKeeper sessions live on that loop
and are opened on first use, so the objects Spark pickles (options, input partitions)
hold only plain data, and a process that runs a hundred tasks opens its connections
once. A forked child never touches its parent's loop: the runtime is per process id.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from ..cluster import Cluster, cluster_from
from ..pool import ConnectionPool
from ..timeouts import wait_for
from ..zookeeper import ZooKeeper

__all__ = ["WorkerRuntime"]

T = TypeVar("T")


class WorkerRuntime:
    """The process's event loop thread, with pools and sessions cached on it."""

    _instance: WorkerRuntime | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="aiokafka07-spark", daemon=True
        )
        self._thread.start()
        self._pools: dict[tuple[str, int], ConnectionPool] = {}
        self._zookeepers: dict[str, ZooKeeper] = {}
        self._clusters: dict[tuple[str | None, str | None], Cluster] = {}

    @classmethod
    def get(cls) -> WorkerRuntime:
        """This process's runtime, started on first use."""
        runtime = cls._instance
        if runtime is None or not runtime.usable:
            with cls._lock:
                runtime = cls._instance
                if runtime is None or not runtime.usable:
                    runtime = cls._instance = WorkerRuntime()
                    atexit.register(runtime.shutdown)
        return runtime

    @property
    def usable(self) -> bool:
        """Whether this is the runtime of this process and has not been shut down."""
        return self.pid == os.getpid() and self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and return its result (or raise its exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """A plain iterator over an async iterator running on the loop; closing the
        iterator (or abandoning it) closes the async one there too."""

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await agen.__anext__()
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                more, item = self.run(step())
                if not more:
                    return
                yield item  # type: ignore[misc]
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    self.run(aclose())

    async def pool(self, cluster: str, request_timeout_ms: int) -> ConnectionPool:
        """The shared connection pool for one cluster and request timeout (call on the
        loop). Pools know brokers by id, so two clusters (a job reading one and writing
        another) must not share one."""
        key = (cluster, request_timeout_ms)
        pool = self._pools.get(key)
        if pool is None or pool.closed:
            pool = self._pools[key] = ConnectionPool(request_timeout_ms=request_timeout_ms)
        return pool

    async def zookeeper(self, connect: str, timeout_ms: int | None = None) -> ZooKeeper:
        """A started ZooKeeper session for ``connect`` (call on the loop); a new session
        that no server opens within 0.7.2's 6 s (or ``timeout_ms``, if shorter) raises
        :class:`~aiokafka07.errors.ZooKeeperError` naming the connect string."""
        zk = self._zookeepers.get(connect)
        if zk is None:
            ms = 6000 if timeout_ms is None else max(1, min(6000, timeout_ms))
            zk = ZooKeeper(connect, connection_timeout_ms=ms)
            await zk.start()
            self._zookeepers[connect] = zk
        return zk

    async def cluster(self, zookeeper: str | None, broker_list: str | None) -> Cluster:
        """A started cluster view (ZooKeeper watches or a static list) for producers."""
        key = (zookeeper, broker_list)
        cluster = self._clusters.get(key)
        if cluster is None:
            cluster = cluster_from(zookeeper, broker_list)
            await cluster.start()
            self._clusters[key] = cluster
        return cluster

    def shutdown(self) -> None:
        """Close sessions and connections and stop the loop (at process exit, or earlier
        by a driver that stops its cluster first). Once is enough: later calls return."""
        if not self.usable or self.loop.is_closed():
            return

        async def close_all() -> None:
            resources: list[Any] = [
                *self._clusters.values(),
                *self._zookeepers.values(),
                *self._pools.values(),
            ]
            for resource in resources:
                with contextlib.suppress(Exception):
                    await wait_for(resource.close(), 2)
            # Whatever a vanished server left waiting must not outlive the loop.
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

"""Connections to brokers, shared by everything one client does.

The pool keeps up to ``connections_per_broker`` :class:`BrokerConnection` per broker,
hands them out round-robin, opens new ones lazily and after failures with exponential
backoff and jitter, and replaces a broker's connections when its address changes (a broker
that re-registered on another port). It knows nothing of ZooKeeper: whoever tracks the
cluster tells it about addresses.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

from .backoff import Backoff
from .connection import RENAMED_TIMEOUTS, BrokerAddress, BrokerConnection
from .errors import InvalidConfigError, KafkaConnectionError
from .validation import check_int, check_ms, check_number, renamed_options_to_ms, renamed_to_ms

__all__ = ["BrokerPoolMetrics", "ConnectionPool", "PoolMetrics"]

log = logging.getLogger("aiokafka07.pool")


@dataclass(frozen=True)
class BrokerPoolMetrics:
    """One broker's connections in a pool: ``connections`` open now, ``connects``
    opened and ``connect_failures`` attempts that failed since the pool was made."""

    connections: int
    connects: int
    connect_failures: int


@dataclass(frozen=True)
class PoolMetrics:
    """A snapshot of a pool (``pool.metrics``), per broker: keyed by the broker id as
    text, or ``host:port`` for a broker known only by address (a static broker list)."""

    brokers: dict[str, BrokerPoolMetrics]


class ConnectionPool:
    """Connections keyed by broker (id, host, port); an async context manager.

    ``reconnect_backoff_ms`` is (first delay, cap) in milliseconds, for a
    :class:`~aiokafka07.backoff.Backoff` per broker (doubling, +-20 % jitter). Other keyword
    arguments go to every :class:`BrokerConnection` (``connect_timeout_ms``,
    ``request_timeout_ms``, socket buffers, ``max_message_size``, ``max_unsent_bytes``) and
    are checked here, at construction. ``reconnect_backoff`` (seconds) is the deprecated
    name of ``reconnect_backoff_ms``.
    """

    def __init__(
        self,
        *,
        connections_per_broker: int = 1,
        reconnect_backoff_ms: tuple[float, float] = (50.0, 5000.0),
        reconnect_backoff: tuple[float, float] | None = None,
        **connection_options: Any,
    ) -> None:
        self.connections_per_broker = check_int(
            "connections_per_broker", connections_per_broker, minimum=1
        )
        self.reconnect_backoff_ms = _backoff_pair(
            renamed_to_ms(
                "ConnectionPool", "reconnect_backoff", reconnect_backoff, reconnect_backoff_ms
            )
        )
        connection_options = renamed_options_to_ms(
            "ConnectionPool", connection_options, RENAMED_TIMEOUTS
        )
        # Every connection gets these: check them now, not at the first connect.
        BrokerConnection(BrokerAddress(None, "127.0.0.1", 1), **connection_options)
        self.connection_options = connection_options
        self._connections: dict[Any, list[BrokerConnection]] = {}
        self._addresses: dict[Any, BrokerAddress] = {}
        # Per broker: consecutive connect failures, and no new attempt before a time.
        self._backoff: dict[Any, Backoff] = {}
        self._not_before: dict[Any, float] = {}
        self._locks: dict[Any, asyncio.Lock] = {}
        self._turn = itertools.count()
        self._closed = False
        # Per broker: [connections opened, connect attempts failed] (counted on the
        # connect path only, never per request).
        self._counts: dict[Any, list[int]] = {}

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self, address: BrokerAddress) -> None:
        if self._closed:
            raise KafkaConnectionError("the connection pool is closed", broker=str(address))

    @staticmethod
    def _key(address: BrokerAddress) -> Any:
        return address.broker_id if address.broker_id is not None else (address.host, address.port)

    async def connection(self, address: BrokerAddress) -> BrokerConnection:
        """A live connection to ``address`` (opened if needed, after any backoff).

        A broker id seen at a new address moves there: its connections to the old
        address are closed (answers outstanding on them still arrive first). Whoever asks
        last names the current address; a connection is only ever handed out for the
        exact address it was opened to.
        """
        self._check_open(address)
        key = self._key(address)
        previous = self._addresses.get(key)
        self._addresses[key] = address
        if previous is not None and previous != address:
            log.info("%s moved from %s:%d", address, previous.host, previous.port)
            conns = self._connections.get(key, [])
            self._connections[key] = [c for c in conns if c.address == address]
            self._forget_failures(key)
            stale = [c for c in conns if c.address != address]
            await asyncio.gather(*(c.close() for c in stale), return_exceptions=True)
        conn = self._pick(key, address)
        if conn is not None:
            return conn
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._pick(key, address)
            if conn is not None:
                return conn
            conn = await self._open(key, address)
            try:
                self._check_open(address)  # the pool may have closed during the open
            except KafkaConnectionError:
                await conn.close()
                raise
            self._connections.setdefault(key, []).append(conn)
            return conn

    def _pick(self, key: Any, address: BrokerAddress) -> BrokerConnection | None:
        """Round-robin over live connections to ``address``, unless more may be opened."""
        live = [c for c in self._connections.get(key, ()) if not c.closed]
        self._connections[key] = live
        matching = [c for c in live if c.address == address]
        if len(matching) < self.connections_per_broker:
            return None
        return matching[next(self._turn) % len(matching)]

    async def _open(self, key: Any, address: BrokerAddress) -> BrokerConnection:
        wait = self._not_before.get(key, 0.0) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            conn = await BrokerConnection.open(address, **self.connection_options)
        except KafkaConnectionError:
            self._counts.setdefault(key, [0, 0])[1] += 1
            backoff = self._backoff.get(key)
            if backoff is None:
                base, cap = self.reconnect_backoff_ms
                backoff = self._backoff[key] = Backoff(base / 1000, cap / 1000)
            delay = backoff.failed()
            self._not_before[key] = time.monotonic() + delay
            log.warning(
                "cannot connect to %s (%d failures; next try in %.2f s)",
                address,
                backoff.failures,
                delay,
            )
            raise
        self._counts.setdefault(key, [0, 0])[0] += 1
        backoff = self._backoff.get(key)
        if backoff is not None:
            log.info("reconnected to %s after %d failures", address, backoff.failures)
        self._forget_failures(key)
        return conn

    def _forget_failures(self, key: Any) -> None:
        self._backoff.pop(key, None)
        self._not_before.pop(key, None)

    @property
    def metrics(self) -> PoolMetrics:
        """Open connections and connect counts per broker, as of now (a snapshot)."""
        brokers = {}
        for key in self._counts.keys() | self._connections.keys():
            connects, failures = self._counts.get(key, (0, 0))
            live = sum(not c.closed for c in self._connections.get(key, ()))
            label = str(key) if isinstance(key, int) else f"{key[0]}:{key[1]}"
            brokers[label] = BrokerPoolMetrics(live, connects, failures)
        return PoolMetrics(brokers)

    def connections(self, address: BrokerAddress) -> list[BrokerConnection]:
        """The live connections to ``address`` (for inspection)."""
        conns = self._connections.get(self._key(address), ())
        return [c for c in conns if not c.closed and c.address == address]

    async def forget(self, broker_id: int) -> None:
        """Close a broker's connections (it left the cluster)."""
        await self._drop(broker_id)
        self._addresses.pop(broker_id, None)

    async def _drop(self, key: Any) -> None:
        conns = self._connections.pop(key, [])
        self._forget_failures(key)
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    async def close(self, timeout: float | None = None, *, timeout_ms: float = 5000.0) -> None:
        """Let outstanding requests finish (up to ``timeout_ms``), then close everything.
        (``timeout``, in seconds, is the deprecated form.)"""
        timeout_ms = check_ms("ConnectionPool.close", "timeout_ms", timeout_ms, timeout)
        self._closed = True
        conns = [c for group in self._connections.values() for c in group]
        self._connections.clear()
        await asyncio.gather(
            *(c.close(timeout_ms=timeout_ms) for c in conns), return_exceptions=True
        )


def _backoff_pair(value: object) -> tuple[float, float]:
    """``reconnect_backoff_ms``: (first delay, cap) in milliseconds, 0 < first <= cap."""
    try:
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise TypeError
        base = check_number("reconnect_backoff_ms", value[0], minimum=0, above=True)
        cap = check_number("reconnect_backoff_ms", value[1], minimum=base)
    except (TypeError, ValueError) as exc:
        raise InvalidConfigError(
            f"reconnect_backoff_ms must be (first delay, cap) in milliseconds, "
            f"0 < first <= cap, not {value!r}"
        ) from exc
    return (base, cap)

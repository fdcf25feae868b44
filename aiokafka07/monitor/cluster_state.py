"""The exporter's view of one 0.7 cluster: a cache refreshed in the background.

:class:`ClusterMonitor` owns one ZooKeeper session, one connection pool and ONE supervised
task, the refresher. Each refresh builds a new immutable :class:`ClusterState` (brokers,
partitions with their log start and end, groups with committed offsets, owners and lag)
and swaps it in; a scrape reads the last one and never waits on the cluster.

What a refresh costs:

* ZooKeeper listings (``/brokers/ids``, ``/brokers/topics/*``, ``/consumers``, each
  group's ``ids``, ``offsets/*`` and ``owners/*``) come from :class:`WatchedListings`: read
  once with a child watch, then again only after the watch fired. Committed offsets are
  node *data*, which changes with every commit: they are read on each refresh, pipelined.
* Brokers: every partition's log start and end, pipelined on one connection per broker
  (:func:`~aiokafka07.monitor.offsets.probe_broker`), all brokers at once.

Filters: ``topics`` and ``groups`` (regular expressions matched against whole names, as
the consumers' and the bridge's ``--whitelist``: :class:`~aiokafka07.group.TopicFilter`)
leave the rest out before anything is read: a topic not matching has its registrations
neither read nor watched, its partitions neither probed nor counted in the bounds, and no
group's offsets or owners of it are read; a group not matching has nothing under it read.
On a big cluster they take the load of what nobody watches off ZooKeeper and the brokers.

Bounds: at most ``max_groups`` groups and ``max_partitions`` broker-partitions (and as
many group partitions) are listed, the rest counted as ``limit`` errors; a refresh taking
longer than ``refresh_timeout_ms`` is abandoned (``timeout``); refreshes run one at a time,
every ``interval_ms`` or sooner when a watch fired (at most every ``min_interval_ms``).

When ZooKeeper cannot be reached the last state stays served and :attr:`ClusterMonitor.stale`
is true; the refresher waits for the connection and refreshes as soon as it is back. A
broker that cannot be probed is shown down (its partitions keep no offsets).

**Unknown is never zero.** A group partition whose lag cannot be known now (its broker did
not answer OFFSETS, is not registered, or was left out by ``max_partitions``; its offset
znode holds no offset) carries the reason in :attr:`GroupPartitionState.unknown`, and
:attr:`GroupState.unknown` counts them: consumers of the state report such a group's
total lag as unknown, never as the sum of the partitions that could be read.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ..backoff import Backoff
from ..connection import BrokerAddress
from ..errors import ZooKeeperError
from ..group.subscription import TopicFilter, normalize_filter
from ..pool import ConnectionPool
from ..records import TopicPartition
from ..supervisor import CrashPolicy, Supervisor
from ..timeouts import wait_for
from ..znodes import (
    BROKER_IDS,
    BROKER_TOPICS,
    CONSUMERS,
    brokers_from_values,
    group_path,
    ids_path,
    offset_path,
    offsets_path,
    owners_path,
    registrations_from_values,
    topic_path,
)
from ..zookeeper import ZooKeeper
from .message_lag import ESTIMATE, EXACT, MessageCounter, MessageLag, Method, PartitionRange
from .offsets import LogOffsets, probe_broker

__all__ = [
    "BrokerState",
    "ClusterMonitor",
    "ClusterState",
    "GroupPartitionState",
    "GroupState",
    "PartitionState",
    "WatchedListings",
]

log = logging.getLogger("aiokafka07.monitor")

#: How often (seconds) an idle refresher checks that ZooKeeper is still connected.
_CONNECTION_CHECK = 0.25

#: Error kinds counted by :attr:`ClusterMonitor.errors` (the ``kind`` label).
ERROR_KINDS = ("zookeeper", "broker", "timeout", "limit", "bad_znode")


@dataclasses.dataclass(frozen=True)
class BrokerState:
    """A broker the exporter has seen: registered in ZooKeeper now, answering OFFSETS."""

    broker_id: int
    address: BrokerAddress | None
    registered: bool
    up: bool
    probe_seconds: float | None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class PartitionState:
    """A broker-partition of a topic: log start and end (bytes) and bytes appended per
    second since the previous refresh (None on the first)."""

    tp: TopicPartition
    log_start: int
    log_end: int
    bytes_in_per_second: float | None


@dataclasses.dataclass(frozen=True)
class GroupPartitionState:
    """A group's view of one broker-partition: committed offset, owner thread, lag in
    bytes (log end minus committed; None when either is unknown) and how long the
    committed offset has not moved, as far as the exporter saw."""

    tp: TopicPartition
    committed: int | None
    owner: str | None
    log_start: int | None
    log_end: int | None
    lag: int | None
    unmoved_seconds: float | None
    #: When the committed offset was last written (ZooKeeper's mtime, ms since the epoch).
    committed_at_ms: int | None = None
    #: Why the lag cannot be known now (None: known, or no offset committed yet).
    unknown: str | None = None
    #: Messages between the committed offset and the log end (None: unknown, or no
    #: offset committed), and how they were had: ``"exact"`` (counted) or
    #: ``"estimate"`` (:mod:`aiokafka07.monitor.message_lag`).
    lag_messages: int | None = None
    lag_messages_method: Method | None = None


@dataclasses.dataclass(frozen=True)
class GroupState:
    """A consumer group: live members, member-list changes seen, its partitions."""

    group: str
    members: int
    rebalances: int
    partitions: tuple[GroupPartitionState, ...]

    @property
    def unknown(self) -> int:
        """Partitions whose lag cannot be known now (see :attr:`GroupPartitionState.unknown`)."""
        return sum(p.unknown is not None for p in self.partitions)

    @property
    def total_lag(self) -> int | None:
        """The sum of the partitions' lags; None while any is unknown (a sum of the others
        would fall during an outage, and read as consumers catching up). An offset past
        the log end (ERR, a negative lag) adds nothing: it is not lag taken away."""
        if self.unknown:
            return None
        return sum(max(p.lag, 0) for p in self.partitions if p.lag is not None)

    def lag_messages(self, topic: str | None = None) -> MessageLag | None:
        """The sum of the partitions' lags in messages (of ``topic``, or of every topic),
        ``exact`` when every one is; None while any is unknown (its byte lag, or its
        count and estimate), as :attr:`total_lag`. Partitions never committed add
        nothing."""
        total = 0
        method: Method = EXACT
        for p in self.partitions:
            if topic is not None and p.tp.topic != topic:
                continue
            if p.unknown is not None:
                return None
            if p.committed is None:
                continue
            if p.lag_messages is None or p.lag_messages_method is None:
                return None
            total += p.lag_messages
            if p.lag_messages_method != EXACT:
                method = ESTIMATE
        return MessageLag(total, method)

    @property
    def topics(self) -> list[str]:
        """The topics of the group's partitions, sorted."""
        return sorted({p.tp.topic for p in self.partitions})


@dataclasses.dataclass(frozen=True)
class ClusterState:
    """One refresh's result; ``refreshed_at`` is ``time.time()`` when it ended."""

    brokers: tuple[BrokerState, ...] = ()
    partitions: tuple[PartitionState, ...] = ()
    groups: tuple[GroupState, ...] = ()
    refreshed_at: float | None = None
    refresh_seconds: float | None = None


class WatchedListings:
    """Children (and, where asked, their data) of znodes, cached until a watch fires.

    The first read of a path leaves a child watch and registers a callback; when it
    fires, the path is read again on next use (re-arming the watch) and ``on_change`` is
    called, so the refresher can run sooner. :meth:`invalidate` drops everything (after
    ZooKeeper was unreachable: changes may have been missed), :meth:`forget` a subtree
    (a group that vanished).
    """

    def __init__(self, zookeeper: ZooKeeper, on_change: Callable[[], None]) -> None:
        self.zookeeper = zookeeper
        self.on_change = on_change
        self._children: dict[str, list[str]] = {}
        self._data: dict[str, dict[str, str | None]] = {}
        self._registered: set[str] = set()

    def _fired(self, path: str) -> None:
        self._children.pop(path, None)
        self._data.pop(path, None)
        self.on_change()

    def _watch(self, path: str) -> None:
        if path not in self._registered:
            self.zookeeper.add_child_watch_callback(path, self._fired)
            self._registered.add(path)

    async def children(self, path: str) -> list[str]:
        """The children of ``path`` (``[]`` when it does not exist), sorted."""
        cached = self._children.get(path)
        if cached is not None:
            return cached
        self._watch(path)
        children = sorted(await self.zookeeper.watch_children(path))
        self._children[path] = children
        return children

    async def children_data(self, path: str) -> dict[str, str | None]:
        """The children of ``path`` with their data; for nodes whose data is written once
        (broker and topic registrations, owners: ephemeral nodes replaced, not updated)."""
        cached = self._data.get(path)
        if cached is not None:
            return cached
        self._watch(path)
        values = await self.zookeeper.watch_children_data(path)
        self._data[path] = values
        self._children[path] = sorted(values)
        return values

    def invalidate(self) -> None:
        """Read every path again on next use."""
        self._children.clear()
        self._data.clear()

    def forget(self, prefix: str) -> None:
        """Drop ``prefix`` and every path below it, and their callbacks."""
        below = prefix.rstrip("/") + "/"
        for path in [p for p in self._registered if p == prefix or p.startswith(below)]:
            self._registered.discard(path)
            self._children.pop(path, None)
            self._data.pop(path, None)
            self.zookeeper.remove_child_watch_callback(path, self._fired)


class _Commit(NamedTuple):
    """A committed offset as read (None: none committed, or not an offset: ``bad``) and
    its znode's mtime (ms)."""

    offset: int | None
    at_ms: int | None
    bad: bool = False


class _Limits:
    """Takes at most ``limit`` items across calls of one refresh; counts what it cut."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.cut = 0

    def take(self, items: list[TopicPartition]) -> list[TopicPartition]:
        taken = items[: max(self.left, 0)]
        self.left -= len(taken)
        self.cut += len(items) - len(taken)
        return taken


class _Unknown:
    """Why a partition's log end is not known after a refresh (for
    :attr:`GroupPartitionState.unknown`)."""

    def __init__(
        self,
        registered: Mapping[int, BrokerAddress],
        unreadable: Mapping[int, str],
        left_out: set[TopicPartition],
    ) -> None:
        self.registered = registered
        self.unreadable = unreadable
        self.left_out = left_out

    def reason(self, tp: TopicPartition) -> str:
        if tp.broker_id not in self.registered:
            return f"broker {tp.broker_id} is not registered in ZooKeeper"
        found = self.unreadable.get(tp.broker_id)
        if found is not None:
            return found
        if tp in self.left_out:
            return "left out: more broker-partitions than max_partitions"
        return f"{tp.topic} has no partition {tp.name} registered in ZooKeeper"


def _name_filter(option: str, regex: str | None) -> TopicFilter | None:
    """The whole-name filter ``regex`` gives (None: everything), in the syntax of the
    consumers' ``--whitelist`` (``"a, b"`` means a or b); a :class:`ValueError` naming
    ``option`` and the reason when it is empty or does not compile."""
    if regex is None:
        return None
    normalized = normalize_filter(regex)
    if not normalized:
        raise ValueError(f"{option} {regex!r} matches no name: give a regular expression")
    try:
        re.compile(normalized)
    except re.error as exc:
        raise ValueError(f"{option} {regex!r} is not a regular expression: {exc}") from None
    return TopicFilter(normalized, whitelist=True)


class ClusterMonitor:
    """The cached, background-refreshed state of one cluster (an async context manager).

    ``connect`` is the cluster's ZooKeeper connect string. Only reads: it never writes a
    znode nor produces. ``topics`` and ``groups``, regular expressions matched against whole
    names, leave out every other topic and group before anything of them is read (module
    docstring; a :class:`ValueError` when one does not compile). :attr:`state` is the last
    refresh's :class:`ClusterState`; :attr:`stale`, :attr:`errors` and the timings describe
    the monitor itself. ``on_refresh(state)``, if given, is called after each successful
    refresh (the lag evaluation hooks in there); an exception from it is logged and
    survived.
    """

    def __init__(
        self,
        connect: str,
        *,
        interval_ms: float = 5000.0,
        min_interval_ms: float = 200.0,
        refresh_timeout_ms: float = 10000.0,
        max_groups: int = 1000,
        max_partitions: int = 10000,
        connection_timeout_ms: float = 5000.0,
        request_timeout_ms: float = 5000.0,
        on_refresh: Callable[[ClusterState], None] | None = None,
        message_counter: MessageCounter | None = None,
        topics: str | None = None,
        groups: str | None = None,
    ) -> None:
        for name, value in (
            ("interval_ms", interval_ms),
            ("min_interval_ms", min_interval_ms),
            ("refresh_timeout_ms", refresh_timeout_ms),
            ("connection_timeout_ms", connection_timeout_ms),
            ("request_timeout_ms", request_timeout_ms),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive, not {value!r}")
        if max_groups < 1 or max_partitions < 1:
            raise ValueError("max_groups and max_partitions must be at least 1")
        #: The topics and groups read (None: all), as ``topics`` and ``groups`` give them.
        self.topic_filter = _name_filter("topics", topics)
        self.group_filter = _name_filter("groups", groups)
        self.connect = connect
        self.interval_ms = interval_ms
        self.min_interval_ms = min(min_interval_ms, interval_ms)
        self.refresh_timeout_ms = refresh_timeout_ms
        self.max_groups = max_groups
        self.max_partitions = max_partitions
        self.on_refresh = on_refresh
        #: Counts the group partitions' lag in messages within its bounds, each refresh.
        self.message_counter = MessageCounter() if message_counter is None else message_counter
        # Operations give up well within a refresh, so an outage is noticed at once.
        self.zookeeper = ZooKeeper(
            connect,
            connection_timeout_ms=connection_timeout_ms,
            operation_timeout_ms=min(refresh_timeout_ms, 2000.0),
        )
        self._request_timeout = min(request_timeout_ms, refresh_timeout_ms) / 1000
        self.pool = ConnectionPool(
            connect_timeout_ms=min(connection_timeout_ms, refresh_timeout_ms),
            request_timeout_ms=min(request_timeout_ms, refresh_timeout_ms),
            reconnect_backoff_ms=(100.0, 1000.0),
        )
        self.state = ClusterState()
        self.stale = True  # nothing read yet
        self.refreshes = 0
        self.errors: collections.Counter[str] = collections.Counter(dict.fromkeys(ERROR_KINDS, 0))
        self.last_error: str | None = None
        #: Seconds the last scrape took to answer (set by the server that answers them).
        self.scrape_seconds: float | None = None
        self._changed = asyncio.Event()
        self._refreshed = asyncio.Event()
        self._listings = WatchedListings(self.zookeeper, self._changed.set)
        self._supervisor = Supervisor("exporter", log)
        # Memory between refreshes: what makes rates, ages and counts.
        self._known_brokers: dict[int, BrokerAddress] = {}
        self._previous_ends: dict[TopicPartition, tuple[int, float]] = {}
        # (group, partition) → (committed offset, when it last changed: epoch seconds).
        self._moved: dict[tuple[str, TopicPartition], tuple[int, float]] = {}
        self._members: dict[str, frozenset[str]] = {}
        self._rebalances: dict[str, int] = {}

    async def __aenter__(self) -> ClusterMonitor:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def zookeeper_connected(self) -> bool:
        return self.zookeeper.connected

    @property
    def is_stale(self) -> bool:
        """Whether the state served may be out of date: the last refresh failed, or the
        ZooKeeper connection is down now."""
        return self.stale or not self.zookeeper.connected

    async def start(self) -> None:
        """Open the ZooKeeper session (raising :class:`ZooKeeperError` when it cannot be
        opened) and start the refresher; the first refresh runs at once."""
        await self.zookeeper.start()
        self._supervisor.spawn(
            "refresh",
            self._refresh_loop,
            policy=CrashPolicy.RESTART,
            backoff=Backoff(0.5, 5.0),
            max_restarts=10,
            on_give_up=self._gave_up,
        )

    def _gave_up(self, exc: BaseException) -> None:
        self.stale = True
        self.last_error = f"the refresher stopped: {exc!r}"

    async def close(self) -> None:
        """Stop the refresher, then close the connections and the ZooKeeper session."""
        await self._supervisor.aclose()
        try:
            await self.pool.close()
        finally:
            await self.zookeeper.close()

    async def wait_refreshed(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` seconds) for the next successful refresh; whether one
        happened."""
        self._refreshed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(self._refreshed.wait(), timeout)
        return self._refreshed.is_set()

    # -- the refresher ----------------------------------------------------------------

    async def _refresh_loop(self) -> None:
        backoff = Backoff(0.1, 0.5)
        interval = self.interval_ms / 1000
        while True:
            if not self.zookeeper.connected:
                self._failed("zookeeper", f"no ZooKeeper connection to {self.connect}")
                # Refresh as soon as it is back (within the session's reconnection time).
                if not await self.zookeeper.wait_connected(interval):
                    continue
            self._changed.clear()
            try:
                await wait_for(self.refresh(), self.refresh_timeout_ms / 1000)
            except asyncio.TimeoutError:
                self._failed("timeout", f"a refresh took over {self.refresh_timeout_ms} ms")
                await asyncio.sleep(backoff.failed())
                continue
            except ZooKeeperError as exc:
                self._failed("zookeeper", str(exc))
                await asyncio.sleep(backoff.failed())
                continue
            backoff.succeeded()
            self._refreshed.set()
            # Sooner when a watch fired, but never more often than min_interval_ms.
            await asyncio.sleep(self.min_interval_ms / 1000)
            await self._idle(interval)

    async def _idle(self, interval: float) -> None:
        """Wait until the next refresh is due: ``interval`` seconds, or a watch fired, or
        the ZooKeeper connection broke (then the loop waits for it to come back and
        refreshes at once, instead of sleeping through its return)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + interval
        while not self._changed.is_set() and self.zookeeper.connected:
            left = deadline - loop.time()
            if left <= 0:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_for(self._changed.wait(), min(left, _CONNECTION_CHECK))

    def _failed(self, kind: str, message: str) -> None:
        if not self.stale:
            log.warning("serving the last state, marked stale: %s", message)
        self.stale = True
        self.errors[kind] += 1
        self.last_error = message
        # Watches may have fired while we could not see them: read everything again.
        self._listings.invalidate()

    async def refresh(self) -> ClusterState:
        """Read the cluster once and make the result :attr:`state` (also returned)."""
        started = time.perf_counter()
        listings = self._listings
        registered = brokers_from_values(await listings.children_data(BROKER_IDS))
        self._known_brokers.update(registered)
        topics = [t for t in await listings.children(BROKER_TOPICS) if self._topic_read(t)]
        topic_values = await asyncio.gather(
            *(listings.children_data(topic_path(t)) for t in topics)
        )
        limits = _Limits(self.max_partitions)
        by_broker: dict[int, list[TopicPartition]] = {b: [] for b in registered}
        left_out: set[TopicPartition] = set()
        for topic, values in zip(topics, topic_values, strict=True):
            registrations = registrations_from_values(topic, values)
            partitions = [
                TopicPartition(topic, b, p)
                for b, count in sorted(registrations.items())
                if b in registered
                for p in range(count)
            ]
            taken = limits.take(partitions)
            left_out.update(partitions[len(taken) :])
            for tp in taken:
                by_broker[tp.broker_id].append(tp)
        groups_task = asyncio.ensure_future(self._read_groups())
        try:
            probes = await asyncio.gather(
                *(probe_broker(self.pool, registered[b], tps) for b, tps in by_broker.items())
            )
        except BaseException:
            groups_task.cancel()
            with contextlib.suppress(BaseException):
                await groups_task
            raise
        groups = await groups_task
        now = time.monotonic()
        brokers: list[BrokerState] = []
        offsets: dict[TopicPartition, LogOffsets] = {}
        #: broker id -> why its partitions' log ends are not known now.
        unreadable: dict[int, str] = {}
        for broker_id, probe in zip(by_broker, probes, strict=True):
            if probe.error is not None:
                self.errors["broker"] += 1
                unreadable[broker_id] = f"broker {broker_id} did not answer OFFSETS: {probe.error}"
                log.debug("broker %d did not answer OFFSETS: %s", broker_id, probe.error)
            offsets.update(probe.offsets)
            brokers.append(
                BrokerState(
                    broker_id,
                    registered[broker_id],
                    True,
                    probe.error is None,
                    probe.seconds,
                    None if probe.error is None else str(probe.error),
                )
            )
        for broker_id, address in sorted(self._known_brokers.items()):
            if broker_id not in registered:
                brokers.append(BrokerState(broker_id, address, False, False, None))
        brokers.sort(key=lambda b: b.broker_id)
        partition_states = [
            PartitionState(tp, o.start, o.end, self._rate(tp, o.end, now))
            for tp, o in sorted(offsets.items())
        ]
        self._previous_ends = {tp: (o.end, now) for tp, o in offsets.items()}
        why = _Unknown(registered, unreadable, left_out)
        answering = {b: a for b, a in registered.items() if b not in unreadable}
        messages = await self._count_messages(answering, groups, offsets)
        group_states = [
            self._group_state(g, m, c, w, offsets, why, messages) for g, m, c, w in groups
        ]
        if limits.cut:
            self.errors["limit"] += 1
            log.warning("listed %d broker-partitions, left %d out", self.max_partitions, limits.cut)
        state = ClusterState(
            tuple(brokers),
            tuple(partition_states),
            tuple(group_states),
            time.time(),
            time.perf_counter() - started,
        )
        self.state = state
        if self.stale:
            log.info("state refreshed: serving fresh values again")
        self.stale = False
        self.refreshes += 1
        if self.on_refresh is not None:
            try:
                self.on_refresh(state)
            except Exception:
                log.exception("on_refresh failed")
        return state

    def _topic_read(self, topic: str) -> bool:
        """Whether ``topic`` passes the ``topics`` filter (is read at all)."""
        return self.topic_filter is None or self.topic_filter.allows(topic)

    def _group_read(self, group: str) -> bool:
        """Whether ``group`` passes the ``groups`` filter (is read at all)."""
        return self.group_filter is None or self.group_filter.allows(group)

    async def _count_messages(
        self,
        registered: Mapping[int, BrokerAddress],
        groups: list[
            tuple[str, frozenset[str], dict[TopicPartition, _Commit], dict[TopicPartition, str]]
        ],
        offsets: Mapping[TopicPartition, LogOffsets],
    ) -> dict[tuple[TopicPartition, int], MessageLag | None]:
        """Every committed offset's lag in messages (:attr:`message_counter`): the
        counting reads the brokers that answered OFFSETS, within its bounds, and is cut
        off after its ``max_seconds`` plus one request timeout, at most half the refresh
        timeout (what it counted by then is kept and used)."""
        committed: dict[TopicPartition, set[int]] = {}
        for _, _, commits, _ in groups:
            for tp, commit in commits.items():
                if commit.offset is not None and tp in offsets:
                    committed.setdefault(tp, set()).add(commit.offset)
        ranges = {
            tp: PartitionRange(offsets[tp].start, offsets[tp].end, frozenset(found))
            for tp, found in committed.items()
        }
        counter = self.message_counter
        limit = min(counter.max_seconds + self._request_timeout, self.refresh_timeout_ms / 2000)
        try:
            await wait_for(counter.read(self.pool, registered, ranges), limit)
        except asyncio.TimeoutError:
            log.debug("counting messages took over %.1f s: cut off", limit)
        return counter.lags(ranges)

    def _rate(self, tp: TopicPartition, end: int, now: float) -> float | None:
        previous = self._previous_ends.get(tp)
        if previous is None or now <= previous[1]:
            return None
        grown = end - previous[0]
        return max(grown, 0) / (now - previous[1])  # a log that shrank was recreated

    async def _read_groups(
        self,
    ) -> list[tuple[str, frozenset[str], dict[TopicPartition, _Commit], dict[TopicPartition, str]]]:
        listings = self._listings
        names = [g for g in await listings.children(CONSUMERS) if self._group_read(g)]
        if len(names) > self.max_groups:
            self.errors["limit"] += 1
            log.warning(
                "listed %d groups, left %d out", self.max_groups, len(names) - self.max_groups
            )
        names = names[: self.max_groups]
        for gone in set(self._members) - set(names):
            self._drop_group(gone)
        limits = _Limits(self.max_partitions)
        results = await asyncio.gather(*(self._read_group(g, limits) for g in names))
        if limits.cut:
            self.errors["limit"] += 1
            log.warning("listed %d group partitions, left %d out", self.max_partitions, limits.cut)
        return [(g, *r) for g, r in zip(names, results, strict=True)]

    def _drop_group(self, group: str) -> None:
        self._members.pop(group, None)
        self._rebalances.pop(group, None)
        self._moved = {k: v for k, v in self._moved.items() if k[0] != group}
        self._listings.forget(group_path(group))

    async def _read_group(
        self, group: str, limits: _Limits
    ) -> tuple[frozenset[str], dict[TopicPartition, _Commit], dict[TopicPartition, str]]:
        listings = self._listings
        members = frozenset(await listings.children(ids_path(group)))
        offset_topics = [
            t for t in await listings.children(offsets_path(group)) if self._topic_read(t)
        ]
        owner_topics = [
            t for t in await listings.children(owners_path(group)) if self._topic_read(t)
        ]
        names: dict[str, set[str]] = {}
        owners: dict[TopicPartition, str] = {}
        for topic in offset_topics:
            names.setdefault(topic, set()).update(
                await listings.children(offsets_path(group, topic))
            )
        for topic in owner_topics:
            values = await listings.children_data(owners_path(group, topic))
            names.setdefault(topic, set()).update(values)
            for name, value in values.items():
                tp = self._parse(group, topic, name)
                if tp is not None and value is not None:
                    owners[tp] = value
        partitions: list[TopicPartition] = []
        for topic, found in sorted(names.items()):
            parsed = (self._parse(group, topic, name) for name in sorted(found))
            partitions.extend(tp for tp in parsed if tp is not None)
        partitions = limits.take(partitions)
        reads = await asyncio.gather(
            *(
                self.zookeeper.data_and_mtime(offset_path(group, tp.topic, tp.name))
                for tp in partitions
            )
        )
        committed: dict[TopicPartition, _Commit] = {}
        for tp, read in zip(partitions, reads, strict=True):
            if read is None:
                committed[tp] = _Commit(None, None)  # owned, never committed
            else:
                offset = self._offset(group, tp, read[0])
                committed[tp] = _Commit(offset, read[1], bad=offset is None)
        return members, committed, owners

    def _parse(self, group: str, topic: str, name: str) -> TopicPartition | None:
        try:
            return TopicPartition.parse(topic, name)
        except ValueError:
            self.errors["bad_znode"] += 1
            log.debug("group %s, topic %s: %r is not a b-p name", group, topic, name)
            return None

    def _offset(self, group: str, tp: TopicPartition, value: str | None) -> int | None:
        if value is None:
            return None
        text = value.strip()
        if not text.isdigit() or len(text) > 19:
            self.errors["bad_znode"] += 1
            log.debug("group %s, %s %s: %r is not an offset", group, tp.topic, tp.name, value)
            return None
        return int(text)

    def _group_state(
        self,
        group: str,
        members: frozenset[str],
        committed: Mapping[TopicPartition, _Commit],
        owners: Mapping[TopicPartition, str],
        offsets: Mapping[TopicPartition, LogOffsets],
        why: _Unknown,
        messages: Mapping[tuple[TopicPartition, int], MessageLag | None],
    ) -> GroupState:
        previous = self._members.get(group)
        if previous is not None and previous != members:
            self._rebalances[group] = self._rebalances.get(group, 0) + 1
        self._members[group] = members
        rows = []
        wall = time.time()
        for tp, (offset, at_ms, bad) in sorted(committed.items()):
            log_offsets = offsets.get(tp)
            unmoved: float | None = None
            if offset is not None and at_ms is not None:
                # Moved when the write that changed it happened; first seen: its last write.
                seen = self._moved.get((group, tp))
                if seen is None or seen[0] != offset:
                    seen = (offset, at_ms / 1000)
                    self._moved[(group, tp)] = seen
                unmoved = max(wall - seen[1], 0.0)
            lag = None
            unknown = None
            counted = None
            if offset is not None and log_offsets is not None:
                lag = log_offsets.end - offset
                counted = messages.get((tp, offset))
            elif bad:
                unknown = (
                    f"its offset znode holds no offset ({offset_path(group, tp.topic, tp.name)})"
                )
            elif offset is not None:
                unknown = why.reason(tp)
            rows.append(
                GroupPartitionState(
                    tp,
                    offset,
                    owners.get(tp),
                    None if log_offsets is None else log_offsets.start,
                    None if log_offsets is None else log_offsets.end,
                    lag,
                    unmoved,
                    at_ms,
                    unknown,
                    None if counted is None else counted.messages,
                    None if counted is None else counted.method,
                )
            )
        return GroupState(group, len(members), self._rebalances.get(group, 0), tuple(rows))

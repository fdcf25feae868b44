"""The producer's view of a Kafka 0.7 cluster: live brokers and per-topic partitions.

A 0.7.2 producer routes with a cached picture of the cluster (ZOOKEEPER §6): which brokers
are alive and where they listen, and for every topic the sorted list of
``(broker id, partition)`` pairs it may send to. Two sources exist:

* :class:`ZooKeeperCluster` (``zk.connect``) reads ``/brokers/ids`` and ``/brokers/topics``
  and keeps the picture current with child watches, applying 0.7.2's rules: the merge rule
  for topic changes (§6.2), partition 0 of every live broker for a topic nobody registered
  yet (§6.3), and a full reload after session expiry (§6.5). ZooKeeper trouble never blanks
  the picture: while the connection is down the last known view is served.
* :class:`StaticCluster` (``broker.list``) is a fixed list of brokers, each offering
  partition 0 only (§6.6).

Both publish :class:`BrokerAdded`, :class:`BrokerRemoved`, :class:`BrokerMoved` and
:class:`TopicChanged` events to every queue handed out by :meth:`Cluster.subscribe`, so a
producer can open and drop per-broker senders as the cluster changes.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from aiozk.states import States

from .backoff import Backoff
from .connection import BrokerAddress
from .errors import InvalidConfigError, KafkaError, NoBrokersError, ZooKeeperError
from .supervisor import CrashPolicy, Supervisor
from .timeouts import wait_for
from .validation import check_optional_ms
from .znodes import (
    BROKER_IDS,
    BROKER_TOPICS,
    brokers_from_values,
    registrations_from_values,
    topic_of_path,
    topic_path,
)
from .zookeeper import ZooKeeper

__all__ = [
    "BrokerAdded",
    "BrokerMoved",
    "BrokerRemoved",
    "Cluster",
    "ClusterEvent",
    "ClusterTimeoutError",
    "StaticCluster",
    "TopicChanged",
    "ZooKeeperCluster",
    "cluster_from",
    "parse_broker_list",
]

log = logging.getLogger("aiokafka07.cluster")

Partition = tuple[int, int]
"""``(broker id, partition id on that broker)``: how 0.7 names a partition."""

_DECIMAL = re.compile(r"[0-9]+")
_MAX_PORT = 65535
# Back-off between attempts to re-read the view after a failed read.
_RETRY_MIN_DELAY = 0.2
_RETRY_MAX_DELAY = 5.0


# -- parsing -------------------------------------------------------------------------


def _port(text: str) -> int | None:
    text = text.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    port = int(text)
    return port if 0 < port <= _MAX_PORT else None


def parse_broker_list(text: str) -> dict[int, BrokerAddress]:
    """The static ``broker.list`` ``"0:host:port,1:host:port"`` as ``{id: address}``.

    Each entry is ``id:host:port`` (ZOOKEEPER §6.6); surrounding whitespace and empty
    entries (a trailing comma) are ignored. Raises :class:`ValueError` saying which entry
    is wrong: missing fields, a host containing ``:`` (0.7.2 cannot express IPv6
    literals), a non-numeric id, a port outside 1-65535, or a repeated id.
    """
    brokers: dict[int, BrokerAddress] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        fields = entry.split(":")
        if len(fields) != 3:
            hint = " (a host may not contain ':')" if len(fields) > 3 else ""
            raise ValueError(f"broker.list entry {entry!r} is not 'id:host:port'{hint}")
        id_text, host, port_text = (f.strip() for f in fields)
        if not _DECIMAL.fullmatch(id_text):
            raise ValueError(f"broker.list entry {entry!r}: broker id {id_text!r} is not a number")
        port = _port(port_text)
        if not host or port is None:
            raise ValueError(
                f"broker.list entry {entry!r} needs a host and a port between 1 and {_MAX_PORT}"
            )
        broker_id = int(id_text)
        if broker_id in brokers:
            raise ValueError(f"broker.list names broker {broker_id} twice")
        brokers[broker_id] = BrokerAddress(broker_id, host, port)
    if not brokers:
        raise ValueError(f"broker.list {text!r} names no broker")
    return brokers


# -- events --------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerAdded:
    """A broker registered (or was there when the view was first read)."""

    address: BrokerAddress


@dataclass(frozen=True)
class BrokerRemoved:
    """A broker's registration vanished; its partitions left every topic with it."""

    broker_id: int


@dataclass(frozen=True)
class BrokerMoved:
    """A broker id re-registered at another address (e.g. restarted on another port)."""

    old: BrokerAddress
    new: BrokerAddress


@dataclass(frozen=True)
class TopicChanged:
    """A topic's cached partition list changed; ``partitions`` is the new sorted list
    (empty when the topic has none left)."""

    topic: str
    partitions: tuple[Partition, ...]


ClusterEvent = BrokerAdded | BrokerRemoved | BrokerMoved | TopicChanged


class ClusterTimeoutError(KafkaError, TimeoutError):
    """:meth:`Cluster.wait_for` gave up: the condition did not come true in time."""


# -- the shared base -----------------------------------------------------------------


class Cluster(abc.ABC):
    """What a producer needs to know about the cluster, whatever the source.

    Use as an async context manager (or :meth:`start` / :meth:`close`). The view is a
    cache: :attr:`brokers` and :meth:`partitions` answer at once, without I/O.
    """

    static: bool = False

    def __init__(self) -> None:
        self._brokers: dict[int, BrokerAddress] = {}
        self._subscribers: list[asyncio.Queue[ClusterEvent]] = []
        self._changed = asyncio.Event()

    async def __aenter__(self) -> Cluster:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def brokers(self) -> dict[int, BrokerAddress]:
        """The live brokers by id (a copy)."""
        return dict(self._brokers)

    @abc.abstractmethod
    def partitions(self, topic: str) -> list[Partition]:
        """The producer's candidate partitions for ``topic``, sorted numerically."""

    @abc.abstractmethod
    def topics(self) -> set[str]:
        """The topics the view knows of."""

    def no_brokers_error(self, topic: str) -> NoBrokersError:
        """The error for ``topic`` when :meth:`partitions` has no candidate for it, saying
        why as far as the view knows (the one place that message is written)."""
        return NoBrokersError(f"no live broker for topic {topic}")

    @abc.abstractmethod
    async def refresh(self) -> None:
        """Re-read the whole view from its source now."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Load the view and begin keeping it current."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop keeping the view current; the last view stays readable."""

    def subscribe(self) -> asyncio.Queue[ClusterEvent]:
        """A new queue that receives every event published from now on."""
        queue: asyncio.Queue[ClusterEvent] = asyncio.Queue()
        self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[ClusterEvent]) -> None:
        """Stop publishing to ``queue`` (a no-op for an unknown queue)."""
        with contextlib.suppress(ValueError):
            self._subscribers.remove(queue)

    async def wait_for(
        self,
        predicate: Callable[[Cluster], bool],
        timeout: float | None = None,
        *,
        timeout_ms: float | None = None,
    ) -> None:
        """Return once ``predicate(self)`` holds, checking after every change of the view;
        raise :class:`ClusterTimeoutError` if it still does not after ``timeout_ms``
        (required; ``timeout``, in seconds, is its deprecated form).
        """
        limit_ms = check_optional_ms("Cluster.wait_for", "timeout_ms", timeout_ms, timeout)
        if limit_ms is None:
            raise InvalidConfigError("Cluster.wait_for needs timeout_ms")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_ms / 1000
        while not predicate(self):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ClusterTimeoutError(
                    f"the cluster view did not satisfy {predicate!r} within {limit_ms:g} ms"
                )
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_for(self._changed.wait(), remaining)

    def _publish(self, events: Iterable[ClusterEvent]) -> None:
        """Hand ``events`` to every subscriber and wake :meth:`wait_for` callers."""
        for event in events:
            for queue in self._subscribers:
                queue.put_nowait(event)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


# -- static mode ---------------------------------------------------------------------


class StaticCluster(Cluster):
    """A fixed ``broker.list`` (ZOOKEEPER §6.6): every broker offers partition 0.

    The producer picks a broker at random and sends with partition -1, letting the broker
    choose; there is nothing to watch, so :meth:`refresh` does nothing and no events are
    ever published.
    """

    static = True

    def __init__(self, brokers: str | Mapping[int, BrokerAddress]) -> None:
        super().__init__()
        if isinstance(brokers, str):
            self._brokers = parse_broker_list(brokers)
        else:
            if not brokers:
                raise ValueError("a static cluster needs at least one broker")
            # The mapping's keys are the ids; addresses are normalised to carry them.
            self._brokers = {
                int(broker_id): BrokerAddress(int(broker_id), address.host, address.port)
                for broker_id, address in brokers.items()
            }
        self._partitions = [(broker_id, 0) for broker_id in sorted(self._brokers)]

    def __repr__(self) -> str:
        listed = ",".join(f"{a.broker_id}:{a.host}:{a.port}" for a in self._brokers.values())
        return f"<StaticCluster {listed}>"

    def partitions(self, topic: str) -> list[Partition]:
        """``(id, 0)`` for each configured broker, whatever the topic."""
        return list(self._partitions)

    def topics(self) -> set[str]:
        """Empty: a broker list says nothing about topics."""
        return set()

    async def refresh(self) -> None:
        """Nothing to re-read."""

    async def start(self) -> None:
        """Nothing to load."""

    async def close(self) -> None:
        """Nothing to stop."""


# -- ZooKeeper mode ------------------------------------------------------------------


_FULL = "full"  # re-read everything and *replace* the view (start, refresh, new session)
_RESYNC = "resync"  # re-read everything through the merge rules (same session reconnected)
_IDS = "ids"
_TOPICS = "topics"

_WorkKey = str | tuple[str, str]  # the above, or ("topic", name)


class _Work:
    """One queued re-read, plus the :meth:`ZooKeeperCluster.refresh` calls waiting for it."""

    __slots__ = ("futures", "key")

    def __init__(self, key: _WorkKey) -> None:
        self.key = key
        self.futures: list[asyncio.Future[None]] = []


def _expand(registrations: Mapping[int, int]) -> set[Partition]:
    return {(b, p) for b, count in registrations.items() for p in range(count)}


class ZooKeeperCluster(Cluster):
    """The cluster as registered in ZooKeeper, kept current with watches (ZOOKEEPER §6).

    ``zookeeper`` is a connect string (``host:port[,...][/chroot]``: the cluster opens and
    owns its session) or a :class:`~aiokafka07.zookeeper.ZooKeeper` to share (started if
    need be, never closed here).

    One background task does all ZooKeeper reading, so changes apply one at a time, in
    the order ZooKeeper reported them, and events reach subscribers in that order. Child
    watches sit on ``/brokers/ids``, ``/brokers/topics`` and every known
    ``/brokers/topics/<topic>``; each fired watch queues a re-read of that node, which
    re-arms it. Topic changes follow the merge rule: the new partition set is the cached
    set united with the freshly read one, keeping only live brokers, so entries leave only
    when their broker dies. When the connection drops, the last view keeps being served;
    once it is back everything is re-read (on a new session after expiry, the view is
    rebuilt from scratch as 0.7.2 does).
    """

    static = False

    def __init__(
        self,
        zookeeper: str | ZooKeeper,
        *,
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int = 6000,
    ) -> None:
        super().__init__()
        if isinstance(zookeeper, ZooKeeper):
            self.zookeeper = zookeeper
            self._owns_session = False
        else:
            self.zookeeper = ZooKeeper(
                zookeeper,
                session_timeout_ms=session_timeout_ms,
                connection_timeout_ms=connection_timeout_ms,
            )
            self._owns_session = True
        # topic -> sorted partitions; a topic with no usable partitions has no entry.
        self._partitions: dict[str, tuple[Partition, ...]] = {}
        # Children of /brokers/topics seen so far (each has a child watch).
        self._watched_topics: set[str] = set()
        # topic -> {broker id: partition count} as last read, dead brokers included.
        self._registered: dict[str, dict[int, int]] = {}
        self._queue: asyncio.Queue[_Work] = asyncio.Queue()
        self._queued: dict[_WorkKey, _Work] = {}
        # Owns the watch loop and the connection follower (a new one per start()).
        self._supervisor: Supervisor | None = None
        # Between failed re-reads of the view.
        self._retry = Backoff(_RETRY_MIN_DELAY, _RETRY_MAX_DELAY)
        self._started = False

    def __repr__(self) -> str:
        return (
            f"<ZooKeeperCluster {self.zookeeper.connect} brokers={sorted(self._brokers)} "
            f"topics={len(self.topics())}>"
        )

    # -- the view ----------------------------------------------------------------

    def partitions(self, topic: str) -> list[Partition]:
        """The sorted ``(broker, partition)`` candidates for ``topic`` (ZOOKEEPER §6.1-6.3).

        A topic without a cached set (nobody registered it yet, or all its entries left
        with their brokers) gets partition 0 of every live broker, stored as its set:
        every broker accepts partition 0 and creates the topic on the first write. Real
        registrations are merged into it as they appear.
        """
        cached = self._partitions.get(topic)
        if cached:
            return list(cached)
        bootstrap = tuple((broker_id, 0) for broker_id in sorted(self._brokers))
        if bootstrap:
            log.info("topic %s has no registered partitions; using %s", topic, bootstrap)
            self._partitions[topic] = bootstrap
            self._publish([TopicChanged(topic, bootstrap)])
        return list(bootstrap)

    def topics(self) -> set[str]:
        """Topics registered in ZooKeeper, plus those :meth:`partitions` bootstrapped."""
        return set(self._partitions) | self._watched_topics

    def no_brokers_error(self, topic: str) -> NoBrokersError:
        """Every live broker offers a topic (see :meth:`partitions`), so no candidate
        means no broker in the view: the error says where the view was read from, chroot
        included, as that is the usual cause (brokers registered under another one)."""
        if self._brokers:  # (never so after partitions(): nothing more to say)
            return super().no_brokers_error(topic)
        if self.zookeeper.chroot:
            hint = (
                "Check the chroot: brokers register under the chroot of their own "
                "zk.connect (at the root when it has none); use their connect string"
            )
        else:
            hint = (
                "If the brokers' zk.connect has a chroot (zk1:2181/kafka), add it to this "
                "connect string; else start a broker"
            )
        return NoBrokersError(
            f"no live broker for topic {topic}: no broker is registered under {BROKER_IDS} "
            f"in {self.zookeeper.where}. {hint}"
        )

    async def refresh(self) -> None:
        """Re-read brokers and topics now and rebuild the view from what is registered,
        as a 0.7.2 producer does before each retry (``zk.read.num.retries``). Entries kept
        only by the merge rule or by bootstrap go; the next :meth:`partitions` call
        bootstraps an unregistered topic again from the live brokers.

        Raises :class:`ZooKeeperError` if that does not finish within the connection
        timeout (ZooKeeper unreachable); the previous view stays in place and the re-read
        still happens once ZooKeeper is back.
        """
        if not self._started:
            raise ZooKeeperError("the cluster view is not started")
        future = self._enqueue(_FULL, wait=True)
        assert future is not None
        timeout = self.zookeeper.connection_timeout_ms / 1000
        try:
            await wait_for(future, timeout)
        except asyncio.TimeoutError:
            raise ZooKeeperError(
                f"could not re-read the cluster from ZooKeeper at {self.zookeeper.connect} "
                f"within {timeout} s; serving the last known view"
            ) from None

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Open (or join) the session, ensure ``/brokers/topics`` exists, load the view
        and arm the watches. Raises :class:`ZooKeeperError` if ZooKeeper cannot be used."""
        if self._started:
            return
        zk = self.zookeeper
        await zk.start()
        self._started = True
        try:
            await zk.ensure_path(BROKER_TOPICS)
            zk.add_child_watch_callback(BROKER_IDS, self._on_watch)
            zk.add_child_watch_callback(BROKER_TOPICS, self._on_watch)
            # Both keep the view current for as long as it is open: a crash (a bug; the
            # loops handle ZooKeeper errors themselves) is logged and the task restarted,
            # a bounded number of times; refresh() calls waiting on a crashed re-read fail.
            supervisor = self._supervisor = Supervisor("cluster", log)
            supervisor.spawn(
                "watch", self._run, policy=CrashPolicy.RESTART, on_crash=self._fail_waiting
            )
            supervisor.spawn("connection", self._follow_connection, policy=CrashPolicy.RESTART)
            await self.refresh()
        except BaseException:
            await self.close()
            raise
        log.info(
            "cluster view from %s: brokers %s, %d topics",
            zk.connect,
            sorted(self._brokers),
            len(self._partitions),
        )

    async def close(self) -> None:
        """Stop the background tasks and drop the watches; close the session if owned.

        The last view stays readable.
        """
        if not self._started:
            return
        self._started = False
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            await supervisor.aclose()
        for work in self._queued.values():
            for future in work.futures:
                future.cancel()
        self._queued.clear()
        self._queue = asyncio.Queue()
        zk = self.zookeeper
        for topic in self._watched_topics:
            zk.remove_child_watch_callback(topic_path(topic), self._on_watch)
        zk.remove_child_watch_callback(BROKER_IDS, self._on_watch)
        zk.remove_child_watch_callback(BROKER_TOPICS, self._on_watch)
        self._watched_topics.clear()
        if self._owns_session:
            await zk.close()

    # -- background work ---------------------------------------------------------

    def _on_watch(self, path: str) -> None:
        """A watch fired (called by aiozk via ``call_soon``): queue the matching re-read."""
        if path == BROKER_IDS:
            self._enqueue(_IDS)
        elif path == BROKER_TOPICS:
            self._enqueue(_TOPICS)
        elif (topic := topic_of_path(path)) is not None:
            self._enqueue(("topic", topic))

    def _enqueue(self, key: _WorkKey, *, wait: bool = False) -> asyncio.Future[None] | None:
        """Queue a re-read unless the same one is already queued (and not yet started)."""
        work = self._queued.get(key)
        if work is None:
            work = self._queued[key] = _Work(key)
            self._queue.put_nowait(work)
        if not wait:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        work.futures.append(future)
        return future

    def _fail_waiting(self, exc: BaseException) -> None:
        """The watch loop crashed: refresh() calls waiting for queued work fail now."""
        error = ZooKeeperError(f"updating the cluster view failed: {exc!r}")
        for work in self._queued.values():
            for future in work.futures:
                if not future.done():
                    future.set_exception(error)
        self._queued.clear()
        self._queue = asyncio.Queue()
        self._enqueue(_FULL)  # the restarted loop re-reads everything

    async def _run(self) -> None:
        """The background task: perform queued re-reads one at a time, retrying after
        failures (a failed read may leave a watch unarmed, so everything is re-read)."""
        while True:
            work = await self._queue.get()
            if self._queued.get(work.key) is work:
                del self._queued[work.key]
            try:
                await self._process(work.key)
            except asyncio.CancelledError:
                for future in work.futures:
                    future.cancel()
                raise
            except Exception as exc:
                delay = self._retry.failed()
                if isinstance(exc, ZooKeeperError):
                    error = exc
                    log.warning(
                        "reading the cluster from ZooKeeper failed (%s); retrying in %.1f s",
                        exc,
                        delay,
                    )
                else:
                    log.exception("updating the cluster view failed; retrying in %.1f s", delay)
                    error = ZooKeeperError(f"updating the cluster view failed: {exc!r}")
                for future in work.futures:
                    if not future.done():
                        future.set_exception(error)
                await asyncio.sleep(delay)
                self._enqueue(_FULL if work.key == _FULL else _RESYNC)
            else:
                self._retry.succeeded()
                for future in work.futures:
                    if not future.done():
                        future.set_result(None)

    async def _follow_connection(self) -> None:
        """Re-read everything whenever the connection comes back after a loss.

        aiozk re-sends our watches itself after reconnecting, but a new session starts
        with none of the old state, and changes made while we were away must be seen.
        """
        session = self.zookeeper.client.session
        current = session.session_id
        while True:
            await session.state.wait_for(States.SUSPENDED, States.LOST)
            log.warning("ZooKeeper connection lost; serving the last known cluster view")
            await session.state.wait_for(States.CONNECTED)
            if session.session_id == current:
                log.info("ZooKeeper connection restored; re-reading the cluster")
                self._enqueue(_RESYNC)
            else:
                log.info("new ZooKeeper session after expiry; reloading the cluster")
                current = session.session_id
                self._enqueue(_FULL)

    async def _process(self, key: _WorkKey) -> None:
        if key == _FULL:
            await self._reload()
        elif key == _RESYNC:
            await self._update_brokers()
            await self._update_topics(self._watched_topics | await self._update_topic_list())
        elif key == _IDS:
            await self._update_brokers()
        elif key == _TOPICS:
            await self._update_topics(await self._update_topic_list())
        elif isinstance(key, tuple):
            await self._update_topics({key[1]})

    # -- reading ZooKeeper -------------------------------------------------------

    async def _read_brokers(self) -> dict[int, BrokerAddress]:
        """``/brokers/ids/*`` (re-arming its child watch); unusable entries are skipped."""
        return brokers_from_values(await self.zookeeper.watch_children_data(BROKER_IDS))

    async def _read_topic_names(self) -> set[str]:
        """Children of ``/brokers/topics``, re-arming its child watch."""
        return set(await self.zookeeper.watch_children(BROKER_TOPICS))

    async def _read_registrations(self, topic: str) -> dict[int, int]:
        """``{broker id: partition count}`` under ``/brokers/topics/<topic>`` (re-arming
        its child watch); unusable entries are skipped with a warning."""
        values = await self.zookeeper.watch_children_data(topic_path(topic))
        return registrations_from_values(topic, values)

    def _watch_topic(self, topic: str) -> None:
        if topic not in self._watched_topics:
            self._watched_topics.add(topic)
            self.zookeeper.add_child_watch_callback(topic_path(topic), self._on_watch)

    def _unwatch_topic(self, topic: str) -> None:
        self._watched_topics.discard(topic)
        self._registered.pop(topic, None)
        self.zookeeper.remove_child_watch_callback(topic_path(topic), self._on_watch)

    # -- applying changes --------------------------------------------------------
    # Each update reads first and then changes the view without awaiting in between, so
    # readers never see a half-applied change.

    def _set_topic(
        self, topic: str, partitions: Iterable[Partition], events: list[ClusterEvent]
    ) -> None:
        new = tuple(sorted(partitions))
        if new == self._partitions.get(topic, ()):
            return
        if new:
            self._partitions[topic] = new
        else:
            del self._partitions[topic]
        log.info("topic %s partitions: %s", topic, list(new) or "none")
        events.append(TopicChanged(topic, new))

    def _replace_brokers(
        self, brokers: dict[int, BrokerAddress], events: list[ClusterEvent]
    ) -> tuple[set[int], set[int]]:
        """Install ``brokers``, recording events; return the (added, removed) ids."""
        old = self._brokers
        added = brokers.keys() - old.keys()
        removed = old.keys() - brokers.keys()
        self._brokers = dict(brokers)
        for broker_id in sorted(removed):
            log.info("%s is gone", old[broker_id])
            events.append(BrokerRemoved(broker_id))
        for broker_id in sorted(old.keys() & brokers.keys()):
            if old[broker_id] != brokers[broker_id]:
                new = brokers[broker_id]
                log.info("%s moved to %s:%d", old[broker_id], new.host, new.port)
                events.append(BrokerMoved(old[broker_id], brokers[broker_id]))
        for broker_id in sorted(added):
            log.info("%s joined", brokers[broker_id])
            events.append(BrokerAdded(brokers[broker_id]))
        return set(added), set(removed)

    async def _update_brokers(self) -> None:
        """``/brokers/ids`` changed: add new brokers, drop vanished ones with all their
        partitions, and report brokers registered at a new address (ZOOKEEPER §6.2)."""
        brokers = await self._read_brokers()
        events: list[ClusterEvent] = []
        added, removed = self._replace_brokers(brokers, events)
        topics = set(self._partitions) | {
            t for t, regs in self._registered.items() if added & regs.keys()
        }
        for topic in sorted(topics):
            current = set(self._partitions.get(topic, ()))
            kept = {(b, p) for b, p in current if b not in removed}
            # A (re)joining broker's partitions, as last read for this topic, come back
            # through the merge rule: the topic's watch may have fired before the broker's
            # registration was seen, and will not fire again for it.
            joined = {(b, p) for b, p in _expand(self._registered.get(topic, {})) if b in added}
            self._set_topic(topic, kept | joined, events)
        self._publish(events)

    async def _update_topic_list(self) -> set[str]:
        """``/brokers/topics`` changed: watch each topic not seen before and return those
        (for the caller to read)."""
        names = await self._read_topic_names()
        for topic in sorted(self._watched_topics - names):
            # 0.7 never deletes topics; someone removed it by hand. Forget its watch; the
            # cached partitions stay until their brokers die, as 0.7.2 leaves them.
            log.info("topic %s was deleted from ZooKeeper", topic)
            self._unwatch_topic(topic)
        new = names - self._watched_topics
        for topic in new:
            self._watch_topic(topic)  # before reading, so no change slips in between
        return new

    async def _update_topics(self, topics: set[str]) -> None:
        """``/brokers/topics/<topic>`` changed (for each of ``topics``): apply the merge
        rule (ZOOKEEPER §6.2): cached set united with the registrations just read, kept
        to live brokers."""
        ordered = sorted(topics & self._watched_topics)
        read = await asyncio.gather(*(self._read_registrations(t) for t in ordered))
        events: list[ClusterEvent] = []
        for topic, registrations in zip(ordered, read, strict=True):
            self._registered[topic] = registrations
            merged = set(self._partitions.get(topic, ())) | _expand(registrations)
            self._set_topic(topic, {(b, p) for b, p in merged if b in self._brokers}, events)
        self._publish(events)

    async def _reload(self) -> None:
        """Rebuild the view from scratch (ZOOKEEPER §6.5), re-arming every watch."""
        brokers = await self._read_brokers()
        names = await self._read_topic_names()
        for topic in names:
            self._watch_topic(topic)
        ordered = sorted(names)
        read = await asyncio.gather(*(self._read_registrations(t) for t in ordered))
        events: list[ClusterEvent] = []
        self._replace_brokers(brokers, events)
        for topic in sorted(self._watched_topics - names):
            self._unwatch_topic(topic)
        self._registered = dict(zip(ordered, read, strict=True))
        fresh = {
            topic: {(b, p) for b, p in _expand(regs) if b in brokers}
            for topic, regs in self._registered.items()
        }
        for topic in sorted(set(self._partitions) | fresh.keys()):
            self._set_topic(topic, fresh.get(topic, ()), events)
        self._publish(events)


def cluster_from(
    zookeeper: str | None,
    brokers: str | None,
    *,
    session_timeout_ms: int = 6000,
    connection_timeout_ms: int = 6000,
) -> Cluster:
    """The cluster a producer configuration names: ``zk.connect`` or ``broker.list``.

    Exactly one must be given (an empty string counts as not given); raises
    :class:`ValueError` otherwise, or when the value is malformed. The result is not
    started yet.
    """
    zookeeper = (zookeeper or "").strip() or None
    brokers = (brokers or "").strip() or None
    if zookeeper is not None and brokers is not None:
        raise ValueError("set either zk.connect or broker.list, not both")
    if zookeeper is not None:
        return ZooKeeperCluster(
            zookeeper,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
        )
    if brokers is not None:
        return StaticCluster(brokers)
    raise ValueError("set zk.connect or broker.list to find the brokers")

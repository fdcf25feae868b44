"""The bridge's run loop: recover, then copy batch after batch, one transaction each."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backoff import Backoff
from ..cluster import ClusterEvent, ZooKeeperCluster
from ..connection import BrokerAddress
from ..errors import BridgeError, KafkaError
from ..group.subscription import TopicFilter
from ..monitor.offsets import probe_broker
from ..pool import ConnectionPool
from ..protocol import validate_topic
from ..records import TopicPartition
from ..supervisor import CrashPolicy, Supervisor
from ..timeouts import wait_for
from ..validation import check_int, check_number, check_optional_int
from ..znodes import read_topic_registrations, topic_exists
from ..zookeeper import ZooKeeper
from .mapping import KeyFunction
from .mapping import Mapping as PartitionMapping
from .metrics import BridgeMetrics, LogEnds, PartitionLag, Phase, TopicCounts
from .positions import Position, headers_for
from .recovery import Checkpoint, Recovered, recover
from .source import SourceMessage, SourceReaders
from .target import OutRecord, TargetWriter

__all__ = ["Bridge"]

log = logging.getLogger("aiokafka07.bridge")


@dataclass
class _TopicCounts:
    """One topic's counts (mutable; :class:`~aiokafka07.bridge.metrics.TopicCounts` is
    the snapshot)."""

    messages: int = 0
    bytes: int = 0
    skipped: int = 0


@dataclass
class _Counts:
    """What the bridge has done in this process (its :attr:`Bridge.metrics` read them:
    the copying only adds to these, a snapshot is made when someone asks)."""

    messages: int = 0
    bytes: int = 0
    transactions: int = 0
    skipped: int = 0
    aborted: int = 0
    recoveries: int = 0
    topics: dict[str, _TopicCounts] = field(default_factory=dict)
    positions: dict[TopicPartition, Position] = field(default_factory=dict)
    #: time.time() and time.monotonic() of the last commit.
    last_commit: float | None = None
    last_commit_monotonic: float | None = None
    #: time.monotonic() when the current run began copying (None: not copying).
    copying_since: float | None = None
    phase: Phase = "idle"


#: Seconds between checks of a chosen topic the target could not take, when no change of
#: the cluster view comes sooner.
TOPIC_RECHECK = 30


@dataclass
class _Plan:
    """What one stretch of copying reads: the topics and their broker-partitions (with
    the brokers' addresses), the target's partition counts, the broker-partitions the
    run began with (``first``), and where the last plan stood (``positions``)."""

    topics: list[str]
    sources: dict[str, list[TopicPartition]]
    brokers: dict[int, BrokerAddress]
    first: set[TopicPartition]
    counts: dict[str, int]
    positions: dict[TopicPartition, Position] = field(default_factory=dict)


async def _set_when(event: asyncio.Event, then: asyncio.Event) -> None:
    """Set ``then`` once ``event`` is set."""
    await event.wait()
    then.set()


class Bridge:
    """Copies 0.7 topics into a modern Kafka cluster, exactly once (see
    :mod:`aiokafka07.bridge`).

    ``zookeeper`` is the 0.7 cluster's connect string, ``bootstrap_servers`` the target's.
    ``topics`` names the topics, or ``whitelist`` / ``blacklist`` (regular expressions,
    matched against whole names, as the group consumer takes them: ``"a, b"`` is a or b)
    selects them among those registered. ``name`` identifies
    the bridge on the target: its transactional id is ``aiokafka07-bridge-<name>`` and its
    checkpoints are records with key ``name`` in ``checkpoint_topic``. ``key`` extracts a
    record key from each message (default: no key). ``start`` is where broker-partitions
    without a checkpoint begin: ``"earliest"`` or ``"latest"``. ``create_partitions``
    creates missing target topics with that many partitions (None: a missing topic is an
    error). ``producer_options`` / ``consumer_options`` are passed to aiokafka's producer /
    consumer as they are. ``lag_interval_ms`` is how often the 0.7 log ends are read
    for :attr:`metrics`.
    """

    def __init__(
        self,
        zookeeper: str,
        bootstrap_servers: str,
        topics: Sequence[str] = (),
        *,
        whitelist: str | None = None,
        blacklist: str | None = None,
        name: str = "bridge",
        key: KeyFunction | None = None,
        start: str = "earliest",
        checkpoint_topic: str = "aiokafka07-bridge-checkpoints",
        batch_size: int = 10000,
        linger_ms: float = 100.0,
        create_partitions: int | None = None,
        replication_factor: int = 1,
        request_timeout_ms: float = 30000.0,
        lag_interval_ms: float = 1000.0,
        producer_options: Mapping[str, Any] | None = None,
        consumer_options: Mapping[str, Any] | None = None,
    ) -> None:
        if bool(topics) + (whitelist is not None) + (blacklist is not None) != 1:
            raise BridgeError("name the topics, or give a whitelist or a blacklist (one of them)")
        if start not in ("earliest", "latest"):
            raise BridgeError(f"start must be 'earliest' or 'latest', not {start!r}")
        if not lag_interval_ms > 0:
            raise BridgeError(f"lag_interval_ms must be above 0, not {lag_interval_ms}")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", name):
            raise BridgeError(f"bridge name {name!r}: letters, digits, '.', '_', '-' only")
        self.zookeeper = zookeeper
        self.bootstrap_servers = bootstrap_servers
        self.topics = [validate_topic(topic) for topic in topics]
        # As the group consumer takes a filter: Java's normalisation ("a, b" is a or b),
        # whole names, InvalidTopicFilterError for a bad regex.
        self.filter: TopicFilter | None = None
        if whitelist is not None:
            self.filter = TopicFilter.parse(whitelist, whitelist=True)
        elif blacklist is not None:
            self.filter = TopicFilter.parse(blacklist, whitelist=False)
        check_int("batch_size", batch_size, minimum=1)
        check_number("linger_ms", linger_ms, minimum=0)
        check_number("request_timeout_ms", request_timeout_ms, minimum=0, above=True)
        check_optional_int("create_partitions", create_partitions, minimum=1)
        check_int("replication_factor", replication_factor, minimum=1)
        self.name = name
        self.key = key
        self.start = start
        self.checkpoint_topic = checkpoint_topic
        self.batch_size = batch_size
        self.linger = linger_ms / 1000
        self.create_partitions = create_partitions
        self.replication_factor = replication_factor
        self.request_timeout_ms = request_timeout_ms
        self.producer_options = dict(producer_options or {})
        self.consumer_options = dict(consumer_options or {})
        self.lag_interval_ms = lag_interval_ms
        self._counts = _Counts()
        #: Messages gathered past a transaction's batch_size, first in the next one.
        self._carry: list[SourceMessage] = []
        self._log_ends: dict[TopicPartition, int] = {}
        self._stop: asyncio.Event | None = None
        #: The current run's chosen topics the target cannot take, with why (see
        #: _watch_registrations).
        self._refused: dict[str, str] = {}

    @property
    def metrics(self) -> BridgeMetrics:
        """The counters of this process and the lag of every 0.7 broker-partition, as
        of now (a snapshot: read it on the bridge's event loop)."""
        counts, ends = self._counts, self._log_ends
        phase = counts.phase
        if phase == "copying" and self._stop is not None and self._stop.is_set():
            phase = "stopping"
        age = None
        since = counts.copying_since
        if counts.last_commit_monotonic is not None and (
            since is None or counts.last_commit_monotonic > since
        ):
            since = counts.last_commit_monotonic
        if since is not None and phase in ("copying", "stopping"):
            age = max(time.monotonic() - since, 0.0)
        return BridgeMetrics(
            messages=counts.messages,
            bytes=counts.bytes,
            transactions=counts.transactions,
            skipped=counts.skipped,
            partitions={
                source: PartitionLag(position, ends.get(source))
                for source, position in counts.positions.items()
            },
            topics={
                topic: TopicCounts(c.messages, c.bytes, c.skipped)
                for topic, c in sorted(counts.topics.items())
            },
            aborted=counts.aborted,
            recoveries=counts.recoveries,
            last_commit=counts.last_commit,
            commit_age=age,
            phase=phase,
            topics_not_copied=dict(self._refused),
        )

    def _chosen(self, registered: set[str]) -> list[str]:
        if self.filter is None:
            return sorted(self.topics)
        return sorted(t for t in registered if self.filter.allows(t))

    async def run(
        self,
        stop: asyncio.Event | None = None,
        *,
        on_batch: Callable[[BridgeMetrics], object] | None = None,
    ) -> BridgeMetrics:
        """Copy until ``stop`` is set (then end after the transaction in progress), or
        until something fails (a :class:`~aiokafka07.errors.BridgeError` or the 0.7
        client's error). ``on_batch(metrics)`` is called after each committed
        transaction. Returns the last :attr:`metrics`.

        The broker-partitions copied are those the brokers registered at the start. When
        a broker registers more of the bridged topics' broker-partitions while the bridge
        runs (a broker added to the 0.7 cluster, or given more partitions), or those of a
        new topic a whitelist or blacklist chooses, the bridge ends its transaction in
        progress, recovers as at a start, and copies them too, from their log start (they
        began after this run did), exactly once like the rest.
        """
        stop = stop or asyncio.Event()
        self._stop = stop
        stats = self._counts
        stats.phase = "starting"
        stats.copying_since = None
        ended: Phase = "failed"
        try:
            cluster = ZooKeeperCluster(self.zookeeper)
            async with cluster:
                topics = self._chosen(cluster.topics())
                if not topics:
                    raise BridgeError("no 0.7 topic matches")
                for topic in topics:
                    stats.topics.setdefault(topic, _TopicCounts())
                # Subscribed before the registrations are read: a broker registering a
                # topic after that read is seen (see _watch_registrations).
                changes = cluster.subscribe()
                # The broker-partitions are taken here, as the brokers registered them
                # (not the producers' partition 0 of every broker for a topic none
                # registered): a topic with none would be "copied" from nothing for as
                # long as the run lasts.
                sources = {t: await _registered(cluster.zookeeper, t) for t in topics}
                empty = [t for t in topics if not sources[t]]
                if empty:
                    raise BridgeError(
                        f"no live broker holds {', '.join(empty)} in ZooKeeper at "
                        f"{self.zookeeper!r}: their brokers are down or not registered yet "
                        "(their registrations are ephemeral, gone with their sessions); "
                        "start the bridge once they are up"
                    )
                first = {s for t in topics for s in sources[t]}
                brokers = cluster.brokers
                async with TargetWriter(
                    self.bootstrap_servers,
                    f"aiokafka07-bridge-{self.name}",
                    request_timeout_ms=self.request_timeout_ms,
                    options=self.producer_options,
                ) as writer:
                    counts = await self._target_partitions(writer, topics)
                    log.info("target partitions: %s", counts)
                    self._refused = {}
                    plan: _Plan | None = _Plan(topics, sources, brokers, first, counts)
                    while plan is not None:
                        plan = await self._copy_plan(plan, cluster, changes, writer, stop, on_batch)
            ended = "stopped"
        except asyncio.CancelledError:
            ended = "stopped"
            raise
        finally:
            stats.phase = ended
            stats.copying_since = None
        return self.metrics

    async def _copy_plan(
        self,
        plan: _Plan,
        cluster: ZooKeeperCluster,
        changes: asyncio.Queue[ClusterEvent],
        writer: TargetWriter,
        stop: asyncio.Event,
        on_batch: Callable[[BridgeMetrics], object] | None,
    ) -> _Plan | None:
        """Recover, read every broker-partition of ``plan`` and copy until ``stop`` is
        set (None), or until brokers registered more broker-partitions of its topics:
        then the next plan, once the transaction in progress ended."""
        stats = self._counts
        stats.phase = "starting"
        stats.copying_since = None
        # Messages gathered past a transaction's batch size belong to this plan's readers.
        self._carry = []
        topics, sources, brokers, counts = plan.topics, plan.sources, plan.brokers, plan.counts
        supervisor = Supervisor(f"bridge-{self.name}", log)
        try:
            recovered = await recover(
                self.bootstrap_servers,
                self.checkpoint_topic,
                self.name.encode(),
                counts,
                request_timeout_ms=self.request_timeout_ms,
                options=self.consumer_options,
            )
            self._check_counts(recovered.checkpoint, counts)
            stats.recoveries += 1
            readers = SourceReaders(
                supervisor, queue_size=max(4, 2 * sum(map(len, sources.values())))
            )
            # Where the last plan stood for what no checkpoint holds yet (it began there,
            # and nothing of it was committed), else the checkpoint's.
            positions = dict(plan.positions)
            positions.update(recovered.checkpoint.positions)
            for topic in topics:
                for source in sources[topic]:
                    if source.broker_id not in brokers:
                        raise BridgeError(f"broker {source.broker_id} of {topic} is not registered")
            fresh = [s for t in topics for s in sources[t] if s not in positions]
            # Those registered after the run began are copied from their log start
            # whatever ``start`` says: everything in them came after it.
            late = {s for s in fresh if s not in plan.first}
            positions.update(await self._first_positions(fresh, brokers, late))
            for topic in topics:
                for source in sources[topic]:
                    readers.start(source, brokers[source.broker_id], positions[source])
            mappings = {t: PartitionMapping(sources[t], counts[t]) for t in topics}
            stats.positions = positions
            log_ends = LogEnds(supervisor, interval_ms=self.lag_interval_ms)
            self._log_ends = log_ends.ends
            log_ends.watch(
                {
                    brokers[b]: [s for s in positions if s.broker_id == b]
                    for b in {s.broker_id for s in positions}
                }
            )
            # Copying ends after the transaction in progress when ``stop`` is set, or
            # when the watch found more broker-partitions (``grown``).
            halt = asyncio.Event()
            grown: list[_Plan] = []
            supervisor.spawn("stop", _set_when(stop, halt), policy=CrashPolicy.LOG)
            supervisor.spawn(
                "registrations",
                self._watch_registrations(cluster, changes, writer, plan, grown, halt),
                policy=CrashPolicy.LOG,
            )
            log.info("copying %s from %d broker-partitions", topics, len(positions))
            stats.phase = "copying"
            stats.copying_since = time.monotonic()
            await self._copy(
                writer, readers, recovered, positions, counts, mappings, halt, on_batch
            )
        finally:
            await supervisor.aclose()
        if stop.is_set() or not grown:
            return None
        grown[0].positions = positions
        return grown[0]

    async def _watch_registrations(
        self,
        cluster: ZooKeeperCluster,
        changes: asyncio.Queue[ClusterEvent],
        writer: TargetWriter,
        plan: _Plan,
        grown: list[_Plan],
        halt: asyncio.Event,
    ) -> None:
        """Wait until brokers registered broker-partitions the plan does not read: more
        of its topics', or (with a whitelist or blacklist) those of a topic the filter
        chooses and the target can take (it exists there, or ``create_partitions``
        creates it). Registrations are re-read from ZooKeeper after each change of the
        cluster view; then the next plan goes in ``grown`` and ``halt`` is set.

        A chosen topic the target cannot take is logged as an error, once, and tried
        again at each change and every :data:`TOPIC_RECHECK` seconds. A failed read is
        tried again at the next change, or after a backoff (up to 10 s) if none comes;
        the first failure of a run of them is logged, and the read that ends it."""
        known = {s for t in plan.topics for s in plan.sources[t]}
        retry = Backoff(0.5, 10.0)
        again: float | None = None  # after a failed read: when to read anyway
        while True:
            wait = again if again is not None else (TOPIC_RECHECK if self._refused else None)
            if wait is None:
                await changes.get()
            else:
                with contextlib.suppress(asyncio.TimeoutError):
                    await wait_for(changes.get(), wait)
            while not changes.empty():  # one read for a burst of changes
                changes.get_nowait()
            try:
                now = {t: await _registered(cluster.zookeeper, t) for t in plan.topics}
                added: dict[str, list[TopicPartition]] = {}
                for topic in self._chosen(cluster.topics()):
                    if topic not in now:
                        registered = await _registered(cluster.zookeeper, topic)
                        if registered:
                            added[topic] = registered
            except (KafkaError, OSError) as exc:
                if again is None:
                    log.warning(
                        "reading the broker-partitions of %s from ZooKeeper at %r failed "
                        "(%s); trying again at the next change, or after a backoff",
                        plan.topics,
                        self.zookeeper,
                        exc,
                    )
                again = retry.failed()
                continue
            if again is not None:
                log.info("read the broker-partitions of %s from ZooKeeper again", plan.topics)
                again = None
                retry.succeeded()
            counts = dict(plan.counts)
            for topic in sorted(added):
                try:
                    counts.update(await self._target_partitions(writer, [topic]))
                except BridgeError as exc:
                    if topic not in self._refused:
                        log.error(
                            "topic %s is registered in the 0.7 cluster and chosen by the "
                            "bridge's filter, but is not copied: %s (tried again at each "
                            "change and every %g s)",
                            topic,
                            exc,
                            TOPIC_RECHECK,
                        )
                    self._refused[topic] = str(exc)
                    del added[topic]
                    continue
                if self._refused.pop(topic, None) is not None:
                    log.info("topic %s can be copied now", topic)
            new = sorted(s for t in plan.topics for s in now[t] if s not in known)
            new += [s for topic in sorted(added) for s in added[topic]]
            if not new:
                continue
            brokers = {**plan.brokers, **cluster.brokers}
            if any(s.broker_id not in brokers for s in new):
                continue  # its broker's registration comes with a later change
            log.info(
                "brokers registered %d more broker-partitions (%s): copying them too, "
                "after the transaction in progress",
                len(new),
                ", ".join(f"{s.topic}/{s.broker_id}-{s.partition}" for s in new),
            )
            sources = {t: sorted(set(plan.sources[t]) | set(now[t])) for t in plan.topics}
            sources.update(added)
            for topic in added:
                self._counts.topics.setdefault(topic, _TopicCounts())
            topics = sorted([*plan.topics, *added])
            grown.append(_Plan(topics, sources, brokers, plan.first, counts))
            halt.set()
            return

    async def _target_partitions(self, writer: TargetWriter, topics: list[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for topic in topics:
            count = await writer.partition_count(topic)
            if count is None:
                if self.create_partitions is None:
                    raise BridgeError(
                        f"topic {topic} does not exist on the target (create it, or let the "
                        "bridge create it with a partition count)"
                    )
                await writer.create_topic(topic, self.create_partitions, self.replication_factor)
                count = await writer.partition_count(topic)
                if count is None:
                    raise BridgeError(f"topic {topic} was created but the target does not show it")
            counts[topic] = count
        return counts

    @staticmethod
    def _check_counts(checkpoint: Checkpoint, counts: Mapping[str, int]) -> None:
        for topic, count in counts.items():
            before = checkpoint.partitions.get(topic)
            if before is not None and before != count:
                raise BridgeError(
                    f"target topic {topic} has {count} partitions, the bridge mapped keys to "
                    f"{before}: changing the count would move keys between partitions"
                )

    async def _first_positions(
        self,
        sources: Sequence[TopicPartition],
        brokers: Mapping[int, BrokerAddress],
        late: Collection[TopicPartition],
    ) -> dict[TopicPartition, Position]:
        """Where broker-partitions without a checkpoint begin (``start``: their log start
        or end; those in ``late`` at their log start), one pipelined OFFSETS probe per
        broker; raises what a broker failed with."""
        by_broker: dict[int, list[TopicPartition]] = {}
        for source in sources:
            by_broker.setdefault(source.broker_id, []).append(source)
        if not by_broker:
            return {}
        async with ConnectionPool(request_timeout_ms=self.request_timeout_ms) as pool:
            probes = await asyncio.gather(
                *(probe_broker(pool, brokers[b], parts) for b, parts in by_broker.items())
            )
        first: dict[TopicPartition, Position] = {}
        for probe in probes:
            if probe.error is not None:
                raise probe.error
            for source, offsets in probe.offsets.items():
                early = self.start == "earliest" or source in late
                offset = offsets.start if early else offsets.end
                first[source] = Position(offset, 0)
        return first

    async def _copy(
        self,
        writer: TargetWriter,
        readers: SourceReaders,
        recovered: Recovered,
        positions: dict[TopicPartition, Position],
        counts: dict[str, int],
        mappings: Mapping[str, PartitionMapping],
        stop: asyncio.Event,
        on_batch: Callable[[BridgeMetrics], object] | None,
    ) -> None:
        written = recovered.written
        targets = dict(recovered.checkpoint.targets)
        targets.update(recovered.ends)
        stats = self._counts
        key_of = self.key
        while not stop.is_set():
            batch = await self._gather(readers, stop)
            if readers.failure is not None:
                raise readers.failure
            if not batch:
                continue
            records: list[OutRecord] = []
            # Per topic: messages and bytes of this batch, counted once it is committed.
            added: dict[str, list[int]] = {}
            for message in batch:
                source, record, position = message
                key = key_of(record.value) if key_of is not None else None
                partition = mappings[source.topic].partition(key, source)
                where = (source.topic, partition)
                if written:
                    done = written.get(where, {}).get(source)
                    if done is not None and position <= done:
                        stats.skipped += 1
                        stats.topics[source.topic].skipped += 1
                        continue
                records.append(
                    OutRecord(
                        source.topic, partition, key, record.value, headers_for(source, position)
                    )
                )
                sums = added.get(source.topic)
                if sums is None:
                    sums = added[source.topic] = [0, 0]
                sums[0] += 1
                sums[1] += len(record.value)
            after = dict(positions)
            for message in batch:
                after[message.source] = message.position
            # Records found at recovery that the copying has not reached yet stay to be
            # skipped after the next recovery too (its tail reads start past them).
            pending = {}
            for where, found in written.items():
                ahead = {s: p for s, p in found.items() if p > after.get(s, Position(-1))}
                if ahead:
                    pending[where] = ahead
            written = pending
            checkpoint = Checkpoint(after, {}, dict(counts), pending)

            def encode(ends: Mapping[tuple[str, int], int], c: Checkpoint = checkpoint) -> bytes:
                c.targets = dict(ends)
                return c.encode()

            aborted = writer.aborted
            try:
                targets = await writer.write(
                    records, self.checkpoint_topic, self.name.encode(), targets, encode
                )
            finally:
                stats.aborted += writer.aborted - aborted
            positions.update(after)
            for topic, (messages, size) in added.items():
                per_topic = stats.topics[topic]
                per_topic.messages += messages
                per_topic.bytes += size
                stats.messages += messages
                stats.bytes += size
            stats.transactions += 1
            stats.last_commit = time.time()
            stats.last_commit_monotonic = time.monotonic()
            if on_batch is not None:
                try:
                    on_batch(self.metrics)
                except Exception:
                    log.exception("the bridge's on_batch callback failed")

    async def _gather(self, readers: SourceReaders, stop: asyncio.Event) -> list[SourceMessage]:
        """Up to batch_size messages: waits for the first fetch (until stop or a reader
        fails), then lingers for more; what a fetch brings past batch_size is carried
        to the next call."""
        queue = readers.queue
        batch, self._carry = self._carry, []
        if stop.is_set():
            return []
        if not batch:
            waits = [
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(readers.failed.wait()),
            ]
            try:
                while queue.empty() and not stop.is_set() and not readers.failed.is_set():
                    getter = asyncio.ensure_future(queue.get())
                    done, _ = await asyncio.wait(
                        [getter, *waits], return_when=asyncio.FIRST_COMPLETED
                    )
                    if getter in done:
                        batch.extend(getter.result())
                        break
                    getter.cancel()
                    if getter.done() and not getter.cancelled():
                        batch.extend(getter.result())
            finally:
                for w in waits:
                    w.cancel()
            if not batch and queue.empty():
                return batch
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.linger
        while len(batch) < self.batch_size:
            try:
                batch.extend(queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            remaining = deadline - loop.time()
            if remaining <= 0 or stop.is_set():
                break
            try:
                batch.extend(await wait_for(queue.get(), remaining))
            except asyncio.TimeoutError:
                break
        if len(batch) > self.batch_size:
            batch, self._carry = batch[: self.batch_size], batch[self.batch_size :]
        return batch


async def _registered(zookeeper: ZooKeeper, topic: str) -> list[TopicPartition]:
    """The broker-partitions of ``topic`` its brokers registered (ZOOKEEPER §2), sorted;
    none if no broker registered it or every registration left with its broker."""
    if not await topic_exists(zookeeper, topic):
        return []
    registered = await read_topic_registrations(zookeeper, topic)
    return [
        TopicPartition(topic, broker_id, partition)
        for broker_id, count in sorted(registered.items())
        for partition in range(count)
    ]

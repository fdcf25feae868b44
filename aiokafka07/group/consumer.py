"""The balanced group consumer, sharing groups with Java 0.7.2 consumers (ZOOKEEPER §3-§5).

A member registers under ``/consumers/<group>/ids``, computes the 0.7.2 range assignment
from the same ZooKeeper view as every other member, claims owner nodes, and fetches the
partitions it owns, one MULTIFETCH per broker. Records come out of one or more streams;
each stream iterates the partitions of one thread id. Rebalances run in the background
when the group's members or the subscribed topics' registrations change.

Where this differs from 0.7.2, on purpose (all compatible with Java members in the group):

* owner nodes are claimed *before* the starting offset is read, so a new owner never starts
  from an offset the previous owner is about to move (0.7.2 reads first: duplicates);
* partitions a member keeps across a rebalance stay owned and keep fetching; only revoked
  ones are released (0.7.2 drops everything and re-claims);
* after a ZooKeeper session expiry the member re-registers, rebalances and commits the
  progress of the partitions it still owns (0.7.2 loses that progress);
* with a topic filter and several streams, data is spread over all streams (0.7.2's
  KAFKA-550 sends everything to the last one);
* a failed rebalance is retried after ``rebalance_backoff_ms`` (100 ms, not 2000 ms) until it
  succeeds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from .. import znodes
from ..connection import BrokerAddress
from ..errors import (
    KafkaConnectionError,
    KafkaError,
    OffsetOutOfRangeError,
    ProtocolError,
    ZooKeeperError,
    error_for_code,
)
from ..fetch_size import FetchSizer, decompression_bound
from ..pool import ConnectionPool
from ..protocol import EARLIEST, LATEST, FetchRequest, decode_messages_into
from ..records import ConsumerRecord, TopicPartition
from ..znodes import (
    GroupRegistry,
    consumer_id,
    read_brokers,
    read_topic_registrations,
    read_topics,
    thread_ids,
)
from ..zookeeper import ZooKeeper
from .assignment import assign, group_threads, partition_names
from .subscription import Subscription

__all__ = ["Consumer", "RebalanceListener", "Stream"]

log = logging.getLogger("aiokafka07.group")


class RebalanceListener(Protocol):
    """Told about partitions around a rebalance (both coroutines are awaited)."""

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class _Owned:
    """What the member knows about one owned partition."""

    __slots__ = (
        "committed",
        "consumed",
        "epoch",
        "fetch_offset",
        "halted",
        "sizer",
        "stream",
        "thread",
        "tp",
    )

    def __init__(
        self, tp: TopicPartition, thread: str, stream: Stream, offset: int, sizer: FetchSizer
    ) -> None:
        self.tp = tp
        self.thread = thread
        self.stream = stream
        self.fetch_offset = offset  # where the next fetch starts
        self.consumed = offset  # the next offset after the last record handed out
        self.committed: int | None = None
        self.sizer = sizer  # the fetch size, grown for a large message
        self.epoch = 0  # bumped by seek(): answers of fetches sent before are dropped
        # An error was queued for the application: not fetched again until seek().
        self.halted = False


_NO_OWNER: Any = None  # the owner slot of an error that belongs to no partition


class Stream:
    """Records of the partitions one thread id owns, in fetch order per partition."""

    def __init__(self, consumer: Consumer, index: int) -> None:
        self._consumer = consumer
        self.index = index
        self._chunks: collections.deque[
            tuple[_Owned, list[ConsumerRecord] | BaseException, int]
        ] = collections.deque()
        self._current: list[ConsumerRecord] = []
        self._owner: _Owned | None = None
        self._pos = 0
        self.buffered_bytes = 0
        self._ready = asyncio.Event()

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> ConsumerRecord:
        while True:
            record = self.next_nowait()
            if record is not None:
                return record
            if self._consumer.closed:
                raise StopAsyncIteration
            self._ready.clear()
            timeout = self._consumer.consumer_timeout
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except asyncio.TimeoutError:
                raise StopAsyncIteration from None

    def next_nowait(self) -> ConsumerRecord | None:
        """The next record if one is buffered (raises a fetch error queued for it)."""
        return self._next(raise_errors=True)

    def _next(self, *, raise_errors: bool) -> ConsumerRecord | None:
        """The next record; at a queued error, raise it or (``raise_errors=False``)
        leave it queued and return None."""
        if self._consumer.closed:
            return None  # closing commits what was handed out; nothing more is
        while True:
            if self._pos < len(self._current):
                record = self._current[self._pos]
                self._pos += 1
                assert self._owner is not None
                self._owner.consumed = record.offset
                return record
            if not self._chunks:
                return None
            if not raise_errors and isinstance(self._chunks[0][1], BaseException):
                return None
            owner, records, size = self._chunks.popleft()
            self.buffered_bytes -= size
            self._consumer._room.set()
            if isinstance(records, BaseException):
                raise records
            self._owner, self._current, self._pos = owner, records, 0

    def _put(self, owner: _Owned, records: list[ConsumerRecord] | BaseException, size: int) -> None:
        self._chunks.append((owner, records, size))
        self.buffered_bytes += size
        self._ready.set()
        self._consumer._data.set()

    def _put_error(self, exc: BaseException) -> None:
        self._chunks.append((_NO_OWNER, exc, 0))
        self._ready.set()
        self._consumer._data.set()

    def _drop(self, partitions: set[TopicPartition]) -> None:
        """Forget what is buffered for ``partitions`` (they are revoked or sought)."""
        kept = collections.deque(
            c for c in self._chunks if c[0] is _NO_OWNER or c[0].tp not in partitions
        )
        self.buffered_bytes = sum(size for _, _, size in kept)
        self._chunks = kept
        if self._owner is not None and self._owner.tp in partitions:
            self._current, self._pos, self._owner = [], 0, None
        self._consumer._room.set()


class Consumer:
    """A member of a consumer group (an async context manager, and an async iterator).

    ``topics`` are names (``streams`` streams each) or a map topic → streams; or give
    ``whitelist`` / ``blacklist`` (a 0.7.2 topic filter) instead. ``auto_offset_reset`` is
    ``"smallest"`` (0.7.2's default), ``"largest"`` or ``"error"``.

    Errors of a partition's data or fetches (a corrupt message, a message larger than
    ``max_fetch_size``, an offset that is not a message start, compressed data over
    ``max_decompressed_bytes`` (default: ``max_fetch_size``, at least 64 MiB), a broker
    error code such as InvalidPartition, OffsetOutOfRange with ``"error"``) come out of
    iteration, :meth:`getone` and :meth:`getmany` as typed
    :class:`~aiokafka07.errors.KafkaError` subclasses naming the partition and offset,
    after the records fetched before them. That partition is then not fetched again
    until :meth:`seek` (e.g. past a corrupt message) or a rebalance gives it to a new
    owner; the others go on.

    With ``shallow`` (0.7.2's ``shallowiterator.enable``) a compressed wrapper is handed out
    as one record, not decompressed: its value is the compressed payload, its
    ``attributes`` name the codec and its offset is the wrapper's end. A mirror forwards
    such records unchanged with :meth:`Producer.send_message
    <aiokafka07.producer.Producer.send_message>`.
    """

    def __init__(
        self,
        *topics: str | Mapping[str, int],
        group: str,
        zookeeper: str,
        streams: int = 1,
        whitelist: str | None = None,
        blacklist: str | None = None,
        auto_offset_reset: str = "smallest",
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 10000,
        consumer_timeout_ms: float | None = None,
        fetch_size: int = 1048576,
        max_fetch_size: int = 64 * 1048576,
        max_decompressed_bytes: int | None = None,
        max_prefetch_bytes: int = 4 * 1048576,
        fetch_backoff_ms: float = 100.0,
        rebalance_backoff_ms: float = 100.0,
        listener: RebalanceListener | None = None,
        consumer_id_suffix: str | None = None,
        session_timeout_ms: int = 6000,
        request_timeout: float = 30.0,
        shallow: bool = False,
        connection_timeout_ms: int = 6000,
    ) -> None:
        if auto_offset_reset not in ("smallest", "largest", "error"):
            raise ValueError("auto_offset_reset must be smallest, largest or error")
        self.subscription = _subscription(topics, streams, whitelist, blacklist)
        self.group = group
        self.connect = zookeeper
        self.auto_offset_reset = auto_offset_reset
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self.consumer_timeout = None if consumer_timeout_ms is None else consumer_timeout_ms / 1000
        self.fetch_size = fetch_size
        self.max_fetch_size = max_fetch_size
        self.max_decompressed_bytes = decompression_bound(max_fetch_size, max_decompressed_bytes)
        self.max_prefetch_bytes = max_prefetch_bytes
        self.fetch_backoff = fetch_backoff_ms / 1000
        self.rebalance_backoff = rebalance_backoff_ms / 1000
        self.listener = listener
        self.shallow = shallow
        self.consumer_id = consumer_id(group, suffix=consumer_id_suffix)
        stream_count = max(self.subscription.streams_per_topic([]).values(), default=streams)
        self.streams = [Stream(self, i) for i in range(max(stream_count, streams))]
        self._zk = ZooKeeper(
            zookeeper,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
        )
        self._registry = GroupRegistry(self._zk, group)
        self._pool = ConnectionPool(request_timeout=request_timeout)
        self._owned: dict[TopicPartition, _Owned] = {}
        self._brokers: dict[int, BrokerAddress] = {}
        self._fetchers: dict[int, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_needed = asyncio.Event()
        self._rebalanced = asyncio.Event()
        self._room = asyncio.Event()
        self._data = asyncio.Event()
        self._lock = asyncio.Lock()
        self._watched: set[str] = set()
        self._next_stream = 0
        self.closed = False
        self.rebalances = 0
        self._members = 0  # group size seen by the last rebalance (for its log line)

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Join the group: register, take part in a first rebalance, start fetching."""
        await self._zk.start()
        try:
            self._zk.add_session_listener(self._new_session)
            await self._registry.register(self.consumer_id, self.subscription.as_registration())
            self._zk.add_child_watch_callback(znodes.ids_path(self.group), self._trigger)
            await self._rebalance()
        except BaseException:
            # Leave no registration or owner behind: they are ephemeral, and go with the
            # session (others could never claim partitions a failed member holds).
            self.closed = True
            await self._stop_fetchers()
            await self._zk.close()
            await self._pool.close()
            raise
        self._tasks.append(
            asyncio.create_task(self._coordinate(), name=f"{self.consumer_id}-rebalance")
        )
        if self.auto_commit:
            self._tasks.append(
                asyncio.create_task(self._auto_commit(), name=f"{self.consumer_id}-commit")
            )
        log.info(
            "%s joined group %s at %s with subscription %s, %d streams, auto_offset_reset %s, "
            "auto_commit %s",
            self.consumer_id,
            self.group,
            self.connect,
            self.subscription.registration(),
            len(self.streams),
            self.auto_offset_reset,
            f"every {self.auto_commit_interval * 1000:g} ms" if self.auto_commit else "off",
        )

    async def close(self, *, commit: bool | None = None) -> None:
        """Leave the group: stop fetching, commit, delete our ids and owner nodes, close
        the session. Iterators end.

        ``commit`` defaults to ``auto_commit``, as 0.7.2's shutdown commits only with
        ``autocommit.enable`` (ZOOKEEPER §5.4). ``commit=False`` leaves the committed
        offsets as they are: for a caller that could not finish handling what it was
        handed (a mirror whose producer failed), so the group resumes from the last
        progress it did record; ``commit=True`` commits what was handed out.
        """
        if self.closed:
            return
        if commit is None:
            commit = self.auto_commit
        self.closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stop_fetchers()
        try:
            if commit:
                await self.commit()
            for tp in list(self._owned):
                await self._registry.release(tp.topic, tp.name)
            await self._registry.unregister(self.consumer_id)
        except KafkaError as exc:  # the session closes next: ZooKeeper cleans up anyway
            log.warning("%s: leaving the group cleanly failed: %s", self.consumer_id, exc)
        finally:
            await self._zk.close()
            await self._pool.close()
            for stream in self.streams:
                stream._ready.set()
            self._data.set()
        log.info("%s left group %s", self.consumer_id, self.group)

    # -- consuming ---------------------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record of any stream (round-robin over streams)."""
        while True:
            for _ in range(len(self.streams)):
                stream = self.streams[self._next_stream]
                self._next_stream = (self._next_stream + 1) % len(self.streams)
                record = stream.next_nowait()
                if record is not None:
                    return record
            if self.closed:
                raise StopAsyncIteration
            self._data.clear()
            try:
                await asyncio.wait_for(self._data.wait(), self.consumer_timeout)
            except asyncio.TimeoutError:
                raise StopAsyncIteration from None

    async def getone(self) -> ConsumerRecord:
        """The next record (waits; raises StopAsyncIteration after the consumer timeout)."""
        return await self.__anext__()

    async def getmany(
        self, timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records available within ``timeout_ms``, grouped by partition."""
        result: dict[TopicPartition, list[ConsumerRecord]] = {}
        count = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while max_records is None or count < max_records:
            record = None
            for stream in self.streams:
                # An error is raised only before any record: the records gathered so far
                # are handed out (they count as consumed), the error comes next call.
                record = stream._next(raise_errors=not count)
                if record is not None:
                    break
            if record is None:
                left = deadline - loop.time()
                if count or left <= 0 or self.closed:
                    break
                self._data.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._data.wait(), left)
                continue
            tp = TopicPartition(record.topic, record.broker_id or 0, record.partition)
            result.setdefault(tp, []).append(record)
            count += 1
        return result

    def assignment(self) -> set[TopicPartition]:
        return set(self._owned)

    def position(self, tp: TopicPartition) -> int | None:
        """The next offset to consume (what a commit would write)."""
        owned = self._owned.get(tp)
        return None if owned is None else owned.consumed

    async def committed(self, tp: TopicPartition) -> int | None:
        return await self._registry.committed(tp.topic, tp.name)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Consume ``tp`` from ``offset`` on (it must be owned); buffered records and
        errors of it are dropped, and a partition stopped by an error is fetched again."""
        owned = self._owned.get(tp)
        if owned is None:
            raise KafkaError(f"{tp.topic}/{tp.name} is not assigned to this consumer")
        owned.epoch += 1
        owned.halted = False
        owned.fetch_offset = owned.consumed = offset
        owned.stream._drop({tp})

    async def commit(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Write the consumed offsets (of ``partitions``, or all owned) to ZooKeeper."""
        targets = list(self._owned) if partitions is None else list(partitions)
        for tp in targets:
            owned = self._owned.get(tp)
            if owned is None or owned.consumed == owned.committed:
                continue
            offset = owned.consumed  # consumption may go on while ZooKeeper answers
            await self._registry.commit(tp.topic, tp.name, offset)
            owned.committed = offset
            log.debug("%s: committed %s/%s at %d", self.consumer_id, tp.topic, tp.name, offset)

    # -- rebalancing ----------------------------------------------------------------------

    def _trigger(self, _path: str = "") -> None:
        self._rebalance_needed.set()

    async def _new_session(self) -> None:
        log.warning("%s: new ZooKeeper session: registering again", self.consumer_id)
        await self._registry.register(self.consumer_id, self.subscription.as_registration())
        self._trigger()

    async def _coordinate(self) -> None:
        while True:
            await self._rebalance_needed.wait()
            self._rebalance_needed.clear()
            try:
                await self._rebalance()
            except KafkaError as exc:  # e.g. auto_offset_reset="error": the iterators raise it
                log.error("%s: rebalance failed: %s", self.consumer_id, exc)
                for stream in self.streams:
                    stream._put_error(exc)

    async def _rebalance(self) -> None:
        """Rebalance until an attempt succeeds (claims can conflict while others release)."""
        attempt = 0
        began = time.monotonic()
        while True:
            attempt += 1
            log.debug("%s: rebalance attempt %d", self.consumer_id, attempt)
            try:
                async with self._lock:
                    if await self._rebalance_once():
                        self.rebalances += 1
                        log.info(
                            "%s: rebalance %d of group %s done in %.0f ms (%d attempts, "
                            "%d members): owns %s",
                            self.consumer_id,
                            self.rebalances,
                            self.group,
                            (time.monotonic() - began) * 1000,
                            attempt,
                            self._members,
                            _describe(self._owned) or "nothing",
                        )
                        return
            except (ZooKeeperError, KafkaConnectionError) as exc:
                log.warning("%s: rebalance attempt %d failed: %s", self.consumer_id, attempt, exc)
            await asyncio.sleep(self.rebalance_backoff)

    async def _arm_watches(self, topics: Iterable[str]) -> None:
        await self._zk.watch_children(znodes.ids_path(self.group))
        if self.subscription.is_wildcard:
            if znodes.BROKER_TOPICS not in self._watched:
                self._zk.add_child_watch_callback(znodes.BROKER_TOPICS, self._trigger)
                self._watched.add(znodes.BROKER_TOPICS)
            await self._zk.watch_children(znodes.BROKER_TOPICS)
        for topic in topics:
            path = znodes.topic_path(topic)
            if path not in self._watched:
                self._zk.add_child_watch_callback(path, self._trigger)
                self._watched.add(path)
            await self._zk.watch_children(path)

    async def _rebalance_once(self) -> bool:
        registry = self._registry
        available = await read_topics(self._zk) if self.subscription.is_wildcard else []
        my_topics = self.subscription.streams_per_topic(available)
        await self._arm_watches(my_topics)
        members = {
            member: Subscription.from_registration(registration)
            for member, registration in (await registry.members()).items()
        }
        if self.consumer_id not in members:
            await registry.register(self.consumer_id, self.subscription.as_registration())
            members[self.consumer_id] = self.subscription
        self._members = len(members)
        threads = group_threads(members, available or my_topics)
        self._brokers = await read_brokers(self._zk)
        wanted: dict[TopicPartition, str] = {}
        for topic, count in my_topics.items():
            registrations = await read_topic_registrations(self._zk, topic)
            ranges = assign(partition_names(registrations), threads.get(topic, []))
            for thread in thread_ids(self.consumer_id, count):
                for name in ranges.get(thread, []):
                    wanted[TopicPartition.parse(topic, name)] = thread
        current = {tp: owned.thread for tp, owned in self._owned.items()}
        revoked = {tp for tp, thread in current.items() if wanted.get(tp) != thread}
        added = {tp for tp, thread in wanted.items() if current.get(tp) != thread}

        if revoked or added:
            await self._stop_fetchers()
        if revoked:
            if self.listener is not None:
                await self.listener.on_partitions_revoked(set(revoked))
            for stream in self.streams:
                stream._drop(revoked)
            await self.commit(revoked)
            for tp in revoked:  # first stop holding it, then give up the owner node
                del self._owned[tp]
            for tp in revoked:
                await registry.release(tp.topic, tp.name)
        # Claim everything wanted: our own nodes count as ours (they vanish with an
        # expired session, and must be created again).
        claimed: list[TopicPartition] = []
        for tp, thread in wanted.items():
            if not await registry.claim(tp.topic, tp.name, thread):
                for mine in claimed:
                    if mine in added:
                        await registry.release(mine.topic, mine.name)
                self._start_fetchers()
                return False
            claimed.append(tp)
        for tp in added:
            offset = await self._starting_offset(tp)
            stream = self.streams[int(wanted[tp].rsplit("-", 1)[1]) % len(self.streams)]
            sizer = FetchSizer(tp.topic, tp.name, self.fetch_size, self.max_fetch_size)
            self._owned[tp] = _Owned(tp, wanted[tp], stream, offset, sizer)
            self._owned[tp].committed = await registry.committed(tp.topic, tp.name)
        await self.commit()  # progress of kept partitions survives a session expiry
        if added and self.listener is not None:
            await self.listener.on_partitions_assigned(set(added))
        if revoked or added:
            log.info(
                "%s: assigned %s, revoked %s",
                self.consumer_id,
                _describe(added) or "nothing",
                _describe(revoked) or "nothing",
            )
        self._start_fetchers()
        self._rebalanced.set()
        return True

    async def _starting_offset(self, tp: TopicPartition) -> int:
        committed = await self._registry.committed(tp.topic, tp.name)
        if committed is not None:
            return committed
        return await self._reset_offset(tp, None)

    async def _reset_offset(self, tp: TopicPartition, bad_offset: int | None) -> int:
        if self.auto_offset_reset == "error":
            raise OffsetOutOfRangeError(
                f"{tp.topic}/{tp.name}: no valid offset (offset {bad_offset})", offset=bad_offset
            )
        address = self._brokers.get(tp.broker_id)
        if address is None:
            raise KafkaConnectionError(
                f"broker {tp.broker_id} of {tp.topic}/{tp.name} is not registered"
            )
        conn = await self._pool.connection(address)
        time = EARLIEST if self.auto_offset_reset == "smallest" else LATEST
        offsets = await conn.offsets(tp.topic, tp.partition, time, 1)
        offset = offsets[0] if offsets else 0
        if bad_offset is not None:
            log.warning(
                "%s/%s: offset %d out of range, reset to %d", tp.topic, tp.name, bad_offset, offset
            )
        return offset

    # -- fetching ---------------------------------------------------------------------------

    def _start_fetchers(self) -> None:
        for broker_id in {tp.broker_id for tp in self._owned}:
            task = self._fetchers.get(broker_id)
            if task is None or task.done():
                self._fetchers[broker_id] = asyncio.create_task(
                    self._fetch_loop(broker_id), name=f"{self.consumer_id}-fetch-{broker_id}"
                )

    async def _stop_fetchers(self) -> None:
        tasks = list(self._fetchers.values())
        self._fetchers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _fetch_loop(self, broker_id: int) -> None:
        """Fetch the owned partitions of one broker whose streams have room."""
        while True:
            owned = [
                o
                for o in self._owned.values()
                if o.tp.broker_id == broker_id
                and not o.halted
                and o.stream.buffered_bytes < self.max_prefetch_bytes
            ]
            if not owned:
                self._room.clear()
                await self._room.wait()
                continue
            address = self._brokers.get(broker_id)
            try:
                if address is None:
                    raise KafkaConnectionError(f"broker {broker_id} is not registered")
                conn = await self._pool.connection(address)
                requests = [
                    FetchRequest(o.tp.topic, o.tp.partition, o.fetch_offset, o.sizer.size)
                    for o in owned
                ]
                epochs = [o.epoch for o in owned]
                response = await conn.multifetch(requests)
                if log.isEnabledFor(logging.DEBUG):
                    log.debug(
                        "%s: fetched %d bytes of %d partitions from %s",
                        self.consumer_id,
                        sum(len(answer.message_set) for answer in response.responses),
                        len(requests),
                        address,
                    )
            except KafkaConnectionError as exc:
                log.warning(
                    "%s: fetching from broker %d failed: %s", self.consumer_id, broker_id, exc
                )
                await asyncio.sleep(self.fetch_backoff * 10)
                continue
            got_data = False
            for o, epoch, answer in zip(owned, epochs, response.responses, strict=True):
                if o.epoch != epoch or self._owned.get(o.tp) is not o:
                    continue  # sought or revoked meanwhile
                got_data |= await self._deliver(o, answer)
            if not got_data:
                await asyncio.sleep(self.fetch_backoff)

    def _halt(self, owned: _Owned, exc: KafkaError) -> None:
        """Queue ``exc`` for the application, behind the partition's records, and stop
        fetching the partition until it is sought (ZOOKEEPER §5.1: an error chunk, after
        which 0.7.2's fetcher stops)."""
        owned.halted = True
        owned.stream._put(owned, exc, 0)
        log.warning("%s: %s; not fetched again until seek() or a rebalance", self.consumer_id, exc)

    async def _deliver(self, owned: _Owned, answer: Any) -> bool:
        tp = owned.tp
        if answer.error_code == OffsetOutOfRangeError.code:
            try:
                owned.fetch_offset = owned.consumed = await self._reset_offset(
                    tp, owned.fetch_offset
                )
            except OffsetOutOfRangeError as exc:
                self._halt(owned, exc)
            return False
        if answer.error_code:
            error = error_for_code(answer.error_code)
            self._halt(
                owned,
                error(
                    f"{tp.topic}/{tp.name}: broker error code {answer.error_code} "
                    f"({error.__name__}) fetching offset {owned.fetch_offset}"
                ),
            )
            return False
        records: list[ConsumerRecord] = []
        try:
            valid = decode_messages_into(
                records,
                answer.message_set,
                owned.fetch_offset,
                shallow=self.shallow,
                message_type=ConsumerRecord,
                prefix=(tp.topic, tp.broker_id, tp.partition),
                max_decompressed=self.max_decompressed_bytes,
            )
        except ProtocolError as exc:
            declared = FetchSizer.incomplete_first(exc)
            if declared is not None:
                return await self._grow(owned, declared, len(answer.message_set))
            # The messages before the bad entry are good: hand them out once, then the
            # error, at the bad entry's offset (the position after those messages).
            good = exc.decoded.valid_bytes if exc.decoded is not None else 0
            if good:
                owned.stream._put(owned, list(exc.decoded.messages), good)
                owned.fetch_offset += good
            exc.args = (f"{tp.topic}/{tp.name} at offset {owned.fetch_offset}: {exc}",)
            self._halt(owned, exc)
            return good > 0
        if not valid:
            if answer.message_set:  # fewer than 4 bytes: a cut entry, or a tiny fetch size
                return await self._grow(owned, None, len(answer.message_set))
            return False
        owned.fetch_offset += valid
        owned.stream._put(owned, records, valid)
        return True

    async def _grow(self, owned: _Owned, declared: int | None, received: int) -> bool:
        """A fetch brought no complete message: fetch again, larger, at once (True), or
        halt the partition with the typed error :class:`FetchSizer` decides on."""
        tp, sizer, offset, epoch = owned.tp, owned.sizer, owned.fetch_offset, owned.epoch
        try:
            log_end = await self._log_end(tp) if sizer.needs_log_end(received) else None
            if owned.epoch != epoch or self._owned.get(tp) is not owned:
                return False  # sought or revoked meanwhile
            size = sizer.grow(offset, declared, received, log_end)
        except KafkaConnectionError as exc:
            log.warning("%s/%s: asking the log end failed: %s", tp.topic, tp.name, exc)
            return False  # fetched again after the backoff
        except KafkaError as exc:
            self._halt(owned, exc)
            return False
        log.info(
            "%s/%s: a %s-byte message at offset %d; fetch size now %d",
            tp.topic,
            tp.name,
            declared,
            offset,
            size,
        )
        return True

    async def _log_end(self, tp: TopicPartition) -> int | None:
        """The partition's log end from OFFSETS (None if the broker has none)."""
        address = self._brokers.get(tp.broker_id)
        if address is None:
            raise KafkaConnectionError(f"broker {tp.broker_id} is not registered")
        conn = await self._pool.connection(address)
        offsets = await conn.offsets(tp.topic, tp.partition, LATEST, 1)
        return offsets[0] if offsets else None

    async def _auto_commit(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval)
            try:
                await self.commit()
            except KafkaError as exc:
                log.warning("%s: auto-commit failed: %s", self.consumer_id, exc)


def _subscription(
    topics: Sequence[str | Mapping[str, int]],
    streams: int,
    whitelist: str | None,
    blacklist: str | None,
) -> Subscription:
    if sum(bool(x) for x in (topics, whitelist, blacklist)) != 1:
        raise ValueError("subscribe to topics, or a whitelist, or a blacklist")
    if whitelist:
        return Subscription.whitelist(whitelist, streams)
    if blacklist:
        return Subscription.blacklist(blacklist, streams)
    counts: dict[str, int] = {}
    for item in topics:
        if isinstance(item, str):
            counts[item] = streams
        else:
            counts.update(item)
    return Subscription.of_topics(counts)


def _describe(partitions: Iterable[TopicPartition]) -> str:
    """``"events [0-0 0-1], logs [1-0]"``: partitions grouped by topic, for log lines."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp)
    return ", ".join(f"{t} [{' '.join(tp.name for tp in tps)}]" for t, tps in by_topic.items())

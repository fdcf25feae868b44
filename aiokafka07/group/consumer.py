"""The balanced group consumer, sharing groups with Java 0.7.2 consumers (ZOOKEEPER §3-§5).

:class:`Consumer` is a thin facade over the parts of a member, each in its own module:

* :mod:`.state`: what the member knows about each owned partition (position, committed
  offset, paused, halted, fenced, epoch), and nothing that does I/O;
* :mod:`.fetcher`: one task per broker, one MULTIFETCH at a time, reading only the states;
* :mod:`.coordinator`: registration, rebalances, claims, the rebalance listener, commits,
  and what a ZooKeeper session expiry means for all of them;
* :mod:`.streams`: the fetched records per stream, behind the iterator interface.

Every background task (the coordinator, the fetchers, the auto-commit) runs under one
:class:`~aiokafka07.supervisor.Supervisor`, with a crash policy each; :meth:`Consumer.close`
cancels and awaits them all.

Where this differs from 0.7.2, on purpose (all compatible with Java members in the group):

* owner nodes are claimed *before* the starting offset is read, so a new owner never starts
  from an offset the previous owner is about to move (0.7.2 reads first: duplicates);
* partitions a member keeps across a rebalance stay owned and keep fetching; only revoked
  ones are released (0.7.2 drops everything and re-claims);
* after a ZooKeeper session expiry the member stops fetching, handing out and committing
  at once, re-registers, and restarts every partition it owns from the committed offset
  (0.7.2 goes on from its in-memory position, re-reading what the interim owner consumed);
* with a topic filter and several streams, data is spread over all streams (0.7.2's
  KAFKA-550 sends everything to the last one);
* a failed rebalance is retried after ``rebalance_backoff_ms`` (100 ms, not 2000 ms).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, overload

from ..backoff import Backoff
from ..errors import ConsumerStoppedError, IllegalStateError, InvalidConfigError
from ..fetch_size import decompression_bound
from ..pool import ConnectionPool, PoolMetrics
from ..protocol import EARLIEST, LATEST, validate_topic
from ..record_batch import FetchedColumns, RecordBatch
from ..records import ConsumerRecord, TopicPartition
from ..supervisor import CrashPolicy, Supervisor
from ..timeouts import wait_for
from ..validation import (
    INT32_MAX,
    NOT_GIVEN,
    check_bool,
    check_callable,
    check_int,
    check_ms,
    check_name,
    check_number,
    check_optional_int,
    check_optional_name,
    check_optional_number,
    deprecated,
    warn_deprecated,
)
from ..znodes import GroupRegistry, consumer_id
from ..zookeeper import ZooKeeper
from .coordinator import LEASE_FRACTION, Coordinator, GroupSettings, RebalanceListener, Target
from .fetcher import Fetcher, Fetchers, FetchSettings, Offsets
from .state import Assignment, ConsumerMetrics, PartitionMetrics, PartitionState
from .streams import Chunk, Delivery, Stream
from .subscription import Subscription

__all__ = ["Consumer", "RebalanceListener", "Stream", "SubscriptionView"]

log = logging.getLogger("aiokafka07.group")

#: ``commit(partitions=)``: what goes and what to use instead (the overload's words, too).
COMMIT_PARTITIONS = (
    "Consumer.commit(partitions=...)",
    "commit(offsets=[tp, ...]) (commit() for every owned partition)",
)

_RESET_POLICIES = ("smallest", "largest", "error")


class Consumer:
    """A member of a consumer group (an async context manager, and an async iterator).

    What it consumes is given here, or later with :meth:`subscribe` (changeable while it
    runs) or :meth:`assign` (partitions by hand, no group membership; ``group`` is then
    optional, and without it nothing is committed).

    ``topics`` are names (``streams`` streams each) or a map topic → streams; or give
    ``whitelist`` / ``blacklist`` (a 0.7.2 topic filter) instead. ``auto_offset_reset`` is
    ``"smallest"`` (0.7.2's default), ``"largest"`` or ``"error"``: where a partition
    without a committed offset starts, if it was registered when the member subscribed.
    One registered later (a topic created later, one a filter matches once created, a
    broker added) is read from its beginning: everything in it is new to the member
    (with ``"error"`` it is an error too; see :mod:`aiokafka07.group.coordinator`).
    Every duration is in milliseconds (``*_ms``; ``request_timeout``, in seconds, is the
    deprecated name of ``request_timeout_ms``). A bad value or type raises
    :class:`~aiokafka07.errors.InvalidConfigError` naming the parameter. ``group``,
    ``consumer_id_suffix`` and every topic become ZooKeeper path components: one that
    ZooKeeper would refuse, or with a ``/``, raises at construction too
    (:class:`~aiokafka07.errors.InvalidTopicError` for a topic a broker would refuse).

    Errors of a partition's data or fetches (a corrupt message, a message larger than
    ``max_fetch_size``, a broker error code such as InvalidPartition, OffsetOutOfRange with
    ``"error"``, a failing ``value_deserializer``) come out of iteration, :meth:`getone`
    and :meth:`getmany` once, as typed :class:`~aiokafka07.errors.KafkaError` subclasses
    naming the partition and offset, after the records fetched before them. That
    partition is then not fetched again until :meth:`seek` (e.g. past a corrupt message)
    or a rebalance gives it to a new owner; the others go on. An error of no partition (a
    fetcher that crashed and restarts, a rebalance that keeps failing) is raised once too.

    With ``shallow`` (0.7.2's ``shallowiterator.enable``) a compressed wrapper is handed out
    as one record, not decompressed: its value is the compressed payload, its
    ``attributes`` name the codec and its offset is the wrapper's end. A mirror forwards
    such records unchanged with :meth:`Producer.send_message
    <aiokafka07.producer.Producer.send_message>`.
    """

    def __init__(
        self,
        *topics: str | Mapping[str, int],
        group: str | None = None,
        zookeeper: str,
        streams: int = 1,
        whitelist: str | None = None,
        blacklist: str | None = None,
        auto_offset_reset: str = "smallest",
        auto_commit: bool = True,
        auto_commit_interval_ms: float = 10000,
        consumer_timeout_ms: float | None = None,
        fetch_size: int = 1048576,
        max_fetch_size: int = 64 * 1048576,
        max_decompressed_bytes: int | None = None,
        max_prefetch_bytes: int = 4 * 1048576,
        fetch_backoff_ms: float = 100.0,
        rebalance_backoff_ms: float = 100.0,
        rebalance_max_retries: int | None = None,
        listener: RebalanceListener | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        consumer_id_suffix: str | None = None,
        session_timeout_ms: float = 6000,
        connection_timeout_ms: float = 6000,
        request_timeout_ms: float = 30000,
        shallow: bool = False,
        request_timeout: float | None = None,
    ) -> None:
        if auto_offset_reset not in _RESET_POLICIES:
            raise InvalidConfigError(
                f"auto_offset_reset must be smallest, largest or error, not {auto_offset_reset!r}"
            )
        # The group id and the suffix become ZooKeeper path components (consumer ids).
        group = check_optional_name("group", group)
        check_optional_name("consumer_id_suffix", consumer_id_suffix)
        streams = check_int("streams", streams)  # the subscription checks the count
        fetch_size = check_int("fetch_size", fetch_size, minimum=1, maximum=INT32_MAX)
        max_fetch_size = check_int(
            "max_fetch_size", max_fetch_size, minimum=fetch_size, maximum=INT32_MAX
        )
        max_prefetch_bytes = check_int("max_prefetch_bytes", max_prefetch_bytes, minimum=1)
        for name, value in (
            ("auto_commit_interval_ms", auto_commit_interval_ms),
            ("fetch_backoff_ms", fetch_backoff_ms),
            ("rebalance_backoff_ms", rebalance_backoff_ms),
            ("connection_timeout_ms", connection_timeout_ms),
        ):
            check_number(name, value, minimum=0, above=True)
        # An int32 of milliseconds on the wire; the server fits it into its own bounds.
        check_number("session_timeout_ms", session_timeout_ms, minimum=0, above=True,
                     maximum=INT32_MAX)  # fmt: skip
        check_optional_number("consumer_timeout_ms", consumer_timeout_ms, minimum=0)
        rebalance_max_retries = check_optional_int(
            "rebalance_max_retries", rebalance_max_retries, minimum=1
        )
        request_timeout_ms = check_ms(
            "Consumer", "request_timeout_ms", request_timeout_ms, request_timeout, above=True
        )
        auto_commit = check_bool("auto_commit", auto_commit)
        shallow = check_bool("shallow", shallow)
        check_callable("value_deserializer", value_deserializer)
        _check_listener(listener)
        self.max_decompressed_bytes = decompression_bound(max_fetch_size, max_decompressed_bytes)
        subscription = _subscription(topics, streams, whitelist, blacklist)
        if subscription is not None and group is None:
            raise InvalidConfigError(
                "a subscription needs a group (0.7 balances partitions through the group's "
                "znodes): give group=, or assign() partitions without one"
            )
        self.group = group
        self.connect = zookeeper
        self.auto_offset_reset = auto_offset_reset
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        # (The host name it includes, too, must make a ZooKeeper path component.)
        self.consumer_id = check_name(
            "consumer id", consumer_id(group or _NO_GROUP, suffix=consumer_id_suffix)
        )
        self._mode: Literal["subscribed", "assigned"] | None = (
            None if subscription is None else "subscribed"
        )
        self.closed = False
        self._started = False
        self._turn = 0
        self._head: Chunk | None = None

        self._assignment = Assignment()
        self._delivery = Delivery(self._wake_fetchers, consumer_timeout_ms)
        self._streams_per_topic = streams
        stream_count = max(
            subscription.streams_per_topic([]).values() if subscription else (), default=streams
        )
        #: One stream per thread id (0.7.2's ``KafkaStream``); each an async iterator.
        self.streams: list[Stream] = [
            Stream(self._delivery, i, max_prefetch_bytes) for i in range(max(stream_count, streams))
        ]
        self._zk = ZooKeeper(
            zookeeper,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=connection_timeout_ms,
            operation_timeout_ms=request_timeout_ms,
        )
        self._registry = GroupRegistry(self._zk, group) if group is not None else None
        self._pool = ConnectionPool(request_timeout_ms=request_timeout_ms)
        self._supervisor = Supervisor(self.consumer_id, log)
        self._offsets = Offsets(self._pool, self._assignment, self._zk, auto_offset_reset)
        backoff = fetch_backoff_ms / 1000
        fetch_settings = FetchSettings(
            consumer_id=self.consumer_id,
            max_fetch_size=max_fetch_size,
            max_decompressed_bytes=self.max_decompressed_bytes,
            poll_interval=backoff,
            shallow=shallow,
            value_deserializer=value_deserializer,
            connection_backoff=(backoff, max(backoff, 5.0)),
        )
        self._fetch_settings = fetch_settings
        self._fetchers = Fetchers(
            self._supervisor,
            self._assignment,
            lambda broker_id: Fetcher(
                broker_id,
                self._assignment,
                self._delivery,
                self._pool,
                self._offsets,
                fetch_settings,
            ),
            restart_backoff=(backoff, max(backoff, 5.0)),
        )
        if rebalance_max_retries is None:  # enough to outwait a dead member's session
            budget = 2 * session_timeout_ms + 10_000
            rebalance_max_retries = max(10, math.ceil(budget / rebalance_backoff_ms))
        self._request_timeout = request_timeout_ms / 1000
        # How long close waits for its tasks to end once cancelled (a listener call may
        # ignore it: then it is left behind, named in a warning).
        self._task_grace = min(self._request_timeout, 10.0)
        self._coordinator = Coordinator(
            GroupSettings(
                consumer_id=self.consumer_id,
                subscription=subscription,
                fetch_size=fetch_size,
                max_fetch_size=max_fetch_size,
                rebalance_backoff=rebalance_backoff_ms / 1000,
                rebalance_attempts=rebalance_max_retries,
                listener_timeout=self._request_timeout,
                auto_commit_interval=auto_commit_interval_ms / 1000,
            ),
            self._zk,
            self._registry,
            self._assignment,
            self.streams,
            self._delivery,
            self._offsets,
            self._fetchers,
            listener,
            self._supervisor,
        )

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._assignment)} partitions"
        return f"<Consumer {self.consumer_id}: {state}>"

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Join the group: register, take part in a first rebalance, start fetching."""
        if self.closed:
            raise ConsumerStoppedError("the consumer is closed")
        if self._started:
            return
        self._started = True
        began = time.monotonic()
        await self._zk.start()
        coordinator = self._coordinator
        self._delivery.renew(began + self._zk.session_timeout * LEASE_FRACTION)
        try:
            self._supervisor.spawn(
                "session-lease",
                coordinator.keep_lease,
                policy=CrashPolicy.RESTART,
                on_crash=self._delivery.report,
            )
            await coordinator.join()
        except BaseException:
            # Leave no registration or owner behind: they are ephemeral, and go with the
            # session (others could never claim partitions a failed member holds).
            self.closed = self._delivery.closed = True
            await self._supervisor.aclose(self._task_grace)
            await self._zk.close()
            await self._pool.close()
            raise

        def coordinator_crashed(exc: BaseException) -> None:
            self._delivery.report(exc)
            coordinator.trigger()  # the restarted coordinator rebalances first

        self._supervisor.spawn(
            "coordinator",
            coordinator.run,
            policy=CrashPolicy.RESTART,
            on_crash=coordinator_crashed,
            on_give_up=self._delivery.fail,
            backoff=Backoff(
                self._coordinator.settings.rebalance_backoff,
                max(self._coordinator.settings.rebalance_backoff, 5.0),
            ),
        )
        if self.auto_commit and self.group is not None:
            self._supervisor.spawn(
                "auto-commit",
                coordinator.auto_commit,
                policy=CrashPolicy.RESTART,
                on_crash=self._delivery.report,
            )
        target = coordinator.wanted
        log.info(
            "%s joined group %s at %s with subscription %s, %d streams, auto_offset_reset %s, "
            "auto_commit %s",
            self.consumer_id,
            self.group,
            self.connect,
            _describe(target),
            len(self.streams),
            self.auto_offset_reset,
            f"every {self.auto_commit_interval_ms:g} ms" if self.auto_commit else "off",
        )

    async def close(self, *, commit: bool | None = None) -> None:
        """Leave the group: stop handing out records, stop every task, commit, close the
        session (ZooKeeper deletes our ids and owner nodes with it, in one go, as 0.7.2's
        shutdown leaves). Iterators end; ``getone()`` and ``getmany()`` raise
        :class:`ConsumerStoppedError`.

        ``commit`` defaults to ``auto_commit``, as 0.7.2's shutdown commits only with
        ``autocommit.enable`` (ZOOKEEPER §5.4). ``commit=False`` leaves the committed
        offsets as they are: for a caller that could not finish handling what it was
        handed (a mirror whose producer failed), so the group resumes from the last
        progress it did record; ``commit=True`` commits what was handed out. A commit that
        fails raises :class:`~aiokafka07.errors.CommitFailedError` once the member has left.
        """
        if self.closed:
            return
        self.closed = True
        if commit is None:
            commit = self.auto_commit and self.group is not None
        self._delivery.closed = True
        self._head = None
        for stream in self.streams:  # positions stop where the last record left them
            stream.close()
        await self._supervisor.aclose(self._task_grace)
        if not self._started:
            return
        try:
            await self._coordinator.leave(commit)
        finally:
            await self._zk.close()
            await self._pool.close()
            log.info("%s left group %s", self.consumer_id, self.group)

    async def stop(self) -> None:
        """:meth:`close` (aiokafka's name)."""
        await self.close()

    # -- consuming ---------------------------------------------------------------------

    @property
    def consumer_timeout_ms(self) -> float | None:
        """After this long without a record an iteration ends (None: it waits until the
        consumer closes). Settable."""
        return self._delivery.timeout_ms

    @consumer_timeout_ms.setter
    def consumer_timeout_ms(self, value: float | None) -> None:
        self._delivery.timeout_ms = check_optional_number("consumer_timeout_ms", value, minimum=0)

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record of any stream; the iteration ends after ``consumer_timeout_ms``
        without one, or when the consumer closes."""
        chunk = self._head
        if chunk is not None:
            pos = chunk.pos
            if pos < chunk.end:
                chunk.pos = pos + 1
                return chunk.records[pos]
        return await self._next(self._delivery.timeout_ms, iterating=True)

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of one of ``partitions``, if given), waiting as long as it
        takes; :class:`ConsumerStoppedError` once the consumer is closed."""
        if partitions:
            while True:
                batch = await self.getmany(*partitions, timeout_ms=60_000, max_records=1)
                for records in batch.values():
                    return records[0]
        return await self._next(None, iterating=False)

    async def _next(self, timeout_ms: float | None, *, iterating: bool) -> ConsumerRecord:
        delivery = self._delivery
        streams = self.streams
        count = len(streams)
        loop = asyncio.get_running_loop()
        deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        while True:
            if delivery.closed:
                if iterating:
                    raise StopAsyncIteration
                raise ConsumerStoppedError("the consumer is closed")
            delivery.check()
            for i in range(count):
                stream = streams[(self._turn + i) % count]
                chunk = stream.next_chunk()
                if chunk is not None:
                    self._turn = (self._turn + i + 1) % count
                    self._head = chunk
                    pos = chunk.pos
                    chunk.pos = pos + 1
                    return chunk.records[pos]
            delivery.data.clear()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise StopAsyncIteration
            try:
                await wait_for(delivery.data.wait(), left)
            except asyncio.TimeoutError:
                raise StopAsyncIteration from None

    async def getmany(
        self,
        *partitions: TopicPartition,
        timeout_ms: float = 0,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records available within ``timeout_ms`` (of ``partitions`` only, if given),
        grouped by partition, at most ``max_records``.

        An error queued behind records is raised only by a call that has gathered nothing
        yet: the records before it are handed out first (they count as consumed).
        :class:`ConsumerStoppedError` once the consumer is closed.
        """
        for tp in partitions:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"partitions must be TopicPartition, not {tp!r}")
        if max_records is not None and (not isinstance(max_records, int) or max_records < 1):
            raise ValueError(f"max_records must be a positive int, not {max_records!r}")
        delivery = self._delivery
        if delivery.closed:
            raise ConsumerStoppedError("the consumer is closed")
        wanted = set(partitions)
        result: dict[TopicPartition, list[ConsumerRecord]] = {}

        def take() -> bool:
            if wanted:
                self._take_of(wanted, result, max_records)
            else:
                self._take(result, max_records)
            return bool(result)

        await self._gather(take, timeout_ms)
        return result

    async def _gather(self, take: Callable[[], bool], timeout_ms: float) -> None:
        """Call ``take()`` (it adds what is buffered to the caller's result and says
        whether there is any) until it gets something, the consumer closes, or
        ``timeout_ms`` passes, waiting for fetched data in between: ``getmany`` and
        ``getmany_batches``. Raises :class:`ConsumerStoppedError` if the consumer closed
        with nothing gathered."""
        delivery = self._delivery
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            delivery.check()
            got = take()
            if got or delivery.closed:
                break
            left = deadline - loop.time()
            if left <= 0:
                break
            delivery.data.clear()
            try:
                await wait_for(delivery.data.wait(), left)
            except asyncio.TimeoutError:
                break
        if not got and delivery.closed:
            raise ConsumerStoppedError("the consumer is closed")

    def _take(self, result: dict[TopicPartition, list[ConsumerRecord]], limit: int | None) -> None:
        """Whole chunks (slices of the last one) from every stream, round-robin."""
        streams = self.streams
        count = 0
        for i in range(len(streams)):
            stream = streams[(self._turn + i) % len(streams)]
            while limit is None or count < limit:
                chunk = stream.next_chunk(raise_errors=not result)
                if chunk is None:
                    break
                pos, chunk_records = chunk.pos, chunk.records
                n = chunk.end - pos if limit is None else min(chunk.end - pos, limit - count)
                if isinstance(chunk_records, list) and not pos and n == len(chunk_records):
                    records = chunk_records
                else:
                    records = _as_list(chunk_records[pos : pos + n])
                chunk.pos = pos + n
                state = chunk.state
                assert state is not None
                if chunk.pos >= chunk.end:
                    stream.finish(chunk)  # its list goes to the application whole
                previous = result.get(state.tp)
                result[state.tp] = records if previous is None else previous + records
                count += n
        self._turn = (self._turn + 1) % len(streams)

    def _take_of(
        self,
        wanted: set[TopicPartition],
        result: dict[TopicPartition, list[ConsumerRecord]],
        limit: int | None,
    ) -> None:
        count = sum(len(records) for records in result.values())
        for stream in self.streams:
            while limit is None or count < limit:
                taken = stream.take(None if limit is None else limit - count, wanted, not result)
                if taken is None:
                    break
                tp, records = taken
                result[tp] = result.get(tp, []) + records
                count += len(records)

    async def getmany_batches(
        self,
        *partitions: TopicPartition,
        timeout_ms: float = 0,
        max_bytes: int | None = None,
    ) -> dict[TopicPartition, RecordBatch]:
        """What is available within ``timeout_ms`` (of ``partitions`` only, if given) as
        one :class:`~aiokafka07.RecordBatch` per partition: the messages as columns, no
        Python object per message, for Arrow (pyarrow, polars, duckdb) without a copy.

        Positions, commits, pauses, seeks and rebalances work as with :meth:`getmany`: a
        batch's :attr:`~aiokafka07.RecordBatch.last_offset` is its partition's position
        once it is handed out (what :meth:`commit` writes), a paused partition brings
        nothing, and a seek drops what was fetched before it. A batch is the rest of one
        fetch at most (what else is buffered for its partition comes with the next call);
        with ``max_bytes`` the values of all batches of a call total at most that many
        bytes, except that a call always brings at least one message if one is there.

        From the first call on, fetches are decoded into columns, which ``getmany`` and
        iteration still read as records; what was fetched as records before is turned
        into columns (a copy). Not with ``shallow`` or a ``value_deserializer``
        (:class:`~aiokafka07.errors.IllegalStateError`): a batch's values are the
        messages' own bytes. Errors as in :meth:`getmany`; :class:`ConsumerStoppedError`
        once the consumer is closed.
        """
        for tp in partitions:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"partitions must be TopicPartition, not {tp!r}")
        if max_bytes is not None and (
            not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1
        ):
            raise ValueError(f"max_bytes must be a positive int, not {max_bytes!r}")
        settings = self._fetch_settings
        if settings.shallow or settings.value_deserializer is not None:
            raise IllegalStateError(
                "getmany_batches hands out the messages' own bytes: not with shallow=True "
                "or a value_deserializer (use getmany)"
            )
        delivery = self._delivery
        if delivery.closed:
            raise ConsumerStoppedError("the consumer is closed")
        delivery.columnar = True
        wanted = set(partitions)
        result: dict[TopicPartition, RecordBatch] = {}

        def take() -> bool:
            self._take_batches(wanted, result, max_bytes)
            return bool(result)

        await self._gather(take, timeout_ms)
        return result

    def _take_batches(
        self, wanted: set[TopicPartition], result: dict[TopicPartition, RecordBatch],
        max_bytes: int | None,
    ) -> None:  # fmt: skip
        """One batch per partition with records (of ``wanted``, if any), stream by stream
        from the turn's one, within ``max_bytes`` of values: each from the chunk the
        partition is read from, taken as :meth:`_take` / :meth:`Stream.take` take records,
        so the position bookkeeping is theirs."""
        streams = self.streams
        left = max_bytes
        for i in range(len(streams)):
            stream = streams[(self._turn + i) % len(streams)]
            while left is None or left > 0:
                raise_errors = not result
                if wanted:
                    chunk = stream.take_chunk(wanted - result.keys(), raise_errors)
                else:
                    chunk = stream.next_chunk(raise_errors=raise_errors)
                if chunk is None:
                    break
                state = chunk.state
                assert state is not None
                if state.tp in result:
                    break  # its next chunk waits for the next call (one batch each)
                columns = _columns_of(chunk)
                start = chunk.pos
                count = chunk.end - start
                if left is not None:
                    count = max(columns.count_within(start, chunk.end, left), 0 if result else 1)
                    if not count:
                        break
                batch = columns.batch(start, start + count)
                if left is not None:
                    left -= batch.nbytes
                if wanted:
                    stream.advance(chunk, count)
                else:
                    chunk.pos = start + count
                    if chunk.pos >= chunk.end:
                        stream.finish(chunk)
                result[state.tp] = batch
        self._turn = (self._turn + 1) % len(streams)

    # -- partitions ---------------------------------------------------------------------

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member owns now."""
        return set(self._assignment.partitions)

    async def position(self, tp: TopicPartition) -> int:
        """The next offset to consume of an owned partition: what a commit would write.
        :class:`~aiokafka07.errors.IllegalStateError` for a partition not owned, or fenced
        after a session expiry (the next rebalance assigns it again, from the committed
        offset, or to another member)."""
        return self._owned(tp).position

    def _owned(self, tp: TopicPartition) -> PartitionState:
        state = self._assignment.require(tp)
        if state.fenced:
            raise IllegalStateError(
                f"{tp.topic}/{tp.name} is fenced: this member's ZooKeeper session expired, "
                "and the next rebalance decides where it is consumed from"
            )
        return state

    def highwater(self, tp: TopicPartition) -> int | None:
        """The last known log end of an owned partition (None until a fetch reached it,
        or :meth:`end_offsets` asked): ``highwater - position`` bytes are left to read."""
        return self._assignment.require(tp).highwater

    async def committed(self, tp: TopicPartition) -> int | None:
        """The offset the group committed for ``tp`` (any partition), or None."""
        return await self._coordinator.registry.committed(tp.topic, tp.name)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Consume an owned partition from ``offset`` on; buffered records and errors of
        it are dropped, and a partition stopped by an error is fetched again."""
        state = self._owned(tp)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, not {offset!r}")
        state.epoch += 1
        state.halted = False
        state.stream.discard({state})
        state.fetch_offset = state.consumed = offset
        self._fetchers.ensure(tp.broker_id)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Seek owned partitions (all when none given) to their oldest offset."""
        await self._seek_to(EARLIEST, partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Seek owned partitions (all when none given) to their log end."""
        await self._seek_to(LATEST, partitions)

    async def _seek_to(self, time: int, partitions: Sequence[TopicPartition]) -> None:
        states = self._assignment.require_all(partitions)
        offsets = await asyncio.gather(*(self._offsets.before(s.tp, time) for s in states))
        for state, offset in zip(states, offsets, strict=True):
            if self._assignment.holds(state):
                self.seek(state.tp, offset)

    async def seek_to_committed(
        self, *partitions: TopicPartition
    ) -> dict[TopicPartition, int | None]:
        """Seek owned partitions (all when none given) to the group's committed offsets;
        return them (a partition without one, None, stays where it is)."""
        states = self._assignment.require_all(partitions)
        committed = await asyncio.gather(
            *(self._coordinator.registry.committed(s.tp.topic, s.tp.name) for s in states)
        )
        for state, offset in zip(states, committed, strict=True):
            if offset is not None and self._assignment.holds(state):
                self.seek(state.tp, offset)
        return {s.tp: offset for s, offset in zip(states, committed, strict=True)}

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The oldest offset of each partition (owned or not), asked of its broker."""
        return await self._offsets_before(EARLIEST, partitions)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log end of each partition (owned or not), asked of its broker; updates
        :meth:`highwater` of owned ones."""
        ends = await self._offsets_before(LATEST, partitions)
        for tp, end in ends.items():
            state = self._assignment.get(tp)
            if state is not None:
                state.highwater = end
        return ends

    async def _offsets_before(
        self, time: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        wanted = list(partitions)
        offsets = await asyncio.gather(*(self._offsets.before(tp, time) for tp in wanted))
        return dict(zip(wanted, offsets, strict=True))

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching and handing out records of owned ``partitions`` (what is buffered
        is held back, in order) until :meth:`resume`; a rebalance that keeps them keeps
        them paused."""
        for state in [self._assignment.require(tp) for tp in partitions]:
            if not state.paused:
                state.paused = True
                state.stream.park(state)

    def resume(self, *partitions: TopicPartition) -> None:
        """Undo :meth:`pause`."""
        for state in [self._assignment.require(tp) for tp in partitions]:
            if state.paused:
                state.paused = False
                state.stream.unpark(state)
                self._fetchers.ensure(state.tp.broker_id)

    def paused(self) -> set[TopicPartition]:
        """The owned partitions that are paused."""
        return {tp for tp, s in self._assignment.partitions.items() if s.paused}

    @overload
    async def commit(
        self, offsets: Mapping[TopicPartition, int] | Iterable[TopicPartition] | None = None
    ) -> None: ...

    @overload
    @deprecated(
        "Consumer.commit(partitions=...) is deprecated and goes in the next release: use "
        "commit(offsets=[tp, ...]) (commit() for every owned partition)"
    )
    async def commit(self, *, partitions: Iterable[TopicPartition] | None) -> None: ...

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int] | Iterable[TopicPartition] | None = None,
        *,
        partitions: Any = NOT_GIVEN,
    ) -> None:
        """Write offsets to ZooKeeper: ``{tp: offset}`` commits exactly those (each of an
        owned partition; the 0.7.2 "next offset", e.g. ``record.offset``); an iterable of
        partitions commits their positions; nothing commits every owned position.

        Offsets already committed are not written again. Raises
        :class:`~aiokafka07.errors.CommitFailedError` when a write failed or the partition
        was lost with an expired session, :class:`~aiokafka07.errors.IllegalStateError`
        for a partition not owned, or for a consumer without a group.

        Deprecated, until the next release: ``commit(partitions=[tp, ...])`` (the keyword
        before ``offsets``) commits the positions of those partitions this member owns and
        skips the others, as it did (``partitions=None``: every owned position), with a
        :class:`DeprecationWarning`.
        """
        if partitions is not NOT_GIVEN:
            if offsets is not None:
                raise TypeError("commit() takes offsets, or (deprecated) partitions, not both")
            warn_deprecated(*COMMIT_PARTITIONS)
        if self.closed:
            raise ConsumerStoppedError("the consumer is closed")
        if self.group is None:
            raise IllegalStateError("commit() needs a group: this consumer has none")
        if partitions is not NOT_GIVEN and partitions is not None:
            held = [self._assignment.get(tp) for tp in partitions]
            await self._coordinator.commit(
                {s.tp: s.position for s in held if s is not None and not s.fenced}
            )
        elif offsets is None:
            await self._coordinator.commit()
        elif isinstance(offsets, Mapping):
            await self._coordinator.commit(offsets)
        else:
            states = [self._assignment.require(tp) for tp in offsets]
            await self._coordinator.commit({s.tp: s.position for s in states})

    # -- what the member consumes -------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        listener: RebalanceListener | None = None,
        *,
        blacklist: str | None = None,
    ) -> None:
        """Consume ``topics`` (``streams`` streams each), or the topics ``pattern`` matches
        (a 0.7.2 whitelist: a Java regex over whole names, ``a,b`` meaning ``a|b``), or
        those ``blacklist`` does not match, instead of what was subscribed before (one of
        the three). ``listener`` replaces the rebalance listener (None keeps the current
        one) and is told about the rebalance this call starts, the previous
        subscription's revocations included.

        On a running member this re-registers it as 0.7.2 does: its
        ``/consumers/<group>/ids/<id>`` node is deleted and created again with the new
        value, so every member of the group rebalances (Java ones too); partitions of
        topics no longer covered are revoked (committed, released), new ones assigned.
        It returns at once; the coordinator's task does it (a failure is raised once from
        the next read and retried). Records of revoked partitions may still be handed out
        until that rebalance revokes them. Before :meth:`start`, it only sets what
        :meth:`start` registers. Partitions registered at the time of the call are
        reset by ``auto_offset_reset``; ones that appear later are read from their
        beginning (for a topic subscribed before too: from when it was first subscribed).

        Raises :class:`~aiokafka07.errors.IllegalStateError` after :meth:`assign` (call
        :meth:`unsubscribe` first) or without a group, ``ValueError`` unless exactly one
        of ``topics`` / ``pattern`` / ``blacklist`` is given, ``TypeError`` for a
        ``topics`` string or a ``listener`` without the two callbacks,
        :class:`ConsumerStoppedError` once closed.
        """
        if self.closed:
            raise ConsumerStoppedError("the consumer is closed")
        if isinstance(topics, str):
            raise TypeError(f"topics must be a list of names, not the string {topics!r}")
        if self._mode == "assigned":
            raise IllegalStateError(
                "subscribe() after assign(): a consumer either balances a subscription in its "
                "group or reads partitions assigned by hand; call unsubscribe() first"
            )
        if self.group is None:
            raise IllegalStateError("subscribe() needs a group: give group= to Consumer")
        names = list(topics)
        if not (names or pattern or blacklist):
            raise ValueError("subscribe() needs topics, a pattern or a blacklist")
        subscription = _subscription(names, self._streams_per_topic, pattern, blacklist)
        assert subscription is not None
        if listener is not None:
            self._coordinator.listener = _check_listener(listener)
        self._mode = "subscribed"
        self._coordinator.request(subscription)

    def unsubscribe(self) -> None:
        """Consume nothing: on a running member, every partition is revoked (the listener
        is told; the positions are committed, the owner nodes released) and the member's
        ``ids`` node deleted, so the rest of the group rebalances without it; its
        ZooKeeper session stays open for a later :meth:`subscribe` or :meth:`assign`.
        Also drops a manual assignment. Returns at once (as :meth:`subscribe`)."""
        if self.closed:
            raise ConsumerStoppedError("the consumer is closed")
        self._mode = None
        self._coordinator.request(None)

    @property
    def subscription(self) -> SubscriptionView:
        """Call it: ``consumer.subscription()`` is the set of topics subscribed to (as
        aiokafka's): the static ones, or those a pattern matches in the member's last view
        of the cluster (its last rebalance, or :meth:`topics`); after :meth:`assign`, the
        topics of the assigned partitions; empty when unsubscribed. What was asked for
        last, even before the coordinator applied it. (Its attributes are those of
        :attr:`topic_subscription`, deprecated: see :class:`SubscriptionView`.)"""
        return SubscriptionView(self)

    @property
    def topic_subscription(self) -> Subscription | None:
        """The 0.7 :class:`~aiokafka07.group.Subscription` asked for last (topics with
        stream counts, or a filter; its ``registration()`` is the ``ids`` node's value),
        or None when unsubscribed or assigned by hand."""
        target = self._coordinator.wanted
        return target if isinstance(target, Subscription) else None

    def _subscribed_topics(self) -> set[str]:
        target = self._coordinator.wanted
        if target is None:
            return set()
        if not isinstance(target, Subscription):
            return {tp.topic for tp in target}
        return set(target.streams_per_topic(self._coordinator.known_topics))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly ``partitions`` (replacing an earlier assignment), without group
        membership: no registration under ``/consumers/<group>/ids``, no owner nodes, no
        rebalances and no listener calls; nothing stops other consumers (or group members)
        from reading the same partitions. Each starts at the group's committed offset when
        the consumer has a group, else (or without one) at ``auto_offset_reset``; a
        partition kept from the previous assignment keeps its position.

        Commits: with ``group=`` they are written to that group's offsets in ZooKeeper,
        exactly as a member's (auto-commit, :meth:`commit`, :meth:`close`), but unfenced:
        0.7 keeps offsets in ZooKeeper with no owner check, so two consumers assigned the
        same partition overwrite each other's progress, and a group member owning it
        would too. Without a group nothing is committed (:meth:`commit` raises
        :class:`~aiokafka07.errors.IllegalStateError`). The broker addresses are read at
        the call; a broker missing then is looked up in ZooKeeper when fetched.

        Returns at once (before :meth:`start`, :meth:`start` applies it). Raises
        :class:`~aiokafka07.errors.IllegalStateError` after :meth:`subscribe` (call
        :meth:`unsubscribe` first), ``TypeError`` for anything but TopicPartitions.
        """
        if self.closed:
            raise ConsumerStoppedError("the consumer is closed")
        wanted = frozenset(partitions)
        for tp in wanted:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"partitions must be TopicPartition, not {tp!r}")
        if self._mode == "subscribed":
            raise IllegalStateError(
                "assign() after subscribe(): a consumer either balances a subscription in its "
                "group or reads partitions assigned by hand; call unsubscribe() first"
            )
        self._mode = "assigned"
        self._coordinator.request(wanted)

    # -- the cluster ----------------------------------------------------------------------

    async def topics(self) -> set[str]:
        """Every topic ZooKeeper knows (the children of ``/brokers/topics``: topics some
        broker has registered; one whose brokers are all down stays listed, with no
        partitions). Also refreshes what :meth:`partitions_for_topic` answers from."""
        self._require_started()
        return set(await self._coordinator.refresh_topics())

    def partitions_for_topic(self, topic: str) -> set[TopicPartition] | None:
        """The partitions of ``topic`` registered in the member's last view of the cluster
        (a rebalance, a :meth:`subscribe`, or :meth:`topics`, which reads every topic):
        in 0.7 a partition is a partition number on one broker, so these are
        TopicPartitions, not numbers. None when the member has not read ``topic`` yet
        (as aiokafka without metadata for it): ``await topics()`` first."""
        partitions = self._coordinator.topic_partitions.get(topic)
        return None if partitions is None else set(partitions)

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """For each partition (owned or not), where to start reading so as to miss nothing
        written at or after its time (ms since the epoch), asked of its broker.

        Coarse: 0.7 messages carry no time. The broker answers from its segment files:
        the start offset of the newest segment last modified at or before the time (the
        log end when the time is now or later). So the offset is a segment start (a
        segment is up to ``log.file.size``, 1 GiB by default, of messages) and everything
        from there on is read, older messages included; it moves as the active segment
        is written (its modification time changes). When every segment was modified
        after the time (or the broker has no log of it), it is the oldest offset. Unlike
        aiokafka's ``OffsetAndTimestamp`` the value is the offset alone (``seek(tp,
        offset)``). ``ValueError`` for a negative time (0.7 reads -1 and -2 as latest and
        earliest)."""
        for tp, ms in timestamps.items():
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"partitions must be TopicPartition, not {tp!r}")
            if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
                raise ValueError(f"{tp.topic}/{tp.name}: the time must be ms >= 0, not {ms!r}")
        wanted = list(timestamps.items())
        found = await asyncio.gather(*(self._offsets.for_time(tp, ms) for tp, ms in wanted))
        return {tp: offset for (tp, _), offset in zip(wanted, found, strict=True)}

    def last_poll_timestamp(self, tp: TopicPartition) -> int | None:
        """When (ms since the epoch) the last fetch answer for an owned partition was taken
        in, as aiokafka: the last time :meth:`highwater` could change, whether or not it
        brought records; None before the first. :class:`~aiokafka07.errors.
        IllegalStateError` for a partition not owned."""
        return self._assignment.require(tp).last_poll_ms

    def _require_started(self) -> None:
        if self.closed:
            raise ConsumerStoppedError("the consumer is closed")
        if not self._started:
            raise IllegalStateError("start() the consumer first (it reads ZooKeeper)")

    # -- what the member is doing -----------------------------------------------------

    @property
    def rebalances(self) -> int:
        """Rebalances this member completed."""
        return self._coordinator.rebalances

    @property
    def metrics(self) -> ConsumerMetrics:
        """A snapshot: owned partitions with position, committed offset, last known log
        end and lag (bytes), and counters (see :class:`~aiokafka07.group.state.
        ConsumerMetrics`)."""
        coordinator = self._coordinator
        return ConsumerMetrics(
            consumer_id=self.consumer_id,
            generation=self._assignment.generation,
            rebalances=coordinator.rebalances,
            partitions={tp: _partition_metrics(s) for tp, s in self._assignment.partitions.items()},
            buffered_bytes=sum(stream.buffered_bytes for stream in self.streams),
            records=self._delivery.records,
            listener_errors=coordinator.listener_errors,
            fetcher_crashes=self._fetchers.crashes,
            commit_failures=coordinator.commit_failures,
            session_expiries=coordinator.session_expiries,
        )

    @property
    def pool_metrics(self) -> PoolMetrics:
        """The broker connections' counters, as of now (a snapshot of the member's
        :class:`~aiokafka07.ConnectionPool`)."""
        return self._pool.metrics

    def _wake_fetchers(self) -> None:
        self._fetchers.wake()


#: The group part of the consumer id of a consumer without a group (it is never written
#: to ZooKeeper: such a consumer only takes manual assignments).
_NO_GROUP = "nogroup"


def _as_list(records: Sequence[ConsumerRecord]) -> list[ConsumerRecord]:
    """A slice of a chunk's records as the list getmany hands out (a list's slice is one;
    columns build theirs)."""
    return records if isinstance(records, list) else list(records)


def _columns_of(chunk: Chunk) -> FetchedColumns:
    """The chunk's records as columns; records decoded before batches were asked for are
    copied into columns once, and the chunk reads from those from then on."""
    records = chunk.records
    if isinstance(records, FetchedColumns):
        return records
    state = chunk.state
    assert state is not None
    tp = state.tp
    columns = FetchedColumns.from_records(records, tp.topic, tp.broker_id, tp.partition, chunk.base)
    chunk.records = columns
    return columns


def _describe(target: Target) -> str:
    if target is None:
        return "none (subscribe() or assign() to consume)"
    if isinstance(target, Subscription):
        return target.registration()
    return "manual " + (", ".join(f"{tp.topic}/{tp.name}" for tp in sorted(target)) or "nothing")


class SubscriptionView:
    """What ``consumer.subscription`` is: call it, ``consumer.subscription()``, for the
    subscribed topics (aiokafka's ``subscription()``). Reading an attribute of it reaches
    the consumer's 0.7 :class:`~aiokafka07.group.Subscription`, which the attribute was
    until now; that is deprecated: use :attr:`Consumer.topic_subscription`."""

    __slots__ = ("_consumer",)

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    def __call__(self) -> set[str]:
        return self._consumer._subscribed_topics()

    def __getattr__(self, name: str) -> Any:
        warnings.warn(
            "Consumer.subscription as the Subscription object is deprecated: call "
            "consumer.subscription() for the topics, or use consumer.topic_subscription",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self._consumer.topic_subscription, name)

    def __repr__(self) -> str:
        return f"<subscription of {self._consumer.consumer_id}: {sorted(self())}>"


def _partition_metrics(state: PartitionState) -> PartitionMetrics:
    position = state.position
    highwater = state.highwater
    return PartitionMetrics(
        thread=state.thread,
        stream=state.stream.index,
        position=position,
        committed=state.committed,
        highwater=highwater,
        lag=None if highwater is None else max(0, highwater - position),
        fetch_size=state.fetch_size,
        paused=state.paused,
        halted=state.halted,
    )


def _check_listener(listener: object) -> RebalanceListener | None:
    """``listener`` (None too) if it has both callbacks, else
    :class:`~aiokafka07.errors.InvalidConfigError` (a TypeError) naming the missing one."""
    if listener is None:
        return None
    for method in ("on_partitions_revoked", "on_partitions_assigned"):
        if not callable(getattr(listener, method, None)):
            raise InvalidConfigError(
                f"listener must have the coroutine methods on_partitions_revoked and "
                f"on_partitions_assigned (a RebalanceListener); {listener!r} has no {method}"
            )
    return listener  # type: ignore[return-value]


def _subscription(
    topics: Sequence[str | Mapping[str, int]],
    streams: int,
    whitelist: str | None,
    blacklist: str | None,
) -> Subscription | None:
    """The subscription of topics, a whitelist or a blacklist (one; None: none given);
    every topic name is checked (:class:`~aiokafka07.errors.InvalidTopicError`: it becomes
    a ZooKeeper path component), every other mistake is :class:`InvalidConfigError`."""
    for name, value in (("whitelist", whitelist), ("blacklist", blacklist)):
        if value is not None and not isinstance(value, str):
            raise InvalidConfigError(f"{name} must be a str (a topic regex), not {value!r}")
    given = sum(bool(x) for x in (topics, whitelist, blacklist))
    if given == 0:
        return None
    if given != 1:
        raise InvalidConfigError("subscribe to topics, or a whitelist, or a blacklist")
    if whitelist:
        return Subscription.whitelist(whitelist, streams)
    if blacklist:
        return Subscription.blacklist(blacklist, streams)
    counts: dict[str, int] = {}
    for item in topics:
        if isinstance(item, str):
            counts[item] = streams
        elif isinstance(item, Mapping):
            counts.update(item)
        else:
            raise InvalidConfigError(
                f"topics are names or a map of name to stream count, not {item!r}"
            )
    for topic in counts:
        validate_topic(topic)
    return Subscription.of_topics(counts)

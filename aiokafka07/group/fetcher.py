"""Fetching for a group member: one task per broker, one MULTIFETCH at a time.

A :class:`Fetcher` reads only the partition states (:mod:`.state`): which partitions of
its broker are fetchable (owned, not paused, halted or fenced, their stream has room), from
which offset, how many bytes. It decodes each answer into a chunk of records for the
partition's stream, or queues a typed error for the application and halts the partition
(a corrupt message, a message larger than ``max_fetch_size``, a broker error code,
OffsetOutOfRange with ``auto_offset_reset="error"``). A fetch answer for a partition that
was revoked, fenced or sought meanwhile is dropped.

Fetchers run under the consumer's :class:`~aiokafka07.supervisor.Supervisor`
(:class:`Fetchers`): a connection failure is retried with a :class:`~aiokafka07.backoff.
Backoff` up to a bound; anything else (a malformed frame, a failing offset reset, a bug)
crashes the task, which is logged with its traceback, raised once by the streams of the
broker's partitions, and restarted after a backoff.

:class:`Offsets` answers OFFSETS questions (resets, seeks to the beginning or end, log
ends) for any partition through the consumer's connection pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..backoff import Backoff
from ..connection import BrokerAddress
from ..errors import (
    DeserializationError,
    KafkaConnectionError,
    KafkaError,
    OffsetOutOfRangeError,
    ProtocolError,
    error_for_code,
)
from ..fetch_size import FetchSizer
from ..pool import ConnectionPool
from ..protocol import EARLIEST, LATEST, FetchRequest, FetchResponse, decode_messages_into
from ..protocol.columns import MessageColumns, decode_columns
from ..protocol.messages import BytesLike
from ..record_batch import FetchedColumns
from ..records import ConsumerRecord, TopicPartition
from ..supervisor import CrashPolicy, Supervisor
from ..timeouts import wait_for
from ..znodes import read_brokers
from ..zookeeper import ZooKeeper
from .state import Assignment, PartitionState
from .streams import Delivery, Stream, shared_error

__all__ = ["FetchSettings", "Fetcher", "Fetchers", "Offsets"]

log = logging.getLogger("aiokafka07.group")

#: How long an idle fetcher (nothing fetchable) sleeps before it looks again on its own;
#: it is woken at once when a stream gets room, a partition is resumed or sought, or a
#: rebalance changes what it owns.
IDLE_RECHECK = 1.0
#: How long a fetcher that is no longer needed may take to stop.
STOP_TIMEOUT = 10.0
#: How many bytes one MULTIFETCH asks for, about (a partition whose fetch size is
#: larger is still fetched, alone).
REQUEST_BYTES = 1048576
#: What a record takes in memory besides its value's bytes (its tuple, the bytes object's
#: header), for the prefetch bound.
RECORD_OVERHEAD = 100
#: Consecutive connection failures a fetcher retries before it crashes (and is
#: restarted by its supervisor, the error reaching the application).
CONNECTION_ATTEMPTS = 8


class Offsets:
    """OFFSETS requests for a group member: resets, seeks and log ends.

    ``auto_offset_reset`` decides where a partition without a valid offset starts:
    ``"smallest"``, ``"largest"``, or ``"error"`` (raise OffsetOutOfRangeError).
    """

    def __init__(
        self,
        pool: ConnectionPool,
        assignment: Assignment,
        zookeeper: ZooKeeper,
        auto_offset_reset: str,
    ) -> None:
        self.pool = pool
        self.assignment = assignment
        self.zookeeper = zookeeper
        self.auto_offset_reset = auto_offset_reset

    async def address(self, broker_id: int) -> BrokerAddress:
        address = self.assignment.brokers.get(broker_id)
        if address is None:  # not one of ours: ask ZooKeeper where it is
            address = (await read_brokers(self.zookeeper)).get(broker_id)
        if address is None:
            raise KafkaConnectionError(f"broker {broker_id} is not registered")
        return address

    async def before(self, tp: TopicPartition, time: int) -> int:
        """The offset before ``time`` (EARLIEST, LATEST or ms) of ``tp``; 0 if none."""
        conn = await self.pool.connection(await self.address(tp.broker_id))
        offsets = await conn.offsets(tp.topic, tp.partition, time, 1)
        return offsets[0] if offsets else 0

    async def for_time(self, tp: TopicPartition, time_ms: int) -> int:
        """Where to start reading ``tp`` so as to miss nothing written at or after
        ``time_ms``: 0.7's OFFSETS answer for that time, the start of the newest segment
        last modified at or before it (the log end when ``time_ms`` is now or later);
        when every segment was modified after it (or the broker has no log), the oldest
        offset."""
        conn = await self.pool.connection(await self.address(tp.broker_id))
        offsets = await conn.offsets(tp.topic, tp.partition, time_ms, 1)
        return offsets[0] if offsets else await self.before(tp, EARLIEST)

    async def reset(self, tp: TopicPartition, bad_offset: int | None) -> int:
        """Where ``tp`` starts without a valid offset (``bad_offset``: the one the broker
        refused, None: nothing committed), per ``auto_offset_reset``."""
        if self.auto_offset_reset == "error":
            raise OffsetOutOfRangeError(
                f"{tp.topic}/{tp.name}: no valid offset (offset {bad_offset})", offset=bad_offset
            )
        time = EARLIEST if self.auto_offset_reset == "smallest" else LATEST
        offset = await self.before(tp, time)
        if bad_offset is not None:
            log.warning(
                "%s/%s: offset %d out of range, reset to %d", tp.topic, tp.name, bad_offset, offset
            )
        return offset


@dataclass(frozen=True)
class FetchSettings:
    """What every fetcher of one consumer is configured with."""

    consumer_id: str
    max_fetch_size: int
    max_decompressed_bytes: int  # the most one fetched set may decompress to
    poll_interval: float  # seconds after a MULTIFETCH that brought nothing
    shallow: bool
    value_deserializer: Callable[[bytes], Any] | None
    connection_backoff: tuple[float, float]  # seconds: first delay, cap


class Fetcher:
    """Fetches the owned partitions of one broker (see the module docstring)."""

    def __init__(
        self, broker_id: int, assignment: Assignment, delivery: Delivery, pool: ConnectionPool,
        offsets: Offsets, settings: FetchSettings,
    ) -> None:  # fmt: skip
        self.broker_id = broker_id
        self.assignment = assignment
        self.delivery = delivery
        self.pool = pool
        self.offsets = offsets
        self.settings = settings
        self._wake = asyncio.Event()
        self._turn = 0

    def wake(self) -> None:
        """Look at the states again now (room, resume, seek, rebalance)."""
        self._wake.set()

    async def run(self) -> None:
        """Fetch until cancelled; raise (crash) on anything but a bounded run of
        connection failures."""
        first, cap = self.settings.connection_backoff
        failures = Backoff(first, cap, max_attempts=CONNECTION_ATTEMPTS)
        while True:
            states = self._fetchable()
            if not states or not self.delivery.leased():
                await self._idle(IDLE_RECHECK)
                continue
            try:
                got = await self._fetch(states)
            except KafkaConnectionError as exc:
                delay = failures.failed()
                if failures.exhausted:
                    raise
                log.warning(
                    "%s: fetching from broker %d failed (%d in a row; again in %.2f s): %s",
                    self.settings.consumer_id,
                    self.broker_id,
                    failures.failures,
                    delay,
                    exc,
                )
                await self._idle(delay)
                continue
            failures.succeeded()
            if not got:
                await self._idle(self.settings.poll_interval)

    def _fetchable(self) -> list[PartitionState]:
        """The partitions to fetch now: fetchable ones whose stream has room for what they
        may bring (so what is decoded and waiting stays near ``max_prefetch_bytes``), up
        to about :data:`REQUEST_BYTES` per MULTIFETCH (an answer that stays small is
        cheaper to take in than one large one). A partition that was at its log end
        brings nothing and always comes along. The order turns every fetch, so the
        partitions share the room."""
        states = self.assignment.of_broker(self.broker_id)
        if not states:
            return []
        self._turn = turn = (self._turn + 1) % len(states)
        room: dict[Stream, int] = {}
        chosen: list[PartitionState] = []
        asked = 0
        for state in states[turn:] + states[:turn]:
            if not state.fetchable:
                continue
            stream = state.stream
            left = room.get(stream)
            if left is None:
                left = stream.room()
            at_end = state.highwater is not None and state.fetch_offset >= state.highwater
            may_bring = 0 if at_end else state.fetch_size
            if left <= 0 or (asked and asked + may_bring > REQUEST_BYTES):
                continue
            chosen.append(state)
            asked += may_bring
            room[stream] = left - may_bring
        return chosen

    async def _idle(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(self._wake.wait(), seconds)

    async def _fetch(self, states: list[PartitionState]) -> bool:
        # (A broker the last cluster view lacks is looked up in ZooKeeper.)
        address = await self.offsets.address(self.broker_id)
        conn = await self.pool.connection(address)
        requests = [
            FetchRequest(s.tp.topic, s.tp.partition, s.fetch_offset, s.fetch_size) for s in states
        ]
        epochs = [s.epoch for s in states]
        response = await conn.multifetch(requests)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s: fetched %d bytes of %d partitions from %s",
                self.settings.consumer_id,
                sum(len(answer.message_set) for answer in response.responses),
                len(requests),
                address,
            )
        if not self.delivery.leased():
            return True  # (taken in again once the session is confirmed alive)
        got = False
        now_ms = int(time.time() * 1000)
        for state, epoch, request, answer in zip(
            states, epochs, requests, response.responses, strict=True
        ):
            if state.epoch == epoch and self.assignment.holds(state):
                state.last_poll_ms = now_ms
                got |= await self._deliver(state, request, answer)
        return got

    async def _deliver(
        self, state: PartitionState, request: FetchRequest, answer: FetchResponse
    ) -> bool:
        """Hand one partition's answer to its stream; True if records came."""
        tp = state.tp
        code = answer.error_code
        if code == OffsetOutOfRangeError.code:
            epoch = state.epoch
            try:
                offset = await self.offsets.reset(tp, request.offset)
            except OffsetOutOfRangeError as exc:
                self._halt(state, exc)
                return False
            if state.epoch == epoch and self.assignment.holds(state):
                self._move(state, offset)
            return False
        if code:
            error = error_for_code(code)
            self._halt(
                state,
                error(
                    f"{tp.topic}/{tp.name}: broker error code {code} ({error.__name__}) "
                    f"fetching offset {request.offset}"
                ),
            )
            return False
        data = answer.message_set
        try:
            records, valid = self._decode(tp, data, request.offset)
        except ProtocolError as exc:
            declared = FetchSizer.incomplete_first(exc)
            if declared is not None:
                return await self._grow(state, declared, len(data))
            # The messages before the bad entry are good: hand them out once, then the
            # error, at the bad entry's offset (the position after those messages).
            good = exc.decoded.valid_bytes if exc.decoded is not None else 0
            if good:
                self._put(
                    state,
                    self._good(tp, exc.decoded.messages, request.offset),
                    good,
                    request.offset,
                )
            exc.args = (f"{tp.topic}/{tp.name} at offset {state.fetch_offset}: {exc}",)
            self._halt(state, exc)
            return good > 0
        end = request.offset + len(data)
        if len(data) < request.max_size or state.highwater is None or end > state.highwater:
            state.highwater = end  # a short answer reached the log end: exact
        if not valid:
            if data:  # fewer than 4 bytes: a cut entry, or a tiny fetch size
                return await self._grow(state, None, len(data))
            return False
        if self.settings.value_deserializer is not None:
            return self._put_deserialized(state, records, valid, request.offset)
        self._put(state, records, valid, request.offset)
        return True

    def _columnar(self) -> bool:
        """Whether to decode into columns: batches were asked for, and the records are
        the messages' own bytes (not shallow wrappers, no value deserializer)."""
        settings = self.settings
        return (
            self.delivery.columnar and not settings.shallow and settings.value_deserializer is None
        )

    def _decode(
        self, tp: TopicPartition, data: BytesLike, offset: int
    ) -> tuple[Sequence[ConsumerRecord], int]:
        """The messages of one fetched set at ``offset`` and its valid byte count: as
        columns when batches were asked for (:meth:`_columnar`), else as records."""
        max_decompressed = self.settings.max_decompressed_bytes
        if self._columnar():
            columns, valid = decode_columns(data, offset, max_decompressed=max_decompressed)
            return FetchedColumns(tp.topic, tp.broker_id, tp.partition, columns, offset), valid
        records: list[ConsumerRecord] = []
        valid = decode_messages_into(
            records,
            data,
            offset,
            shallow=self.settings.shallow,
            message_type=ConsumerRecord,
            prefix=(tp.topic, tp.broker_id, tp.partition),
            max_decompressed=max_decompressed,
        )
        return records, valid

    @staticmethod
    def _good(tp: TopicPartition, decoded: Any, offset: int) -> Sequence[ConsumerRecord]:
        """What a ProtocolError's ``decoded`` holds before the bad entry, as a chunk's
        records (columns decoded by :meth:`_decode`, or a list of records)."""
        if isinstance(decoded, MessageColumns):
            return FetchedColumns(tp.topic, tp.broker_id, tp.partition, decoded, offset)
        return list(decoded)

    async def _grow(self, state: PartitionState, declared: int | None, received: int) -> bool:
        """A fetch brought no complete message (its first entry declares ``declared``
        bytes; None: fewer than 4 came): fetch again at once, larger (True), or halt the
        partition with the typed error :class:`~aiokafka07.fetch_size.FetchSizer` decides
        on (an offset that is not a message start, a message over ``max_fetch_size``, too
        many fetches at one offset). The log end is asked only when the fetch came back
        full."""
        tp, sizer, offset, epoch = state.tp, state.sizer, state.fetch_offset, state.epoch
        try:
            log_end = (
                await self.offsets.before(tp, LATEST) if sizer.needs_log_end(received) else None
            )
            if state.epoch != epoch or not self.assignment.holds(state):
                return False  # sought or revoked meanwhile
            size = sizer.grow(offset, declared, received, log_end)
        except KafkaConnectionError as exc:
            log.warning("%s/%s: asking the log end failed: %s", tp.topic, tp.name, exc)
            return False  # fetched again after the backoff
        except KafkaError as exc:
            self._halt(state, exc)
            return False
        log.info(
            "%s/%s: a %s-byte message at offset %d; fetch size now %d",
            tp.topic,
            tp.name,
            "?" if declared is None else declared,
            offset,
            size,
        )
        return True

    def _put(
        self, state: PartitionState, records: Sequence[ConsumerRecord], size: int, base: int
    ) -> None:
        state.fetch_offset = base + size
        # The prefetch bound counts what the records take in memory, at least roughly: a
        # compressed set decodes into far more than its bytes on the wire.
        if isinstance(records, FetchedColumns):
            held = records.values.nbytes + 12 * len(records)
        else:
            held = len(records) * RECORD_OVERHEAD
        state.stream.put(state, records, max(size, held), base)

    def _put_deserialized(
        self, state: PartitionState, records: Sequence[ConsumerRecord], valid: int, base: int
    ) -> bool:
        deserialize = self.settings.value_deserializer
        assert deserialize is not None
        out: list[ConsumerRecord] = []
        for index, record in enumerate(records):
            try:
                out.append(record._replace(value=deserialize(record.value)))
            except Exception as exc:
                tp = state.tp
                at = records[index - 1].offset if index else base
                log.error(
                    "%s: the value deserializer raised for %s/%s at offset %d",
                    self.settings.consumer_id,
                    tp.topic,
                    tp.name,
                    at,
                    exc_info=True,
                )
                if out:
                    self._put(state, out, at - base, base)
                error = DeserializationError(
                    f"{tp.topic}/{tp.name} at offset {at}: the value deserializer raised "
                    f"{type(exc).__name__}: {exc}",
                    record=record,
                )
                error.__cause__ = exc
                self._halt(state, error)
                return bool(out)
        self._put(state, out, valid, base)
        return True

    def _move(self, state: PartitionState, offset: int) -> None:
        """Continue at ``offset`` (a reset): the position follows once what is buffered
        before it is handed out."""
        state.fetch_offset = offset
        if state.buffered or state.reading is not None or state.parked:
            state.stream.put(state, [], 0, offset)
        else:
            state.consumed = offset

    def _halt(self, state: PartitionState, exc: KafkaError) -> None:
        """Queue ``exc`` behind the partition's records and stop fetching it until it is
        sought (ZOOKEEPER §5.1: an error chunk, after which 0.7.2's fetcher stops)."""
        state.halted = True
        state.stream.put_error(exc, state)
        log.warning(
            "%s: %s; not fetched again until seek() or a rebalance",
            self.settings.consumer_id,
            exc,
        )


class Fetchers:
    """The fetcher tasks of one consumer, one per broker it owns partitions of.

    Each runs under ``supervisor`` with :attr:`CrashPolicy.RESTART`: a crash is logged
    with its traceback by the supervisor, raised once by every stream holding one of the
    broker's partitions, counted in ``crashes``, and the fetcher restarts after
    ``restart_backoff``; when it gives up, the broker's partitions are fetched again only
    after a ``seek()`` or a rebalance.
    """

    def __init__(
        self,
        supervisor: Supervisor,
        assignment: Assignment,
        make: Callable[[int], Fetcher],
        restart_backoff: tuple[float, float],
    ) -> None:
        self.supervisor = supervisor
        self.assignment = assignment
        self.make = make
        self.restart_backoff = restart_backoff
        self.crashes = 0
        self._running: dict[int, tuple[Fetcher, asyncio.Task[None]]] = {}

    def wake(self) -> None:
        for fetcher, _ in self._running.values():
            fetcher.wake()

    def ensure(self, broker_id: int) -> None:
        """Run a fetcher for ``broker_id`` (again, if the last one gave up)."""
        running = self._running.get(broker_id)
        if running is not None and not running[1].done():
            running[0].wake()
            return
        if self.supervisor.closed:
            return
        fetcher = self.make(broker_id)
        task = self.supervisor.spawn(
            f"fetch-{broker_id}",
            fetcher.run,
            policy=CrashPolicy.RESTART,
            on_crash=lambda exc: self._crashed(broker_id, exc),
            on_give_up=lambda exc: self._gave_up(broker_id, exc),
            backoff=Backoff(*self.restart_backoff),
        )
        self._running[broker_id] = (fetcher, task)

    async def sync(self) -> None:
        """Fetchers for exactly the brokers of the owned partitions."""
        wanted = self.assignment.broker_ids()
        for broker_id in sorted(wanted):
            self.ensure(broker_id)
        stopping = [self._running.pop(broker_id)[1] for broker_id in set(self._running) - wanted]
        for task in stopping:
            task.cancel()
        if stopping:
            _, pending = await asyncio.wait(stopping, timeout=STOP_TIMEOUT)
            for task in pending:
                log.warning("%s did not stop within %g s", task.get_name(), STOP_TIMEOUT)

    def _crashed(self, broker_id: int, exc: BaseException) -> None:
        self.crashes += 1
        streams = {s.stream for s in self.assignment.of_broker(broker_id)}
        chunk = shared_error(exc)
        for stream in streams:
            stream.put_chunk(chunk)

    def _gave_up(self, broker_id: int, exc: BaseException) -> None:
        log.error(
            "the fetcher of broker %d gave up after repeated crashes (last: %r); its "
            "partitions are fetched again after seek() or a rebalance",
            broker_id,
            exc,
        )

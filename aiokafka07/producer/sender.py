"""The sender: the only part of the producer that touches connections.

One supervised task per broker takes ready batches from the accumulator, encodes them as
one PRODUCE / MULTIPRODUCE, and submits it to the broker's connection. Submitting is a
plain function call on the connection (:meth:`BrokerConnection.submit_produce`), and a
broker has one sender, so requests reach the broker in the order they were taken: a
partition's batches stay in order without any lock. The connection's flow control
(``drain()``) holds the sender back when the socket does not keep up, and the
accumulator's buffer then holds the callers back.

**Writing and confirming are separate.** Up to ``max_in_flight`` requests per broker
may be unprocessed: a request holds its place from submission until the broker is
proven to have processed it (the answer to a request queued behind it arrived), not
until it is confirmed. A confirmation waits for the broker's flush (every
``log.flush.interval`` messages, or on its timer), and while it trails the writes go on,
bounded only by the producer's buffer (messages count there until their outcome). Under
steady load a partition reaches its flush count and confirmations come at the broker's
pace; no count of unconfirmed requests and no flush timer holds the pipeline.

Every outcome is classified, in one place (:meth:`Sender.settle`):

* **done**: the broker confirmed (or, without confirm, the frame was written);
* **doubt**: the connection closed after the request was written and before it was
  confirmed. The request waits, as a :class:`~.settlement.Doubt`, until the broker
  answers again; then, before anything new is written to it, its log ends are read and
  settle it (:mod:`.settlement`): appended (done), absent (sent again, in every mode),
  processed by a broker that lived on (read again, nothing new written meanwhile, until
  its flush shows it or its confirmation would have given up) or unknown (sent again
  with ``on_unconfirmed="retry"``; with ``"fail"`` it fails with
  :class:`~aiokafka07.errors.DeliveryUnknownError`);
* **retry**: the request never reached the broker (``maybe_delivered`` False), or was
  proven absent. After a :class:`~aiokafka07.backoff.Backoff` delay, one retry task
  re-reads the cluster and routes the batch again, whatever the cause (a refused
  connection, no live broker, a broker gone from ZooKeeper), until its delivery timeout
  (or the optional ``retries`` cap). A batch that shared a refusal (a request, or a
  connection end with other requests on it, that the broker closed the connection on)
  goes alone, so that one bad entry cannot take the others down twice; a batch a
  broker closed the connection on twice while it went alone fails. Every other retry is
  batched with the rest again. A broker that cannot be reached fails every batch ready
  for it at once, one attempt each; its sender then waits a backoff of its own before
  the next request (new messages fill whole batches meanwhile), except once the
  producer is closing;
* **fail**: anything else, with the error as the cause. An error that is not a
  :class:`~aiokafka07.errors.KafkaError` (a bug) is logged once with its traceback.

**Delivery timeout.** Every batch ends within ``delivery_timeout_ms`` of its first
message's ``send()`` (later messages of the batch were accepted later: they end sooner
than that bound). A sweep fails what is still waiting then: in the buffer or for a retry
with :class:`~aiokafka07.errors.DeliveryTimeoutError` (not appended; the last attempt's
error as its cause), and what was written and is still unconfirmed or in doubt with
:class:`~aiokafka07.errors.DeliveryUnknownError`.

A sender, the retry task or the sweep that crashes anyway fails the work it held with
the crash's error; the next message starts a new sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
import time
from collections.abc import Iterator
from typing import Any

from ..backoff import Backoff
from ..cluster import Cluster
from ..connection import BrokerConnection
from ..errors import (
    DeliveryTimeoutError,
    DeliveryUnknownError,
    InvalidPartitionError,
    KafkaConnectionError,
    KafkaError,
    NoBrokersError,
    ProduceNotConfirmedError,
    ProducerClosedError,
    RequestTimeoutError,
)
from ..pool import ConnectionPool
from ..protocol import LATEST
from ..supervisor import CrashPolicy, Supervisor
from .accumulator import Accumulator, BrokerQueue
from .batch import Batch, Route, untrack_list
from .encoding import MessageSetEncoder
from .results import Outcomes, ProduceResult, ProducerMetrics
from .router import Router
from .settlement import Doubt, Verdict

__all__ = ["Sender"]

log = logging.getLogger("aiokafka07.producer")

#: A batch the broker closed the connection on this many times while it went alone,
#: the broker answering again at once each time, or that was found twice for a partition
#: its broker does not have, fails: the broker refuses that batch.
MAX_ALONE_REFUSALS = 2
_CLOSED_UNSETTLED = "the producer closed before its broker's log end could settle it"


class _Submitted:
    """A request handed to a connection: its broker, its batches, and whether it still
    holds one of the broker's ``max_in_flight`` places (until it is processed)."""

    __slots__ = ("batches", "broker_id", "holds")

    def __init__(self, broker_id: int, batches: list[Batch]) -> None:
        self.broker_id = broker_id
        self.batches = batches
        self.holds = False


class Sender:
    """Per-broker sender tasks, outcome classification, settlement of closed
    connections, retries and delivery deadlines (module docstring)."""

    def __init__(
        self,
        *,
        accumulator: Accumulator,
        router: Router,
        encoder: MessageSetEncoder,
        cluster: Cluster,
        pool: ConnectionPool,
        outcomes: Outcomes,
        metrics: ProducerMetrics,
        supervisor: Supervisor,
        confirm: bool,
        retry_unconfirmed: bool,
        retries: int | None,
        backoff: Backoff,
        max_in_flight: int,
        max_request_bytes: int,
        delivery_timeout: float,
    ) -> None:
        self.accumulator = accumulator
        self.router = router
        self.encoder = encoder
        self.cluster = cluster
        self.pool = pool
        self.outcomes = outcomes
        self.metrics = metrics
        self.supervisor = supervisor
        self.confirm = confirm
        self.retry_unconfirmed = retry_unconfirmed
        self.retries = retries
        self.backoff = backoff
        self.max_in_flight = max_in_flight
        self.max_request_bytes = max_request_bytes
        #: Seconds from a batch's first ``send()`` to its end, at the latest.
        self.delivery_timeout = delivery_timeout
        self.closed = False
        # Per broker: batches taken and not yet submitted, requests holding a place
        # (unprocessed), and an event set whenever a place frees.
        self._taken: dict[int, list[Batch]] = {}
        self._in_flight: dict[int, int] = {}
        self._slot: dict[int, asyncio.Event] = {}
        self._requests: dict[asyncio.Future[Any], _Submitted] = {}
        #: The connections each broker's requests went on (the closed ones until looked at).
        self._conns: dict[int, set[BrokerConnection]] = {}
        # Per broker: requests whose connection closed before they were confirmed, to
        # settle from the log ends before anything new is written to it.
        self._doubts: dict[int, list[Doubt]] = {}
        # Per broker: failures in a row to hand it a request (it cannot be reached).
        self._unreachable: dict[int, Backoff] = {}
        # Batches waiting to be routed again: (due time, sequence, batch).
        self._retry_queue: list[tuple[float, int, Batch]] = []
        self._retry_seq = itertools.count()
        self._retry_wakeup = asyncio.Event()
        self._retrier: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None

    # -- tasks -----------------------------------------------------------------------

    def start(self, broker_id: int) -> None:
        """A broker got its first batch: start its sender (``on_new_queue``)."""
        if self.closed:
            return  # closing: what is queued is failed by close()
        self._in_flight.setdefault(broker_id, 0)
        self._slot.setdefault(broker_id, asyncio.Event())
        queue = self.accumulator.queues[broker_id]
        self.supervisor.spawn(
            f"sender-{broker_id}",
            self._run(queue),
            policy=CrashPolicy.ESCALATE,
            on_crash=lambda exc: self._sender_crashed(broker_id, exc),
        )
        if self._sweeper is None:
            self._sweeper = self.supervisor.spawn(
                "delivery-timeout", self._sweep_loop, policy=CrashPolicy.RESTART
            )

    def _sender_crashed(self, broker_id: int, exc: BaseException) -> None:
        """Fail what the crashed sender held and what waited for it."""
        held = self._taken.pop(broker_id, [])
        for batch in [*held, *self.accumulator.drop_queue(broker_id)]:
            self.outcomes.fail(batch, exc)
        for doubt in self._doubts.pop(broker_id, []):
            for batch in doubt.batches:
                self.outcomes.fail(batch, _unknown(doubt.error, f"its sender crashed ({exc!r})"))

    async def _run(self, queue: BrokerQueue) -> None:
        broker_id = queue.broker_id
        while True:
            if self._has_doubts(broker_id):
                await self._settle_doubts(broker_id)
                continue
            batches = await self.accumulator.next_request(queue, self.max_request_bytes)
            if not batches:
                continue  # called for doubts
            self._taken[broker_id] = batches
            await self._send(broker_id, batches)
            self._taken.pop(broker_id, None)

    async def _wait_for_slot(self, broker_id: int, limit: int) -> None:
        """Wait until fewer than ``limit`` requests are unprocessed on the broker (each
        is within the request timeout)."""
        slot = self._slot[broker_id]
        while self._in_flight[broker_id] >= limit:
            slot.clear()
            await slot.wait()

    def _release(self, entry: _Submitted) -> None:
        """``entry`` was processed, or ended: its place is free."""
        if entry.holds:
            entry.holds = False
            self._in_flight[entry.broker_id] -= 1
            self._slot[entry.broker_id].set()

    # -- connecting ------------------------------------------------------------------

    async def _connect(self, broker_id: int) -> BrokerConnection:
        """A connection to the broker, with its closed connections' requests classified
        first (their doubts then exist before anything is written on the new one).
        Raises :class:`KafkaConnectionError` if it cannot be reached; a refused attempt
        completes the view of the doubts that existed before it (the process that held
        their connection is gone, and the one answering next recovered its log)."""
        self._collect(broker_id)
        before = list(self._doubts.get(broker_id, ()))
        address = self.cluster.brokers.get(broker_id)
        if address is None:
            raise KafkaConnectionError(f"broker {broker_id} is not in the cluster")
        try:
            conn = await self.pool.connection(address)
        except KafkaConnectionError as exc:
            if isinstance(exc.__cause__, ConnectionRefusedError):
                for doubt in before:
                    doubt.complete = True
            raise
        self._collect(broker_id)
        self._conns.setdefault(broker_id, set()).add(conn)
        return conn

    def _collect(self, broker_id: int) -> None:
        """Classify the broker's requests that ended and whose done callbacks have not
        run yet, once the connection they went on closed (it fails them all at once);
        nothing to do (and no look at every request) while it is open."""
        conns = self._conns.get(broker_id)
        if not conns or not any(conn.closed for conn in conns):
            return
        conns -= {conn for conn in conns if conn.closed}
        for future, entry in list(self._requests.items()):
            if entry.broker_id == broker_id and future.done():
                self._completed(future)

    async def _unreachable_wait(self, broker_id: int, exc: KafkaConnectionError) -> None:
        """The broker cannot be reached: every batch ready for it counts an attempt
        now (one request's worth per backoff made a queue of n batches take n times as
        long to end), then its sender waits its own backoff, unless closing (the
        retries keep their own pace then)."""
        taken = self._taken.pop(broker_id, [])
        self.settle(broker_id, [*taken, *self.accumulator.take_ready(broker_id)], exc)
        if self.accumulator.closing and not self._doubts.get(broker_id):
            return
        # Not again at once: meanwhile new messages fill whole batches, instead of a
        # batch per linger going round the retries while the broker is away.
        await self._back_off(broker_id)

    async def _back_off(self, broker_id: int) -> None:
        """Wait the broker's own backoff (it failed to take a request, or its log ends
        could not be read), longer at each failure in a row."""
        unreachable = self._unreachable.setdefault(
            broker_id, Backoff(self.backoff.base, self.backoff.cap)
        )
        await asyncio.sleep(unreachable.failed())

    # -- sending ---------------------------------------------------------------------

    async def _send(self, broker_id: int, batches: list[Batch]) -> None:
        isolated = batches[0].isolated
        # An isolated batch goes alone on the connection too: a request pipelined
        # behind a refused one would be lost with it.
        await self._wait_for_slot(broker_id, 1 if isolated else self.max_in_flight)
        batches = self._taken[broker_id] = [b for b in batches if not b.ended]
        if not batches:
            return  # their delivery time ran out meanwhile
        try:
            conn = await self._connect(broker_id)
        except KafkaConnectionError as exc:
            await self._unreachable_wait(broker_id, exc)
            return
        if self._has_doubts(broker_id):
            # A connection closed before confirming requests: their log ends are read
            # before this request adds to them.
            if not await self._settle_on(broker_id, conn):
                self._taken.pop(broker_id, None)
                error = KafkaConnectionError(
                    f"the connection to broker {broker_id} closed before the request was written",
                )
                self.settle(broker_id, batches, error)
                return
            batches = self._taken[broker_id] = [b for b in batches if not b.ended]
            if not batches:
                return
        entry = _Submitted(broker_id, batches)
        for batch in batches:  # sealed: off the collector's lists until completed
            untrack_list(batch.values)
            untrack_list(batch.futures)
        try:
            frame = self.encoder.frame(batches)
            if self.confirm:
                await conn.prepare_confirm(frame)  # for partition -1: learns the count
            # A place until the broker processed it (confirm), or wrote it (without).
            entry.holds = True
            self._in_flight[broker_id] += 1
            processed = functools.partial(self._release, entry) if self.confirm else None
            future = conn.submit_produce(frame, confirm=self.confirm, processed=processed)
        except Exception as exc:
            self._release(entry)
            self._taken.pop(broker_id, None)
            self.settle(broker_id, batches, exc)
            if not self.accumulator.closing:
                await self._back_off(broker_id)
            return
        backoff = self._unreachable.get(broker_id)
        if backoff is not None:
            backoff.succeeded()
        self._taken.pop(broker_id, None)
        self._requests[future] = entry
        future.add_done_callback(self._completed)
        self.metrics.requests_sent += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "producing to %s: %d entries, %d messages, %d bytes of payload",
                conn.address,
                len(batches),
                sum(b.count for b in batches),
                sum(b.size for b in batches),
            )
        with contextlib.suppress(KafkaConnectionError):
            await conn.drain()  # flow control; a failure reaches the request's future
        if isolated:
            # Alone until the broker processed it (the answer to a request behind it
            # proves that): a refusal closes the connection, and nothing pipelined
            # behind it may be lost with it. Its confirmation may take a flush longer.
            batch = batches[0]
            with contextlib.suppress(KafkaError):
                await conn.offsets(batch.topic, max(batch.partition, 0), LATEST)

    def _completed(self, future: asyncio.Future[Any]) -> None:
        """A request ended (a done callback: nothing may escape it)."""
        entry = self._requests.pop(future, None)
        if entry is None:
            return  # classified already, or failed by close()
        self._release(entry)
        try:
            if future.cancelled():
                exc: BaseException | None = ProduceNotConfirmedError(
                    "the request was cancelled before it was confirmed", maybe_delivered=True
                )
            else:
                exc = future.exception()
            self.settle(entry.broker_id, entry.batches, exc)
        except Exception as bug:
            log.exception("classifying the outcome of a produce failed")
            for batch in entry.batches:
                self.outcomes.fail(batch, bug)

    # -- outcomes --------------------------------------------------------------------

    def settle(self, broker_id: int, batches: list[Batch], exc: BaseException | None) -> None:
        """Classify a request's outcome into done / doubt / retry / fail (module
        docstring)."""
        if exc is None:
            for batch in batches:
                result = ProduceResult(batch.topic, broker_id, batch.partition, self.confirm)
                self.outcomes.deliver(batch, result)
            return
        address = self.cluster.brokers.get(broker_id) or f"broker {broker_id}"
        if isinstance(exc, ProduceNotConfirmedError) and exc.processed:
            # The broker processed the request; what its log shows is delivered, what it
            # does not is failed, not retried: it drops a message over its
            # max.message.size every time (and one that shows up late is in the log).
            log.warning("produce to %s not confirmed: %s", address, exc)
            for batch in batches:
                if exc.partitions is None or (batch.topic, batch.partition) in exc.partitions:
                    self.outcomes.fail(batch, exc)
                else:
                    result = ProduceResult(batch.topic, broker_id, batch.partition, True)
                    self.outcomes.deliver(batch, result)
            return
        if isinstance(exc, KafkaConnectionError):
            refused = isinstance(exc, ProduceNotConfirmedError) and exc.refused
            shared = refused and self._share_refusal(exc)
            alone = len(batches) == 1 and batches[0].isolated
            if refused:
                # Only a refusal may be one entry's fault: then each goes alone (and the
                # one refused alone again stays alone). Any other failure says nothing of
                # the entries and leaves them as they were.
                for batch in batches:
                    batch.isolated = len(batches) > 1 or batch.isolated or shared
            if exc.maybe_delivered and exc.claims is not None and self.confirm:
                log.warning(
                    "produce to %s not confirmed before the connection closed (%s): its "
                    "log ends will settle it",
                    address,
                    exc,
                )
                self._doubt(broker_id, Doubt(batches, exc.claims, exc, alone=refused and alone))
                return
            retriable = not exc.maybe_delivered or (
                self.retry_unconfirmed
                and isinstance(exc, (ProduceNotConfirmedError, RequestTimeoutError))
            )
            log.warning("produce to %s failed (%s)", address, exc)
            for batch in batches:
                if retriable:
                    if exc.maybe_delivered:
                        batch.doubtful = True
                    self.retry(batch, exc)
                else:
                    self.outcomes.fail(batch, exc)
            return
        if isinstance(exc, KafkaError):
            log.warning("produce to %s refused: %s", address, exc)
        else:
            log.error("producing to %s failed unexpectedly", address, exc_info=exc)
        for batch in batches:
            self.outcomes.fail(batch, exc)

    def _share_refusal(self, exc: BaseException) -> bool:
        """Whether the connection end that refused this request failed other requests
        too (pipelined behind it or ahead of it: which one the broker refused cannot be
        known). Their batches are marked isolated now, before their own outcomes are
        classified (their done callbacks run later in this loop iteration), so that
        every batch of a shared refusal goes alone, as those of one multi-entry
        request do."""
        cause = exc.__cause__
        if cause is None:
            return False
        shared = False
        for future, entry in self._requests.items():
            if not future.done() or future.cancelled():
                continue
            other = future.exception()
            if (
                isinstance(other, ProduceNotConfirmedError)
                and other.refused
                and other.__cause__ is cause
            ):
                shared = True
                for batch in entry.batches:
                    batch.isolated = True
        return shared

    # -- settling closed connections -------------------------------------------------

    def _has_doubts(self, broker_id: int) -> bool:
        """Whether the broker has doubts with a batch not ended (the others, ended by
        their delivery timeout, are dropped here)."""
        doubts = self._doubts.get(broker_id)
        if not doubts:
            return False
        doubts[:] = [d for d in doubts if not all(b.ended for b in d.batches)]
        return bool(doubts)

    def _doubt(self, broker_id: int, doubt: Doubt) -> None:
        """Keep ``doubt`` until its broker's log ends can be read; call its sender.
        (Once the producer stopped, nothing will read them: it fails as unknown.)"""
        if self.closed:
            for batch in doubt.batches:
                self.outcomes.fail(batch, _unknown(doubt.error, _CLOSED_UNSETTLED))
            return
        self._doubts.setdefault(broker_id, []).append(doubt)
        self.accumulator.call_sender(broker_id)

    async def _settle_doubts(self, broker_id: int) -> None:
        """Connect to the broker and settle its doubts, or, if it cannot be reached,
        wait (its ready batches count an attempt, as for a request)."""
        try:
            conn = await self._connect(broker_id)
        except KafkaConnectionError as exc:
            await self._unreachable_wait(broker_id, exc)
            return
        if not await self._settle_on(broker_id, conn):
            await self._back_off(broker_id)

    async def _settle_on(self, broker_id: int, conn: BrokerConnection) -> bool:
        """Read, on ``conn`` and before anything new is written there, the log end of
        every target of the broker's doubts, and act on the verdicts; while some are
        pending (processed by a broker that lived on, not flushed yet), read again,
        writing nothing meanwhile, until none is. False if a reading failed (what is
        left stays in doubt)."""
        poll = Backoff(0.01, 0.1)
        while self._has_doubts(broker_id):
            # Read while they stay listed: their delivery timeout may end them meanwhile.
            doubts = list(self._doubts[broker_id])
            targets = sorted(set().union(*(d.targets() for d in doubts)), key=repr)
            try:
                readings = await asyncio.gather(*(_log_end(conn, *target) for target in targets))
            except KafkaError as exc:
                log.warning(
                    "reading the log ends of broker %d to settle produces: %s", broker_id, exc
                )
                return False
            ends = dict(zip(targets, readings, strict=True))
            now = time.monotonic()
            pending = [d for d in doubts if self._resolve(broker_id, d, ends, now)]
            current = self._doubts.get(broker_id, [])
            current[:] = [d for d in current if d not in doubts or d in pending]
            if pending:
                await asyncio.sleep(poll.failed())
        return True

    def _resolve(
        self,
        broker_id: int,
        doubt: Doubt,
        ends: dict[tuple[str, range], int | None],
        now: float,
    ) -> bool:
        """Act on ``doubt``'s verdicts; keep in it only its pending batches. True if
        some are (read again)."""
        address = self.cluster.brokers.get(broker_id) or f"broker {broker_id}"
        pending: list[Batch] = []
        for batch, found in doubt.decide(ends, now):
            if batch.ended:
                continue
            if found is Verdict.APPENDED:
                self.metrics.settled += batch.count
                result = ProduceResult(batch.topic, broker_id, batch.partition, True)
                self.outcomes.deliver(batch, result)
            elif found is Verdict.PENDING:
                pending.append(batch)
            elif found is Verdict.NOT_SHOWN:
                error = ProduceNotConfirmedError(
                    f"{address} processed the produce, but {batch.topic}/{batch.partition} "
                    "did not grow by its bytes within request_timeout_ms (read again after "
                    f"the connection closed: {doubt.error}): the broker most likely dropped a "
                    "message over its max.message.size, or it flushes its log less often "
                    "than that",
                    broker=str(address),
                    maybe_delivered=True,
                    processed=True,
                    partitions=frozenset({(batch.topic, batch.partition)}),
                )
                error.__cause__ = doubt.error
                self.outcomes.fail(batch, error)
            elif found is Verdict.ABSENT:
                self.metrics.settled += batch.count
                absent = KafkaConnectionError(
                    f"{address} closed the connection before confirming the produce "
                    f"({doubt.error}); its log end, read once it answered again (its log "
                    "recovered), shows none of it: sent again",
                    broker=str(address),
                )
                absent.__cause__ = doubt.error
                self.retry(batch, absent)
            elif found is Verdict.NO_SUCH_PARTITION:
                self.metrics.settled += batch.count
                batch.refusals += 1
                missing = InvalidPartitionError(
                    f"{address} has no partition {batch.partition} of {batch.topic}: it "
                    "closed the connection on the produce, which is not in its log (the "
                    "partition given to send(), or the topic's partition count in "
                    "ZooKeeper, does not match the broker's num.partitions / "
                    "topic.partition.count.map)"
                )
                missing.__cause__ = doubt.error
                if batch.refusals < MAX_ALONE_REFUSALS:
                    self.retry(batch, missing)  # routed again: the view may have changed
                else:
                    self.outcomes.fail(batch, missing)
            else:
                if doubt.alone:
                    # Closed on it while it went alone, the broker alive (no refused
                    # connection since): most likely a refusal of this very batch.
                    batch.refusals += 1
                if self.retry_unconfirmed and batch.refusals < MAX_ALONE_REFUSALS:
                    batch.doubtful = True  # at least once: it may be in the log already
                    self.retry(batch, doubt.error)
                    continue
                why = (
                    f"the broker closed the connection on it {batch.refusals} times while "
                    "it went alone (it refuses it: invalid partition or data?)"
                    if batch.refusals >= MAX_ALONE_REFUSALS
                    else "its log end, read once the broker answered again, cannot tell"
                )
                self.outcomes.fail(batch, _unknown(doubt.error, why))
        doubt.batches = pending
        return bool(pending)

    # -- retries ---------------------------------------------------------------------

    def retry(self, batch: Batch, exc: BaseException) -> None:
        """Route ``batch`` again after a backoff (its delivery timeout, or the optional
        ``retries`` cap, bounds how often)."""
        batch.last_error = exc
        batch.attempts += 1
        if self.closed or (self.retries is not None and batch.attempts > self.retries):
            self.outcomes.fail(batch, exc)
            return
        self.metrics.retries += batch.count
        loop = asyncio.get_running_loop()
        due = loop.time() + self.backoff.jittered(batch.attempts)
        heapq.heappush(self._retry_queue, (due, next(self._retry_seq), batch))
        self._retry_wakeup.set()
        if self._retrier is None or self._retrier.done():
            self._retrier = self.supervisor.spawn(
                "retry",
                self._retry_loop(),
                policy=CrashPolicy.ESCALATE,
                on_crash=self._retrier_crashed,
            )

    def _retrier_crashed(self, exc: BaseException) -> None:
        waiting, self._retry_queue = self._retry_queue, []
        for _, _, batch in waiting:
            self.outcomes.fail(batch, exc)

    async def _retry_loop(self) -> None:
        """Route batches again as they fall due (re-reading the cluster first, as a
        0.7.2 producer does), until none is waiting."""
        loop = asyncio.get_running_loop()
        queue = self._retry_queue
        while queue:
            wait = queue[0][0] - loop.time()
            if wait > 0:
                self._retry_wakeup.clear()
                timer = loop.call_later(wait, self._retry_wakeup.set)
                try:
                    await self._retry_wakeup.wait()
                finally:
                    timer.cancel()
                continue
            try:
                await self.cluster.refresh()  # bounded by the view's own timeout
            except Exception as exc:
                log.warning("routing retries with the last known cluster view: %s", exc)
            now = loop.time()
            due = []
            while queue and queue[0][0] <= now:
                due.append(heapq.heappop(queue)[2])
            for batch in due:
                if not batch.ended:  # its delivery time may have run out meanwhile
                    self._reroute(batch)

    def _reroute(self, batch: Batch) -> None:
        topic = batch.topic

        def target_of(route: Route | None) -> tuple[int, int]:
            if route is None:
                return self.router.random_target(topic)
            key, pinned = route
            return pinned if pinned is not None else self.router.by_key(topic, key)

        parts = batch.regroup(target_of)
        # No live broker for the topic in the view now (its brokers away, or the view
        # between two ZooKeeper sessions): a retry like any other, at the backoff's pace,
        # within the delivery timeout; but not once the producer is closing, when a
        # cluster that has gone (stopped with the application) must not hold close() up
        # for every retry's re-read of ZooKeeper.
        wait = not self.closed and not self.accumulator.closing
        no_brokers = [target for target, _ in parts if isinstance(target, NoBrokersError)]
        if wait and parts and len(no_brokers) == len(parts):
            log.warning(
                "%d messages of %s wait for a broker: %s", batch.count, topic, no_brokers[0]
            )
            self.retry(batch, no_brokers[0])
            return
        for target, part in parts:
            if isinstance(target, NoBrokersError) and wait:
                self.retry(part, target)  # beside messages that could be routed
            elif isinstance(target, Exception):
                log.warning("cannot route %d messages of %s again: %r", part.count, topic, target)
                self.outcomes.fail(part, target)
            elif self.closed:
                self.outcomes.fail(part, part.last_error or exc_closed())
            else:
                self.accumulator.requeue(part)

    # -- delivery timeout ------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        """Fail what outlived its delivery timeout, a few times per timeout (at least
        every second)."""
        interval = min(1.0, max(self.delivery_timeout / 20, 0.01))
        while True:
            await asyncio.sleep(interval)
            self.expire(time.monotonic())

    def expire(self, now: float) -> None:
        """Fail every batch whose first ``send()`` is at least the delivery timeout
        before ``now`` (``time.monotonic()``), wherever it waits."""
        limit = self.delivery_timeout
        accumulator = self.accumulator
        accumulator.seal_lingered(now)
        for batch in list(accumulator.batches()):
            if now - batch.created >= limit and accumulator.remove(batch):
                self.outcomes.fail(batch, self._timed_out(batch))
        for batch in self._not_written():
            if not batch.ended and now - batch.created >= limit:
                self.outcomes.fail(batch, self._timed_out(batch))
        for entry in self._requests.values():
            for batch in entry.batches:
                if not batch.ended and now - batch.created >= limit:
                    error = ProduceNotConfirmedError(
                        "written, and not confirmed", maybe_delivered=True
                    )
                    self.outcomes.fail(batch, _unknown(error, self._late()))
        for doubts in self._doubts.values():
            for doubt in doubts:
                for batch in doubt.batches:
                    if not batch.ended and now - batch.created >= limit:
                        self.outcomes.fail(batch, _unknown(doubt.error, self._late()))

    def _not_written(self) -> Iterator[Batch]:
        """Batches a sender holds before writing them, and batches waiting for a retry."""
        for held in self._taken.values():
            yield from held
        for _, _, batch in self._retry_queue:
            yield batch

    def _late(self) -> str:
        return (
            f"its delivery timeout ({self.delivery_timeout * 1000:g} ms from send()) ran out first"
        )

    def _timed_out(self, batch: Batch) -> DeliveryTimeoutError:
        cause = batch.last_error
        why = f"the last attempt failed: {cause}" if cause is not None else "never sent"
        error = DeliveryTimeoutError(
            f"{batch.count} messages for {batch.topic}/{batch.broker_id}-{batch.partition} "
            f"were not delivered within the delivery timeout "
            f"({self.delivery_timeout * 1000:g} ms from send()) and are not in the log ({why})",
            last_error=cause,
        )
        error.__cause__ = cause
        return error

    # -- the end ---------------------------------------------------------------------

    def batches(self) -> Iterator[Batch]:
        """Every batch the sender holds: taken, in flight, in doubt, or waiting for a
        retry."""
        for held in self._taken.values():
            yield from held
        for entry in self._requests.values():
            yield from entry.batches
        for doubts in self._doubts.values():
            for doubt in doubts:
                yield from doubt.batches
        for _, _, batch in self._retry_queue:
            yield batch

    def stop(self) -> None:
        """No more retries: batches waiting for one fail with their last error, doubts
        still open fail as unknown, and later failures are final."""
        self.closed = True
        waiting, self._retry_queue = self._retry_queue, []
        for _, _, batch in waiting:
            self.outcomes.fail(batch, batch.last_error or exc_closed())
        doubts, self._doubts = self._doubts, {}
        for broker_doubts in doubts.values():
            for doubt in broker_doubts:
                for batch in doubt.batches:
                    self.outcomes.fail(batch, _unknown(doubt.error, _CLOSED_UNSETTLED))

    def abandon(self) -> None:
        """The producer closed with these still unresolved (after ``stop()`` and once
        the sender tasks are gone): batches taken but never submitted fail with
        :class:`ProducerClosedError`, requests still unanswered with
        :class:`DeliveryUnknownError` (they may have been delivered)."""
        for held in self._taken.values():
            for batch in held:
                self.outcomes.fail(batch, exc_closed())
        self._taken.clear()
        requests, self._requests = self._requests, {}
        for entry in requests.values():
            broker_id = entry.broker_id
            address = self.cluster.brokers.get(broker_id) or f"broker {broker_id}"
            error = DeliveryUnknownError(
                f"the producer closed before {address} confirmed the produce",
                broker=str(address),
            )
            for batch in entry.batches:
                self.outcomes.fail(batch, error)


async def _log_end(conn: BrokerConnection, topic: str, partitions: range) -> int | None:
    """A target's log end: the sum of its partitions' (OFFSETS latest, pipelined); None
    if the broker has no such partition. A target of one partition (the producer chose
    it) is first fetched, 0 bytes: a partition the broker does not have is answered
    WrongPartition, where an OFFSETS for it would close the connection (PROTOCOL §10.4).
    (The partitions of a partition -1 target were counted that way: they exist.)"""
    if len(partitions) == 1:
        exists = await conn.fetch(topic, partitions[0], 0, 0)
        if exists.error_code == InvalidPartitionError.code:
            return None
    answers = await asyncio.gather(*(conn.offsets(topic, p, LATEST) for p in partitions))
    return sum(offsets[0] if offsets else 0 for offsets in answers)


def _unknown(cause: KafkaConnectionError, why: str) -> DeliveryUnknownError:
    """The error of messages whose outcome cannot be known: ``cause`` left it open."""
    error = DeliveryUnknownError(
        f"the produce may or may not have been appended: {why} ({cause})", broker=cause.broker
    )
    error.__cause__ = cause
    return error


def exc_closed() -> ProducerClosedError:
    return ProducerClosedError("the producer closed before this message was sent")

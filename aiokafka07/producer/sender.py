"""The sender: the only part of the producer that touches connections.

One supervised task per broker takes ready batches from the accumulator, encodes them as
one PRODUCE / MULTIPRODUCE, and submits it to the broker's connection. Submitting is a
plain function call on the connection (:meth:`BrokerConnection.submit_produce`), and a
broker has one sender, so requests reach the broker in the order they were taken: a
partition's batches stay in order without any lock. Up to ``max_in_flight`` requests per
broker are outstanding; the connection's flow control (``drain()``) holds the sender
back when the socket does not keep up, and the accumulator's buffer then holds the
callers back.

Every outcome is classified, in one place (:meth:`Sender.settle`):

* **done**: the broker confirmed (or, without confirm, the frame was written);
* **retry**: the request never reached the broker (``maybe_delivered`` False), or its
  confirmation was lost and the producer retries unconfirmed messages. After a
  :class:`~aiokafka07.backoff.Backoff` delay, one retry task re-reads the cluster and
  routes the batch again; after ``retries`` attempts it fails. A batch that shared a
  refusal (a request, or a connection end with other requests on it, that the broker
  closed the connection on) goes alone once, so that one bad entry cannot take the
  others down twice; every other retry is batched with the rest again (a broker that
  was down is no reason to send its batches one by one). A broker that cannot be
  reached fails every batch ready for it at once, one attempt each; its sender then
  waits a backoff of its own before the next request (new messages fill whole batches
  meanwhile), except once the producer is closing;
* **fail**: anything else, with the error as the cause. An error that is not a
  :class:`~aiokafka07.errors.KafkaError` (a bug) is logged once with its traceback.

A sender or the retry task that crashes anyway (:data:`CrashPolicy.ESCALATE`) fails the
work it held with the crash's error; the next message starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Iterator
from typing import Any

from ..backoff import Backoff
from ..cluster import Cluster
from ..errors import (
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
from .batch import Batch, Route
from .encoding import MessageSetEncoder
from .results import Outcomes, ProduceResult, ProducerMetrics
from .router import Router

__all__ = ["Sender"]

log = logging.getLogger("aiokafka07.producer")


class Sender:
    """Per-broker sender tasks, outcome classification and retries (module docstring)."""

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
        retries: int,
        backoff: Backoff,
        max_in_flight: int,
        max_request_bytes: int,
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
        self.closed = False
        # Per broker: batches taken and not yet submitted, requests outstanding, and an
        # event set whenever one of those ends (a free slot).
        self._taken: dict[int, list[Batch]] = {}
        self._in_flight: dict[int, int] = {}
        self._slot: dict[int, asyncio.Event] = {}
        self._requests: dict[asyncio.Future[Any], tuple[int, list[Batch]]] = {}
        # Per broker: failures in a row to hand it a request (it cannot be reached).
        self._unreachable: dict[int, Backoff] = {}
        # Batches waiting to be routed again: (due time, sequence, batch).
        self._retry_queue: list[tuple[float, int, Batch]] = []
        self._retry_seq = itertools.count()
        self._retry_wakeup = asyncio.Event()
        self._retrier: asyncio.Task[None] | None = None

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

    def _sender_crashed(self, broker_id: int, exc: BaseException) -> None:
        """Fail what the crashed sender held and what waited for it."""
        held = self._taken.pop(broker_id, [])
        for batch in [*held, *self.accumulator.drop_queue(broker_id)]:
            self.outcomes.fail(batch, exc)

    async def _run(self, queue: BrokerQueue) -> None:
        broker_id = queue.broker_id
        while True:
            batches = await self.accumulator.next_request(queue, self.max_request_bytes)
            self._taken[broker_id] = batches
            await self._send(broker_id, batches)
            self._taken.pop(broker_id, None)

    async def _wait_for_slot(self, broker_id: int, limit: int) -> None:
        """Wait until fewer than ``limit`` requests are outstanding on the broker (each
        ends within the request timeout)."""
        slot = self._slot[broker_id]
        while self._in_flight[broker_id] >= limit:
            slot.clear()
            await slot.wait()

    # -- sending ---------------------------------------------------------------------

    async def _send(self, broker_id: int, batches: list[Batch]) -> None:
        isolated = batches[0].isolated
        # An isolated batch goes alone on the connection too: a request pipelined
        # behind a refused one would be lost with it.
        await self._wait_for_slot(broker_id, 1 if isolated else self.max_in_flight)
        address = self.cluster.brokers.get(broker_id)
        conn = None
        try:
            if address is None:
                raise KafkaConnectionError(f"broker {broker_id} is not in the cluster")
            frame = self.encoder.frame(batches)
            conn = await self.pool.connection(address)
            if self.confirm:
                await conn.prepare_confirm(frame)  # for partition -1: learns the count
            future = conn.submit_produce(frame, confirm=self.confirm)
        except Exception as exc:
            self._taken.pop(broker_id, None)
            if conn is None and isinstance(exc, KafkaConnectionError):
                # The broker cannot be reached: every batch ready for it counts this
                # attempt now. One request's worth per backoff below made a queue of n
                # batches take n times their retries to end (minutes, for a close).
                batches = [*batches, *self.accumulator.take_ready(broker_id)]
            self.settle(broker_id, batches, exc)
            if self.accumulator.closing:
                return  # nothing new to wait for: the retries keep their own pace
            # Not again at once: meanwhile new messages fill whole batches, instead of
            # a batch per linger going round the retries while the broker is away.
            unreachable = self._unreachable.setdefault(
                broker_id, Backoff(self.backoff.base, self.backoff.cap)
            )
            await asyncio.sleep(unreachable.failed())
            return
        backoff = self._unreachable.get(broker_id)
        if backoff is not None:
            backoff.succeeded()
        self._taken.pop(broker_id, None)
        self._in_flight[broker_id] += 1
        self._requests[future] = (broker_id, batches)
        future.add_done_callback(self._completed)
        self.metrics.requests_sent += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "producing to %s: %d entries, %d messages, %d bytes of payload",
                address,
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
            return  # failed by close() already
        broker_id, batches = entry
        self._in_flight[broker_id] -= 1
        self._slot[broker_id].set()
        try:
            if future.cancelled():
                exc: BaseException | None = ProduceNotConfirmedError(
                    "the request was cancelled before it was confirmed", maybe_delivered=True
                )
            else:
                exc = future.exception()
            self.settle(broker_id, batches, exc)
        except Exception as bug:
            log.exception("classifying the outcome of a produce failed")
            for batch in batches:
                self.outcomes.fail(batch, bug)

    # -- outcomes --------------------------------------------------------------------

    def settle(self, broker_id: int, batches: list[Batch], exc: BaseException | None) -> None:
        """Classify a request's outcome into done / retry / fail (module docstring)."""
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
            retriable = not exc.maybe_delivered or (
                self.retry_unconfirmed
                and isinstance(exc, (ProduceNotConfirmedError, RequestTimeoutError))
            )
            refused = isinstance(exc, ProduceNotConfirmedError) and exc.refused
            shared = refused and self._share_refusal(exc)
            log.warning("produce to %s failed (%s)", address, exc)
            for batch in batches:
                if retriable:
                    # Only a refusal may be one entry's fault: then each goes alone (and
                    # the one refused alone again stays alone). Any other failure says
                    # nothing of the entries and leaves them as they were.
                    if refused:
                        batch.isolated = len(batches) > 1 or batch.isolated or shared
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
        for future, (_, others) in self._requests.items():
            if not future.done() or future.cancelled():
                continue
            other = future.exception()
            if (
                isinstance(other, ProduceNotConfirmedError)
                and other.refused
                and other.__cause__ is cause
            ):
                shared = True
                for batch in others:
                    batch.isolated = True
        return shared

    def retry(self, batch: Batch, exc: BaseException) -> None:
        """Route ``batch`` again after a backoff, or fail it once out of attempts."""
        batch.last_error = exc
        batch.attempts += 1
        if self.closed or batch.attempts > self.retries:
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
        # until the attempts are spent; but not once the producer is closing, when a
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

    # -- the end ---------------------------------------------------------------------

    def batches(self) -> Iterator[Batch]:
        """Every batch the sender holds: taken, in flight, or waiting for a retry."""
        for held in self._taken.values():
            yield from held
        for _, batches in self._requests.values():
            yield from batches
        for _, _, batch in self._retry_queue:
            yield batch

    def stop(self) -> None:
        """No more retries: batches waiting for one fail with their last error, and
        later failures are final."""
        self.closed = True
        waiting, self._retry_queue = self._retry_queue, []
        for _, _, batch in waiting:
            self.outcomes.fail(batch, batch.last_error or exc_closed())

    def abandon(self) -> None:
        """The producer closed with these still unresolved (after ``stop()`` and once
        the sender tasks are gone): batches taken but never submitted fail with
        :class:`ProducerClosedError`, requests still unanswered with
        :class:`ProduceNotConfirmedError` (they may have been delivered)."""
        for held in self._taken.values():
            for batch in held:
                self.outcomes.fail(batch, exc_closed())
        self._taken.clear()
        requests, self._requests = self._requests, {}
        for broker_id, batches in requests.values():
            address = self.cluster.brokers.get(broker_id) or f"broker {broker_id}"
            error = ProduceNotConfirmedError(
                f"the producer closed before {address} confirmed the produce",
                broker=str(address),
                maybe_delivered=True,
            )
            for batch in batches:
                self.outcomes.fail(batch, error)


def exc_closed() -> ProducerClosedError:
    return ProducerClosedError("the producer closed before this message was sent")

"""A :class:`logging.Handler` that sends log records to a Kafka 0.7 topic: what
KafkaLog4jAppender is to log4j.

::

    handler = KafkaHandler("app-logs", zookeeper="127.0.0.1:2181")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)

**What a logging call costs.** The record is formatted by the handler's formatter (the
default gives the message and any traceback, as the appender does without a layout) in
the thread that logs it, encoded as UTF-8 (a record over ``max_record_bytes`` is cut
there, and counted) and appended to a bounded buffer. Nothing else: no I/O, no waiting, no
exception, from any thread, with or without a running event loop, so it never blocks an
event loop it is called on.

**Sending.** A thread of the handler's own runs an event loop with a
:class:`~aiokafka07.Producer` (ZooKeeper or a static broker list, as the appender's
``ZkConnect`` / ``BrokerList``); its sender task takes records from the buffer and hands
them to the producer: one message per record, keyless (so spread over the partitions),
compressed if asked. A :class:`~aiokafka07.supervisor.Supervisor` owns that task with
the RESTART policy: a crash is logged with its traceback, the record it held is counted as
dropped, and the task starts again after a backoff; after 10 crashes in a row it gives up,
and every record from then on is dropped and counted. Connecting (starting the producer)
is retried with :class:`~aiokafka07.backoff.Backoff`, 0.5 s doubling to 30 s, for as long
as the handler is open; records wait in the buffer meanwhile.

**When Kafka is down or slow**, records pile up until ``max_buffered_records`` (or
``max_buffered_bytes``) are waiting, counting those the producer holds, and every record
after that is dropped; so is a record the producer could not deliver (after its own
retries). Drops are counted (:meth:`KafkaHandler.stats`); the first is reported once, as a
WARNING of the ``aiokafka07.logging_handler`` logger, and the total again at close.

**Never its own records.** Records logged in the handler's thread (by its producer, its
ZooKeeper session, asyncio) are not sent by it: when Kafka is down they would feed on
themselves. Other handlers still get them. Neither is a record logged while this handler
formats one in the same thread (a formatter that logs). Logging through the handler takes
no lock (not even the handler's own, which :func:`logging.shutdown` holds while it closes
it), and the handler never waits for its thread while the waiting thread holds the logging
module's lock, which ``logging.config`` does while it closes the handlers it replaces: so
the handler's thread, logging, never deadlocks with them.

**flush() and close().** :meth:`~KafkaHandler.flush` waits (at most ``flush_timeout_ms``)
until every record logged before it was delivered or dropped; called on a thread running
an event loop it only wakes the sender, and ``await handler.aflush()`` waits there
without blocking. :meth:`~KafkaHandler.close` stops taking records, delivers what waits
and closes the producer, for at most ``close_timeout_ms``; what is left then is
counted as dropped. It blocks the calling thread, so asyncio code uses ``await
handler.aclose()``. :func:`logging.shutdown` (at interpreter exit) flushes and closes it;
a handler ``logging.config`` replaced finishes in the background, and at the latest at
exit.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .backoff import Backoff
from .cluster import parse_broker_list
from .connection import MAX_MESSAGE_SIZE, RENAMED_TIMEOUTS
from .errors import KafkaError
from .producer import Producer, ProduceResult
from .protocol import Compression, validate_topic
from .supervisor import CrashPolicy, Supervisor
from .timeouts import wait_for
from .validation import check_ms, check_optional_ms, renamed_options_to_ms

__all__ = ["HandlerStats", "KafkaHandler"]

log = logging.getLogger("aiokafka07.logging_handler")

#: Handlers closed without waiting for their thread (see :meth:`KafkaHandler.close`);
#: waited for at interpreter exit, before :func:`logging.shutdown` (atexit runs last in,
#: first out, and logging registered first).
_UNFINISHED: weakref.WeakSet[KafkaHandler] = weakref.WeakSet()


def _may_wait(*, loop_ok: bool = False) -> bool:
    """Whether this thread may block waiting for a handler's thread: not while it holds
    the logging module's lock, which that thread's loggers may need (``logging.config``
    holds it while it closes the handlers it replaces), and, unless ``loop_ok``, not on
    a thread running an event loop."""
    owned = getattr(getattr(logging, "_lock", None), "_is_owned", None)
    if callable(owned) and owned():
        return False
    if not loop_ok:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return True
        return False
    return True


@atexit.register
def _finish_unfinished() -> None:
    for handler in list(_UNFINISHED):
        handler._finish()


class HandlerStats(NamedTuple):
    """What became of the records a :class:`KafkaHandler` was given.

    Every record handled is either ``accepted`` (buffered) or ``dropped`` at once (buffer
    full, handler closed or broken); an accepted one ends ``delivered``, ``dropped``
    (undeliverable, or still waiting when close timed out), or is still ``waiting``.
    """

    accepted: int
    delivered: int
    dropped: int
    truncated: int
    waiting: int


class KafkaHandler(logging.Handler):
    """Sends each log record, formatted, as one message to ``topic``.

    Give exactly one of ``zookeeper`` (``zk.connect``) and ``brokers`` (``broker.list``,
    ``id:host:port,...``); a missing or malformed one raises ValueError here, an invalid
    topic :class:`~aiokafka07.errors.InvalidTopicError`: configuration errors surface when
    the handler is made, never when logging. ``producer_options`` are further
    :class:`~aiokafka07.Producer` arguments (``batch_size``, ``linger_ms``, ``confirm``,
    ``retries``, ...). Durations are milliseconds (``flush_timeout`` and ``close_timeout``,
    in seconds, are the deprecated names of ``flush_timeout_ms`` and ``close_timeout_ms``).
    See the module documentation for the guarantees.
    """

    def __init__(
        self,
        topic: str,
        *,
        zookeeper: str | None = None,
        brokers: str | None = None,
        level: int | str = logging.NOTSET,
        compression: Compression | int | str | None = None,
        max_buffered_records: int = 10_000,
        max_buffered_bytes: int = 16 << 20,
        max_record_bytes: int = MAX_MESSAGE_SIZE,
        flush_timeout_ms: float = 5000.0,
        close_timeout_ms: float = 5000.0,
        producer_options: Mapping[str, Any] | None = None,
        flush_timeout: float | None = None,
        close_timeout: float | None = None,
    ) -> None:
        validate_topic(topic)
        zookeeper = (zookeeper or "").strip() or None
        brokers = (brokers or "").strip() or None
        if (zookeeper is None) == (brokers is None):
            raise ValueError("give zookeeper (zk.connect) or brokers (broker.list), one of them")
        if brokers is not None:
            parse_broker_list(brokers)  # malformed: ValueError now, not in the thread
        if max_buffered_records < 1 or max_buffered_bytes < 1 or max_record_bytes < 1:
            raise ValueError("the buffer bounds and max_record_bytes must be positive")
        self.flush_timeout_ms = check_ms(
            "KafkaHandler", "flush_timeout_ms", flush_timeout_ms, flush_timeout, above=True
        )
        self.close_timeout_ms = check_ms(
            "KafkaHandler", "close_timeout_ms", close_timeout_ms, close_timeout, above=True
        )
        compression = Compression.parse(compression)
        self.topic = topic
        self.zookeeper = zookeeper
        self.brokers = brokers
        self.compression = compression
        self.max_buffered_records = max_buffered_records
        self.max_buffered_bytes = max_buffered_bytes
        self.max_record_bytes = min(max_record_bytes, MAX_MESSAGE_SIZE)
        options = _checked_producer_options(
            renamed_options_to_ms(
                "KafkaHandler(producer_options)", producer_options or {}, RENAMED_TIMEOUTS
            )
        )
        # Checked first: logging keeps (and at exit flushes) every handler it saw made.
        super().__init__(level)
        self.producer_options = options

        # Shared between the logging threads and the handler's thread, under _state.
        self._state = threading.Lock()
        self._buffer: collections.deque[bytes] = collections.deque()
        self._accepted = 0
        self._delivered = 0
        self._dropped = 0
        self._truncated = 0
        self._settled = 0  # accepted records delivered or dropped
        self._waiting_bytes = 0  # of accepted records not settled yet
        self._closed = False
        self._close_deadline: float | None = None  # time.monotonic() when close() must end
        self._broken = False  # the sender gave up: every record is dropped
        self._final = False  # every record is counted: later outcomes change nothing
        self._drop_reported = False
        self._total_reported = False
        self._wake_pending = False
        self._waiters: list[tuple[int, concurrent.futures.Future[None]]] = []
        self._local = threading.local()

        # Only the handler's thread uses these (asyncio events bind to the loop that first
        # waits on them, so they can be made here).
        self._loop = asyncio.new_event_loop()
        self._wake = asyncio.Event()  # records are buffered
        self._stop = asyncio.Event()  # close() was called
        self._progress = asyncio.Event()  # the sender handed a record over, or waits
        self._producer: Producer | None = None
        self._connect_failures = 0
        self._holding: bytes | None = None
        self._deadline = 0.0  # (loop time) when the close steps must be done
        self._thread = threading.Thread(
            target=self._run, name=f"aiokafka07-log-{topic}", daemon=True
        )
        self._thread.start()

    def __repr__(self) -> str:
        where = self.zookeeper or self.brokers
        return f"<KafkaHandler {self.topic} at {where} ({logging.getLevelName(self.level)})>"

    # -- the logging side: any thread ---------------------------------------------------

    def handle(self, record: logging.LogRecord) -> Any:
        """Filter and buffer ``record``, without the handler lock (:meth:`emit` needs
        none) and without records of the handler's own thread."""
        if threading.get_ident() == self._thread.ident or getattr(self._local, "busy", False):
            return False
        result: Any = self.filter(record)
        if isinstance(result, logging.LogRecord):  # Python 3.12: a filter may replace it
            record = result
        if result:
            self.emit(record)
        return result

    def emit(self, record: logging.LogRecord) -> None:
        """Format ``record`` and buffer it; never blocks, never raises (a record that
        cannot be formatted goes to :meth:`handleError`, as with every handler)."""
        self._local.busy = True
        try:
            try:
                data = self.format(record).encode("utf-8", "backslashreplace")
            except Exception:
                self.handleError(record)
                return
            self._offer(data)
        finally:
            self._local.busy = False

    def _offer(self, data: bytes) -> None:
        truncated = len(data) > self.max_record_bytes
        if truncated:
            # Cut on a character boundary: a broker drops a message above its limit.
            data = data[: self.max_record_bytes].decode("utf-8", "ignore").encode("utf-8")
        wake = report = False
        with self._state:
            self._truncated += truncated
            waiting = self._accepted - self._settled
            if (
                self._closed
                or self._broken
                or waiting >= self.max_buffered_records
                or self._waiting_bytes + len(data) > self.max_buffered_bytes
            ):
                self._dropped += 1
                report = self._first_drop()
            else:
                self._buffer.append(data)
                self._accepted += 1
                self._waiting_bytes += len(data)
                wake = not self._wake_pending
                self._wake_pending = True
        if wake:
            self._call_soon(self._wake_sender)
        if report:
            self._call_soon(self._report_first_drop)

    def _first_drop(self) -> bool:
        """Under _state: whether this drop is the first to report."""
        if self._drop_reported or self._closed:
            return False
        self._drop_reported = True
        return True

    def _call_soon(self, callback: Callable[[], object]) -> None:
        with contextlib.suppress(RuntimeError):  # the handler's loop is closed
            self._loop.call_soon_threadsafe(callback)

    def stats(self) -> HandlerStats:
        """A snapshot of the counters."""
        with self._state:
            return HandlerStats(
                self._accepted,
                self._delivered,
                self._dropped,
                self._truncated,
                self._accepted - self._settled,
            )

    # -- flush and close: any thread ---------------------------------------------------

    def flush(self) -> None:
        """Wait until every record logged before was delivered or dropped, at most
        ``flush_timeout_ms`` (:meth:`wait_delivered` says whether it got there). On a
        thread running an event loop it does not wait: use :meth:`aflush` there."""
        self.wait_delivered()

    def wait_delivered(
        self, timeout: float | None = None, *, timeout_ms: float | None = None
    ) -> bool:
        """:meth:`flush` with a ``timeout_ms`` (default ``flush_timeout_ms``; ``timeout``,
        in seconds, is its deprecated form): True when every record logged before was
        delivered or dropped. On a thread running an event loop, or holding the logging
        module's lock (:func:`_may_wait`), it does not wait, and is True only if nothing
        was waiting."""
        wait = self._flush_seconds(
            check_optional_ms("KafkaHandler.wait_delivered", "timeout_ms", timeout_ms, timeout)
        )
        waiter = self._flush_waiter()
        if waiter.done():
            return True
        if not _may_wait():
            return False
        try:
            waiter.result(wait)
        except concurrent.futures.TimeoutError:
            return False
        return True

    async def aflush(
        self, timeout: float | None = None, *, timeout_ms: float | None = None
    ) -> bool:
        """:meth:`flush` for asyncio code: waits without blocking the event loop, at most
        ``timeout_ms`` (default ``flush_timeout_ms``; ``timeout``, in seconds, is its
        deprecated form)."""
        wait = self._flush_seconds(
            check_optional_ms("KafkaHandler.aflush", "timeout_ms", timeout_ms, timeout)
        )
        waiter = self._flush_waiter()
        try:
            await wait_for(asyncio.wrap_future(waiter), wait)
        except asyncio.TimeoutError:
            return False
        return True

    def _flush_seconds(self, timeout_ms: float | None) -> float:
        """A flush's wait in seconds: ``timeout_ms``, or ``flush_timeout_ms``."""
        return (self.flush_timeout_ms if timeout_ms is None else timeout_ms) / 1000

    def _flush_waiter(self) -> concurrent.futures.Future[None]:
        waiter: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._state:
            if self._settled >= self._accepted:
                waiter.set_result(None)
            else:
                self._waiters.append((self._accepted, waiter))
                wake = not self._wake_pending
                self._wake_pending = True
        if not waiter.done() and wake:
            self._call_soon(self._wake_sender)
        return waiter

    def close(self) -> None:
        """Stop taking records; deliver what waits, within ``close_timeout_ms``
        (what is left then is dropped); stop the handler's thread; report drops once.
        Blocks the calling thread (asyncio code: :meth:`aclose`). Idempotent.

        Called while this thread holds the logging module's lock (``logging.config``
        replacing its handlers does), it does not wait: the handler's thread, whose
        loggers may need that lock, finishes in the background, and at the latest at
        interpreter exit."""
        with self._state:
            first = not self._closed
            self._closed = True
            if first:
                self._close_deadline = time.monotonic() + self.close_timeout_ms / 1000
        if first:
            self._call_soon(self._request_stop)
        if threading.current_thread() is not self._thread:
            if _may_wait(loop_ok=True):
                self._finish()
            else:
                _UNFINISHED.add(self)
        super().close()

    def _finish(self) -> None:
        """Wait for the handler's thread until ``close_timeout_ms`` after close() (it
        ends within that), then count every record still waiting as dropped, so that
        the counts add up from now on, and report the drops once."""
        _UNFINISHED.discard(self)
        deadline = self._close_deadline or time.monotonic()
        self._thread.join(max(deadline - time.monotonic(), 0.0))
        with self._state:
            self._drop_waiting()
            report = not self._total_reported
            self._total_reported = True
        self._local.busy = True  # our own reports are not records to send (or drop)
        try:
            if self._thread.is_alive():
                log.error("the Kafka log handler of %s did not stop in time", self.topic)
            if report:
                self._report_total()
        finally:
            self._local.busy = False

    async def aclose(self) -> None:
        """:meth:`close` for asyncio code: waits in a worker thread, not on the loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def _report_total(self) -> None:
        stats = self.stats()
        if stats.dropped:
            log.warning(
                "%d log records were not sent to Kafka topic %s (%d delivered)",
                stats.dropped,
                self.topic,
                stats.delivered,
            )

    # -- the handler's thread -------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException:
            log.exception("the Kafka log handler of %s failed", self.topic)
        finally:
            with self._state:
                self._broken = True
                self._drop_waiting()
            try:
                self._loop.run_until_complete(self._cancel_stragglers(self._left()))
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    def _left(self) -> float:
        """Seconds left until the thread must have ended (close_timeout_ms after close();
        1 s when it ends for another reason)."""
        if self._close_deadline is None:
            return 1.0
        return max(min(self._close_deadline - time.monotonic(), 1.0), 0.05)

    async def _cancel_stragglers(self, timeout: float) -> None:
        """Cancel and await (at most ``timeout`` seconds) what is left on the loop (as
        :func:`asyncio.run` does), such as a ZooKeeper client's tasks when a connection
        attempt was cut short."""
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            if pending:
                log.warning("%d tasks of the Kafka log handler did not stop", len(pending))

    async def _main(self) -> None:
        supervisor = Supervisor(f"kafka-log-handler-{self.topic}", log)
        sender = supervisor.spawn(
            "sender",
            self._send,
            policy=CrashPolicy.RESTART,
            on_crash=self._sender_crashed,
            backoff=Backoff(0.5, 30.0),
        )
        sender.add_done_callback(self._sender_ended)
        await self._stop.wait()
        # close() waits close_timeout_ms from its call: the steps below end a fifth of it
        # (at most 1 s) before, which the thread keeps for its own end (cancelling what is
        # left, closing its loop, and being scheduled at all on a busy machine).
        loop = asyncio.get_running_loop()
        budget = self.close_timeout_ms / 1000
        close_deadline = self._close_deadline or time.monotonic() + budget
        # loop.time() is time.monotonic() (the default event loop's clock).
        self._deadline = loop.time() + (close_deadline - time.monotonic()) - min(0.2 * budget, 1.0)

        def left() -> float:
            return max(self._deadline - loop.time(), 0.0)

        try:
            # Most of it to hand what is buffered to the producer; the producer's close
            # gets the rest (it delivers what it holds, then fails what is left).
            await wait_for(self._hand_over(), 0.75 * left())  # 0.6 of the budget
        except asyncio.TimeoutError:
            log.warning(
                "closing the Kafka log handler of %s: records still waiting after %g ms are "
                "dropped",
                self.topic,
                self.close_timeout_ms,
            )
        finally:
            await supervisor.aclose(timeout=max(min(left(), 1.0), 0.05))
            if self._producer is not None:
                with contextlib.suppress(KafkaError):  # failures are counted already
                    await self._producer.close(timeout_ms=left() * 1000)
                await asyncio.sleep(0)  # the outcomes' callbacks (_settle) run now

    def _request_stop(self) -> None:
        self._stop.set()

    def _wake_sender(self) -> None:
        self._wake.set()

    async def _hand_over(self) -> None:
        """At close: let the sender hand what is buffered to the producer (unless Kafka
        cannot be reached, or the sender gave up)."""
        while True:
            with self._state:
                empty = not self._buffer and self._holding is None
                broken = self._broken
            if empty or broken:
                break
            if self._producer is None and self._connect_failures:
                return  # Kafka cannot be reached: what waits is dropped
            self._progress.clear()
            self._wake_sender()
            await self._progress.wait()

    async def _connect(self) -> Producer:
        """A started producer; retried with a backoff while Kafka cannot be reached."""
        backoff = Backoff(0.5, 30.0)
        while True:
            producer = Producer(
                zookeeper=self.zookeeper,
                brokers=self.brokers,
                compression=self.compression,
                max_message_size=MAX_MESSAGE_SIZE,
                # The handler bounds what waits, the producer's own buffer included.
                max_buffered_messages=self.max_buffered_records + 1,
                max_buffered_bytes=self.max_buffered_bytes + MAX_MESSAGE_SIZE,
                **self.producer_options,
            )
            try:
                await producer.start()
            except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                with contextlib.suppress(KafkaError):
                    await producer.close()
                self._connect_failures += 1
                delay = backoff.failed()
                if self._connect_failures == 1:
                    log.warning(
                        "the Kafka log handler of %s cannot reach Kafka (%s); trying again, "
                        "records are buffered meanwhile",
                        self.topic,
                        exc,
                    )
                self._progress.set()
                await asyncio.sleep(delay)
                continue
            self._connect_failures = 0
            return producer

    async def _send(self) -> None:
        """The sender: buffered records to the producer, one by one, for ever."""
        if self._producer is None:
            self._producer = await self._connect()
        producer = self._producer
        while True:
            data = self._next_record()
            if data is None:
                self._progress.set()
                await self._wake.wait()
                continue
            self._holding = data
            try:
                future = await producer.send(self.topic, data)
            except KafkaError:
                self._settle(len(data), None)
            else:
                future.add_done_callback(functools.partial(self._settle, len(data)))
            self._holding = None
            self._progress.set()

    def _next_record(self) -> bytes | None:
        with self._state:
            if self._buffer:
                return self._buffer.popleft()
            self._wake_pending = False
            self._wake.clear()
            return None

    def _settle(self, size: int, future: asyncio.Future[ProduceResult] | None) -> None:
        """An accepted record was delivered, or (``future`` failed or None) dropped."""
        delivered = future is not None and not future.cancelled() and future.exception() is None
        report = False
        with self._state:
            if self._final:
                return  # counted as dropped at close already
            if delivered:
                self._delivered += 1
            else:
                self._dropped += 1
                report = self._first_drop()
            self._settled += 1
            self._waiting_bytes -= size
            ready = [w for target, w in self._waiters if target <= self._settled]
            self._waiters = [(t, w) for t, w in self._waiters if t > self._settled]
        _release(ready)
        if not delivered and report:
            self._report_first_drop()

    def _sender_crashed(self, exc: BaseException) -> None:
        """The sender raised (the supervisor logged it): the record it held is lost."""
        held, self._holding = self._holding, None
        if held is not None:
            self._settle(len(held), None)

    def _sender_ended(self, task: asyncio.Task[None]) -> None:
        """The sender ends only when cancelled at close, or when its supervisor gave up
        restarting it: then every record waiting, and every record to come, is lost."""
        if not task.cancelled():
            with self._state:
                self._broken = True
                self._drop_waiting()

    def _drop_waiting(self) -> None:
        """Under _state: count everything still waiting as dropped, once and for all
        (an outcome arriving later changes nothing)."""
        self._final = True
        while self._buffer:
            self._waiting_bytes -= len(self._buffer.popleft())
        leftover = self._accepted - self._settled
        self._dropped += leftover
        self._settled = self._accepted
        self._waiting_bytes = 0
        _release([waiter for _, waiter in self._waiters])
        self._waiters.clear()

    def _report_first_drop(self) -> None:
        log.warning(
            "log records for Kafka topic %s are being dropped (Kafka unreachable or too "
            "slow, or the buffer of %d records is full); they are counted, and the total is "
            "reported at close",
            self.topic,
            self.max_buffered_records,
        )


def _release(waiters: list[concurrent.futures.Future[None]]) -> None:
    """Wake flush() callers. One whose wait timed out cancelled its future (aflush()
    does): it is skipped, and the others are still woken."""
    for waiter in waiters:
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            waiter.set_result(None)


def _checked_producer_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``producer_options``, checked by building (not starting) a producer with them: a
    wrong name or value raises here, in the application's set-up, not in the thread."""
    reserved = {"zookeeper", "brokers", "cluster", "compression", "pool"} & set(options)
    if reserved:
        raise ValueError(f"producer_options cannot set {sorted(reserved)}: the handler does")
    Producer(brokers="0:127.0.0.1:1", **options)
    return dict(options)

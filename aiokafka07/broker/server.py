"""The embedded Kafka 0.7.2-compatible broker: TCP server, request handling, registration.

Behaviour follows PROTOCOL §1-§12 and the captures in ``observed/wire-samples``:

* one request at a time per connection, answered in order; PRODUCE and MULTIPRODUCE
  are never answered;
* every error the real broker answers by closing the socket (bad frame size, unknown
  request type, malformed body, invalid topic or partition on produce/offsets, bad CRC or
  codec in a produced set, a first entry shorter than declared) closes it here too,
  without writing anything;
* FETCH answers errors 0, 1, 3 and -1 where the real broker does, returns raw log bytes
  from one segment up to the flushed end, often ending in a partial message;
* a produced message whose payload exceeds ``max.message.size`` makes the broker drop
  that produce silently (the connection stays open);
* a produced compressed set is validated deeply, as 0.7.2 does, but within
  ``max.decompressed.bytes``: a set whose wrappers would decompress to more is refused
  like any invalid produce (the connection is closed, nothing appended) and logged.

Heavy work stays off the event loop, so other connections keep being served: inflating
a compressed set runs in a worker thread (one set at a time, so memory for it stays
within one bound), as do fsyncs (count-based flushes, the flusher, a segment roll that
must sync first) and retention's unlinks. Background loops (flusher, retention, topic
registration) run under a :class:`~aiokafka07.supervisor.Supervisor` and are restarted
with backoff if they crash.

Storage is :mod:`.log`; ZooKeeper registration (ZOOKEEPER §2) goes through
:class:`aiokafka07.zookeeper.ZooKeeper`. The broker binds to ``hostname`` when set and to
the loopback address otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import (
    CompressionError,
    InvalidPartitionError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    ProtocolError,
)
from ..protocol import (
    FetchRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    Request,
    decode_request,
    encode_fetch_response,
    encode_multifetch_response,
    encode_offsets_response,
    validate_topic,
)
from ..protocol.messages import count_messages, summarize_message_set
from ..supervisor import CrashPolicy, Supervisor
from ..timeouts import wait_for
from ..znodes import format_broker_registration, register_broker, register_topic
from ..zookeeper import ZooKeeper
from .config import BrokerConfig
from .log import Log, LogManager, valid_partitions

__all__ = ["Broker"]

log = logging.getLogger("aiokafka07.broker")

_SIZE = struct.Struct(">i")
# What the 0.7.2 broker writes for a FETCH with a negative max size before it fails: a
# frame header claiming one byte, one byte, then the socket is closed (capture d5).
_NEGATIVE_FETCH_SIZE_REPLY = bytes.fromhex("0000000100")
#: How long a shutdown waits for the connection handlers to end (and, since Python 3.12,
#: for the server's connections to be dropped) before cancelling them.
_HANDLER_END_S = 5.0


class _Close(Exception):
    """Close the connection without writing anything (the 0.7.2 reaction to errors);
    logged at ``level``."""

    def __init__(self, message: str, *, level: int = logging.INFO) -> None:
        super().__init__(message)
        self.level = level


class Broker:
    """One embedded broker (an async context manager).

    ``await broker.start()`` recovers the logs, registers in ZooKeeper (unless
    ``enable.zookeeper=false``) and listens; ``await broker.stop()`` shuts down cleanly
    (logs flushed); ``await broker.crash()`` drops every socket and the ZooKeeper session
    at once without flushing, like a killed process.
    """

    def __init__(self, config: BrokerConfig, *, rng: random.Random | None = None) -> None:
        self.config = config
        #: Picks the partition for ``partition = -1`` produces (seed it for reproducible tests).
        self.rng = rng or random.Random()
        self.logs: LogManager | None = None
        self.zookeeper: ZooKeeper | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._supervisor = Supervisor(f"broker-{config.broker_id}", log)
        # Set when start() has finished, or shutdown began: connection handlers wait for it.
        self._ready = asyncio.Event()
        self._stopping = False
        # One compressed set is inflated at a time: memory for it stays within one bound.
        self._inflating = asyncio.Semaphore(1)
        self._topics_to_register: asyncio.Queue[str] = asyncio.Queue()
        self._registered_topics: set[str] = set()
        # The flush running in a worker thread for each log (at most one per log).
        self._flushes: dict[Log, asyncio.Task[None]] = {}
        self._port = config.port
        self.requests_handled = 0

    # -- lifecycle --------------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def host(self) -> str:
        """The address the broker listens on and registers (loopback unless configured)."""
        return self.config.hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        """The listening port (the one picked when configured with 0)."""
        return self._port

    @property
    def running(self) -> bool:
        return self._server is not None

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Recover logs, bind, register in ZooKeeper, then serve requests."""
        if self._server is not None:
            return
        config = self.config
        self._ready.clear()
        self._stopping = False
        if self._supervisor.closed:  # started again after a stop
            self._supervisor = Supervisor(f"broker-{config.broker_id}", log)
        self.logs = await asyncio.to_thread(
            LogManager,
            config.log_dir,
            partitions_for=config.partitions_for,
            config_for=config.log_config_for,
        )
        try:
            self._server = await asyncio.start_server(
                self._serve, self.host, config.port, reuse_address=True, limit=1 << 20
            )
            self._port = self._server.sockets[0].getsockname()[1]
            if config.enable_zookeeper:
                assert config.zk_connect is not None
                self.zookeeper = ZooKeeper(
                    config.zk_connect,
                    session_timeout_ms=config.zk_sessiontimeout_ms,
                    connection_timeout_ms=config.zk_connectiontimeout_ms,
                )
                await self.zookeeper.start()
                self.zookeeper.add_session_listener(self._register_everything)
                await self._register_everything()
                self._spawn("topic-registrar", self._topic_registrar)
        except BaseException:
            # Not a crash: the caller gets the exception, and reports it.
            await self._shutdown(clean=False, outcome="did not start")
            raise
        self._spawn("flusher", self._flusher)
        self._spawn("retention", self._retention)
        self._ready.set()
        log.info("broker %d serving on %s:%d", self.broker_id, self.host, self.port)

    async def stop(self) -> None:
        """Clean shutdown: stop accepting, close connections, flush logs, end the session."""
        await self._shutdown(clean=True)

    async def flush(self) -> None:
        """Flush every log now, making all appended data visible to fetches (tests use
        this instead of waiting for the periodic flusher)."""
        if self.logs is not None:
            await asyncio.to_thread(self.logs.flush_all)

    async def crash(self) -> None:
        """Crash-like shutdown for fault tests: sockets dropped mid-stream, logs not
        flushed, the ZooKeeper session closed without deleting anything first."""
        await self._shutdown(clean=False)

    async def _shutdown(self, *, clean: bool, outcome: str | None = None) -> None:
        # A connection accepted just before the server closed may get its handler only
        # after this: that handler sees _stopping and ends at once.
        self._stopping = True
        self._ready.set()  # handlers waiting for the start go on, and end
        server, self._server = self._server, None
        if server is not None:
            server.close()
            # Python 3.13+: every connection the server accepted, a handler or not yet.
            clients = getattr(server, "close_clients" if clean else "abort_clients", None)
            if clients is not None:
                clients()
        # Closing the transports ends each connection handler at its next read; handlers
        # are cancelled only if one does not finish in time.
        for writer in list(self._writers):
            if clean:
                writer.close()
            else:
                writer.transport.abort()
        await self._end_handlers()
        # Flushes already running complete either way (a thread cannot be interrupted):
        # wait for them before the supervisor cancels what is left.
        if self._flushes:
            await asyncio.wait(list(self._flushes.values()), timeout=30)
        await self._supervisor.aclose()
        if server is not None:
            # Since Python 3.12 this waits until every connection is dropped (before, it
            # returned at once): those of handlers that started late too.
            try:
                await wait_for(server.wait_closed(), _HANDLER_END_S)
            except asyncio.TimeoutError:
                log.warning("broker %d: connections still open after close", self.broker_id)
        await self._end_handlers()
        self._writers.clear()
        if self.zookeeper is not None:
            await self.zookeeper.close()
            self.zookeeper = None
        self._registered_topics.clear()
        if self.logs is not None:
            if clean:
                await asyncio.to_thread(self.logs.close)
            else:
                self.logs.abandon()
            self.logs = None
        if outcome is None:
            log.info("broker %d %s", self.broker_id, "stopped" if clean else "crashed")
        else:
            log.debug("broker %d %s", self.broker_id, outcome)

    async def _end_handlers(self) -> None:
        """Wait for the connection handlers to end (their sockets are closed), those that
        start meanwhile too; cancel what is still running after ``_HANDLER_END_S``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _HANDLER_END_S
        while self._connections:
            handlers = list(self._connections)
            _, stuck = await asyncio.wait(handlers, timeout=max(deadline - loop.time(), 0))
            for task in stuck:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            self._connections.difference_update(handlers)

    # -- ZooKeeper registration (ZOOKEEPER §2) ------------------------------------------

    def registration(self) -> str:
        """The ``/brokers/ids/<id>`` value: ``<host>-<ms>:<host>:<port>`` (spelled by
        :func:`aiokafka07.znodes.format_broker_registration`)."""
        return format_broker_registration(self.host, self.port)

    async def _register_everything(self) -> None:
        zk = self.zookeeper
        assert zk is not None
        assert self.logs is not None
        registration = await register_broker(zk, self.broker_id, self.host, self.port)
        log.info("broker %d registered in ZooKeeper as %s", self.broker_id, registration)
        self._registered_topics.clear()
        for topic in sorted(self.logs.topics()):
            await self._register_topic(topic)

    async def _register_topic(self, topic: str) -> None:
        zk = self.zookeeper
        assert zk is not None
        count = self.config.partitions_for(topic)
        await register_topic(zk, topic, self.broker_id, count)
        self._registered_topics.add(topic)
        log.info("registered topic %s with %d partitions", topic, count)

    async def _topic_registrar(self) -> None:
        while True:
            topic = await self._topics_to_register.get()
            if topic in self._registered_topics:
                continue
            try:
                await self._register_topic(topic)
            except Exception:  # retried with everything after the next new session
                log.exception("registering topic %s failed", topic)

    # -- background work ---------------------------------------------------------------

    def _spawn(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a housekeeping loop, restarted with backoff if it crashes (its work is
        retried by the next run: a flush, a retention pass, a registration)."""
        self._supervisor.spawn(name, loop, policy=CrashPolicy.RESTART, max_restarts=100)

    def _flush_in_background(self, partition_log: Log) -> None:
        """A count-based flush of ``partition_log``, fsynced in a worker thread.

        One runs at a time per log. Appends made while it runs are not covered by it
        (it marks flushed only what was there when it began), so when it ends it looks
        again: a count reached meanwhile flushes at once, not at the time-based
        flusher's next pass. (Leaving it to "the next append" kept the last appends
        before a pause unreadable for up to two flusher intervals: a confirming
        producer that waits for them sends no next append.)"""
        if partition_log in self._flushes:
            return  # a flush is running: it looks again when it ends
        if self._supervisor.closed:
            return  # shutting down: closing the logs flushes them

        async def flush() -> None:
            try:
                while True:
                    await asyncio.to_thread(partition_log.flush)
                    if not partition_log.flush_pending or self._supervisor.closed:
                        break
            finally:
                self._flushes.pop(partition_log, None)

        # A failed flush is logged; the data stays unflushed and the flusher retries it.
        self._flushes[partition_log] = self._supervisor.spawn(
            f"flush-{partition_log.name}", flush(), policy=CrashPolicy.LOG
        )

    async def _flusher(self) -> None:
        interval = self.config.log_default_flush_scheduler_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            assert self.logs is not None
            await asyncio.to_thread(self.logs.flush_due, int(time.time() * 1000))

    async def _retention(self) -> None:
        await asyncio.sleep(self.config.log_cleanup_initial_delay_s)
        while True:
            assert self.logs is not None
            # Deleting segments unlinks files (and may fsync a roll): a worker thread.
            deleted = await asyncio.to_thread(self.logs.cleanup, int(time.time() * 1000))
            if deleted:
                log.info("retention deleted %d segments", deleted)
            await asyncio.sleep(self.config.log_cleanup_interval_mins * 60)

    # -- connections -------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.socket_send_buffer)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.socket_receive_buffer)
        peer = writer.get_extra_info("peername")
        log.debug("broker %d: connection from %s", self.broker_id, peer)
        try:
            await self._ready.wait()
            if self._stopping:
                return  # accepted as the broker stopped: closed in finally
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 1 <= size <= self.config.max_socket_request_bytes:
                    log.info("closing %s: %d is not a valid request size", peer, size)
                    break
                frame = await reader.readexactly(size)
                try:
                    response = await self._handle(decode_request(frame))
                except _Close as exc:
                    log.log(exc.level, "closing %s because of error: %s", peer, exc)
                    break
                except ProtocolError as exc:
                    log.info("closing %s: malformed request: %s", peer, exc)
                    break
                self.requests_handled += 1
                if response:
                    writer.write(response)
                    await writer.drain()
                    if response is _NEGATIVE_FETCH_SIZE_REPLY:
                        break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away, or the broker is shutting down
        except asyncio.CancelledError:
            # Only shutdown cancels a handler. Ending normally keeps Python 3.11's stream
            # machinery from logging the cancellation as an error.
            pass
        finally:
            self._connections.discard(task)
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    # -- requests ----------------------------------------------------------------------

    async def _handle(self, request: Request) -> bytes | None:
        if isinstance(request, FetchRequest):
            if request.max_size < 0:
                return _NEGATIVE_FETCH_SIZE_REPLY
            return encode_fetch_response(*self._fetch(request))
        if isinstance(request, ProduceRequest):
            await self._produce(request)
            return None
        if isinstance(request, MultiFetchRequest):
            if any(f.max_size < 0 for f in request.fetches):
                raise _Close("negative fetch size in a multifetch")
            return encode_multifetch_response([self._fetch(f) for f in request.fetches])
        if isinstance(request, MultiProduceRequest):
            for produce in request.produces:
                await self._produce(produce)
            return None
        return encode_offsets_response(self._offsets(request))

    def _check_topic(self, topic: str) -> None:
        validate_topic(topic, max_length=self.config.max_topic_name_length)

    def _fetch(self, request: FetchRequest) -> tuple[int, bytes]:
        assert self.logs is not None
        try:
            self._check_topic(request.topic)
            partition_log = self.logs.get_log(request.topic, request.partition)
        except InvalidTopicError:
            return -1, b""
        except InvalidPartitionError as exc:
            log.warning("fetch: %s", exc)
            return 3, b""
        if partition_log is None:
            return 0, b""
        try:
            return 0, partition_log.read(request.offset, request.max_size)
        except OffsetOutOfRangeError:
            return 1, b""

    def _offsets(self, request: OffsetsRequest) -> list[int]:
        assert self.logs is not None
        try:
            self._check_topic(request.topic)
            partition_log = self.logs.get_log(request.topic, request.partition)
        except (InvalidTopicError, InvalidPartitionError) as exc:
            raise _Close(str(exc)) from exc
        if partition_log is None:
            return [0] if request.time in (-1, -2) else []
        return partition_log.offsets_before(request.time, request.max_offsets)

    async def _produce(self, request: ProduceRequest) -> None:
        assert self.logs is not None
        topic = request.topic
        try:
            self._check_topic(topic)
        except InvalidTopicError as exc:
            raise _Close(str(exc)) from exc
        partition = request.partition
        count = self.config.partitions_for(topic)
        if partition == -1:
            partition = self.rng.randrange(count)
        if not 0 <= partition < count:
            raise _Close(
                f"wrong partition {partition} of topic {topic!r}: {valid_partitions(count)}"
            )
        data = request.message_set
        checked = await self._validate(data)
        if checked is None:
            return  # a message over max.message.size: the request is dropped
        valid_bytes, messages = checked
        partition_log, created = self.logs.get_or_create_log(topic, partition)
        if valid_bytes:
            await self._append(partition_log, bytes(data[:valid_bytes]), messages)
        if created and self.zookeeper is not None and topic not in self._registered_topics:
            self._topics_to_register.put_nowait(topic)

    async def _append(self, partition_log: Log, data: bytes, messages: int) -> None:
        if not self.config.log_flush_fsync:
            partition_log.append(data, messages)
            return
        # fsyncs stay off the event loop: a roll that must sync the finished segment
        # first appends from a worker thread, and a count-based flush runs in one.
        if partition_log.try_append(data, messages, flush=False) is None:
            await asyncio.to_thread(partition_log.append, data, messages, flush=False)
        if partition_log.flush_pending:
            self._flush_in_background(partition_log)

    async def _validate(self, data: Any) -> tuple[int, int] | None:
        """(valid bytes, message count) of a produced set; None if it must be dropped.

        Shallow pass (on the loop, nothing built): magic, CRC and size of every top-level
        message. Deep pass, only for sets with compressed wrappers (PROTOCOL §8.2): every
        message inside them, inflated in a worker thread within ``max.decompressed.bytes``.
        Corrupt data, or more than the bound, closes the connection, as 0.7.2 does for
        invalid produce requests.
        """
        try:
            summary = summarize_message_set(data)
        except ProtocolError as exc:
            raise _Close(f"invalid message set: {exc}") from exc
        limit = self.config.max_message_size
        if summary.largest_payload > limit:
            log.warning(
                "dropping a produce: message of %d bytes exceeds max.message.size %d",
                summary.largest_payload,
                limit,
            )
            return None
        if not summary.wrappers:
            return summary.valid_bytes, summary.messages
        valid = memoryview(data)[: summary.valid_bytes]
        bound = self.config.decompression_bound()
        async with self._inflating:
            try:
                count = await asyncio.to_thread(count_messages, valid, max_decompressed=bound)
            except ProtocolError as exc:
                if isinstance(exc, CompressionError) and exc.limit is not None:
                    raise _Close(
                        f"refusing a produce over max.decompressed.bytes: {exc}",
                        level=logging.WARNING,
                    ) from exc
                raise _Close(f"invalid compressed message set: {exc}") from exc
        return summary.valid_bytes, count

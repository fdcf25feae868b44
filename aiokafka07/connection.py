"""One pipelined TCP connection to one Kafka 0.7 broker: transport glue around a
:class:`~aiokafka07.protocol.conversation.Conversation`.

The protocol rules live in the conversation, which knows nothing of sockets: FIFO pairing
of answers (0.7 has no correlation ids), PRODUCE frames that get none, the confirm probe,
frame splitting and the bound on each answer's size. This module adds what needs I/O:

* requests queued in the same event-loop iteration go out together (at most two calls
  on the transport);
* a large answer (a fetch) is read without a copy: once its size is in and checked,
  the rest of it goes from the socket straight into its own buffer, where the fetches
  decode it (an ``asyncio.BufferedProtocol``); small answers, and the start of a large
  one, are read into a buffer of the connection's;
* **flow control**: what waits for the socket (queued here, or in the transport's buffer)
  stays within ``max_unsent_bytes``, for any number of callers. A call whose frame does
  not fit waits for room *before* its frame is queued, in line: first come, first served,
  for at most ``request_timeout_ms``. One frame larger than the bound goes alone, when
  nothing else waits for the socket;
* **write order is call order**: every call takes its place synchronously when its method
  is called, before any ``await``: its frame is queued at once, or its place in line is
  kept. :meth:`BrokerConnection.submit_produce` is the explicit form, a plain function
  whose calls are written in the order they were made;
* a request cancelled before it was written is never written; one cancelled after keeps
  its place in the FIFO and its answer is read and dropped;
* a request unanswered within ``request_timeout_ms`` (or a socket that takes nothing for
  that long) closes the connection, because every later answer would queue behind the lost
  one, failing everything outstanding with a typed error that says whether each request
  may have reached the broker.

Confirm mode closes the gap of 0.7's unacknowledged produce: the connection's
:class:`~aiokafka07.confirm.Confirmer` proves from the partition's log end that the broker
appended what the produce wrote (a broker closes the connection on most refusals, but
drops a message over its ``max.message.size`` silently).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from .confirm import Confirmer
from .errors import (
    KafkaConnectionError,
    MessageTooLargeError,
    ProtocolError,
    RequestTimeoutError,
)
from .protocol import (
    Compression,
    FetchRequest,
    FetchResponse,
    MultiFetchResponse,
    decode_fetch_response,
    decode_message_set,
    decode_multifetch_response,
    decode_offsets_response,
    encode_fetch_request,
    encode_message_set,
    encode_multifetch_request,
    encode_multiproduce_request,
    encode_offsets_request,
    encode_produce_request,
)
from .protocol.conversation import Conversation, Exchange
from .protocol.messages import BytesLike
from .supervisor import mark_retrieved
from .timeouts import wait_for
from .validation import (
    check_int,
    check_ms,
    check_optional_int,
    check_partition,
    renamed_options_to_ms,
)

__all__ = ["BrokerAddress", "BrokerConnection", "check_message_sizes"]

log = logging.getLogger("aiokafka07.connection")

T = TypeVar("T")

#: 0.7.2 ``max.message.size``: the largest top-level payload a broker accepts.
MAX_MESSAGE_SIZE = 1000000
#: Bytes a connection lets wait for the socket before its callers wait (flow control).
DEFAULT_MAX_UNSENT_BYTES = 4 << 20
#: The most a read takes into the connection's own buffer: small answers, and the start
#: of a large one (the rest of which is read in place, into the answer's own buffer).
READ_SIZE = 1 << 16
#: The connection options that took seconds, deprecated names of their ``*_ms`` versions
#: (for one release), for code passing connection options on (e.g. the pool).
RENAMED_TIMEOUTS = ("connect_timeout", "request_timeout")


class BrokerAddress(NamedTuple):
    """Where a broker listens. ``broker_id`` is None for a broker known only by address."""

    broker_id: int | None
    host: str
    port: int

    def __str__(self) -> str:
        where = f"{self.host}:{self.port}"
        return where if self.broker_id is None else f"broker {self.broker_id} at {where}"


def check_message_sizes(message_set: BytesLike, max_message_size: int) -> None:
    """Refuse a set with a top-level payload over ``max_message_size``.

    A 0.7 broker drops such a produce silently, so the client must refuse it up front.
    For compressed sets the limit applies to the wrapper's compressed payload (§13).
    """
    for message in decode_message_set(message_set, shallow=True).messages:
        if len(message.value) > max_message_size:
            kind = "compressed set" if message.attributes & 3 else "message"
            raise MessageTooLargeError(
                f"{kind} payload of {len(message.value)} bytes exceeds max.message.size "
                f"{max_message_size}; a 0.7 broker would drop it silently"
            )


#: A frame at least this long goes to the transport alone (see :func:`write_chunks`).
WRITE_ALONE = 16 << 10


def write_chunks(frames: list[bytes]) -> list[bytes]:
    """``frames`` as the transport should take them, in order: a frame of at least
    :data:`WRITE_ALONE` bytes alone, each run of shorter ones joined into one.

    A transport sends what it is given at once when nothing waits in its buffer, copying
    only what the socket did not take; joining a produce frame (~126 KB at the defaults)
    with the OFFSETS probe confirm mode queues behind it would copy the whole frame into a
    new allocation each request (``writelines()`` joins on Python 3.11), measurable in
    confirm mode's CPU per message. Short frames (requests, probes) are joined: one
    system call for a run of them. Every chunk goes through ``write()``: the selector
    transport's ``writelines()`` of Python 3.12.0-3.12.8 and 3.13.0-3.13.1 never pauses
    the protocol (CPython gh-127655), and ``resume_writing()`` comes only after a pause.
    """
    if len(frames) == 1:
        return frames
    chunks: list[bytes] = []
    run: list[bytes] = []
    for frame in frames:
        if len(frame) < WRITE_ALONE:
            run.append(frame)
            continue
        if run:
            chunks.append(run[0] if len(run) == 1 else b"".join(run))
            run = []
        chunks.append(frame)
    if run:
        chunks.append(run[0] if len(run) == 1 else b"".join(run))
    return chunks


def _not_done(future: asyncio.Future[Any]) -> bool:
    return not future.done()


class _Turn:
    """A call waiting in line for room to queue its frame (flow control).

    ``enqueue`` queues the frame, ``size`` bytes, and ``future`` is the call's outcome. A
    caller that gives up (cancels ``future``) leaves the line, unless ``keep``: a
    :meth:`BrokerConnection.submit_produce` frame is written even then, as one queued at
    once would be. ``taken`` is the connection's progress when the wait began.
    """

    __slots__ = ("answers", "dropped", "enqueue", "future", "handle", "keep", "size", "taken")

    def __init__(
        self,
        size: int,
        enqueue: Callable[[], None],
        future: asyncio.Future[Any],
        *,
        keep: bool,
        answers: bool,
        taken: int,
    ) -> None:
        self.size = size
        self.enqueue = enqueue
        self.future = future
        self.keep = keep
        self.answers = answers
        self.taken = taken
        self.handle: asyncio.TimerHandle | None = None  # its timeout
        self.dropped = False

    def leave(self) -> None:
        """Its wait is over: stop its timeout."""
        if self.handle is not None:
            self.handle.cancel()

    @property
    def waiting(self) -> bool:
        """Still to be queued when its turn comes."""
        return not self.dropped and (self.keep or not self.future.done())


class BrokerConnection(asyncio.BufferedProtocol):
    """A pipelined connection to one broker. Open it with :meth:`open` (or ``async with``).

    Durations are milliseconds. ``connect_timeout_ms`` bounds each connection attempt
    (0.7.2 ``connect.timeout.ms``). ``request_timeout_ms`` bounds the wait for each answer,
    and for the socket to take data (0.7.2 ``socket.timeout.ms``; the Java client's timeout
    never fires on reads, this one does). ``max_message_size`` is the client-side produce
    check. ``max_unsent_bytes`` bounds what waits for the socket: a call whose frame does
    not fit waits (flow control; see the module docstring). ``connect_timeout`` and
    ``request_timeout`` (seconds) are their deprecated names.
    """

    def __init__(
        self,
        address: BrokerAddress,
        *,
        connect_timeout_ms: float = 5000.0,
        request_timeout_ms: float = 30000.0,
        send_buffer: int | None = None,
        receive_buffer: int | None = None,
        max_message_size: int = MAX_MESSAGE_SIZE,
        max_unsent_bytes: int = DEFAULT_MAX_UNSENT_BYTES,
        connect_timeout: float | None = None,
        request_timeout: float | None = None,
    ) -> None:
        self.address = address
        where = "BrokerConnection"
        self.connect_timeout_ms = check_ms(
            where, "connect_timeout_ms", connect_timeout_ms, connect_timeout, above=True
        )
        self.request_timeout_ms = check_ms(
            where, "request_timeout_ms", request_timeout_ms, request_timeout, above=True
        )
        # In seconds, for asyncio.
        self._connect_timeout = self.connect_timeout_ms / 1000
        self._request_timeout = self.request_timeout_ms / 1000
        self.send_buffer = check_optional_int("send_buffer", send_buffer, minimum=1)
        self.receive_buffer = check_optional_int("receive_buffer", receive_buffer, minimum=1)
        self.max_message_size = check_int("max_message_size", max_message_size, minimum=1)
        self.max_unsent_bytes = check_int("max_unsent_bytes", max_unsent_bytes, minimum=1)
        self._conversation: Conversation[asyncio.Future[Any]] = Conversation()
        # Reads land in the rest of the large answer being received (in place, no copy)
        # or here; whether the last buffer handed out was the answer's.
        self._scratch = memoryview(bytearray(READ_SIZE))
        self._reading_in_place = False
        self._transport: asyncio.Transport | None = None
        self._flush_scheduled = False
        # Calls waiting for room to queue their frames, first come first served.
        self._line: deque[_Turn] = deque()
        # Bytes handed to the transport so far (what the socket took is that, less the
        # transport's buffer: the progress a wait for room watches).
        self._handed = 0
        self._closed: KafkaConnectionError | None = None
        # Requests awaiting answers, in the order queued, with their deadlines (loop
        # time), watched by one timer (see _watch); each one's exchange, until it ends.
        self._watched: deque[asyncio.Future[Any]] = deque()
        self._deadlines: deque[float] = deque()
        self._exchanges: dict[asyncio.Future[Any], Exchange[Any]] = {}
        self._watch_timer: asyncio.TimerHandle | None = None
        self._lost = asyncio.Event()
        # Whether this client ended the connection (close(), abort()), not the broker.
        self._closed_locally = False
        self._confirmer = Confirmer(
            str(address),
            self.request_timeout_ms,
            send_request=self._request_now,
            send_produce=self._produce_now,
            broken=self._fail_with,
        )

    # -- lifecycle --------------------------------------------------------------------

    @classmethod
    async def open(cls, address: BrokerAddress, **options: Any) -> BrokerConnection:
        """Connect to ``address``; raise :class:`KafkaConnectionError` if that fails.
        ``options`` are the constructor's."""
        options = renamed_options_to_ms("BrokerConnection.open", options, RENAMED_TIMEOUTS)
        conn = cls(address, **options)
        await conn._connect()
        return conn

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await wait_for(
                loop.create_connection(lambda: self, self.address.host, self.address.port),
                self._connect_timeout,
            )
        except asyncio.TimeoutError:
            raise KafkaConnectionError(
                f"connecting to {self.address} timed out after {self.connect_timeout_ms:g} ms",
                broker=str(self.address),
            ) from None
        except OSError as exc:
            raise KafkaConnectionError(
                f"cannot connect to {self.address}: {exc.strerror or exc}",
                broker=str(self.address),
            ) from exc
        log.info("connected to %s", self.address)

    async def __aenter__(self) -> BrokerConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests written, queued or waiting for room whose answers have not arrived."""
        waiting = sum(1 for t in self._line if t.answers and t.waiting and not t.future.done())
        return self._conversation.outstanding + waiting

    @property
    def requests_sent(self) -> int:
        """Frames written to the socket so far (a confirmed produce counts two)."""
        return self._conversation.written

    @property
    def unsent_bytes(self) -> int:
        """Bytes queued or in the transport's buffer, not yet taken by the kernel: at most
        ``max_unsent_bytes``, or one frame larger than that (flow control)."""
        transport = self._transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        return self._conversation.outbox_bytes + buffered

    async def close(self, timeout: float | None = None, *, timeout_ms: float = 5000.0) -> None:
        """Wait up to ``timeout_ms`` for outstanding answers, then close; what is still
        outstanding fails with :class:`KafkaConnectionError`. (``timeout``, in seconds, is
        the deprecated form.)"""
        wait = check_ms("BrokerConnection.close", "timeout_ms", timeout_ms, timeout) / 1000
        if self._closed is None:
            log.debug("closing the connection to %s", self.address)
            self._closed_locally = True
            pending = [f for f in self._conversation.tokens() if not f.done()]
            pending += [t.future for t in self._line if t.waiting and not t.future.done()]
            pending += self._confirmer.pending()
            if pending:
                await asyncio.wait(pending, timeout=wait)
        self._fail(KafkaConnectionError(f"connection to {self.address} closed"))
        if self._transport is not None:
            try:
                await wait_for(self._lost.wait(), wait)
            except asyncio.TimeoutError:
                self._transport.abort()

    def abort(self) -> None:
        """Drop the connection at once; everything outstanding fails."""
        if self._closed is None:
            self._closed_locally = True
        self._fail(KafkaConnectionError(f"connection to {self.address} aborted"), abort=True)

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: not an asyncio.Transport subclass on every loop (uvloop's
        # are not), so it is not checked as one.
        self._transport = transport = cast(asyncio.Transport, transport)
        # Both marks at 0: the transport pauses us whenever it keeps any byte and resumes
        # us once it has none left, the moment the line is looked at again (_admit). The
        # bound itself is ours: what the transport keeps counts in unsent_bytes.
        transport.set_write_buffer_limits(high=0, low=0)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
            if self.receive_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the transport's next read goes: the rest of the large answer being
        received (read in place), else the connection's own buffer of ``READ_SIZE``."""
        view = self._conversation.reserve()
        self._reading_in_place = view is not None
        return view if view is not None else self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were read into the buffer :meth:`get_buffer` gave: the answers they
        complete are resolved; bad bytes fail the connection."""
        if self._reading_in_place:
            self._deliver(self._conversation.received_into, nbytes)
        else:
            self._deliver(self._conversation.receive_data, self._scratch[:nbytes])

    def data_received(self, data: bytes) -> None:
        """Bytes from the broker (what an ``asyncio.Protocol`` gets; the transport calls
        :meth:`get_buffer` and :meth:`buffer_updated` instead)."""
        self._deliver(self._conversation.receive_data, data)

    def _deliver(self, receive: Callable[[Any], list[tuple[Any, Any]]], received: Any) -> None:
        """Hand what was read to the conversation; resolve the answers it completes."""
        try:
            answers = receive(received)
        except ProtocolError as exc:
            for future, body in exc.decoded or ():
                self._resolve(future, body)
            self._fail_with(exc)
            return
        for future, body in answers:
            self._resolve(future, body)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._closed is None:  # not closed by us: the broker or the network did it
            log.info("connection to %s lost%s", self.address, f": {exc}" if exc else "")
        self._fail(
            KafkaConnectionError(
                f"connection to {self.address} lost" + (f": {exc}" if exc else ""),
                broker=str(self.address),
            )
        )
        self._transport = None
        self._lost.set()

    def resume_writing(self) -> None:
        self._admit()

    # -- internals ----------------------------------------------------------------------

    def _fail_with(self, exc: ProtocolError) -> None:
        """Bad bytes from the broker: requests written fail with ``exc`` itself (their
        answers are lost in garbage), then the connection closes."""
        log.warning("closing the connection to %s: %s", self.address, exc)
        written, unwritten = self._conversation.close()
        for future in written:
            self._reject(future, exc)
        broker = str(self.address)
        for future in unwritten:
            self._reject(
                future,
                KafkaConnectionError(
                    f"connection to {self.address} failed before this request was written: {exc}",
                    broker=broker,
                ),
            )
        self._fail(KafkaConnectionError(f"connection to {self.address} failed: {exc}"))

    def _fail(self, reason: KafkaConnectionError, *, abort: bool = False) -> None:
        if self._closed is None:
            self._closed = reason
        broker = str(self.address)
        written, unwritten = self._conversation.close()
        for future in written:
            self._reject(future, type(reason)(str(reason), broker=broker, maybe_delivered=True))
        line, self._line = self._line, deque()
        for turn in line:
            turn.leave()
        never_written = [*unwritten, *(t.future for t in line if not t.dropped)]
        for future in never_written:
            self._reject(future, type(reason)(str(reason), broker=broker, maybe_delivered=False))
        self._confirmer.close(self._closed, local=self._closed_locally)
        if self._watch_timer is not None:
            self._watch_timer.cancel()
            self._watch_timer = None
        self._watched.clear()
        self._deadlines.clear()
        self._exchanges.clear()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if abort:
                transport.abort()
            else:
                transport.close()

    def _closed_error(self, *, maybe_delivered: bool) -> KafkaConnectionError:
        return KafkaConnectionError(
            f"connection to {self.address} is closed ({self._closed})",
            broker=str(self.address),
            maybe_delivered=maybe_delivered,
        )

    def _check_open(self) -> None:
        if self._closed is not None:
            raise self._closed_error(maybe_delivered=False)
        if self._transport is None:
            raise KafkaConnectionError(f"connection to {self.address} is not open")

    def _queued(self) -> None:
        """Something was queued: write it at the end of this loop iteration."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _watch(self, future: asyncio.Future[Any], exchange: Exchange[Any]) -> None:
        """Time ``future`` out after ``request_timeout_ms``; if it is cancelled (by anyone),
        cancel its exchange: never written if it was not yet, else its answer dropped.

        One timer watches every request of the connection: requests share one timeout,
        so the oldest one not answered is the next to time out. (A timer per request
        lived, with its context and callback, as long as the answer took: under confirm
        mode's wait for the broker's flush, long enough to reach the cyclic collector's
        oldest generation and set off its passes.)"""
        loop = asyncio.get_running_loop()
        watched, deadlines = self._watched, self._deadlines
        while watched and watched[0].done():  # answered in order: forget them now
            watched.popleft()
            deadlines.popleft()
        watched.append(future)
        deadlines.append(loop.time() + self._request_timeout)
        self._exchanges[future] = exchange
        future.add_done_callback(self._watched_ended)
        if self._watch_timer is None:
            self._watch_timer = loop.call_at(deadlines[0], self._watch_expired)

    def _watched_ended(self, future: asyncio.Future[Any]) -> None:
        exchange = self._exchanges.pop(future, None)
        if exchange is not None and future.cancelled():
            self._conversation.cancel(exchange)

    def _watch_expired(self) -> None:
        """The watch timer: the oldest request not answered within ``request_timeout_ms``
        fails the connection (:meth:`_timed_out`); else the timer is set for the next."""
        self._watch_timer = None
        watched, deadlines = self._watched, self._deadlines
        now = asyncio.get_running_loop().time()
        while watched and self._closed is None:
            if watched[0].done():
                watched.popleft()
                deadlines.popleft()
            elif deadlines[0] <= now:
                deadlines.popleft()
                self._timed_out(watched.popleft())
            else:
                self._watch_timer = asyncio.get_running_loop().call_at(
                    deadlines[0], self._watch_expired
                )
                return

    def _flush(self) -> None:
        """Write every frame queued this iteration in one go, skipping cancelled requests;
        then let in whoever in line fits now."""
        self._flush_scheduled = False
        transport = self._transport
        # A transport already closing (its connection_lost is on its way) takes nothing:
        # what is queued fails then, as never written.
        if transport is None or self._closed is not None or transport.is_closing():
            return
        out = self._conversation.data_to_send(_not_done)
        if out.frames:
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "%s: wrote %d requests, %d bytes", self.address, len(out.frames), out.size
                )
            for chunk in write_chunks(out.frames):
                transport.write(chunk)
            self._handed += out.size
        for future in out.written:
            if not future.done():
                future.set_result(None)
        self._admit()

    def _taken(self) -> int:
        """Bytes the socket took so far."""
        transport = self._transport
        return self._handed - (transport.get_write_buffer_size() if transport else 0)

    def _fits(self, size: int) -> bool:
        """Whether ``size`` more bytes may be queued now: what waits for the socket stays
        within ``max_unsent_bytes``, or is this one frame alone."""
        unsent = self.unsent_bytes
        return unsent == 0 or unsent + size <= self.max_unsent_bytes

    def _submit(
        self,
        size: int,
        enqueue: Callable[[], None],
        future: asyncio.Future[Any],
        *,
        keep: bool = False,
        answers: bool = False,
    ) -> bool:
        """Queue ``size`` bytes now (``enqueue()``) when nobody is in line and they fit,
        and return True; else take a place at the end of the line (False). A place in
        line ends within ``request_timeout_ms``: queued, or ``future`` failed (see
        :meth:`_turn_expired`)."""
        if not self._line and self._fits(size):
            enqueue()
            return True
        turn = _Turn(size, enqueue, future, keep=keep, answers=answers, taken=self._taken())
        loop = asyncio.get_running_loop()
        turn.handle = loop.call_later(self._request_timeout, self._turn_expired, turn)
        self._line.append(turn)
        return False

    def _admit(self) -> None:
        """Queue the frames of the calls in line, first come first served, while they fit
        (called whenever room may have appeared: after a write, on resume_writing, when a
        call leaves the line)."""
        line = self._line
        while line and self._closed is None:
            turn = line[0]
            if turn.waiting and not self._fits(turn.size):
                return
            line.popleft()
            turn.leave()
            if turn.waiting:
                try:
                    turn.enqueue()
                except Exception as exc:  # checked when it took its place; closed since?
                    self._reject(turn.future, exc)

    def _turn_expired(self, turn: _Turn) -> None:
        """``turn`` waited ``request_timeout_ms`` for room. If the socket took nothing
        all that time, the broker reads nothing: the connection closes, failing everything
        with :class:`RequestTimeoutError`. Else only this call fails (never written)."""
        if not turn.waiting or self._closed is not None:
            return
        if self._taken() == turn.taken:
            reason = RequestTimeoutError(
                f"{self.address} took no data for {self.request_timeout_ms:g} ms",
                broker=str(self.address),
                maybe_delivered=True,
            )
            log.warning("closing the connection to %s: %s", self.address, reason)
            self._fail(reason, abort=True)
            return
        turn.dropped = True
        self._reject(
            turn.future,
            RequestTimeoutError(
                f"no room to write to {self.address} within {self.request_timeout_ms:g} ms: "
                f"the socket takes data more slowly than it is queued",
                broker=str(self.address),
                maybe_delivered=False,
            ),
        )
        self._admit()  # it may have held up those behind it

    def _timed_out(self, future: asyncio.Future[Any]) -> None:
        if future.done():
            return
        reason = RequestTimeoutError(
            f"no answer from {self.address} within {self.request_timeout_ms:g} ms",
            broker=str(self.address),
            maybe_delivered=True,
        )
        self._reject(future, reason)
        log.warning("closing the connection to %s: %s", self.address, reason)
        self._fail(reason, abort=True)

    async def drain(self) -> None:
        """Flow control for :meth:`submit_produce` callers: wait for this call's turn in
        line and until what waits for the socket is within ``max_unsent_bytes``. (The
        other request methods do this themselves, before queueing.) Raises
        :class:`RequestTimeoutError` after ``request_timeout_ms`` without room (if the
        socket took nothing meanwhile, the connection is closed too),
        :class:`KafkaConnectionError` if the connection is closed."""
        if self._closed is None and self._transport is not None:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._submit(0, functools.partial(_set_done, turn), turn)
            if not turn.done():
                await self._answer(turn)
        if self._closed is not None:
            raise self._closed_error(maybe_delivered=True)

    # -- requests -----------------------------------------------------------------------

    async def request(self, frame: bytes) -> bytes:
        """Send a framed request and return its response frame body (after the size).

        The answer may be at most as large as the request allows (see
        :func:`~aiokafka07.protocol.conversation.answer_limit`); a larger one is a
        :class:`~aiokafka07.errors.MalformedFrameError` and closes the connection.
        """
        body = await self._exchange(frame)
        return body if type(body) is bytes else bytes(body)

    async def _exchange(self, frame: bytes) -> bytes | bytearray:
        """:meth:`request`, whose answer is left as it was read: a large one is the
        ``bytearray`` it was read into in place (the fetches decode it where it lies)."""
        self._check_open()
        size = self._conversation.request_size(frame)
        future: asyncio.Future[bytes | bytearray] = asyncio.get_running_loop().create_future()
        self._submit(size, functools.partial(self._queue_request, frame, future), future)
        return await self._answer(future)

    def _request_now(self, frame: bytes) -> asyncio.Future[bytes | bytearray]:
        """Queue a request at once, outside the line (the confirm ledger's OFFSETS and
        FETCH probes: a few dozen bytes each, ordered against the produces they check,
        which take their places in line); its answer's future is bounded by the request
        timeout."""
        future: asyncio.Future[bytes | bytearray] = asyncio.get_running_loop().create_future()
        self._queue_request(frame, future)
        return future

    def _produce_now(self, frame: bytes) -> asyncio.Future[None]:
        """Queue a PRODUCE / MULTIPRODUCE at once (its turn in line has come); the
        future is resolved once it is written."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._conversation.send_produce(frame, written)
        self._queued()
        return written

    def _queue_request(self, frame: bytes, future: asyncio.Future[bytes | bytearray]) -> None:
        self._watch(future, self._conversation.send_request(frame, future))
        self._queued()

    async def _answer(self, future: asyncio.Future[T]) -> T:
        """``future``'s result; a caller cancelled meanwhile cancels it (in line: it
        leaves the line; queued: never written; written: its answer is dropped)."""
        try:
            return await future
        except asyncio.CancelledError:
            future.cancel()
            self._admit()  # it may have held up those behind it in line
            raise

    async def send(self, frame: bytes) -> None:
        """Send a framed request that gets no answer (PRODUCE, MULTIPRODUCE).

        Returns once the frame is queued for the socket (after waiting for room, see
        flow control); that does not mean the broker has it (see confirm mode). Other
        request types raise :class:`~aiokafka07.errors.MalformedFrameError`: their
        answers would be taken for someone else's.
        """
        await self._produce(frame, confirm=False)

    def submit_produce(
        self,
        frame: bytes,
        *,
        confirm: bool,
        processed: Callable[[], None] | None = None,
    ) -> asyncio.Future[int | None]:
        """Queue a PRODUCE / MULTIPRODUCE frame now; return its outcome as a future.

        The ordering guarantee a producer builds on: frames are written in the order of
        the ``submit_produce`` calls (and of every other request call), since this takes
        its place synchronously: the frame is queued now, or, when others wait for room or
        it does not fit, it keeps its place in line (and fails with
        :class:`RequestTimeoutError`, never written, if no room comes within
        ``request_timeout_ms``). This cannot wait, so the caller applies flow control with
        :meth:`drain` before its next call: then at most this one frame waits beyond
        ``max_unsent_bytes``.

        With ``confirm`` the future gets the last entry's log end once the partitions'
        logs show every byte the produce wrote (:mod:`aiokafka07.confirm`; a frame with
        entries for partition -1 needs :meth:`prepare_confirm` first), or
        :class:`ProduceNotConfirmedError` / :class:`RequestTimeoutError` (may have been
        delivered) or :class:`KafkaConnectionError` with ``maybe_delivered`` False (never
        written). Without, it gets None once the frame is written to the socket.
        Cancelling the future never takes the frame back.

        ``processed`` (with ``confirm``): called once, as soon as the broker is proven to
        have processed the produce (the answer to a request queued behind it came), or
        the outcome is settled first. Confirmation waits for the broker's flush;
        processing does not: a caller bounding its requests in flight counts each until
        this call, so that confirmations trail the writes instead of holding them up.
        """
        return self._submit_produce(frame, confirm=confirm, keep=True, processed=processed)[0]

    def _submit_produce(
        self,
        frame: bytes,
        *,
        confirm: bool,
        keep: bool,
        processed: Callable[[], None] | None = None,
    ) -> tuple[asyncio.Future[int | None], bool]:
        """Take a place for a produce frame (see :meth:`_submit`): its outcome, and
        whether it was queued at once."""
        self._check_open()
        # The frame's own bytes: the ledger's probes are requests of their own.
        size = self._conversation.produce_size(frame)
        # With confirm, refused before it takes a place; the sizes go with it to its turn.
        sizes = self._confirmer.check(frame) if confirm else None
        result: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        enqueue = functools.partial(self._queue_produce, frame, result, sizes, processed)
        return result, self._submit(size, enqueue, result, keep=keep, answers=confirm)

    def _queue_produce(
        self,
        frame: bytes,
        result: asyncio.Future[int | None],
        sizes: dict[tuple[str, int], int] | None,
        processed: Callable[[], None] | None = None,
    ) -> None:
        """Its turn came: queue the frame (with confirm, i.e. ``sizes`` from the ledger's
        check: through the ledger, which queues its probes around it, and whose outcome
        becomes ``result``'s)."""
        if sizes is None:
            self._conversation.send_produce(frame, result)
            self._queued()
            return
        self._confirmer.submit(frame, sizes, result, processed)

    async def prepare_confirm(self, frame: bytes) -> None:
        """Make ``frame`` ready for :meth:`submit_produce` with confirm: learn the
        partition count of each topic it produces to partition -1 (a few FETCHes, once
        per topic and connection). Raises :class:`KafkaConnectionError` (never written)
        if the connection fails meanwhile."""
        self._check_open()
        await self._confirmer.prepare(frame)

    def _resolve(self, future: asyncio.Future[Any], body: bytes | bytearray) -> None:
        """An answer arrived for ``future``."""
        if not future.done():  # else cancelled after it was written: the answer is dropped
            future.set_result(body)

    def _reject(self, future: asyncio.Future[Any], exc: Exception) -> None:
        """Fail ``future`` (unless it is done already)."""
        if not future.done():
            future.set_exception(exc)

    async def fetch(self, topic: str, partition: int, offset: int, max_size: int) -> FetchResponse:
        """FETCH: raw message-set bytes (check ``error_code``; decode with ``.decode``)."""
        frame = await self._exchange(encode_fetch_request(topic, partition, offset, max_size))
        return decode_fetch_response(frame)

    async def multifetch(self, fetches: Sequence[FetchRequest]) -> MultiFetchResponse:
        """MULTIFETCH: one response per fetch, in order."""
        frame = await self._exchange(encode_multifetch_request(fetches))
        return decode_multifetch_response(frame, count=len(fetches))

    async def offsets(
        self, topic: str, partition: int, time: int, max_offsets: int = 1
    ) -> tuple[int, ...]:
        """OFFSETS: offsets before ``time`` (LATEST / EARLIEST / ms), newest first."""
        frame = await self._exchange(encode_offsets_request(topic, partition, time, max_offsets))
        response = decode_offsets_response(frame)
        return response.offsets

    async def produce(
        self,
        topic: str,
        partition: int,
        payloads: Iterable[BytesLike],
        *,
        compression: Compression | int | str | None = None,
        confirm: bool = False,
    ) -> int | None:
        """PRODUCE payloads as one message set (one wrapper when compressed).

        With ``confirm`` it returns the partition's log end once the log shows every
        byte the produce wrote (:mod:`aiokafka07.confirm`), or raises
        :class:`ProduceNotConfirmedError` if the connection closed first (the broker
        refused it, or went away) or the log did not grow by those bytes within
        ``request_timeout_ms`` (the broker dropped it). Without, it returns once the
        frame is queued (after flow control).
        """
        message_set = encode_message_set(payloads, compression=compression)
        return await self.produce_message_set(topic, partition, message_set, confirm=confirm)

    async def produce_message_set(
        self, topic: str, partition: int, message_set: BytesLike, *, confirm: bool = False
    ) -> int | None:
        """PRODUCE an already encoded message set (e.g. wrappers kept by a mirror)."""
        check_partition(partition, produce=True)
        check_message_sizes(message_set, self.max_message_size)
        frame = encode_produce_request(topic, partition, message_set)
        return await self._produce(frame, confirm)

    async def multiproduce(
        self,
        batches: Iterable[tuple[str, int, Iterable[BytesLike]]],
        *,
        compression: Compression | int | str | None = None,
        confirm: bool = False,
    ) -> int | None:
        """MULTIPRODUCE (topic, partition, payloads) batches in one request, in order."""
        entries = [
            (topic, partition, encode_message_set(payloads, compression=compression))
            for topic, partition, payloads in batches
        ]
        return await self.multiproduce_message_sets(entries, confirm=confirm)

    async def multiproduce_message_sets(
        self,
        entries: Sequence[tuple[str, int, BytesLike]],
        *,
        confirm: bool = False,
        check_sizes: bool = True,
    ) -> int | None:
        """MULTIPRODUCE already encoded (topic, partition, message set) entries (a single
        entry goes as a plain PRODUCE). ``check_sizes=False`` skips the max.message.size
        check for callers that checked every message already."""
        if confirm and not entries:
            raise ValueError("nothing to confirm: no produce entries")
        for _, partition, _ in entries:
            check_partition(partition, produce=True)
        if check_sizes:
            for _, _, message_set in entries:
                check_message_sizes(message_set, self.max_message_size)
        if len(entries) == 1:
            frame = encode_produce_request(*entries[0])
        else:
            frame = encode_multiproduce_request(entries)
        return await self._produce(frame, confirm)

    async def _produce(self, frame: bytes, confirm: bool) -> int | None:
        """Wait for room, queue ``frame``; with ``confirm``, wait for its confirmation."""
        if confirm:
            await self.prepare_confirm(frame)
        future, queued = self._submit_produce(frame, confirm=confirm, keep=False)
        if confirm:
            return await self._answer(future)
        if queued:  # the caller does not wait for the write
            future.add_done_callback(mark_retrieved)
            return None
        await self._answer(future)  # in line: until it is written (or fails)
        return None


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

"""The client side of one Kafka 0.7 broker connection, as a pure state machine (no I/O).

In the style of h11: bytes and requests go in, bytes to write and answers come out, and
the caller owns the socket, the clock and the futures. The rules it enforces:

* **FIFO pairing.** 0.7 has no correlation ids: a broker answers a connection's requests
  strictly in the order they were written. Every request that expects an answer gets a
  place in a queue when it is written, and each answer goes to the oldest place.
* **PRODUCE and MULTIPRODUCE get no answer**, so they take no place in that queue. The
  request type is read from the frame: a caller cannot get this wrong.
* **The confirm probe.** 0.7 never acknowledges a produce. :meth:`Conversation.send_produce`
  with ``confirm=True`` queues an OFFSETS request (latest offset, of the last partition the
  produce wrote; partition 0 for -1, since OFFSETS refuses -1) right behind the produce;
  its answer proves the broker processed the produce, not that it wrote it: 0.7.2 drops a
  message over ``max.message.size`` while processing it. Proof of writing needs the log
  ends before and after, which :mod:`aiokafka07.confirm` keeps per connection (the
  library's confirm mode uses that, not this probe).
* **Write order is call order.** Every ``send_*`` call queues synchronously, and
  :meth:`Conversation.data_to_send` hands frames out in the order they were queued. A
  caller that needs requests written in a given order (a producer keeping a partition's
  batches in order) gets it by calling in that order; nothing else is needed.
* **Cancellation never shifts answers.** A request cancelled before it was handed out is
  never written; one cancelled after keeps its place, and its answer is read and dropped.
* **Size limits.** Each request states how large its answer can be (``2 + max_size`` for a
  FETCH, the sum of its fetches for a MULTIFETCH, ``6 + 8 * max_offsets`` for OFFSETS).
  An answer's size prefix is checked against the bound of the request it answers as soon
  as it arrives, before any more of it is buffered: a broker (or anything else on that
  port) cannot make the client allocate more than it asked for.
* **Bad bytes end the conversation.** A size outside its bound, or bytes nobody asked
  for, raise a :class:`~aiokafka07.errors.ProtocolError`; the answers completed before
  them are on the error's ``decoded`` attribute, and every later call raises too. The
  caller fails what is outstanding (:meth:`Conversation.close` says which requests may
  have reached the broker) and drops the connection.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..errors import InvalidPartitionError, MalformedFrameError, ProtocolError
from .messages import BytesLike
from .requests import LATEST, RequestType, encode_offsets_request
from .responses import FrameSplitter

__all__ = [
    "Conversation",
    "Exchange",
    "Outgoing",
    "answer_limit",
    "confirm_target",
    "produce_entries",
]

T = TypeVar("T")

_HEAD = struct.Struct(">ih")  # size, request type
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FETCH_TAIL = 4 + 8 + 4  # partition, offset, max size
_PRODUCE_TYPES = (RequestType.PRODUCE, RequestType.MULTIPRODUCE)

# Exchange states.
_QUEUED = 0  # waiting in the outbox
_WRITTEN = 1  # handed out; for a request, awaiting its answer
_DROPPED = 2  # a request cancelled after it was written: its answer is read and dropped
_CANCELLED = 3  # cancelled before it was written: never written
_DONE = 4  # answered, or a produce handed out, or the conversation closed


def _request_type(frame: bytes) -> int:
    """The type of a whole request frame, after checking its size prefix."""
    if len(frame) < 6:
        raise MalformedFrameError(f"a request frame needs at least 6 bytes, not {len(frame)}")
    size, request_type = _HEAD.unpack_from(frame)
    if size != len(frame) - 4:
        raise MalformedFrameError(
            f"request frame size field says {size} bytes, the frame has {len(frame) - 4}"
        )
    return int(request_type)


def _skip_topic(frame: bytes, pos: int) -> int:
    """The position after the short string (a topic) at ``pos``."""
    if pos + 2 > len(frame):
        raise MalformedFrameError("request frame ends inside a topic length", position=pos)
    length: int = _I16.unpack_from(frame, pos)[0]
    if length < 0 or pos + 2 + length > len(frame):
        raise MalformedFrameError(f"request frame has a bad topic length {length}", position=pos)
    return pos + 2 + length


def answer_limit(frame: bytes) -> int | None:
    """The largest answer body a 0.7 broker can send for the request ``frame`` (a whole
    frame, size prefix included); None for PRODUCE and MULTIPRODUCE, which get none.

    A broker returns at most ``max_size`` bytes of log per fetch (PROTOCOL §4) and at most
    ``max_offsets`` offsets, so: FETCH ``2 + max_size``; MULTIFETCH ``2 + sum(6 +
    max_size)``; OFFSETS ``6 + 8 * max_offsets``. Raises :class:`MalformedFrameError` for
    a frame that is not a well-formed request.
    """
    request_type = _request_type(frame)
    if request_type in _PRODUCE_TYPES:
        return None
    if request_type in (RequestType.FETCH, RequestType.OFFSETS):
        end = _skip_topic(frame, 6) + _FETCH_TAIL
        if end != len(frame):
            raise MalformedFrameError(f"request of type {request_type} has {len(frame)} bytes")
        last: int = _I32.unpack_from(frame, end - 4)[0]
        if last < 0:
            raise MalformedFrameError(f"request of type {request_type} asks for {last}")
        return 2 + last if request_type == RequestType.FETCH else 6 + 8 * last
    if request_type == RequestType.MULTIFETCH:
        if len(frame) < 8:
            raise MalformedFrameError("multifetch request without a count")
        (count,) = _I16.unpack_from(frame, 6)
        pos, limit = 8, 2
        for _ in range(max(count, 0)):
            pos = _skip_topic(frame, pos) + _FETCH_TAIL
            if pos > len(frame):
                raise MalformedFrameError("multifetch request ends inside a fetch")
            (max_size,) = _I32.unpack_from(frame, pos - 4)
            if max_size < 0:
                raise MalformedFrameError(f"multifetch request asks for {max_size} bytes")
            limit += 6 + max_size
        if count < 0 or pos != len(frame):
            raise MalformedFrameError("multifetch request does not match its count")
        return limit
    raise MalformedFrameError(f"unknown request type {request_type}")


def produce_entries(frame: bytes) -> list[tuple[str, int, int]]:
    """The (topic, partition, message set size) of every entry of a PRODUCE or
    MULTIPRODUCE frame, in the order the broker processes them. Raises
    :class:`MalformedFrameError` for anything else or a frame that does not parse."""
    request_type = _request_type(frame)
    if request_type not in _PRODUCE_TYPES:
        raise MalformedFrameError(f"request type {request_type} is not a produce")
    pos = 6
    count = 1
    if request_type == RequestType.MULTIPRODUCE:
        if len(frame) < 8:
            raise MalformedFrameError("multiproduce request without a count")
        (count,) = _I16.unpack_from(frame, 6)
        pos = 8
        if count < 0:
            raise MalformedFrameError(f"multiproduce request with {count} entries")
    entries = []
    for _ in range(count):
        start = pos
        pos = _skip_topic(frame, pos)
        if pos + 8 > len(frame):
            raise MalformedFrameError("produce request ends inside an entry", position=pos)
        partition, size = struct.unpack_from(">ii", frame, pos)
        pos += 8 + size
        if size < 0 or pos > len(frame):
            raise MalformedFrameError("produce request ends inside a message set", position=pos)
        topic = frame[start + 2 : start + 2 + _I16.unpack_from(frame, start)[0]].decode(
            "utf-8", "replace"
        )
        entries.append((topic, partition, size))
    if pos != len(frame):
        raise MalformedFrameError("produce request has bytes after its entries", position=pos)
    return entries


def confirm_target(frame: bytes) -> tuple[str, int]:
    """The (topic, partition) of the last entry of a PRODUCE or MULTIPRODUCE frame: the
    one a confirm probe asks about (a broker processes a MULTIPRODUCE in order)."""
    entries = produce_entries(frame)
    if not entries:
        raise MalformedFrameError("nothing to confirm: a multiproduce without entries")
    topic, partition, _ = entries[-1]
    return topic, partition


class Exchange(Generic[T]):
    """One queued frame: a request awaiting its answer (``limit`` is its bound), or a
    produce (``limit`` None) whose ``token``, if any, is reported once it is written."""

    __slots__ = ("frame", "limit", "state", "token")

    def __init__(self, frame: bytes, token: T | None, limit: int | None) -> None:
        self.frame = frame
        self.token = token
        self.limit = limit
        self.state = _QUEUED

    @property
    def queued(self) -> bool:
        """Not written yet (and not cancelled)."""
        return self.state == _QUEUED


class Outgoing(Generic[T]):
    """What :meth:`Conversation.data_to_send` hands out: ``frames`` to write, in order
    (``size`` bytes in all), and the tokens of produces without confirm among them
    (``written``)."""

    __slots__ = ("frames", "size", "written")

    def __init__(self, frames: list[bytes], written: list[T], size: int) -> None:
        self.frames = frames
        self.written = written
        self.size = size


class Conversation(Generic[T]):
    """The client side of a 0.7 connection, without I/O (see the module docstring).

    ``T`` is whatever the caller uses to recognise a request's answer (the connection
    uses futures). Use :meth:`send_request` / :meth:`send_produce` to queue,
    :meth:`data_to_send` to get bytes to write, :meth:`receive_data` with bytes read,
    :meth:`close` when the connection ends.
    """

    __slots__ = ("_awaiting", "_error", "_outbox", "_splitter", "closed", "outbox_bytes", "written")

    def __init__(self) -> None:
        self._outbox: list[Exchange[T]] = []
        self._awaiting: deque[Exchange[T]] = deque()
        self._splitter = FrameSplitter(min_size=2)
        self._error: ProtocolError | None = None
        self.closed = False
        #: Bytes queued and not yet handed out by :meth:`data_to_send`.
        self.outbox_bytes = 0
        #: Frames handed out so far.
        self.written = 0

    # -- state ---------------------------------------------------------------------

    @property
    def awaiting(self) -> int:
        """Requests written whose answers have not arrived (cancelled ones included)."""
        return len(self._awaiting)

    @property
    def outstanding(self) -> int:
        """Requests queued or written whose answers are still wanted."""
        queued = sum(1 for e in self._outbox if e.limit is not None and e.state == _QUEUED)
        return queued + sum(1 for e in self._awaiting if e.state == _WRITTEN)

    def tokens(self) -> list[T]:
        """The tokens of everything outstanding: queued (produce tokens included) or
        written and awaiting an answer that is still wanted."""
        queued = [e.token for e in self._outbox if e.state == _QUEUED and e.token is not None]
        return queued + [e.token for e in self._awaiting if e.state == _WRITTEN]  # type: ignore[misc]

    @property
    def error(self) -> ProtocolError | None:
        """What broke the conversation (bad bytes from the broker), if anything."""
        return self._error

    def _check_open(self) -> None:
        if self._error is not None:
            raise type(self._error)(f"the conversation is broken: {self._error}")
        if self.closed:
            raise ProtocolError("the conversation is closed")

    # -- sending -------------------------------------------------------------------

    def _queue(self, frame: bytes, token: T | None, limit: int | None) -> Exchange[T]:
        exchange = Exchange(frame, token, limit)
        self._outbox.append(exchange)
        self.outbox_bytes += len(frame)
        return exchange

    def _check_request(self, frame: bytes) -> int:
        """The answer bound of a request ``send_request`` would queue (it raises as that)."""
        self._check_open()
        limit = answer_limit(frame)
        if limit is None:
            raise MalformedFrameError("a produce gets no answer: use send_produce")
        return limit

    def _check_produce(self, frame: bytes, confirm: bool) -> bytes | None:
        """The confirm probe ``send_produce`` would queue behind ``frame`` (None without
        confirm); raises as that."""
        self._check_open()
        if confirm:
            topic, partition = confirm_target(frame)
            if partition < -1:
                raise InvalidPartitionError(f"partition {partition} is not valid for a produce")
            return encode_offsets_request(topic, max(partition, 0), LATEST, 1)
        if _request_type(frame) not in _PRODUCE_TYPES:
            raise MalformedFrameError("send_produce takes PRODUCE or MULTIPRODUCE frames")
        return None

    def request_size(self, frame: bytes) -> int:
        """The bytes :meth:`send_request` would add to the outbox for ``frame``, checking
        it as that does (so a caller can wait for room first); queues nothing."""
        self._check_request(frame)
        return len(frame)

    def produce_size(self, frame: bytes, *, confirm: bool = False) -> int:
        """The bytes :meth:`send_produce` would add to the outbox (the frame, and its
        probe with ``confirm``), checking ``frame`` as that does; queues nothing."""
        probe = self._check_produce(frame, confirm)
        return len(frame) + (len(probe) if probe is not None else 0)

    def send_request(self, frame: bytes, token: T) -> Exchange[T]:
        """Queue a request that expects an answer (FETCH, MULTIFETCH, OFFSETS).

        Its answer comes out of :meth:`receive_data` with ``token``. Raises
        :class:`MalformedFrameError` for a produce or a frame that is not a request.
        """
        return self._queue(frame, token, self._check_request(frame))

    def send_produce(
        self, frame: bytes, token: T | None = None, *, confirm: bool = False
    ) -> Exchange[T] | None:
        """Queue a PRODUCE or MULTIPRODUCE frame (which gets no answer).

        With ``confirm``, an OFFSETS probe follows it and its answer comes out of
        :meth:`receive_data` with ``token``; the returned exchange is the probe's.
        Without, ``token`` (if any) is listed in :meth:`data_to_send`'s ``written`` when
        the frame is handed out. Nothing is queued if the frame is refused.
        """
        probe = self._check_produce(frame, confirm)
        if probe is not None:
            self._queue(frame, None, None)
            return self._queue(probe, token, 6 + 8)
        exchange = self._queue(frame, token, None)
        return exchange if token is not None else None

    def cancel(self, exchange: Exchange[T]) -> bool:
        """The caller gave up on ``exchange``. True if it was never written (and never
        will be); False if it was: its answer will be read and dropped."""
        if exchange.state == _QUEUED:
            exchange.state = _CANCELLED
            self.outbox_bytes -= len(exchange.frame)
            return True
        if exchange.state == _WRITTEN and exchange.limit is not None:
            exchange.state = _DROPPED
        return False

    def data_to_send(self, wanted: Callable[[T], bool] | None = None) -> Outgoing[T]:
        """Everything queued since the last call, in order, minus what was cancelled.

        From now on those requests await their answers, in this order. ``wanted``, if
        given, is asked about each request expecting an answer: one whose token is no
        longer wanted (a future cancelled meanwhile) is dropped unwritten, as by
        :meth:`cancel`. Produce frames are always written.
        """
        outbox, self._outbox = self._outbox, []
        self.outbox_bytes = 0
        frames: list[bytes] = []
        written: list[T] = []
        size = 0
        awaiting = self._awaiting
        for exchange in outbox:
            if exchange.state != _QUEUED:
                continue  # cancelled before it was written: never sent
            if wanted is not None and exchange.limit is not None and not wanted(exchange.token):  # type: ignore[arg-type]
                exchange.state = _CANCELLED
                continue
            frame = exchange.frame
            frames.append(frame)
            size += len(frame)
            if exchange.limit is not None:
                exchange.state = _WRITTEN
                awaiting.append(exchange)
            else:
                exchange.state = _DONE
                if exchange.token is not None:
                    written.append(exchange.token)
        self.written += len(frames)
        return Outgoing(frames, written, size)

    # -- receiving -----------------------------------------------------------------

    def receive_data(self, data: BytesLike) -> list[tuple[T, bytes | bytearray]]:
        """Bytes read from the broker; return (token, answer body) for every answer they
        completed, in request order (answers of cancelled requests are dropped).

        Raises :class:`ProtocolError` (:class:`MalformedFrameError` for a bad size) when
        the broker breaks the protocol; the answers completed before that are on the
        error's ``decoded``, and the conversation is over.
        """
        self._check_open()
        return self._answers(self._splitter.receive, data)

    def reserve(self) -> memoryview | None:
        """Where the next bytes from the broker can be read in place: the rest of a large
        answer being received (:meth:`FrameSplitter.reserve`), or None (read them into a
        buffer of your own and pass them to :meth:`receive_data`). None too once the
        conversation is over."""
        if self._error is not None or self.closed:
            return None
        return self._splitter.reserve()

    def received_into(self, nbytes: int) -> list[tuple[T, bytes | bytearray]]:
        """``nbytes`` were read into the view :meth:`reserve` returned; the answers they
        completed, as :meth:`receive_data` (an answer read in place is a ``bytearray``)."""
        self._check_open()
        return self._answers(self._splitter.received_into, nbytes)

    def _answers(
        self, add: Callable[[Any], None], received: Any
    ) -> list[tuple[T, bytes | bytearray]]:
        """Hand what was received to the splitter (``add(received)``); the answers out."""
        answers: list[tuple[T, bytes | bytearray]] = []
        splitter = self._splitter
        awaiting = self._awaiting
        try:
            add(received)
            while awaiting:
                head = awaiting[0]
                body = splitter.next_frame(head.limit)
                if body is None:
                    return answers
                awaiting.popleft()
                if head.state == _WRITTEN:
                    answers.append((head.token, body))  # type: ignore[arg-type]
                head.state = _DONE
            if splitter.buffered:
                raise ProtocolError(
                    f"{splitter.buffered} bytes arrived that answer no request "
                    "(a response nobody asked for)"
                )
        except ProtocolError as exc:
            self._error = exc
            exc.decoded = answers
            raise
        return answers

    # -- the end -------------------------------------------------------------------

    def close(self) -> tuple[list[T], list[T]]:
        """End the conversation; return the tokens still outstanding, as (written: they
        may have reached the broker, unwritten: they never did). Later sends raise."""
        self.closed = True
        written = [e.token for e in self._awaiting if e.state == _WRITTEN]
        unwritten = [e.token for e in self._outbox if e.state == _QUEUED and e.token is not None]
        for exchange in self._awaiting:
            exchange.state = _DONE
        for exchange in self._outbox:
            exchange.state = _CANCELLED
        self._awaiting.clear()
        self._outbox.clear()
        self.outbox_bytes = 0
        return written, unwritten  # type: ignore[return-value]

"""Kafka 0.7 responses (PROTOCOL §1.2, §5) and the incremental frame splitter.

A response on the wire is ``int32 size || int16 error_code || payload``. The decoders take
a frame *body* (what follows the size, as :class:`FrameSplitter` yields it); the encoders,
used by brokers, return whole frames.

FETCH payloads are raw log bytes: the message set usually ends in a partial message,
which is normal (see :mod:`.messages`). Decoded fetch responses hold the message set as a
zero-copy ``memoryview`` into the frame.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

from ..errors import BrokerError, MalformedFrameError, OffsetOutOfRangeError, error_for_code
from ..validation import INT32_MAX
from ._reader import Reader
from .messages import BytesLike, DecodedMessageSet, decode_message_set
from .requests import MAX_MULTI_COUNT

__all__ = [
    "FetchResponse",
    "FrameSplitter",
    "MultiFetchResponse",
    "OffsetsResponse",
    "decode_fetch_response",
    "decode_multifetch_response",
    "decode_offsets_response",
    "encode_fetch_response",
    "encode_multifetch_response",
    "encode_offsets_response",
]

_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ih")  # size, error code
_OFFSETS_HEAD = struct.Struct(">ihi")  # size, error code, count


class FetchResponse(NamedTuple):
    """The answer to one fetch: an error code and raw message-set bytes from the log."""

    error_code: int
    message_set: BytesLike

    def error(self, offset: int | None = None) -> BrokerError | None:
        """The exception for a non-zero error code (``offset`` names the fetch offset)."""
        if self.error_code == 0:
            return None
        cls = error_for_code(self.error_code)
        if cls is OffsetOutOfRangeError:
            where = "" if offset is None else f" {offset}"
            return OffsetOutOfRangeError(f"offset{where} is out of range", offset=offset)
        return cls(f"broker answered the fetch with error code {self.error_code}")

    def decode(self, base_offset: int, *, shallow: bool = False) -> DecodedMessageSet:
        """Raise the broker error if any, else decode the messages fetched at ``base_offset``."""
        exc = self.error(base_offset)
        if exc is not None:
            raise exc
        return decode_message_set(self.message_set, base_offset, shallow=shallow)


class MultiFetchResponse(NamedTuple):
    """One :class:`FetchResponse` per fetch of a MULTIFETCH, in request order."""

    responses: tuple[FetchResponse, ...]
    error_code: int = 0


class OffsetsResponse(NamedTuple):
    """Offsets of an OFFSETS request, newest first."""

    offsets: tuple[int, ...]
    error_code: int = 0


def decode_fetch_response(frame: BytesLike) -> FetchResponse:
    """Decode a FETCH response body: int16 error code, then the message-set bytes."""
    r = Reader(frame, "fetch response")
    return FetchResponse(r.i16("error code"), r.rest())


def decode_multifetch_response(frame: BytesLike, count: int | None = None) -> MultiFetchResponse:
    """Decode a MULTIFETCH response body: error code, then one FETCH response frame per fetch.

    With ``count`` (the number of fetches sent) a response with a different number of
    sub-responses is malformed.
    """
    r = Reader(frame, "multifetch response")
    error_code = r.i16("error code")
    responses = []
    while r.pos < r.end:
        start = r.pos
        size = r.i32("fetch response size")
        if size < 2:
            raise MalformedFrameError(
                f"multifetch response: fetch response size {size} at position {start} "
                "is smaller than its error code",
                position=start,
            )
        sub = r.take(size, "fetch response")
        responses.append(FetchResponse(int.from_bytes(sub[:2], "big", signed=True), sub[2:]))
    if count is not None and len(responses) != count:
        raise MalformedFrameError(
            f"multifetch response has {len(responses)} fetch responses, expected {count}"
        )
    return MultiFetchResponse(tuple(responses), error_code)


def decode_offsets_response(frame: BytesLike) -> OffsetsResponse:
    """Decode an OFFSETS response body: error code, int32 count, count int64 offsets."""
    r = Reader(frame, "offsets response")
    error_code = r.i16("error code")
    start = r.pos
    count = r.i32("offset count")
    if count < 0:
        raise MalformedFrameError(
            f"offsets response: negative count {count} at position {start}", position=start
        )
    data = r.take(8 * count, "offsets")
    return OffsetsResponse(struct.unpack(f">{count}q", data), error_code)


def encode_fetch_response(error_code: int, message_set: BytesLike = b"") -> bytes:
    """A whole FETCH response frame."""
    size = 2 + len(memoryview(message_set).cast("B"))
    if size > INT32_MAX:
        raise ValueError("fetch response larger than 2 GiB")
    return _HEAD.pack(size, error_code) + bytes(message_set)


def encode_multifetch_response(responses: Iterable[FetchResponse | tuple[Any, ...]]) -> bytes:
    """A whole MULTIFETCH response frame (outer error code 0)."""
    parts = [encode_fetch_response(code, data) for code, data in responses]
    if len(parts) > MAX_MULTI_COUNT:
        raise ValueError(f"more than {MAX_MULTI_COUNT} fetch responses")
    size = 2 + sum(map(len, parts))
    if size > INT32_MAX:
        raise ValueError("multifetch response larger than 2 GiB")
    return b"".join([_HEAD.pack(size, 0), *parts])


def encode_offsets_response(offsets: Iterable[int]) -> bytes:
    """A whole OFFSETS response frame (error code 0; offsets in the order given)."""
    values = tuple(offsets)
    return _OFFSETS_HEAD.pack(6 + 8 * len(values), 0, len(values)) + struct.pack(
        f">{len(values)}q", *values
    )


class FrameSplitter:
    """Split a byte stream into size-prefixed frames, incrementally.

    Two ways to use it. Push: :meth:`feed` adds received bytes and returns the bodies of
    the frames they completed (without the 4-byte size). Pull: :meth:`receive` adds bytes
    and :meth:`next_frame` returns one body at a time, each checked against a bound the
    caller chooses for that frame (a client knows how large each answer may be).

    A frame size outside ``min_size..max_size`` (or the bound given to :meth:`next_frame`)
    raises :class:`MalformedFrameError` as soon as the 4 size bytes are in, before any more
    of the body is buffered, and poisons the splitter: the stream cannot be
    resynchronised, so the connection must be dropped. With :meth:`feed`, frames that were
    complete before the bad one are on the error's ``decoded`` attribute.

    The body of a large frame (a fetch answer of megabytes, arriving in many socket reads)
    is kept as the chunks received and joined once when complete: one copy, instead of a
    buffer that grows and moves with every read. A reader that can read into a buffer of
    ours (``recv_into``, an ``asyncio.BufferedProtocol``) does better with
    :meth:`reserve`: the rest of the body is then read where it will stay, with no copy
    at all, and comes out of :meth:`next_frame` as that ``bytearray``.

    Responses carry at least an error code (``min_size=2``); requests at least a type
    (a broker uses ``min_size=1`` and ``max_size=max.socket.request.bytes``).
    """

    __slots__ = (
        "_body",
        "_buf",
        "_consumed",
        "_error",
        "_have",
        "_parts",
        "_pos",
        "_want",
        "max_size",
        "min_size",
    )

    #: Bodies at least this large are collected as chunks (smaller ones stay in the
    #: buffer, where several small answers often arrive in one read).
    COLLECT_FROM = 1 << 16

    def __init__(self, *, min_size: int = 2, max_size: int = INT32_MAX) -> None:
        self.min_size = min_size
        self.max_size = max_size
        self._buf = bytearray()
        self._pos = 0  # start of the next frame in _buf
        self._consumed = 0  # stream position of _buf[0]
        self._error: MalformedFrameError | None = None
        # A large body being collected: its chunks, their total, the body size.
        self._parts: list[bytes] = []
        self._have = 0
        self._want = 0
        # The body being collected in place, once reserve() was called for it.
        self._body: bytearray | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        collecting = 4 + self._have if self._want else 0
        return collecting + len(self._buf) - self._pos

    @property
    def pending_size(self) -> int | None:
        """Size of the frame being assembled, once its size field has arrived."""
        if self._want:
            return self._want
        if len(self._buf) - self._pos < 4:
            return None
        size: int = _I32.unpack_from(self._buf, self._pos)[0]
        return size

    @property
    def broken(self) -> MalformedFrameError | None:
        """The error that poisoned the splitter, if any."""
        return self._error

    def _check_usable(self) -> None:
        if self._error is not None:
            raise MalformedFrameError(str(self._error), position=self._error.position)

    def receive(self, data: BytesLike) -> None:
        """Add received bytes (pull mode; take frames out with :meth:`next_frame`)."""
        self._check_usable()
        if self._want:
            missing = self._want - self._have
            taken = data if len(data) <= missing else data[:missing]
            if self._body is not None:
                self._body[self._have : self._have + len(taken)] = taken
            else:
                self._parts.append(bytes(taken))
            self._have += len(taken)
            if len(data) <= missing:
                return
            data = data[missing:]  # the start of what follows the collected frame
        if self._pos:
            del self._buf[: self._pos]
            self._consumed += self._pos
            self._pos = 0
        self._buf += data

    def reserve(self) -> memoryview | None:
        """Where the rest of the large body being collected can be read straight from the
        socket, or None when there is none (read into a buffer of your own and
        :meth:`receive` it). Report the bytes written there with :meth:`received_into`.

        The body's buffer is allocated here, at the frame's size, which was checked
        against its bound before (what already arrived of it is copied in, once). A body
        read this way comes out of :meth:`next_frame` as that ``bytearray``.
        """
        self._check_usable()
        if self._have >= self._want:
            return None  # not collecting (both 0)
        body = self._body
        if body is None:
            body = self._body = bytearray(self._want)
            body[: self._have] = b"".join(self._parts)
            self._parts = []
        return memoryview(body)[self._have :]

    def received_into(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the view :meth:`reserve` returned."""
        self._check_usable()
        if self._body is None or not 0 <= nbytes <= self._want - self._have:
            raise ValueError(
                f"received_into({nbytes}) without a reserve() of at least as many bytes"
            )
        self._have += nbytes

    def next_frame(self, max_size: int | None = None) -> bytes | bytearray | None:
        """The body of the next complete frame, or None until it has fully arrived.

        The frame's size must lie in ``min_size..max_size`` and, when given, be at most
        ``max_size`` here; it is checked as soon as the size field is in. A body read
        in place (:meth:`reserve`) is a ``bytearray``, any other ``bytes``.
        """
        self._check_usable()
        if self._want:
            if self._have < self._want:
                return None
            body: bytes | bytearray = (
                self._body if self._body is not None else b"".join(self._parts)
            )
            self._consumed += 4 + self._want
            self._parts, self._have, self._want, self._body = [], 0, 0, None
            return body
        buf, pos = self._buf, self._pos
        available = len(buf) - pos
        if available < 4:
            return None
        (size,) = _I32.unpack_from(buf, pos)
        limit = self.max_size if max_size is None else min(max_size, self.max_size)
        if not self.min_size <= size <= limit:
            where = self._consumed + pos
            self._error = MalformedFrameError(
                f"frame size {size} at stream position {where} is outside {self.min_size}..{limit}",
                position=where,
            )
            raise self._error
        end = pos + 4 + size
        if available - 4 < size:
            if size >= self.COLLECT_FROM and end > len(buf):
                # Collect the rest as it arrives; everything buffered belongs to it.
                self._parts = [bytes(buf[pos + 4 :])]
                self._have = len(self._parts[0])
                self._want = size
                self._consumed += pos
                buf.clear()
                self._pos = 0
            return None
        with memoryview(buf) as view:
            body = bytes(view[pos + 4 : end])
        if end == len(buf):  # all consumed: start over without moving bytes
            buf.clear()
            self._consumed += end
            self._pos = 0
        else:
            self._pos = end
        return body

    def feed(self, data: BytesLike) -> list[bytes | bytearray]:
        """Add received bytes; return every frame body completed by them."""
        self.receive(data)
        frames: list[bytes | bytearray] = []
        try:
            while (body := self.next_frame()) is not None:
                frames.append(body)
        except MalformedFrameError as exc:
            exc.decoded = frames
            raise
        return frames

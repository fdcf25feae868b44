"""The records a group member has fetched and not yet handed out, per stream.

Each stream (0.7.2's ``KafkaStream``) holds the *chunks* fetched for the partitions of one
thread id, in fetch order: a chunk is the decoded records of one fetch of one partition
(or an error queued for the application, after the records before it). Handing out a
record advances a cursor in the chunk being read; the partition's position is read from
that cursor (:attr:`PartitionState.position <aiokafka07.group.state.PartitionState>`), so
nothing is written per record. Revoking, seeking, pausing or closing *stops* a chunk by
moving its end to its cursor: whoever holds it (a stream, the consumer's iterator) sees it
run out and asks for the next one, which sees the new state.

The application reads a stream through :meth:`Stream.__anext__` / :meth:`Stream.next_nowait`
and :attr:`Stream.buffered_bytes`; the fetchers and the coordinator use the buffer methods
(:meth:`Stream.put`, :meth:`Stream.put_error`, :meth:`Stream.discard`, :meth:`Stream.park`,
:meth:`Stream.unpark`), and the consumer's own iteration takes whole chunks
(:meth:`Stream.next_chunk`, :meth:`Stream.take`). What all streams of a consumer share
(closed or not, the consumer-wide error, the "data arrived" event) is one :class:`Delivery`.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Collection, Container, Sequence
from typing import TYPE_CHECKING

from ..errors import ConsumerStoppedError
from ..record_batch import offset_at
from ..records import ConsumerRecord, TopicPartition
from ..timeouts import wait_for

if TYPE_CHECKING:
    from .state import PartitionState

__all__ = ["Chunk", "Delivery", "Stream"]

_EMPTY: list[ConsumerRecord] = []


class Chunk:
    """Records of one fetch of one partition (``records[pos:end]`` still to hand out),
    or an ``error`` to raise once. ``base`` is the offset the fetch started at: the
    partition's position before the chunk's first record. ``records`` is a list, or the
    fetch's columns (:class:`~aiokafka07.record_batch.FetchedColumns`, which build each
    record on demand) once batches were asked for."""

    __slots__ = ("base", "end", "error", "pos", "records", "size", "state")

    def __init__(
        self,
        state: PartitionState | None,
        records: Sequence[ConsumerRecord],
        size: int,
        base: int,
        error: BaseException | None = None,
    ) -> None:
        self.state = state
        self.records = records
        self.pos = 0
        self.end = len(records)
        self.size = size
        self.base = base
        self.error = error

    def stop(self) -> None:
        """Hand out nothing more from this chunk; freeze its partition's position."""
        state = self.state
        if state is not None and state.reading is self:
            state.consumed = state.position
            state.reading = None
        self.end = self.pos


class Delivery:
    """What the streams of one consumer share.

    ``closed``: nothing more is handed out. ``timeout_ms``: how long an idle iteration
    waits before it ends (None: until closed). An error that belongs to no partition (a
    failed rebalance, say) is :meth:`report`-ed and raised once by whichever read comes
    first; a :meth:`fail`-ed consumer raises its error on every read. ``on_room`` is called
    when a full stream gets room again (the fetchers wait for that).
    """

    def __init__(self, on_room: Callable[[], None], timeout_ms: float | None = None) -> None:
        self.closed = False
        self.timeout_ms = timeout_ms
        self.data = asyncio.Event()
        self.on_room = on_room
        self.records = 0
        self._error: BaseException | None = None
        self.fatal: BaseException | None = None
        #: Until when (``time.monotonic()``) the member's ZooKeeper session is known to
        #: be alive, so its partitions are still its own (see :meth:`renew`).
        self.lease_until = 0.0
        self.ready_events: list[asyncio.Event] = []  # one per stream
        #: Whether the fetchers decode into columns (``getmany_batches`` was called): a
        #: chunk then holds a :class:`~aiokafka07.record_batch.FetchedColumns`, handed out
        #: as batches without a copy, or as records built one by one.
        self.columnar = False

    def wake(self) -> None:
        """Wake every reader (the consumer's and each stream's)."""
        self.data.set()
        for event in self.ready_events:
            event.set()

    def leased(self) -> bool:
        """Whether the ZooKeeper session is known to be alive now; while it is not, no
        fetch is issued or taken in and no new chunk is handed out (another member may be
        taking over). It is checked per chunk, not per record: the rest of a chunk already
        being handed out still comes. Every check of the lease goes through here."""
        return time.monotonic() < self.lease_until

    def renew(self, until: float) -> None:
        """The session was alive until at least ``until``: go on (wake who waited)."""
        held = not self.leased()
        self.lease_until = max(self.lease_until, until)
        if held and self.leased():
            self.wake()
            self.on_room()

    def revoke_lease(self) -> None:
        self.lease_until = 0.0

    def report(self, exc: BaseException) -> None:
        """Raise ``exc`` once, from the next read (the first one reported wins)."""
        if self._error is None:
            self._error = exc
        self.wake()

    def fail(self, exc: BaseException) -> None:
        """Raise ``exc`` from every read from now on (the consumer cannot go on)."""
        self.fatal = exc
        self.wake()

    def check(self) -> None:
        """Raise what was reported or failed, if anything."""
        if self.fatal is not None:
            raise self.fatal
        error, self._error = self._error, None
        if error is not None:
            raise error


class Stream:
    """Records of the partitions one thread id owns, in fetch order per partition (an
    async iterator; ``consumer.streams[i]`` is thread ``-i`` of every subscribed topic).

    Iteration ends after ``consumer_timeout_ms`` without a record, or when the consumer
    closes; an error queued for one of its partitions is raised once, after the records
    fetched before it.
    """

    def __init__(self, delivery: Delivery, index: int, max_bytes: int) -> None:
        self.index = index
        self._delivery = delivery
        self._max_bytes = max_bytes
        self._chunks: collections.deque[Chunk] = collections.deque()
        self._head: Chunk | None = None
        self._buffered = 0
        self._ready = asyncio.Event()
        delivery.ready_events.append(self._ready)

    def __repr__(self) -> str:
        return f"<Stream {self.index}: {len(self._chunks)} chunks, {self._buffered} bytes>"

    # -- reading ------------------------------------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        """Bytes fetched for this stream and not yet started on (the prefetch bound)."""
        return self._buffered

    @property
    def pending(self) -> int:
        """Chunks (fetches, queued errors) waiting in this stream."""
        return len(self._chunks)

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> ConsumerRecord:
        chunk = self._head
        if chunk is not None:
            pos = chunk.pos
            if pos < chunk.end:
                chunk.pos = pos + 1
                return chunk.records[pos]
        return await self._next_waiting()

    async def _next_waiting(self) -> ConsumerRecord:
        delivery = self._delivery
        loop = asyncio.get_running_loop()
        timeout = delivery.timeout_ms
        deadline = None if timeout is None else loop.time() + timeout / 1000
        while True:
            if delivery.closed:
                raise StopAsyncIteration
            delivery.check()
            chunk = self.next_chunk()
            if chunk is not None:
                pos = chunk.pos
                chunk.pos = pos + 1
                return chunk.records[pos]
            self._ready.clear()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise StopAsyncIteration
            try:
                await wait_for(self._ready.wait(), left)
            except asyncio.TimeoutError:
                raise StopAsyncIteration from None

    def next_nowait(self) -> ConsumerRecord | None:
        """The next record if one is buffered (raises an error queued for it);
        :class:`ConsumerStoppedError` once the consumer is closed."""
        if self._delivery.closed:
            raise ConsumerStoppedError("the consumer is closed")
        self._delivery.check()
        chunk = self.next_chunk()
        if chunk is None:
            return None
        pos = chunk.pos
        chunk.pos = pos + 1
        return chunk.records[pos]

    # -- taking whole chunks (the consumer's iteration and getmany) -------------------------

    def next_chunk(self, raise_errors: bool = True) -> Chunk | None:
        """The chunk with records to hand out next, or None. At a queued error: raise it
        (once), or with ``raise_errors=False`` leave it queued and return None."""
        head = self._head
        if head is not None:
            if head.pos < head.end:
                return head
            self._finish(head)
            self._head = None
        chunks = self._chunks
        if chunks and not self._delivery.leased():
            return None  # held until the session is confirmed alive (Delivery.renew)
        while chunks:
            chunk = chunks[0]
            error = chunk.error
            if error is not None and not raise_errors:
                return None
            chunks.popleft()
            state = chunk.state
            if state is None:  # an error for no partition (maybe already raised elsewhere)
                chunk.error = None
                if error is not None:
                    raise error
                continue
            state.buffered -= 1
            if error is not None:
                raise error
            self._release(chunk.size)
            if state.reading is not chunk:  # (a chunk taken from partly by take())
                state.consumed = chunk.base
                state.reading = chunk
            if chunk.pos >= chunk.end:
                self._finish(chunk)
                continue
            self._delivery.records += chunk.end - chunk.pos
            self._head = chunk
            return chunk
        return None

    def take(
        self, limit: int | None, partitions: Container[TopicPartition], raise_errors: bool
    ) -> tuple[TopicPartition, list[ConsumerRecord]] | None:
        """Up to ``limit`` records of the first chunk of one of ``partitions``, in order per
        partition (the filtered ``getmany``); None when none is buffered. Errors of those
        partitions (and errors of no partition) are raised as in :meth:`next_chunk`."""
        found = self.take_chunk(partitions, raise_errors)
        if found is None:
            return None
        pos = found.pos
        count = found.end - pos if limit is None else min(limit, found.end - pos)
        records = found.records[pos : pos + count]  # (columns: records built here)
        if not isinstance(records, list):
            records = list(records)
        self.advance(found, count)
        assert found.state is not None
        return found.state.tp, records

    def take_chunk(self, partitions: Container[TopicPartition], raise_errors: bool) -> Chunk | None:
        """The first chunk with records of one of ``partitions``, its partition's position
        now read from it; the caller hands out records from its ``pos`` and then calls
        :meth:`advance`. None when none is buffered; errors as in :meth:`take`."""
        head = self._head
        if head is not None and head.pos >= head.end:
            self._finish(head)
            self._head = head = None
        if not self._delivery.leased():
            return None
        found: Chunk | None = None
        if head is not None and head.state is not None and head.state.tp in partitions:
            found = head
        else:
            for chunk in self._chunks:
                state = chunk.state
                if state is not None and state.tp not in partitions:
                    continue
                if chunk.error is not None or state is None:
                    if chunk.error is not None and not raise_errors:
                        return None
                    self._chunks.remove(chunk)
                    error, chunk.error = chunk.error, None
                    if state is not None:
                        state.buffered -= 1
                    if error is not None:
                        raise error
                    return self.take_chunk(partitions, raise_errors)
                found = chunk
                break
        if found is None:
            return None
        state = found.state
        assert state is not None
        if state.reading is not found:
            state.consumed = found.base
            state.reading = found
        return found

    def advance(self, chunk: Chunk, count: int) -> None:
        """``count`` records of ``chunk`` (from :meth:`take_chunk`) were handed out."""
        chunk.pos += count
        self._delivery.records += count
        if chunk.pos >= chunk.end and chunk is not self._head:
            state = chunk.state
            assert state is not None
            self._chunks.remove(chunk)
            state.buffered -= 1
            self._release(chunk.size)
            self._finish(chunk)

    def finish(self, chunk: Chunk) -> None:
        """The reader is done with the exhausted ``chunk``: the partition's position no
        longer refers to it (its records may be handed to the application whole)."""
        if chunk is self._head:
            self._head = None
        self._finish(chunk)

    def _finish(self, chunk: Chunk) -> None:
        state = chunk.state
        if state is not None and state.reading is chunk:
            if chunk.pos:
                state.consumed = offset_at(chunk.records, chunk.pos - 1)
            state.reading = None

    def _release(self, size: int) -> None:
        if size:
            before = self._buffered
            self._buffered = before - size
            if before >= self._max_bytes > self._buffered:
                self._delivery.on_room()

    # -- the buffer (fetchers and coordinator) ----------------------------------------------

    def room(self) -> int:
        """Bytes that may still be fetched for this stream (<= 0: none)."""
        return self._max_bytes - self._buffered

    def put(
        self, state: PartitionState, records: Sequence[ConsumerRecord], size: int, base: int
    ) -> None:
        """Queue the records of one fetch of ``state``'s partition that started at
        ``base`` (an empty list moves the position to ``base``: an offset reset)."""
        self.put_chunk(Chunk(state, records, size, base))

    def put_error(self, exc: BaseException, state: PartitionState | None = None) -> None:
        """Queue ``exc`` behind what is buffered (for ``state``'s partition, if given)."""
        self.put_chunk(Chunk(state, _EMPTY, 0, 0, exc))

    def put_chunk(self, chunk: Chunk) -> None:
        """Queue a prepared chunk; an error chunk queued in several streams (for no
        partition) is raised by the first of them to reach it."""
        state = chunk.state
        if state is not None:
            if state.paused:
                state.parked.append(chunk)
                return
            state.buffered += 1
        self._chunks.append(chunk)
        self._buffered += chunk.size
        self._wake()

    def discard(self, states: Collection[PartitionState]) -> None:
        """Forget what is buffered for ``states`` (revoked, sought, fenced or closing);
        their positions stay where the last record handed out left them."""
        if not states:
            return
        head = self._head
        if head is not None and head.state in states:
            head.stop()
            self._head = None
        kept: collections.deque[Chunk] = collections.deque()
        before = self._buffered
        for chunk in self._chunks:
            state = chunk.state
            if state is not None and state in states:
                state.buffered -= 1
                self._buffered -= chunk.size
                chunk.stop()
            else:
                kept.append(chunk)
        self._chunks = kept
        for state in states:
            for chunk in state.parked:
                chunk.stop()
            state.parked.clear()
        if before >= self._max_bytes > self._buffered:
            self._delivery.on_room()

    def park(self, state: PartitionState) -> None:
        """Hold back what is buffered for a paused partition (in order) until unparked."""
        moved: list[Chunk] = []
        head = self._head
        if head is not None and head.state is state:
            if head.pos < head.end:
                rest = Chunk(state, head.records, 0, head.base)
                rest.pos, rest.end = head.pos, head.end
                head.end = head.pos
                if state.reading is head:
                    state.reading = rest
                moved.append(rest)
            else:
                self._finish(head)
            self._head = None
        kept: collections.deque[Chunk] = collections.deque()
        before = self._buffered
        for chunk in self._chunks:
            if chunk.state is state:
                state.buffered -= 1
                self._buffered -= chunk.size
                moved.append(chunk)
            else:
                kept.append(chunk)
        self._chunks = kept
        state.parked[:0] = moved
        if before >= self._max_bytes > self._buffered:
            self._delivery.on_room()

    def unpark(self, state: PartitionState) -> None:
        """Give a resumed partition's held-back chunks back, to be read first."""
        parked, state.parked = state.parked, []
        for chunk in reversed(parked):
            self._chunks.appendleft(chunk)
            state.buffered += 1
            self._buffered += chunk.size
        if parked:
            self._wake()

    def close(self) -> None:
        """The consumer closed: stop every chunk, wake every reader."""
        states = {c.state for c in self._chunks if c.state is not None}
        if self._head is not None and self._head.state is not None:
            states.add(self._head.state)
        self.discard(states)
        self._wake()

    def _wake(self) -> None:
        self._ready.set()
        self._delivery.data.set()


def shared_error(exc: BaseException) -> Chunk:
    """An error chunk for :meth:`Stream.put_chunk` into several streams: raised once."""
    return Chunk(None, _EMPTY, 0, 0, exc)

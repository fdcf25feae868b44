"""Confirm mode: proof, from the broker's own log, that a produce was appended.

0.7 never acknowledges a produce. A broker that refuses one closes the connection
(PROTOCOL §10.2), except in one case: a produce with a message over the broker's
``max.message.size`` is dropped and the connection stays open. An answer to a request
pipelined behind the produce therefore proves only that the broker *processed* it, not
that it kept it. What the protocol does show is the partition's log end: OFFSETS
(latest) answers the flushed end, the byte position up to which consumers can read
(§11, §12), and 0.7 offsets are byte positions, so the log grows by exactly the bytes a
produce appended (its message set, which a producer writes without partial entries).

One :class:`Confirmer` per connection keeps a ledger per *target*, a (topic,
partition) this connection confirms produces to; partition -1 (the broker picks) stands
for the sum of all the topic's partitions on that broker, which :meth:`Confirmer.prepare`
learns first (a FETCH of a partition past the last is answered WrongPartition, §10.3):

* **base**: the target's flushed end before this connection's first confirmed produce to
  it (an OFFSETS probe queued in front of that produce; a broker answers a connection's
  requests in order);
* **claims**: each confirmed produce claims the bytes this connection wrote to the target
  up to and including it, ``need``. It is confirmed once an OFFSETS answer queued
  *behind* it shows ``end - base >= need`` for every target it wrote to;
* **readings**: at most one reading of a target is under way. A produce to a target with
  none under way has its probe queued right behind it; the produces written while one is
  under way share the next, queued as soon as that one's answer comes. A probe per
  produce doubled the requests, their answers and the bookkeeping of each (measured in
  confirm mode's CPU per message); sharing costs a produce written meanwhile at most one
  more round trip before it is known processed;
* the broker shows only flushed bytes, and a 0.7.2 broker flushes every
  ``log.flush.interval`` messages or every few seconds: until a claim is met, its target
  is asked again (:class:`~aiokafka07.backoff.Backoff`, 10 ms doubling to 100 ms);
* a claim not met within ``request_timeout_ms`` of the produce, though the broker
  processed it, fails with :class:`~aiokafka07.errors.ProduceNotConfirmedError`
  (``processed`` True, naming the likely cause), and its bytes are written off the
  ledger, so that the produces behind it are judged without them.

**What a confirmation proves.** Between a point before this connection's first confirmed
produce to the partition and a point after this request, the partition's log, as the
broker lets consumers read it, grew by at least every byte this connection wrote to it
with confirm up to and including this request (requests already reported failed
excepted). It proves that the log grew by that much, not whose bytes it holds: bytes
appended after the request and flushed by the time of the reading count too, whether
other writers' or this connection's own later produces. A dropped request is therefore
caught only while fewer bytes than its own have been appended after it and shown by a
reading; a producer that keeps writing covers a dropped request with its own later
bytes within a few requests, and the later requests, whose bytes the ledger then counts
twice, fail instead (``processed``, ``maybe_delivered``). Checking every message against
``max_message_size`` before the wire, with the client's limit no higher than the
broker's ``max.message.size`` (the defaults are equal), is what keeps a broker from
dropping any. Produces without confirm on the same connection count as others.

**Processed, then confirmed.** The answer to the first probe behind a produce proves
the broker processed it, long before a flush may prove it appended: a caller passes
``processed`` to :meth:`Confirmer.submit` to learn that moment (a producer frees the
request's place in flight then, so that confirmations trail the writes instead of
holding them up).

**When the connection closes** first, every request not settled fails; one that was
written carries, on its error, what the ledger knew of each target not confirmed
(:class:`~aiokafka07.errors.UnsettledClaim`: the base and the bytes written before and
up to it), from which a producer settles it once the broker answers again
(:mod:`aiokafka07.producer.settlement`).

A confirmation may wait for the broker's flush; a produce whose bytes show only after
``request_timeout_ms`` is reported failed (``maybe_delivered``). Nothing here owns a task:
probes are requests on the connection (each bounded by its timeout), polls and deadlines
are timers, and :meth:`Confirmer.close` (the connection closing) ends everything.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Callable
from typing import Any

from .backoff import Backoff
from .errors import (
    IllegalStateError,
    InvalidPartitionError,
    KafkaConnectionError,
    KafkaError,
    MalformedFrameError,
    ProduceNotConfirmedError,
    ProtocolError,
    RequestTimeoutError,
    UnknownError,
    UnsettledClaim,
)
from .protocol import (
    LATEST,
    decode_fetch_response,
    decode_offsets_response,
    encode_fetch_request,
    encode_offsets_request,
    validate_topic,
)
from .protocol.conversation import produce_entries
from .supervisor import mark_retrieved

__all__ = ["MAX_PARTITIONS", "Confirmer"]

#: The most partitions a topic may have on one broker for a produce to partition -1 to be
#: confirmed (each confirmation asks every one of them).
MAX_PARTITIONS = 1024
#: FETCH error code 3: the partition is not configured for the topic (PROTOCOL §9).
_WRONG_PARTITION = 3

Target = tuple[str, int]


class _Track:
    """The ledger of one target on one connection (see the module docstring)."""

    __slots__ = (
        "backoff",
        "base",
        "behind",
        "claims",
        "key",
        "partitions",
        "poll",
        "probes",
        "seen",
        "seen_seq",
        "written",
    )

    def __init__(self, key: Target, partitions: range) -> None:
        self.key = key
        #: The partitions whose ends add up to the target's (one, or all for -1).
        self.partitions = partitions
        self.base: int | None = None
        self.written = 0
        self.claims: collections.deque[_Claim] = collections.deque()
        #: The latest end seen, and the sequence number of the last produce queued before
        #: the probe that saw it.
        self.seen = 0
        self.seen_seq = 0
        #: A poll waiting (timer) or a reading under way (probe): at most one per target.
        self.poll: asyncio.TimerHandle | _Probe | None = None
        #: The sequence number of the last produce to the target queued after the reading
        #: under way (0: none): the next reading is queued when that one's answer comes.
        self.behind = 0
        self.backoff = Backoff(0.01, 0.1)
        #: The OFFSETS (latest) requests that read the target's end, one per partition:
        #: the same bytes every time, encoded once.
        topic = key[0]
        self.probes = [encode_offsets_request(topic, p, LATEST, 1) for p in partitions]

    def describe(self) -> str:
        topic, partition = self.key
        return f"the partitions of {topic}" if partition == -1 else f"{topic}/{partition}"


class _Request:
    """One confirmed produce: its result future and what it waits for."""

    __slots__ = (
        "claims",
        "deadline",
        "expired",
        "future",
        "last",
        "processed",
        "seq",
        "written",
    )

    def __init__(
        self,
        future: asyncio.Future[int | None],
        seq: int,
        written: asyncio.Future[None],
        processed: Callable[[], None] | None,
    ):
        self.future = future
        self.seq = seq
        #: Resolved once the produce frame is handed to the socket.
        self.written = written
        self.claims: list[_Claim] = []
        self.last: _Track | None = None
        self.expired = False
        #: ``time.monotonic()`` when its confirmation gives up (``request_timeout_ms``).
        self.deadline = 0.0
        #: Called once, when the broker is proven to have processed the produce or its
        #: outcome is settled, whichever comes first (then set to None).
        self.processed = processed


class _Claim:
    __slots__ = ("met", "need", "request", "size", "track")

    def __init__(self, request: _Request, track: _Track, size: int, need: int) -> None:
        self.request = request
        self.track = track
        self.size = size
        self.need = need
        self.met = False


class _Probe:
    """OFFSETS requests for every partition of a target, queued together: their answers
    add up to one reading of the target's end."""

    __slots__ = ("base", "futures", "seq", "total", "track")

    def __init__(self, track: _Track, seq: int, *, base: bool) -> None:
        self.track = track
        self.seq = seq
        self.base = base
        self.total = 0
        #: The answers still to be read.
        self.futures: list[asyncio.Future[Any]] = []


def _check_entries(entries: list[tuple[str, int, int]]) -> None:
    """Refuse entries a confirmed produce cannot have: none at all, a topic name that is
    not valid (a raw frame's: its probes must not fail half-queued), a partition below
    -1."""
    if not entries:
        raise MalformedFrameError("nothing to confirm: a multiproduce without entries")
    for topic, partition, _ in entries:
        validate_topic(topic)
        if partition < -1:
            raise InvalidPartitionError(f"partition {partition} is not valid for a produce")


class Confirmer:
    """The confirm ledger of one connection (module docstring).

    The connection lends it three functions: ``send_request(frame)`` queues a request at
    once and returns its answer's future (bounded by the request timeout, which closes
    the connection), ``send_produce(frame)`` queues a produce at once and returns a
    future resolved when it is written, and ``broken(error)`` closes the connection for
    an answer that makes no sense. The connection calls :meth:`close` when it ends.
    """

    def __init__(
        self,
        address: str,
        request_timeout_ms: float,
        *,
        send_request: Callable[[bytes], asyncio.Future[Any]],
        send_produce: Callable[[bytes], asyncio.Future[None]],
        broken: Callable[[ProtocolError], None],
    ) -> None:
        self.address = address
        self.request_timeout_ms = request_timeout_ms
        self._send_request = send_request
        self._send_produce = send_produce
        self._broken = broken
        self._tracks: dict[Target, _Track] = {}
        #: topic -> its partition count on this broker (for produces to partition -1).
        self._counts: dict[str, int] = {}
        #: The last frame :meth:`prepare` read, and what :meth:`check` makes of it.
        self._prepared: tuple[bytes, dict[Target, int]] | None = None
        self._requests: dict[int, _Request] = {}
        #: Requests with a ``processed`` callback still to call, in order.
        self._unprocessed: collections.deque[_Request] = collections.deque()
        #: Confirmed produces queued so far, and the last one proven processed.
        self._seq = 0
        self._processed = 0
        #: Probes with answers still to be read.
        #: In the order they were queued (a dict as an ordered set): :meth:`close` reads
        #: the answers that came before the end in that order, base probes first.
        self._probes: dict[_Probe, None] = {}
        #: One timer for every request's deadline: the earliest not passed yet (requests
        #: share one timeout, so their deadlines come in the order they were queued).
        self._deadline_timer: asyncio.TimerHandle | None = None
        #: The connection is ending (answers read before still count), or has ended.
        self._closing = False
        self._closed = False

    # -- submitting --------------------------------------------------------------------

    def pending(self) -> list[asyncio.Future[int | None]]:
        """The futures of confirmed produces not settled yet."""
        return [r.future for r in self._requests.values() if not r.future.done()]

    async def prepare(self, frame: bytes) -> None:
        """Learn the partition count of every topic the frame produces to partition -1
        on (once per topic and connection), so that :meth:`submit` can account for it.
        Raises :class:`KafkaConnectionError` (``maybe_delivered`` False: nothing of the
        produce was written) if the connection fails meanwhile, or as :meth:`check` for a
        frame it refuses (before anything is asked).

        The frame is parsed here once: what :meth:`check` makes of it is kept for the
        next :meth:`check` of the same frame object (a producer prepares a frame, then
        submits it), so a confirmed produce is read once, not at every step."""
        entries = produce_entries(frame)
        _check_entries(entries)
        topics = {t for t, p, _ in entries if p == -1} - set(self._counts)
        for topic in sorted(topics):
            try:
                self._counts[topic] = await self._discover(topic)
            except KafkaConnectionError as exc:
                raise KafkaConnectionError(
                    f"cannot confirm produces to {topic} on {self.address}: {exc}",
                    broker=self.address,
                    maybe_delivered=False,
                ) from exc
        self._prepared = (frame, self._sizes(entries))

    async def _discover(self, topic: str) -> int:
        """The topic's partition count on the broker: a FETCH (0 bytes) of a partition
        past the last is answered WrongPartition and leaves the connection open. A
        broker logs each such fetch as an error, so partitions 0, 1, 3, 7, ... are asked
        until one is past the last, then the gap is halved: few fetches, few past it."""
        below, above = 0, None  # partitions < below exist; above (if known) does not
        probe = 0
        while above is None or below < above:
            if not await self._has_partition(topic, probe):
                above = probe
            else:
                below = probe + 1
                if above is None and below >= MAX_PARTITIONS:
                    raise UnknownError(
                        f"{topic} has more than {MAX_PARTITIONS} partitions on {self.address}"
                    )
            # 0, 1, 3, 7, ... until past the last; then halve the gap.
            probe = min(2 * below - 1, MAX_PARTITIONS) if above is None else (below + above) // 2
        return below

    async def _has_partition(self, topic: str, partition: int) -> bool:
        body = await self._send_request(encode_fetch_request(topic, partition, 0, 0))
        try:
            code = decode_fetch_response(body).error_code
        except ProtocolError as exc:
            self._broken(exc)  # an answer that makes no sense: the connection is over
            raise KafkaConnectionError(
                f"{self.address} broke the protocol: {exc}", broker=self.address
            ) from exc
        if code not in (0, 1, _WRONG_PARTITION):  # 1: offset 0 was deleted (retention)
            raise UnknownError(
                f"{self.address} answered a fetch of {topic}/{partition} with error code {code}"
            )
        return code != _WRONG_PARTITION

    def check(self, frame: bytes) -> dict[Target, int]:
        """What :meth:`submit` checks before it queues anything (a frame with no entries,
        a bad topic, a partition below -1, a topic sent to partition -1 without
        :meth:`prepare`), so a connection can refuse a frame before it takes its place in
        line; the bytes the frame writes to each target, the last entry's target last.
        Pass the result to :meth:`submit`."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared[0] is frame:
            return prepared[1]  # read by prepare(); partition counts are never forgotten
        entries = produce_entries(frame)
        _check_entries(entries)
        return self._sizes(entries)

    def _sizes(self, entries: list[tuple[str, int, int]]) -> dict[Target, int]:
        """Bytes per target of checked entries, the last entry's target last; refuses a
        partition -1 entry whose topic :meth:`prepare` has not counted."""
        sizes: dict[Target, int] = {}
        for topic, partition, size in entries:
            if partition == -1 and topic not in self._counts:
                raise IllegalStateError(
                    f"a produce to {topic} partition -1 is confirmed only after prepare() "
                    "learnt the topic's partitions"
                )
            key = (topic, partition)
            sizes[key] = sizes.pop(key, 0) + size  # the last entry's target ends last
        return sizes

    def submit(
        self,
        frame: bytes,
        sizes: dict[Target, int] | None = None,
        future: asyncio.Future[int | None] | None = None,
        processed: Callable[[], None] | None = None,
    ) -> asyncio.Future[int | None]:
        """Queue a PRODUCE / MULTIPRODUCE frame with its probes now; return its future.

        It gets the last entry's end (for partition -1: the sum of the topic's
        partitions' ends) once every entry is confirmed. ``sizes`` is what :meth:`check`
        returned for this frame; without it the frame is checked here. ``future``: the
        one to settle (a caller's that waits already, settled here without a future
        chained in between, which would cost a loop iteration); one is made when None.
        A future done meanwhile (its caller gave up) is left as it is. ``processed`` is
        called once, as soon as the broker is proven to have processed the produce (the
        answer to a request queued behind it came), or when its outcome is settled if
        that comes first: confirmation waits for the broker's flush, processing does not,
        so a caller that bounds its requests in flight counts them until then, and
        confirmations trail without holding the pipeline. Everything is checked before
        anything is queued: a frame with no entries, a partition below -1, or a topic
        sent to partition -1 without :meth:`prepare` raise.
        """
        if sizes is None:
            sizes = self.check(frame)
        loop = asyncio.get_running_loop()
        for key in sizes:
            if key not in self._tracks:
                topic, partition = key
                count = self._counts[topic] if partition == -1 else 0
                partitions = range(count) if partition == -1 else range(partition, partition + 1)
                track = _Track(key, partitions)
                self._tracks[key] = track
                self._probe(track, base=True)
        written = self._send_produce(frame)
        written.add_done_callback(mark_retrieved)
        self._seq += 1
        if future is None:
            future = loop.create_future()
        request = _Request(future, self._seq, written, processed)
        self._requests[request.seq] = request
        if processed is not None:
            self._unprocessed.append(request)
        for key, size in sizes.items():
            track = self._tracks[key]
            track.written += size
            claim = _Claim(request, track, size, track.written)
            request.claims.append(claim)
            track.claims.append(claim)
            request.last = track
        for claim in request.claims:
            self._read(claim.track)
        request.deadline = time.monotonic() + self.request_timeout_ms / 1000
        if self._deadline_timer is None:
            self._deadline_timer = loop.call_later(self.request_timeout_ms / 1000, self._deadlines)
        return request.future

    def _read(self, track: _Track) -> None:
        """Read ``track``'s end behind the produces queued so far: now, unless a reading
        is under way (then as soon as its answer comes; see the module docstring). A
        poll waiting for its backoff is replaced: a produce was just queued."""
        poll = track.poll
        if isinstance(poll, _Probe):
            track.behind = self._seq
            return
        if poll is not None:
            poll.cancel()
            track.poll = None
        self._probe(track, base=False)

    def _probe(self, track: _Track, *, base: bool) -> None:
        """Queue OFFSETS (latest) for every partition of ``track``; the answers are read
        together as one end, seen after the produces queued so far. A reading (not the
        base) is the track's ``poll`` until its answers are read."""
        probe = _Probe(track, self._seq, base=base)
        if not base:
            track.behind = 0  # this reading is behind every produce queued so far
        for request in track.probes:
            future = self._send_request(request)
            probe.futures.append(future)
            future.add_done_callback(functools.partial(self._answered, probe))
        if probe.futures:
            self._probes[probe] = None
            if not base:
                track.poll = probe
        else:  # a topic without partitions: nothing to add up
            self._seen(probe)

    # -- answers -------------------------------------------------------------------------

    def _answered(self, probe: _Probe, future: asyncio.Future[Any]) -> None:
        """One OFFSETS answer of ``probe`` (a done callback, also called by :meth:`close`
        for answers that came before the end: nothing may escape it)."""
        if self._closed or future not in probe.futures:
            return  # read already, or the end was settled
        if future.cancelled() or future.exception() is not None:
            return  # the connection failed: close() settles every request
        probe.futures.remove(future)
        try:
            offsets = decode_offsets_response(future.result()).offsets
        except ProtocolError as exc:
            if not self._closing:
                self._broken(exc)  # an answer that makes no sense: the connection is over
            return
        probe.total += offsets[0] if offsets else 0
        if not probe.futures:
            self._seen(probe)

    def _seen(self, probe: _Probe) -> None:
        self._probes.pop(probe, None)
        track = probe.track
        if track.poll is probe:
            track.poll = None
        # Answers come in request order: every produce queued before the probe was
        # processed by the broker.
        if probe.seq > self._processed:
            self._processed = probe.seq
            self._notify_processed()
        if probe.base:
            track.base = probe.total
            return
        if probe.seq >= track.seen_seq:
            track.seen, track.seen_seq = probe.total, probe.seq
        self._check(track)
        if track.behind and not isinstance(track.poll, _Probe) and not self._closing:
            self._read(track)  # produces queued while this reading was under way

    def _notify_processed(self) -> None:
        """Call the ``processed`` callback of every request proven processed so far."""
        waiting = self._unprocessed
        while waiting and waiting[0].seq <= self._processed:
            self._call_processed(waiting.popleft())

    @staticmethod
    def _call_processed(request: _Request) -> None:
        callback, request.processed = request.processed, None
        if callback is not None:
            callback()

    def _check(self, track: _Track) -> None:
        """Settle what ``track``'s latest reading decides, and what write-offs then
        decide on other targets; poll again where a claim the broker processed is not
        met yet."""
        tracks = [track]
        while tracks:
            tracks.extend(self._check_one(tracks.pop()))

    def _check_one(self, track: _Track) -> list[_Track]:
        """:meth:`_check` for one target; returns the other targets a write-off touched."""
        touched: list[_Track] = []
        claims = track.claims
        while claims:
            claim = claims[0]
            if claim.request.seq > track.seen_seq:
                break  # its own probe's answer is still to come
            assert track.base is not None  # its probe was queued (answered) first
            if track.seen - track.base >= claim.need:
                claims.popleft()
                self._met(claim)
                track.backoff.succeeded()
                continue
            if not claim.request.expired:
                self._schedule_poll(track)
                break
            touched.extend(t for t in self._fail_unmet(claim.request) if t is not track)
        return touched

    def _met(self, claim: _Claim) -> None:
        claim.met = True
        request = claim.request
        if all(c.met for c in request.claims):
            self._settle(request)
            assert request.last is not None
            if not request.future.done():
                request.future.set_result(request.last.seen)
            request.claims = []  # a request and its claims refer to each other: not left to gc

    def _schedule_poll(self, track: _Track) -> None:
        if track.poll is not None or self._closing:
            return
        loop = asyncio.get_running_loop()
        track.poll = loop.call_later(track.backoff.failed(), self._poll, track)

    def _poll(self, track: _Track) -> None:
        track.poll = None
        if self._closing or not track.claims:
            return
        try:
            self._probe(track, base=False)
        except KafkaError:
            return  # the connection is closing: close() settles every request

    # -- deadlines and write-offs ------------------------------------------------------

    def _deadlines(self) -> None:
        """The deadline timer: every request whose deadline passed expires (see
        :meth:`_expire`); the timer is set again for the next deadline to come. One timer
        per connection, not one per request: a request's timer and its context lived
        as long as the broker's flush took, long enough to reach the collector's oldest
        generation, whose passes they then set off (measured: CPU per message)."""
        self._deadline_timer = None
        if self._closing:
            return
        # A timer may run up to the loop's clock resolution early: a millisecond's grace.
        now = time.monotonic() + 0.001
        due: list[_Request] = []
        upcoming: _Request | None = None
        for request in self._requests.values():
            if request.expired:
                continue  # expired, waiting for its probe's answer
            if request.deadline > now:
                upcoming = request
                break
            due.append(request)
        for request in due:
            self._expire(request)
        if upcoming is not None and not self._closing:
            self._deadline_timer = asyncio.get_running_loop().call_later(
                max(0.0, upcoming.deadline - time.monotonic()), self._deadlines
            )

    def _expire(self, request: _Request) -> None:
        """``request_timeout_ms`` after the produce: the claims the broker processed and
        its log does not show fail now. One not processed yet is judged when its probe's
        answer comes (the probe's own timeout bounds that)."""
        if request.seq not in self._requests:
            return  # settled meanwhile, by another request's write-off
        request.expired = True
        for claim in request.claims:
            if not claim.met:
                self._check(claim.track)

    def _fail_unmet(self, request: _Request) -> list[_Track]:
        """Fail ``request`` for its claims not met, and write their bytes off the ledger
        (the produces behind them are judged without them); return the targets touched."""
        self._settle(request)
        unmet = [c for c in request.claims if not c.met]
        for claim in unmet:
            track = claim.track
            track.claims.remove(claim)
            track.written -= claim.size
            for later in track.claims:
                if later.request.seq > request.seq:
                    later.need -= claim.size
        where = ", ".join(c.track.describe() for c in unmet)
        size = sum(c.size for c in unmet)
        error = ProduceNotConfirmedError(
            f"{self.address} processed the produce, but {where} did not grow by the "
            f"{size} bytes it wrote within {self.request_timeout_ms:g} ms: the broker "
            "most likely dropped a message over its max.message.size (a 0.7 broker drops "
            "such a produce without closing the connection), or it flushes its log less "
            "often than that",
            broker=self.address,
            maybe_delivered=True,
            processed=True,
            partitions=frozenset(c.track.key for c in unmet),
        )
        if not request.future.done():
            request.future.set_exception(error)
        request.claims = []  # a request and its claims refer to each other: not left to gc
        return [c.track for c in unmet]

    def _settle(self, request: _Request) -> None:
        self._requests.pop(request.seq, None)
        self._call_processed(request)  # settled first (its entry stays in line: harmless)

    # -- the end -----------------------------------------------------------------------

    def close(self, reason: KafkaConnectionError, *, local: bool) -> None:
        """The connection ended (``local``: this client closed it): every request not
        settled fails, saying whether it may have reached the broker and whose doing
        the end was."""
        if self._closing:
            return
        self._closing = True
        # Answers read before the end count (their callbacks have not run yet).
        for probe in list(self._probes):
            for future in list(probe.futures):
                if future.done():
                    self._answered(probe, future)
        self._closed = True
        self._probes.clear()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        requests, self._requests = self._requests, {}
        # What each request's unmet claims needed, before the ledger is cleared.
        unsettled = {seq: self._unsettled(request) for seq, request in requests.items()}
        for track in self._tracks.values():
            if isinstance(track.poll, asyncio.TimerHandle):
                track.poll.cancel()
            track.poll = None
            track.claims.clear()
        waiting, self._unprocessed = self._unprocessed, collections.deque()
        for request in waiting:
            self._call_processed(request)  # no longer in flight on this connection
        for seq, request in requests.items():
            if not request.future.done():
                error = self._closed_error(request, reason, local=local)
                if error.maybe_delivered:
                    error.claims = unsettled[seq]
                request.future.set_exception(error)

    def _unsettled(self, request: _Request) -> tuple[UnsettledClaim, ...]:
        """The ledger's knowledge of ``request``'s unmet claims (its other targets were
        confirmed): what settling it later from the log ends takes."""
        processed = request.seq <= self._processed
        return tuple(
            UnsettledClaim(
                claim.track.key[0],
                claim.track.key[1],
                claim.track.partitions,
                claim.track.base,
                claim.need - claim.size,
                claim.need,
                processed=processed,
                deadline=request.deadline,
            )
            for claim in request.claims
            if not claim.met
        )

    def _closed_error(
        self, request: _Request, reason: KafkaConnectionError, *, local: bool
    ) -> KafkaConnectionError:
        written = request.written
        if not written.done() or written.cancelled() or written.exception() is not None:
            return KafkaConnectionError(str(reason), broker=self.address, maybe_delivered=False)
        if isinstance(reason, RequestTimeoutError):
            return RequestTimeoutError(str(reason), broker=self.address, maybe_delivered=True)
        refused = False
        if request.seq <= self._processed:
            text = (
                f"{self.address} processed the produce, but the connection ended ({reason}) "
                "before its log showed the bytes"
            )
        elif local:
            text = (
                f"the produce to {self.address} was not confirmed: this client closed the "
                f"connection ({reason}) before the broker's answer came"
            )
        else:
            refused = True
            text = (
                f"{self.address} did not confirm the produce: it refused it (invalid topic "
                f"or partition, corrupt data), failed or broke the protocol ({reason})"
            )
        error = ProduceNotConfirmedError(
            text, broker=self.address, maybe_delivered=True, refused=refused
        )
        error.__cause__ = reason
        return error

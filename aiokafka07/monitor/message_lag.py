"""Lag in messages: how many messages lie between a group's committed offset and the log
end, counted where the range can be read within a bound, estimated otherwise.

0.7 offsets are byte positions, so the lag a monitor reads for free (log end minus
committed offset) is in bytes. Dashboards and alerts written for later Kafka count
messages. The only exact way to know how many messages a byte range holds is to read it:
FETCH the bytes and count the messages, a compressed wrapper counting as the messages
inside it (what a consumer receives). :class:`MessageCounter` does that with a bound,
and keeps what it counted between refreshes so a refresh reads only what changed.

The rule (also in the monitoring docs, docs/operations/monitoring.md)
---------------------------------------------------------------------
For each broker-partition, the counter keeps one *counted span*: a contiguous byte range
``[lo, hi)`` of the log with *marks*, offsets at message boundaries with the number of
messages counted from ``lo`` to each. ``count[a, b) = count[a, c) + count[c, b)`` for
boundaries ``a <= c <= b``, so a range between two marks costs nothing to count again.
Each refresh, for the committed offsets of every group on the partition whose range to
the log end is at most ``max_range_bytes`` (the *near* ones):

1. the span starts at the smallest near committed offset; marks below it are dropped
   (what every group has committed is never read again). A group that moved its offset
   back before ``lo`` (a reset, a new group) starts the span again from there;
2. a near committed offset inside the span that is not a mark yet is made one by reading
   from the mark before it (marks are at most ``chunk_bytes`` apart, so at most one
   chunk);
3. the span is extended from ``hi`` to each near committed offset past it and then to the
   log end, one FETCH of at most ``chunk_bytes`` at a time, each fetch's end becoming a
   mark.

Reading is bounded per refresh: at most ``partition_bytes`` per partition, at most
``refresh_bytes`` in all, and no fetch starts after ``max_seconds``. It goes in two
passes: first ``sample_bytes`` (16 KiB) of every partition with no mean message size yet
(so a budget spent before the last partitions still leaves each an estimate from its own
messages: a topic's partitions may differ, compressed or not), then the rest, the
partitions that need least first, up to ``concurrency`` at once per broker. What was read
is kept, so a backlog beyond one refresh's budget is counted over several.

A group partition's message lag is then:

* ``exact``: its committed offset and the log end are both marks: the difference of
  their counts. A partition caught up (committed offset = log end) is 0, exact, without
  reading;
* ``estimate`` otherwise: what is counted exactly from the committed offset (when it is
  a mark) plus the rest of the range divided by the partition's *recent mean message
  size* (bytes per message of the last span counted on it, or of the last sample read;
  else the mean over the topic's other partitions), at least 1 message while the byte
  lag is positive. A partition whose every group is beyond ``max_range_bytes`` (no
  span) is sampled instead: one chunk, within the budget, read where its newest
  messages start (the log end of the previous refresh; on the first look, the committed
  offset), again every ``resample_seconds`` (60);
* unknown (None) when neither can be had: the committed offset is past the log end, the
  byte lag itself is unknown, or no mean message size is known. Unknown is never 0.

Counting checks every message as a consumer does (sizes, magic, each CRC, codecs,
nested wrappers; :func:`~aiokafka07.protocol.messages.count_message_set`, the C
accelerator's walk that builds no message). A committed offset that is not a message
boundary (the fetch from it does not parse) is estimated, never counted.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import dataclasses
import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

from ..connection import BrokerAddress, BrokerConnection
from ..errors import InvalidMessageSizeError, KafkaError, OffsetOutOfRangeError, ProtocolError
from ..pool import ConnectionPool
from ..protocol.messages import BytesLike, SetCount, count_message_set
from ..records import TopicPartition

__all__ = [
    "ESTIMATE",
    "EXACT",
    "CountStats",
    "MessageCounter",
    "MessageLag",
    "PartitionRange",
]

log = logging.getLogger("aiokafka07.monitor")

T = TypeVar("T")

EXACT: Literal["exact"] = "exact"
ESTIMATE: Literal["estimate"] = "estimate"

Method = Literal["exact", "estimate"]

#: Fetched sets at least this large are counted in a worker thread: decompressing a MiB
#: of gzip wrappers of small messages takes ~90 ms here, time the event loop (ZooKeeper's
#: session, the other requests) must not lose.
_IN_THREAD = 64 << 10

#: The worker threads counting those sets: two (counting decompresses with the GIL held
#: part of the time, more would not go faster), and not the loop's default executor, so
#: that the exporter's formatting (which uses it) never queues behind a backlog's counting.
_COUNTING = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="aiokafka07-count")


async def _off_loop(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in a counting thread (see :data:`_COUNTING`)."""
    return await asyncio.get_running_loop().run_in_executor(_COUNTING, work, *args)


_I32 = struct.Struct(">i")

#: The largest first entry a fetch grows to (0.7's largest ``max.message.size`` a broker
#: accepts by default is 1,000,000 bytes; a wrapper is one message).
_MAX_ENTRY = 16 << 20


class MessageLag(NamedTuple):
    """A group partition's lag in messages and how it was had (``exact`` or
    ``estimate``)."""

    messages: int
    method: Method


class PartitionRange(NamedTuple):
    """What a refresh knows of one broker-partition: its log start and end, and every
    committed offset of a group on it."""

    log_start: int
    log_end: int
    committed: frozenset[int]


@dataclasses.dataclass
class CountStats:
    """What the last :meth:`MessageCounter.refresh` did: bytes read (FETCH), fetches,
    seconds, whether the budget ran out, and how many group ranges were exact or
    estimated."""

    bytes_read: int = 0
    fetches: int = 0
    seconds: float = 0.0
    exhausted: bool = False
    exact: int = 0
    estimated: int = 0
    unknown: int = 0


class _Span:
    """A counted range of one partition's log: marks (offsets at message boundaries)
    and the messages counted from the first mark to each (see the module docstring)."""

    __slots__ = ("counts", "offsets")

    def __init__(self, start: int) -> None:
        self.offsets = [start]
        self.counts = [0]

    @property
    def lo(self) -> int:
        return self.offsets[0]

    @property
    def hi(self) -> int:
        return self.offsets[-1]

    def count_at(self, offset: int) -> int | None:
        """Messages from ``lo`` to ``offset``, if ``offset`` is a mark."""
        i = bisect.bisect_left(self.offsets, offset)
        if i < len(self.offsets) and self.offsets[i] == offset:
            return self.counts[i]
        return None

    def mark_before(self, offset: int) -> tuple[int, int]:
        """The last mark at or below ``offset`` (inside the span) and its count."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.offsets[i], self.counts[i]

    def add(self, offset: int, count: int) -> None:
        """A mark inside the span (between two others) or at its end."""
        i = bisect.bisect_left(self.offsets, offset)
        if i < len(self.offsets) and self.offsets[i] == offset:
            return
        self.offsets.insert(i, offset)
        self.counts.insert(i, count)

    def drop_below(self, offset: int) -> None:
        """Forget the marks below ``offset`` (a mark): nobody needs them any more."""
        i = bisect.bisect_left(self.offsets, offset)
        if i:
            del self.offsets[:i], self.counts[:i]

    def mean_size(self) -> float | None:
        """Bytes per message over the span: the range counted now, the recent log."""
        messages = self.counts[-1] - self.counts[0]
        return (self.hi - self.lo) / messages if messages else None


class _Budget:
    """What is left of a refresh's reading: bytes, and time (``deadline``, monotonic)."""

    __slots__ = ("deadline", "exhausted", "left")

    def __init__(self, total: int, seconds: float) -> None:
        self.left = total
        self.deadline = time.monotonic() + seconds
        self.exhausted = False

    def allows(self, size: int) -> bool:
        if self.left < size or time.monotonic() >= self.deadline:
            self.exhausted = True
            return False
        return True


class _Unreadable(Exception):
    """The range cannot be counted now (bytes that do not parse, budget spent)."""


def _count_whole(data: BytesLike) -> SetCount:
    """The messages of a fetched set (see :func:`count_message_set`); bytes that do not
    parse raise :class:`_Unreadable`."""
    try:
        return count_message_set(data)
    except ProtocolError as exc:
        raise _Unreadable(str(exc)) from None


def _count_piece(data: BytesLike) -> SetCount | None:
    """The messages of a piece of a fetched set that ends at a target; None when its
    first entry crosses the end (the target is not a message boundary)."""
    try:
        return count_message_set(data)
    except InvalidMessageSizeError as exc:
        if exc.available is not None:
            return None
        raise _Unreadable(str(exc)) from None
    except ProtocolError as exc:
        raise _Unreadable(str(exc)) from None


def _count_cuts(data: BytesLike, cuts: list[int]) -> tuple[list[tuple[int, int]], int, int]:
    """Count a fetched set (its first entry whole) cut at ``cuts`` (sorted positions):
    the messages up to each cut that is a message boundary, the bytes of complete
    entries counted, and their messages. Safe in a worker thread (no shared state)."""
    view = memoryview(data)
    done, total, found = 0, 0, []
    for cut in cuts:
        if cut <= done:
            continue
        counted = _count_piece(view[done:cut])
        if counted is None or counted.valid_bytes != cut - done:
            continue  # a message crosses the cut: not a boundary
        done = cut
        total += counted.messages
        found.append((cut, total))
    if done < len(view):
        rest = _count_piece(view[done:])  # None: a partial tail starts at the last cut
        if rest is not None:
            done += rest.valid_bytes
            total += rest.messages
    if not done:
        raise _Unreadable("no complete message")
    return found, done, total


class MessageCounter:
    """Counts (or estimates) group partitions' lag in messages, keeping what it counted
    between refreshes (module docstring: the rule and the bounds).

    ``max_range_bytes``: a range longer than this is estimated without reading it.
    ``refresh_bytes``: at most this many bytes fetched per refresh in all;
    ``partition_bytes``: per partition; ``max_seconds``: no fetch starts after this long;
    ``chunk_bytes``: the size of one FETCH (and the most two marks are apart);
    ``sample_bytes``: the first fetch of a partition with no mean message size yet;
    ``concurrency``: partitions read at once per broker; ``resample_seconds``: how
    often a partition with no counted span (every group beyond ``max_range_bytes``) is
    sampled again for its mean message size.
    """

    def __init__(
        self,
        *,
        max_range_bytes: int = 256 << 20,
        refresh_bytes: int = 32 << 20,
        partition_bytes: int = 8 << 20,
        max_seconds: float = 1.0,
        chunk_bytes: int = 256 << 10,
        sample_bytes: int = 16 << 10,
        concurrency: int = 8,
        resample_seconds: float = 60.0,
    ) -> None:
        for name, value in (
            ("max_range_bytes", max_range_bytes),
            ("refresh_bytes", refresh_bytes),
            ("partition_bytes", partition_bytes),
            ("concurrency", concurrency),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, not {value!r}")
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 64:
            raise ValueError(f"chunk_bytes must be an int >= 64, not {chunk_bytes!r}")
        if isinstance(sample_bytes, bool) or not isinstance(sample_bytes, int) or sample_bytes < 64:
            raise ValueError(f"sample_bytes must be an int >= 64, not {sample_bytes!r}")
        if not max_seconds >= 0:
            raise ValueError(f"max_seconds must be >= 0, not {max_seconds!r}")
        self.max_range_bytes = max_range_bytes
        self.refresh_bytes = refresh_bytes
        self.partition_bytes = partition_bytes
        self.max_seconds = max_seconds
        self.chunk_bytes = chunk_bytes
        self.sample_bytes = min(sample_bytes, chunk_bytes)
        self.concurrency = max(concurrency, 1)
        self.resample_seconds = resample_seconds
        self._spans: dict[TopicPartition, _Span] = {}
        #: The last mean message size measured on each partition (bytes per message).
        self._means: dict[TopicPartition, float] = {}
        #: When a far partition's mean was last sampled (monotonic), and the log end
        #: each partition had at the last refresh (a message boundary: where the
        #: newest messages start).
        self._sampled: dict[TopicPartition, float] = {}
        self._last_ends: dict[TopicPartition, int] = {}
        self.stats = CountStats()

    async def refresh(
        self,
        pool: ConnectionPool,
        addresses: Mapping[int, BrokerAddress],
        ranges: Mapping[TopicPartition, PartitionRange],
    ) -> dict[tuple[TopicPartition, int], MessageLag | None]:
        """:meth:`read`, then :meth:`lags`: count what the bound allows and return the
        lag in messages of every (partition, committed offset) of ``ranges``."""
        await self.read(pool, addresses, ranges)
        return self.lags(ranges)

    async def read(
        self,
        pool: ConnectionPool,
        addresses: Mapping[int, BrokerAddress],
        ranges: Mapping[TopicPartition, PartitionRange],
    ) -> None:
        """Read and count what the bound allows of ``ranges`` (partitions whose broker
        is not in ``addresses`` are not read); forget partitions not in ``ranges``.
        Never raises for the cluster: a broker that does not answer leaves its ranges
        estimated. Cancelling it (a caller's time limit) keeps what was counted."""
        started = time.perf_counter()
        for gone in self._spans.keys() - ranges.keys():
            del self._spans[gone]
        for memory in (self._means, self._sampled, self._last_ends):
            for gone in memory.keys() - ranges.keys():
                del memory[gone]
        budget = _Budget(self.refresh_bytes, self.max_seconds)
        stats = self.stats = CountStats()
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp, r in ranges.items():
            self._prepare(tp, r)
            if self._need(tp, r) and tp.broker_id in addresses:
                by_broker.setdefault(tp.broker_id, []).append(tp)
        allowances = dict.fromkeys(ranges, self.partition_bytes)
        try:
            # First a sample of every partition with no mean message size yet, so that a
            # budget spent before the last partitions leaves an estimate of each from its
            # own messages (a topic's partitions may differ: compressed or not).
            first = {
                b: [tp for tp in tps if self._mean_of(tp) is None] for b, tps in by_broker.items()
            }
            passes = (
                (first, self.sample_bytes, self.sample_bytes),
                (by_broker, self.partition_bytes, self.chunk_bytes),
            )
            for reading, cap, chunk in passes:
                await asyncio.gather(
                    *(
                        self._read_broker(
                            pool, addresses[b], tps, ranges, budget, stats, allowances, cap, chunk
                        )
                        for b, tps in reading.items()
                        if tps
                    )
                )
        finally:
            stats.exhausted = budget.exhausted
            stats.seconds = time.perf_counter() - started
            for tp, r in ranges.items():
                self._last_ends[tp] = r.log_end

    def lags(
        self, ranges: Mapping[TopicPartition, PartitionRange]
    ) -> dict[tuple[TopicPartition, int], MessageLag | None]:
        """The lag in messages of every (partition, committed offset) of ``ranges``, from
        what was counted: exact, estimated, or None (unknown; never 0 for a range that
        is not empty)."""
        topic_means = self._topic_means()
        stats = self.stats
        stats.exact = stats.estimated = stats.unknown = 0
        results: dict[tuple[TopicPartition, int], MessageLag | None] = {}
        for tp, r in ranges.items():
            for committed in r.committed:
                lag = self._lag(tp, r, committed, topic_means.get(tp.topic))
                results[(tp, committed)] = lag
                if lag is None:
                    stats.unknown += 1
                elif lag.method == EXACT:
                    stats.exact += 1
                else:
                    stats.estimated += 1
        return results

    # -- planning --------------------------------------------------------------------

    def _near(self, r: PartitionRange) -> list[int]:
        """The committed offsets whose range is read: inside the log, within the bound."""
        return sorted(
            c
            for c in r.committed
            if r.log_start <= c < r.log_end and r.log_end - c <= self.max_range_bytes
        )

    def _prepare(self, tp: TopicPartition, r: PartitionRange) -> None:
        """Drop a span the log no longer matches (recreated, segments deleted, or a
        group now before its start); start one at the smallest near offset."""
        span = self._spans.get(tp)
        near = self._near(r)
        if not near:
            self._spans.pop(tp, None)
            return
        if span is not None and (span.hi > r.log_end or span.lo < r.log_start or near[0] < span.lo):
            span = None
        if span is None:
            self._spans[tp] = _Span(near[0])

    def _need(self, tp: TopicPartition, r: PartitionRange) -> int:
        """Bytes this partition would read to be exact (0: nothing to read). A partition
        far behind with no mean message size known needs one sample chunk."""
        span = self._spans.get(tp)
        if span is not None:
            return max(r.log_end - span.hi, 0) + sum(
                self.chunk_bytes for c in self._near(r) if c <= span.hi and span.count_at(c) is None
            )
        if self._sample_at(tp, r) is None:
            return 0
        return self.chunk_bytes

    def _sample_at(self, tp: TopicPartition, r: PartitionRange) -> int | None:
        """Where to sample a partition with no counted span (every group far behind)
        for its mean message size: None while the last sample is recent (younger than
        ``resample_seconds``) or nobody is behind; else where the newest messages start
        (the log end at the last refresh), or on the first look the smallest committed
        offset inside the log."""
        if not any(c < r.log_end for c in r.committed):
            return None
        sampled = self._sampled.get(tp)
        if sampled is not None and time.monotonic() - sampled < self.resample_seconds:
            return None
        last_end = self._last_ends.get(tp)
        if last_end is not None and r.log_start <= last_end < r.log_end:
            return last_end
        inside = [c for c in r.committed if r.log_start <= c < r.log_end]
        return min(inside) if inside else None

    # -- reading ---------------------------------------------------------------------

    async def _read_broker(
        self,
        pool: ConnectionPool,
        address: BrokerAddress,
        tps: list[TopicPartition],
        ranges: Mapping[TopicPartition, PartitionRange],
        budget: _Budget,
        stats: CountStats,
        allowances: dict[TopicPartition, int],
        cap: int,
        chunk: int,
    ) -> None:
        """Read ``tps`` (all on ``address``), least needed first, ``concurrency`` at a time,
        in fetches of at most ``chunk`` bytes, each partition at most ``cap`` bytes and
        what is left of its allowance for the refresh."""
        try:
            connection = await pool.connection(address)
        except KafkaError as exc:
            log.debug("counting messages: no connection to %s: %s", address, exc)
            return
        tps.sort(key=lambda tp: (self._need(tp, ranges[tp]), tp))  # least first
        turns = asyncio.Semaphore(self.concurrency)

        async def one(tp: TopicPartition) -> None:
            async with turns:
                if budget.exhausted:
                    return
                given = min(allowances[tp], cap)
                allowance = [given]
                try:
                    await self._read_partition(
                        connection, tp, ranges[tp], budget, stats, allowance, chunk
                    )
                finally:
                    allowances[tp] -= given - allowance[0]

        await asyncio.gather(*(one(tp) for tp in tps))

    async def _read_partition(
        self,
        connection: BrokerConnection,
        tp: TopicPartition,
        r: PartitionRange,
        budget: _Budget,
        stats: CountStats,
        allowance: list[int],
        chunk: int,
    ) -> None:
        """Count what ``allowance`` (a one-item list: bytes left, spent by the fetches)
        allows of one partition, in fetches of at most ``chunk`` bytes (the module
        docstring's steps)."""
        span = self._spans.get(tp)
        try:
            if span is None:  # far behind: learn the mean message size from one chunk
                start = self._sample_at(tp, r)
                if start is not None:
                    self._sampled[tp] = time.monotonic()
                    size = min(chunk, r.log_end - start)
                    data = await self._fetch(connection, tp, start, size, budget, allowance, stats)
                    if len(data) >= _IN_THREAD:
                        counted = await _off_loop(_count_whole, data)
                    else:
                        counted = _count_whole(data)
                    if counted.messages:
                        self._means[tp] = counted.valid_bytes / counted.messages
                return
            near = self._near(r)
            for c in near:  # step 2: offsets inside the span become marks
                if c < span.hi and span.count_at(c) is None:
                    mark, at = span.mark_before(c)
                    found = await self._advance(
                        connection, tp, span, mark, [c], budget, allowance, stats, chunk, False
                    )
                    if c in found:  # else not a message boundary: estimated
                        span.add(c, at + found[c])
            if span.count_at(near[0]) is not None:
                span.drop_below(near[0])
            targets = [*(c for c in near if c > span.hi), r.log_end]  # step 3
            if r.log_end > span.hi:
                await self._advance(
                    connection, tp, span, span.hi, targets, budget, allowance, stats, chunk, True
                )
        except OffsetOutOfRangeError:
            self._spans.pop(tp, None)  # segments deleted meanwhile: start again next time
        except _Unreadable:
            pass
        except KafkaError as exc:
            log.debug("counting messages of %s %s stopped: %s", tp.topic, tp.name, exc)
        finally:
            span = self._spans.get(tp)
            if span is not None:
                mean = span.mean_size()
                if mean is not None:
                    self._means[tp] = mean

    async def _advance(
        self,
        connection: BrokerConnection,
        tp: TopicPartition,
        span: _Span,
        start: int,
        targets: list[int],
        budget: _Budget,
        allowance: list[int],
        stats: CountStats,
        chunk: int,
        extend: bool,
    ) -> dict[int, int]:
        """Count from ``start`` (a mark) through ``targets`` (sorted, past ``start``), one
        FETCH of at most ``chunk`` bytes at a time, each fetch's buffer cut at the targets
        it holds; with ``extend`` (``start`` is the span's end) each fetch's end and each
        target become marks. Returns the messages from ``start`` to each target that is a
        message boundary (a target a message crosses is left out). Raises
        :class:`_Unreadable` when it stops short (the marks made so far stay)."""
        pos, total, found = start, 0, {}
        base = span.counts[-1] if extend else 0
        last = targets[-1]
        while pos < last:
            data = await self._fetch(
                connection, tp, pos, min(chunk, last - pos), budget, allowance, stats
            )
            cuts = [t - pos for t in targets if pos < t <= pos + len(data)]
            if len(data) >= _IN_THREAD:  # decompressing may take a while: off the loop
                counted = await _off_loop(_count_cuts, data, cuts)
            else:
                counted = _count_cuts(data, cuts)
            at_cuts, done, messages = counted
            for cut, through in at_cuts:
                found[pos + cut] = total + through
                if extend:
                    span.add(pos + cut, base + total + through)
            pos += done
            total += messages
            if extend:
                span.add(pos, base + total)
        return found

    async def _fetch(
        self,
        connection: BrokerConnection,
        tp: TopicPartition,
        offset: int,
        size: int,
        budget: _Budget,
        allowance: list[int],
        stats: CountStats,
    ) -> BytesLike:
        """FETCH ``size`` bytes at ``offset`` within the budget: a message set whose first
        entry is whole (one larger than ``size`` is fetched again whole, up to 16 MiB)."""
        while True:
            if size > allowance[0] or not budget.allows(size):
                raise _Unreadable("budget spent")
            allowance[0] -= size
            budget.left -= size
            response = await connection.fetch(tp.topic, tp.partition, offset, size)
            error = response.error(offset)
            if error is not None:
                raise error
            stats.fetches += 1
            data = response.message_set
            stats.bytes_read += len(data)
            if len(data) < 4:
                raise _Unreadable(f"nothing to count at {offset} of {tp.topic} {tp.name}")
            (entry,) = _I32.unpack_from(data, 0)
            if entry > 0 and entry + 4 > len(data):
                # The first message is larger than the fetch: fetch it whole, once.
                if entry + 4 <= size or entry + 4 > _MAX_ENTRY:
                    raise _Unreadable(f"a message of {entry} bytes at {offset}")
                size = entry + 4
                continue
            return data

    # -- results ---------------------------------------------------------------------

    def _mean_of(self, tp: TopicPartition) -> float | None:
        """The partition's own mean message size, if known (its span's, else the last
        measured)."""
        span = self._spans.get(tp)
        mean = None if span is None else span.mean_size()
        return self._means.get(tp) if mean is None else mean

    def _topic_means(self) -> dict[str, float]:
        sums: dict[str, list[float]] = {}
        for tp, mean in self._means.items():
            sums.setdefault(tp.topic, []).append(mean)
        return {topic: sum(means) / len(means) for topic, means in sums.items()}

    def _lag(
        self, tp: TopicPartition, r: PartitionRange, committed: int, topic_mean: float | None
    ) -> MessageLag | None:
        behind = r.log_end - committed
        if behind < 0:
            return None  # past the log end: ERR, not a count
        if behind == 0:
            return MessageLag(0, EXACT)
        span = self._spans.get(tp)
        exact_part, rest = 0, behind
        if span is not None:
            at = span.count_at(committed)
            if at is not None:
                end = span.count_at(r.log_end)
                if end is not None:
                    return MessageLag(end - at, EXACT)
                exact_part, rest = span.counts[-1] - at, r.log_end - span.hi
        mean = self._means.get(tp, topic_mean)
        if mean is None or mean <= 0:
            return None
        return MessageLag(max(exact_part + round(rest / mean), 1), ESTIMATE)

    def spans(self) -> Sequence[tuple[TopicPartition, int, int, int]]:
        """Each counted span: (partition, lo, hi, marks); for inspection and tests."""
        return [(tp, s.lo, s.hi, len(s.offsets)) for tp, s in sorted(self._spans.items())]

"""On-disk partition logs of the embedded broker, as a Kafka 0.7.2 broker keeps them.

Layout (PROTOCOL §12): ``<log.dir>/<topic>-<partition>/<20-digit start offset>.kafka``.
A partition log is a list of segment files; an offset is a byte position in the
partition, i.e. a segment's start plus a position in its file. Only the newest segment
(the *active* one) is appended to.

What clients can observe follows 0.7.2 exactly:

* **Visibility is flushed data only.** Every segment has a flushed size (high-water
  mark) that advances only when the log is flushed: after ``log.flush.interval``
  messages, when a segment is rolled, by the time-based flusher, and on close. FETCH
  (:meth:`Log.read`) and OFFSETS (:meth:`Log.offsets_before`) see nothing beyond it.
* **A fetch never crosses a segment** and is not aligned to message boundaries
  (PROTOCOL §5.1, §10.3).
* **OFFSETS** is the segment-granular "offsets before time" algorithm of PROTOCOL §11.
* **Recovery** on open validates the newest segment entry by entry and truncates it at
  the first incomplete or corrupt entry; older segments are trusted (§12).
* **Retention** deletes whole segments from the oldest end, by file age and then by
  size; offsets never restart (§12).

Everything here is synchronous. :meth:`Log.flush` may run in a worker thread (the broker
calls it through ``asyncio.to_thread``) while the event-loop thread appends and reads, so
the mutable state of a log is guarded by a lock that is never held during an ``fsync``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..errors import (
    InvalidMessageSizeError,
    InvalidPartitionError,
    InvalidTopicError,
    KafkaError,
    OffsetOutOfRangeError,
    ProtocolError,
    UnknownCodecError,
)
from ..protocol import EARLIEST, LATEST, decode_message_set

__all__ = [
    "RECOVERY_WINDOW",
    "SEGMENT_SUFFIX",
    "CorruptLogError",
    "Log",
    "LogClosedError",
    "LogConfig",
    "LogManager",
    "SegmentInfo",
    "parse_log_dir_name",
    "segment_file_name",
]

# Named so because ``log`` is what this module calls a partition log.
logger = logging.getLogger("aiokafka07.broker.log")

#: File name suffix of a segment (Kafka's ``Log.FileSuffix``).
SEGMENT_SUFFIX = ".kafka"

#: Bytes of the newest segment read per step during recovery, so that a 1 GiB segment is
#: never loaded at once. An entry larger than the window is read whole on its own.
RECOVERY_WINDOW = 8 << 20

_I32 = struct.Struct(">i")
_FILE_MODE = 0o644


class CorruptLogError(ProtocolError):
    """The log directory's contents cannot be a 0.7.2 log.

    Raised for a segment file or log directory whose name does not parse, and for
    segments that do not follow each other without a gap (0.7.2 refuses to start then).
    """


class LogClosedError(KafkaError):
    """An append, read or OFFSETS on a log that was closed."""


@dataclass(frozen=True)
class LogConfig:
    """The per-log settings of the broker's ``log.*`` keys (CONFIG §1), in bytes and ms."""

    #: ``log.file.size``: roll when the active segment already exceeds this (checked
    #: before an append).
    segment_bytes: int = 1073741824
    #: ``log.roll.hours``: roll when the active segment's first append is older than this.
    roll_ms: int = 168 * 3600 * 1000
    #: ``log.retention.hours``: delete segments whose file mtime is older than this.
    retention_ms: int = 168 * 3600 * 1000
    #: ``log.retention.size``: delete oldest segments to keep the log near this size (-1 off).
    retention_bytes: int = -1
    #: ``log.flush.interval``: flush after this many appended messages.
    flush_interval_messages: int = 500
    #: ``log.default.flush.interval.ms`` / ``topic.flush.intervals.ms``: time-based flush.
    flush_interval_ms: int = 3000
    #: Whether a flush also fsyncs (embedded test clusters turn it off for speed; the
    #: high-water mark advances either way).
    fsync: bool = True


class SegmentInfo(NamedTuple):
    """A snapshot of one segment: where it starts, how big it is and how much is visible."""

    start: int
    size: int
    flushed_size: int
    mtime_ms: int
    path: Path


def segment_file_name(start: int) -> str:
    """``<start offset as 20 zero-padded digits>.kafka`` (Kafka's ``Log.nameFromOffset``)."""
    return f"{start:020d}{SEGMENT_SUFFIX}"


def parse_log_dir_name(name: str) -> tuple[str, int]:
    """Split a log directory name ``<topic>-<partition>`` on its last ``-``.

    Topic names may contain ``-`` themselves, so ``my-topic-3`` is ``("my-topic", 3)``.
    """
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not (number.isascii() and number.isdigit()):
        raise CorruptLogError(f"log directory name {name!r} is not <topic>-<partition>")
    return topic, int(number)


class _Segment:
    """One open segment file and its sizes (mutable; guarded by the owning log's lock)."""

    __slots__ = ("fd", "first_append_ms", "flushed", "path", "size", "start")

    def __init__(self, start: int, path: Path, fd: int, size: int) -> None:
        self.start = start
        self.path = path
        self.fd = fd
        #: Bytes in the file (everything appended).
        self.size = size
        #: The high-water mark: bytes readers may see (advanced by flushes only).
        self.flushed = size
        #: When the first append to this segment happened in this process (ms); segments
        #: loaded from disk have none, so age-based rolling starts with the next append.
        self.first_append_ms: int | None = None

    def mtime_ms(self) -> int:
        """The file's last-modified time in ms (``File.lastModified`` in 0.7.2)."""
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def info(self) -> SegmentInfo:
        return SegmentInfo(self.start, self.size, self.flushed, self.mtime_ms(), self.path)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def _open_new_segment(directory: Path, start: int) -> _Segment:
    """Create (or empty, as 0.7.2's roll does with a leftover file) a segment at ``start``."""
    path = directory / segment_file_name(start)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
    return _Segment(start, path, fd, 0)


def _write_all(fd: int, data: memoryview, size_before: int) -> None:
    """Write all of ``data`` to an ``O_APPEND`` fd; on failure cut the file back.

    A failed append (disk full, I/O error) must not leave half an entry in front of the
    next append, so the file is truncated to where it was before the error is raised.
    """
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, data[written:])
    except OSError:
        # The original error is the one worth reporting; recovery cleans up otherwise.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size_before)
        raise


def _scan_window(view: memoryview) -> tuple[int, bool, int]:
    """Validate entries at the start of ``view`` like 0.7.2's recovery.

    Returns ``(good, corrupt, need)``: ``good`` bytes of complete valid entries; whether
    an invalid entry follows them; and, if the entry after them is cut off by the end of
    ``view``, its full size (length field included), else 0.

    Entries are checked for size, magic and CRC with the codec's shallow decode. An entry
    with compression codec 3 passes (its CRC is good and 0.7.2's recovery does not look at
    the codec), so decoding resumes behind it.
    """
    start = 0
    while True:
        try:
            return start + decode_message_set(view[start:], shallow=True).valid_bytes, False, 0
        except UnknownCodecError as exc:
            at = start + (exc.position or 0)
            start = at + 4 + _I32.unpack_from(view, at)[0]
        except InvalidMessageSizeError as exc:
            if exc.available is not None:  # the first entry is incomplete in this window
                return start, False, 4 + (exc.size or 0)
            return start + (exc.position or 0), True, 0
        except ProtocolError as exc:
            return start + (exc.position or 0), True, 0


def _valid_prefix(fd: int, size: int, window: int) -> int:
    """How many leading bytes of a segment file are complete, valid entries.

    Reads ``window`` bytes at a time so memory stays bounded; an entry larger than the
    window is read on its own, at its declared size, if the file holds all of it.
    """
    pos = 0
    want = window
    while size - pos >= 4:
        expected = min(want, size - pos)
        buf = os.pread(fd, expected, pos)
        if len(buf) < expected:  # the file shrank under us: believe what is there
            size = pos + len(buf)
            if len(buf) < 4:
                break
        good, corrupt, need = _scan_window(memoryview(buf))
        pos += good
        want = window
        if corrupt:
            break
        if good == 0:
            if need == 0 or need > size - pos:
                break  # a torn entry at the end of the file
            want = need
    return pos


class Log:
    """One partition's log: ``<dir>/<20-digit start offset>.kafka`` segment files.

    Opening runs recovery of the newest segment; afterwards everything on disk counts as
    flushed. ``clock`` returns seconds since the epoch (like :func:`time.time`); it times
    segment rolling, flushes, and the log-end entry of OFFSETS, so tests can control it.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock: Callable[[], float] = time.time,
        recovery_window: int = RECOVERY_WINDOW,
    ) -> None:
        if recovery_window < 4:
            raise ValueError("recovery_window must be at least 4 bytes")
        self.directory = Path(directory)
        self.topic, self.partition = parse_log_dir_name(self.directory.name)
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        #: Messages appended since the last flush (0.7.2 counts messages, not bytes).
        self._unflushed = 0
        self._last_flush_ms = self._now_ms()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._segments = self._load(recovery_window)

    def __repr__(self) -> str:
        return f"<Log {self.name} segments={len(self._segments)} end={self.log_end_offset}>"

    @property
    def name(self) -> str:
        """The directory name, ``<topic>-<partition>``."""
        return self.directory.name

    # -- opening -----------------------------------------------------------------------

    def _load(self, window: int) -> list[_Segment]:
        """Open every segment (older ones read-only), check they chain, recover the newest."""
        found: list[tuple[int, Path]] = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if not entry.name.endswith(SEGMENT_SUFFIX) or not entry.is_file():
                    continue
                stem = entry.name[: -len(SEGMENT_SUFFIX)]
                if not (stem.isascii() and stem.isdigit()):
                    raise CorruptLogError(f"segment file {entry.path!r} is not <offset>.kafka")
                found.append((int(stem), Path(entry.path)))
        if not found:
            return [_open_new_segment(self.directory, 0)]
        found.sort()
        segments: list[_Segment] = []
        try:
            for index, (start, path) in enumerate(found):
                newest = index == len(found) - 1
                flags = os.O_RDWR | os.O_APPEND if newest else os.O_RDONLY
                fd = os.open(path, flags)
                segment = _Segment(start, path, fd, os.fstat(fd).st_size)
                if segments:
                    previous = segments[-1]
                    if previous.start + previous.size != start:
                        segment.close()
                        raise CorruptLogError(
                            f"segments {previous.path.name} ({previous.size} bytes) and "
                            f"{path.name} do not follow each other"
                        )
                segments.append(segment)
            self._recover(segments[-1], window)
        except BaseException:
            for segment in segments:
                segment.close()
            raise
        return segments

    @staticmethod
    def _recover(segment: _Segment, window: int) -> None:
        """Truncate the newest segment at its first incomplete or invalid entry."""
        valid = _valid_prefix(segment.fd, segment.size, window)
        if valid < segment.size:
            logger.warning(
                "recovery: truncating %s from %d to %d bytes (torn or corrupt entries)",
                segment.path,
                segment.size,
                valid,
            )
            os.ftruncate(segment.fd, valid)
        segment.size = segment.flushed = valid

    # -- helpers (call with the lock held unless noted) ----------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.name} is closed")

    def _roll_due(self, segment: _Segment, now_ms: int) -> bool:
        """0.7.2's ``maybeRoll``: too big, or first append too old; never when empty."""
        if segment.size == 0:
            return False
        if segment.size > self.config.segment_bytes:
            return True
        first = segment.first_append_ms
        return first is not None and now_ms - first > self.config.roll_ms

    def _needs_sync(self, segment: _Segment, synced: tuple[_Segment, int] | None) -> bool:
        """Whether ``segment`` has bytes that must be fsynced before it is marked flushed."""
        if not self.config.fsync or segment.flushed >= segment.size:
            return False
        return synced is None or synced[0] is not segment or synced[1] < segment.size

    def _sync(self, segment: _Segment) -> int:
        """fsync ``segment``'s file without holding the lock (call it *without* the lock).

        Returns how many bytes of the segment are now durable. The descriptor is
        duplicated under the lock so that a concurrent close or retention cannot turn
        the fsync into one on an unrelated, reused descriptor number.
        """
        with self._lock:
            size = segment.size
            if segment.fd < 0 or not self.config.fsync:
                return size
            fd = os.dup(segment.fd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return size

    def _roll(self, active: _Segment, now_ms: int) -> None:
        """Start a new segment at the log end; the old one is entirely flushed by now."""
        active.flushed = active.size
        self._unflushed = 0
        self._last_flush_ms = now_ms
        self._segments.append(_open_new_segment(self.directory, active.start + active.size))

    def _find(self, offset: int) -> _Segment:
        """The last segment whose start is ≤ ``offset`` (the caller checked the range)."""
        segments = self._segments
        low, high = 0, len(segments) - 1
        while low < high:
            mid = (low + high + 1) // 2
            if segments[mid].start <= offset:
                low = mid
            else:
                high = mid - 1
        return segments[low]

    # -- appending and flushing --------------------------------------------------------

    def append(
        self,
        message_set: bytes | bytearray | memoryview,
        message_count: int,
        *,
        flush: bool = True,
    ) -> tuple[int, int]:
        """Append already validated, complete entries; return (start offset, end offset).

        ``message_count`` is the number of messages the set holds (inner messages of
        compressed wrappers included, as 0.7.2 counts them); it drives the count-based
        flush. Like 0.7.2, the roll check runs before every append, even an empty one,
        and an empty set writes nothing. With ``flush=False`` a count-based flush is left
        to the caller (see :attr:`flush_pending`), e.g. to fsync off the event loop.
        """
        appended = self._append(message_set, message_count, flush=flush, may_sync=True)
        assert appended is not None
        return appended

    def try_append(
        self,
        message_set: bytes | bytearray | memoryview,
        message_count: int,
        *,
        flush: bool = True,
    ) -> tuple[int, int] | None:
        """:meth:`append`, unless the finished segment of a due roll must be fsynced
        first: then nothing is appended and None is returned, so that a caller on an
        event loop can append from a worker thread instead."""
        return self._append(message_set, message_count, flush=flush, may_sync=False)

    def _append(
        self,
        message_set: bytes | bytearray | memoryview,
        message_count: int,
        *,
        flush: bool,
        may_sync: bool,
    ) -> tuple[int, int] | None:
        if message_count < 0:
            raise ValueError("message_count must not be negative")
        data = memoryview(message_set).cast("B")
        synced: tuple[_Segment, int] | None = None
        while True:
            with self._lock:
                self._check_open()
                active = self._segments[-1]
                now_ms = self._now_ms()
                roll = self._roll_due(active, now_ms)
                if not (roll and self._needs_sync(active, synced)):
                    if roll:
                        self._roll(active, now_ms)
                        active = self._segments[-1]
                    start = active.start + active.size
                    if data:
                        _write_all(active.fd, data, active.size)
                        active.size += len(data)
                        if active.first_append_ms is None:
                            active.first_append_ms = now_ms
                    self._unflushed += message_count
                    flush_now = self._unflushed >= self.config.flush_interval_messages
                    break
            if not may_sync:
                return None
            # The segment being finished must be durable before it is marked flushed;
            # sync it outside the lock, then check again (another thread may have acted).
            synced = (active, self._sync(active))
        if flush_now and flush:
            self.flush()
        return start, start + len(data)

    @property
    def flush_pending(self) -> bool:
        """Whether enough messages are unflushed for a count-based flush (never once the
        log is closed: closing flushed it)."""
        with self._lock:
            return not self._closed and self._unflushed >= self.config.flush_interval_messages

    def flush(self) -> None:
        """fsync the active segment (if configured) and advance its high-water mark.

        Safe to call from a worker thread while the event loop appends and reads: only
        the bytes present when the flush began are marked flushed, and the lock is not
        held during the fsync. A no-op when nothing is unflushed or the log is closed.
        """
        with self._lock:
            if self._closed:
                return
            active = self._segments[-1]
            if self._unflushed == 0 and active.flushed >= active.size:
                return
            counted = self._unflushed
        durable = self._sync(active)
        with self._lock:
            if durable > active.flushed:
                active.flushed = min(durable, active.size)
            self._unflushed = max(0, self._unflushed - counted)
            self._last_flush_ms = self._now_ms()

    def flush_due(self, now_ms: int) -> bool:
        """Whether the time-based flusher should flush this log now.

        True when the last flush is at least ``flush_interval_ms`` old and something is
        unflushed (0.7.2 calls ``flush`` on the interval, which returns early otherwise).
        """
        with self._lock:
            if self._closed:
                return False
            active = self._segments[-1]
            unflushed = self._unflushed > 0 or active.flushed < active.size
            return unflushed and now_ms - self._last_flush_ms >= self.config.flush_interval_ms

    def maybe_flush_by_time(self, now_ms: int) -> bool:
        """Flush if :meth:`flush_due`; return whether a flush was done."""
        if not self.flush_due(now_ms):
            return False
        self.flush()
        return True

    # -- reading -----------------------------------------------------------------------

    def read(self, offset: int, max_size: int) -> bytes:
        """FETCH: up to ``max_size`` raw bytes from ``offset`` (PROTOCOL §5.1, §10.3).

        Raises :class:`~aiokafka07.errors.OffsetOutOfRangeError` if ``offset`` is below
        the oldest segment or beyond the flushed log end; the flushed end itself gives
        ``b""``. The bytes come from the one segment containing ``offset`` (an offset
        equal to a segment's start reads that segment) and stop at its flushed size, so
        a fetch never spans two segments. There is no alignment to message boundaries.
        ``max_size`` ≤ 0 gives ``b""``.
        """
        with self._lock:
            self._check_open()
            segments = self._segments
            last = segments[-1]
            end = last.start + last.flushed
            if offset < segments[0].start or offset > end:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range [{segments[0].start}, {end}] "
                    f"of log {self.name}",
                    offset=offset,
                )
            if offset == end or max_size <= 0:
                return b""
            segment = self._find(offset)
            position = offset - segment.start
            length = min(max_size, segment.flushed - position)
            if length <= 0:
                return b""
            return os.pread(segment.fd, length, position)

    def offsets_before(
        self, time_ms: int, max_offsets: int, *, now_ms: int | None = None
    ) -> list[int]:
        """OFFSETS (PROTOCOL §11): up to ``max_offsets`` offsets, newest first.

        Candidates are every segment's ``(start, file mtime)`` plus, if the active
        segment has flushed data, ``(flushed log end, now)``. ``time_ms`` -1 (latest)
        starts from the last candidate, -2 (earliest) from the first, any other value
        from the newest candidate whose timestamp is ≤ it (none: ``[]``). ``now_ms``
        defaults to the log's clock.
        """
        if max_offsets < 0:
            raise ValueError("max_offsets must not be negative")
        if now_ms is None:
            now_ms = self._now_ms()
        with self._lock:
            self._check_open()
            candidates = [(segment.start, segment.mtime_ms()) for segment in self._segments]
            last = self._segments[-1]
            if last.flushed > 0:
                candidates.append((last.start + last.flushed, now_ms))
        if time_ms == LATEST:
            index = len(candidates) - 1
        elif time_ms == EARLIEST:
            index = 0
        else:
            index = len(candidates) - 1
            while index >= 0 and candidates[index][1] > time_ms:
                index -= 1
        count = min(max_offsets, index + 1)
        return [candidates[index - i][0] for i in range(count)]

    # -- retention ---------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: delete old segments by age, then by size; return how many went.

        By age: leading segments whose file mtime is more than ``retention_ms`` before
        ``now_ms``. By size (``retention_bytes`` ≥ 0), 0.7.2's rule: with ``diff`` = log
        size - limit, delete leading segments while ``diff - segment size >= 0``, so the
        log never shrinks below the limit. Sizes are flushed sizes. The active segment
        goes only if every segment qualifies; then a new empty segment starts at the log
        end first, or, if the active segment has nothing flushed, it is kept and its
        mtime reset to ``now_ms`` instead.
        """
        retention_ms = self.config.retention_ms
        deleted = self._delete_leading(
            lambda segments: _count_while(segments, lambda s: now_ms - s.mtime_ms() > retention_ms),
            now_ms,
        )
        if self.config.retention_bytes >= 0:
            deleted += self._delete_leading(self._over_size, now_ms)
        return deleted

    def _over_size(self, segments: list[_Segment]) -> int:
        """How many leading segments size-based retention deletes (0.7.2's algorithm)."""
        limit = self.config.retention_bytes
        total = sum(segment.flushed for segment in segments)
        if total < limit:
            return 0
        diff = total - limit
        count = 0
        for segment in segments:
            if diff - segment.flushed < 0:
                break
            diff -= segment.flushed
            count += 1
        return count

    def _delete_leading(self, choose: Callable[[list[_Segment]], int], now_ms: int) -> int:
        """Delete the first ``choose(segments)`` segments (0.7.2's ``markDeletedWhile``)."""
        synced: tuple[_Segment, int] | None = None
        while True:
            with self._lock:
                if self._closed:
                    return 0
                segments = self._segments
                count = choose(segments)
                if count == 0:
                    return 0
                last = segments[-1]
                if count == len(segments):
                    if last.flushed > 0:
                        if self._needs_sync(last, synced):
                            pass  # sync outside the lock, then decide again
                        else:
                            self._roll(last, self._now_ms())
                            return self._drop(count)
                    else:
                        # Rolling would recreate the same file name: keep the empty
                        # active segment and make it look new instead.
                        os.utime(last.path, ns=(now_ms * 1_000_000, now_ms * 1_000_000))
                        return self._drop(count - 1)
                else:
                    return self._drop(count)
            synced = (last, self._sync(last))

    def _drop(self, count: int) -> int:
        """Remove the first ``count`` segments from the log and delete their files."""
        doomed, self._segments = self._segments[:count], self._segments[count:]
        deleted = 0
        for segment in doomed:
            segment.close()
            try:
                segment.path.unlink()
            except OSError:
                continue  # as in 0.7.2 a failed delete is just not counted
            deleted += 1
        return deleted

    # -- state -------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        """The offset the next append goes to (everything appended, flushed or not)."""
        with self._lock:
            last = self._segments[-1]
            return last.start + last.size

    @property
    def flushed_end_offset(self) -> int:
        """The end of what readers see (FETCH at this offset gives ``b""``)."""
        with self._lock:
            last = self._segments[-1]
            return last.start + last.flushed

    @property
    def start_offset(self) -> int:
        """The start of the oldest segment (fetching below it is out of range)."""
        with self._lock:
            return self._segments[0].start

    @property
    def size_bytes(self) -> int:
        """Bytes in all segment files, unflushed ones included."""
        with self._lock:
            return sum(segment.size for segment in self._segments)

    @property
    def unflushed_messages(self) -> int:
        """Messages appended since the last flush."""
        with self._lock:
            return self._unflushed

    @property
    def last_flush_ms(self) -> int:
        """When the log was last flushed (or opened), by the log's clock."""
        with self._lock:
            return self._last_flush_ms

    @property
    def segments(self) -> list[SegmentInfo]:
        """A snapshot of the segments, oldest first."""
        with self._lock:
            self._check_open()
            return [segment.info() for segment in self._segments]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` or :meth:`abandon` was called."""
        return self._closed

    # -- closing -----------------------------------------------------------------------

    def close(self) -> None:
        """Flush, then close every segment file. Idempotent."""
        self.flush()
        self.abandon()

    def abandon(self) -> None:
        """Close every segment file *without* flushing, as a crashing broker would.

        The bytes already written stay in the files; the next open recovers them.
        """
        with self._lock:
            self._closed = True
            for segment in self._segments:
                segment.close()


def _count_while(segments: Iterable[_Segment], predicate: Callable[[_Segment], bool]) -> int:
    """How many leading ``segments`` satisfy ``predicate`` (Scala's ``takeWhile(...).size``)."""
    count = 0
    for segment in segments:
        if not predicate(segment):
            break
        count += 1
    return count


def valid_partitions(count: int) -> str:
    """``valid partitions are 0..3``, or ``the only valid partition is 0``."""
    return "the only valid partition is 0" if count == 1 else f"valid partitions are 0..{count - 1}"


class LogManager:
    """All partition logs under one ``log.dir``.

    ``partitions_for(topic)`` is the configured partition count of a topic on this broker
    (``topic.partition.count.map`` or ``num.partitions``) and ``config_for(topic)`` its
    :class:`LogConfig`. Opening loads (and recovers) every ``<topic>-<partition>``
    directory; plain files in ``log.dir`` are skipped as 0.7.2 does.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        partitions_for: Callable[[str], int],
        config_for: Callable[[str], LogConfig],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.log_dir = Path(log_dir)
        self._partitions_for = partitions_for
        self._config_for = config_for
        self._clock = clock
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], Log] = {}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            with os.scandir(self.log_dir) as entries:
                directories = sorted(entry.name for entry in entries if entry.is_dir())
            for name in directories:
                topic, partition = parse_log_dir_name(name)
                self._logs[topic, partition] = Log(
                    self.log_dir / name, config_for(topic), clock=clock
                )
        except BaseException:
            self.abandon()
            raise

    def __repr__(self) -> str:
        return f"<LogManager {str(self.log_dir)!r} logs={len(self._logs)}>"

    def _check(self, topic: str, partition: int) -> None:
        """0.7.2's ``getLogPool`` checks: a non-empty topic and a configured partition."""
        if not topic:
            raise InvalidTopicError("topic name can't be empty")
        count = self._partitions_for(topic)
        if partition < 0 or partition >= count:
            raise InvalidPartitionError(
                f"wrong partition {partition} of topic {topic!r}: {valid_partitions(count)}"
            )

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The log of a partition, or ``None`` if this broker has none (nothing is created).

        Raises :class:`~aiokafka07.errors.InvalidPartitionError` for a partition outside
        ``0 … partitions_for(topic) - 1``.
        """
        self._check(topic, partition)
        with self._lock:
            return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int) -> tuple[Log, bool]:
        """The log of a partition, creating its directory if needed; ``(log, created)``."""
        self._check(topic, partition)
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing, False
            log = Log(
                self.log_dir / f"{topic}-{partition}", self._config_for(topic), clock=self._clock
            )
            self._logs[topic, partition] = log
            return log, True

    def all_logs(self) -> list[Log]:
        """Every open log."""
        with self._lock:
            return list(self._logs.values())

    def topics(self) -> set[str]:
        """Topics with at least one log on this broker."""
        with self._lock:
            return {topic for topic, _ in self._logs}

    def due_for_flush(self, now_ms: int) -> list[Log]:
        """Logs the time-based flusher should flush now (see :meth:`Log.flush_due`).

        Nothing is flushed here, so the caller can run the fsyncs in a worker thread.
        """
        return [log for log in self.all_logs() if log.flush_due(now_ms)]

    def flush_due(self, now_ms: int) -> list[Log]:
        """Flush the logs that are :meth:`due_for_flush` right here; return them."""
        due = self.due_for_flush(now_ms)
        for log in due:
            log.flush()
        return due

    def flush_all(self) -> None:
        """Flush every log."""
        for log in self.all_logs():
            log.flush()

    def cleanup(self, now_ms: int) -> int:
        """Run retention over every log; return the number of segments deleted."""
        return sum(log.delete_old_segments(now_ms) for log in self.all_logs())

    def close(self) -> None:
        """Flush and close every log."""
        for log in self.all_logs():
            log.close()

    def abandon(self) -> None:
        """Close every log without flushing (a simulated crash; see :meth:`Log.abandon`)."""
        for log in self.all_logs():
            log.abandon()

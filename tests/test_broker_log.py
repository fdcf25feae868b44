"""The embedded broker's log storage behaves like a Kafka 0.7.2 broker's on disk.

Real files in ``tmp_path`` and a controllable clock. PROTOCOL §10.3 (FETCH), §11
(OFFSETS) and §12 (flush visibility, rolling, recovery, retention).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from aiokafka07.broker.log import (
    CorruptLogError,
    Log,
    LogClosedError,
    LogConfig,
    LogManager,
    parse_log_dir_name,
    segment_file_name,
)
from aiokafka07.errors import InvalidPartitionError, InvalidTopicError, OffsetOutOfRangeError
from aiokafka07.protocol import decode_message_set, encode_message_set

HOUR_MS = 3600 * 1000


class Clock:
    """A settable stand-in for ``time.time``."""

    def __init__(self, seconds: float = 1_700_000_000.0) -> None:
        self.seconds = seconds

    def __call__(self) -> float:
        return self.seconds

    @property
    def ms(self) -> int:
        return int(self.seconds * 1000)

    def advance_ms(self, ms: int) -> None:
        self.seconds += ms / 1000


def entry(payload_size: int, fill: bytes = b"x") -> bytes:
    """One uncompressed magic-1 entry of ``10 + payload_size`` bytes."""
    return encode_message_set([fill * payload_size])


E36 = entry(26)  # a 36-byte entry
E24 = entry(14)  # a 24-byte entry


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_log(tmp_path: Path, clock: Clock) -> Iterator[Callable[..., Log]]:
    """Open ``<tmp>/test-0`` with the given :class:`LogConfig` fields (fsync off)."""
    opened: list[Log] = []

    def make(name: str = "test-0", *, recovery_window: int | None = None, **fields: int) -> Log:
        fields.setdefault("flush_interval_messages", 1)
        config = LogConfig(fsync=False, **fields)
        extra = {} if recovery_window is None else {"recovery_window": recovery_window}
        log = Log(tmp_path / name, config, clock=clock, **extra)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.abandon()


def three_segments(make_log: Callable[..., Log], **fields: int) -> Log:
    """Segments at 0 (108 bytes), 108 (108 bytes) and 216 (24 bytes): log end 240."""
    log = make_log(segment_bytes=100, **fields)
    for _ in range(6):
        log.append(E36, 1)
    log.append(E24, 1)
    return log


# -- layout and naming ---------------------------------------------------------------


def test_new_log_starts_with_segment_zero(make_log: Callable[..., Log], tmp_path: Path) -> None:
    log = make_log()
    assert (tmp_path / "test-0" / "00000000000000000000.kafka").is_file()
    assert (log.topic, log.partition) == ("test", 0)
    assert log.start_offset == log.log_end_offset == log.flushed_end_offset == 0
    assert [(s.start, s.size, s.flushed_size) for s in log.segments] == [(0, 0, 0)]


def test_directory_names_split_on_the_last_dash(make_log: Callable[..., Log]) -> None:
    log = make_log("my-dashed-topic-12")
    assert (log.topic, log.partition) == ("my-dashed-topic", 12)
    assert parse_log_dir_name("a-b-0") == ("a-b", 0)
    for bad in ("nodash", "-3", "topic-", "topic-x", "topic-1a"):
        with pytest.raises(CorruptLogError):
            parse_log_dir_name(bad)
    assert segment_file_name(216) == "00000000000000000216.kafka"


def test_append_returns_byte_offsets_and_reads_round_trip(make_log: Callable[..., Log]) -> None:
    log = make_log()
    assert log.append(E36, 1) == (0, 36)
    two = encode_message_set([b"hello", b"world"])
    assert log.append(two, 2) == (36, 36 + len(two))
    assert log.append(b"", 0) == (36 + len(two), 36 + len(two))
    data = log.read(0, 1 << 20)
    assert data == E36 + two
    decoded = decode_message_set(data)
    assert [m.value for m in decoded.messages] == [b"x" * 26, b"hello", b"world"]
    assert decoded.messages[-1].offset == log.log_end_offset


# -- rolling -------------------------------------------------------------------------


def test_roll_at_size_and_segment_names(make_log: Callable[..., Log], tmp_path: Path) -> None:
    log = three_segments(make_log)
    names = sorted(p.name for p in (tmp_path / "test-0").iterdir())
    assert names == [segment_file_name(0), segment_file_name(108), segment_file_name(216)]
    assert [(s.start, s.size) for s in log.segments] == [(0, 108), (108, 108), (216, 24)]
    assert log.log_end_offset == log.flushed_end_offset == 240
    assert log.size_bytes == 240


def test_size_limit_is_checked_before_the_append(make_log: Callable[..., Log]) -> None:
    log = make_log(segment_bytes=72)
    for _ in range(3):
        log.append(E36, 1)  # 72 is not > 72: the third still goes to segment 0
    assert [s.start for s in log.segments] == [0]
    log.append(E36, 1)  # 108 > 72: roll first
    assert [(s.start, s.size) for s in log.segments] == [(0, 108), (108, 36)]


def test_roll_by_time_since_first_append(make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log(roll_ms=1000)
    clock.advance_ms(5000)  # time before the first append does not count
    log.append(E36, 1)
    clock.advance_ms(1000)
    log.append(E36, 1)  # exactly roll_ms old: not yet
    assert [s.start for s in log.segments] == [0]
    clock.advance_ms(1)
    log.append(E36, 1)
    assert [s.start for s in log.segments] == [0, 72]


def test_reopened_segment_has_no_first_append_time(
    make_log: Callable[..., Log], clock: Clock
) -> None:
    log = make_log(roll_ms=1000)
    log.append(E36, 1)
    log.close()
    clock.advance_ms(10 * HOUR_MS)
    log = make_log(roll_ms=1000)
    log.append(E36, 1)  # the age clock starts with this append
    assert [s.start for s in log.segments] == [0]
    clock.advance_ms(1001)
    log.append(E36, 1)
    assert [s.start for s in log.segments] == [0, 72]


def test_empty_segment_is_never_rolled_but_empty_appends_check(
    make_log: Callable[..., Log],
) -> None:
    log = make_log(segment_bytes=0)
    log.append(b"", 0)
    assert [s.start for s in log.segments] == [0]
    log.append(E36, 1)
    log.append(E36, 1)
    assert [s.start for s in log.segments] == [0, 36]
    # As in 0.7.2 the roll check runs before every append, even an empty one.
    assert log.append(b"", 0) == (72, 72)
    assert [s.start for s in log.segments] == [0, 36, 72]
    log.append(b"", 0)
    assert [s.start for s in log.segments] == [0, 36, 72]


def test_roll_flushes_the_finished_segment(make_log: Callable[..., Log]) -> None:
    log = make_log(segment_bytes=50, flush_interval_messages=500)
    log.append(E36, 1)
    log.append(E36, 1)
    assert log.flushed_end_offset == 0
    log.append(E36, 1)  # rolls: segment 0 is flushed, the new one is not
    assert log.read(0, 1000) == E36 * 2
    assert log.flushed_end_offset == 72
    assert log.log_end_offset == 108
    assert log.offsets_before(-1, 10) == [72, 0]


# -- FETCH -----------------------------------------------------------------------------


def test_fetch_never_crosses_a_segment(make_log: Callable[..., Log]) -> None:
    log = three_segments(make_log)
    assert log.read(0, 10_000) == E36 * 3
    assert log.read(100, 10_000) == (E36 * 3)[100:]  # only the rest of segment 0
    assert log.read(108, 10_000) == E36 * 3  # a segment's start reads that segment
    assert log.read(216, 10_000) == E24
    assert log.read(230, 10_000) == E24[14:]
    assert log.read(108, 40) == E36 + E36[:4]  # max_size cuts mid-message


def test_fetch_offset_boundaries(make_log: Callable[..., Log]) -> None:
    log = make_log()
    log.append(E36 * 2, 2)
    assert log.read(72, 100) == b""  # exactly the flushed end
    for offset in (73, 1000, -1, -72):
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read(offset, 100)
        assert info.value.offset == offset
    assert log.read(3, 5) == (E36 * 2)[3:8]  # mid-message: raw bytes, no check
    assert log.read(0, 0) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(73, 0)  # the range check comes first


def test_fetch_of_an_empty_partition(make_log: Callable[..., Log]) -> None:
    log = make_log()
    assert log.read(0, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)


def test_visibility_is_capped_at_the_flushed_end(make_log: Callable[..., Log]) -> None:
    log = make_log(flush_interval_messages=3)
    log.append(E36, 1)
    log.append(E36, 1)
    assert log.log_end_offset == 72
    assert log.flushed_end_offset == 0
    assert log.read(0, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(36, 1000)
    assert log.offsets_before(-1, 10) == [0]
    log.append(E36, 1)
    assert log.flushed_end_offset == 108
    assert log.read(0, 1000) == E36 * 3
    assert log.offsets_before(-1, 10) == [108, 0]
    assert log.unflushed_messages == 0


def test_flush_counts_messages_not_appends(make_log: Callable[..., Log]) -> None:
    log = make_log(flush_interval_messages=3)
    log.append(E36 * 2, 2)
    assert log.flushed_end_offset == 0
    log.append(E36 * 2, 2)
    assert log.flushed_end_offset == 144


def test_flush_by_time(make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log(flush_interval_messages=500, flush_interval_ms=1000)
    log.append(E36, 1)
    assert not log.maybe_flush_by_time(clock.ms + 999)
    assert log.flushed_end_offset == 0
    assert log.flush_due(clock.ms + 1000)
    assert log.maybe_flush_by_time(clock.ms + 1000)
    assert log.flushed_end_offset == 36
    clock.advance_ms(5000)
    assert not log.maybe_flush_by_time(clock.ms)  # nothing unflushed
    log.append(E36, 1)
    assert log.maybe_flush_by_time(clock.ms + 1)  # the last flush was long ago


def test_fsync_paths(tmp_path: Path, clock: Clock) -> None:
    config = LogConfig(flush_interval_messages=500, segment_bytes=50, retention_bytes=0)
    log = Log(tmp_path / "t-0", config, clock=clock)
    log.append(E36, 1)
    log.flush()
    assert log.read(0, 100) == E36
    log.append(E36, 1)
    log.append(E36, 1)  # the roll syncs the finished segment first
    assert log.flushed_end_offset == 72
    log.flush()
    assert log.flushed_end_offset == 108
    assert log.delete_old_segments(clock.ms) == 2  # everything: roll (synced), then delete
    assert [(s.start, s.size) for s in log.segments] == [(108, 0)]
    log.close()


def test_try_append_leaves_a_roll_that_must_sync_to_the_caller(
    tmp_path: Path, clock: Clock
) -> None:
    """A caller on an event loop uses try_append; when the finished segment of a due
    roll still needs its fsync, nothing happens and the caller appends from a thread."""
    config = LogConfig(flush_interval_messages=500, segment_bytes=50)
    log = Log(tmp_path / "t-0", config, clock=clock)
    assert log.try_append(E36, 1) == (0, 36)
    assert log.try_append(E36, 1) == (36, 72)
    assert log.try_append(E36, 1) is None  # 72 > 50: a roll, and 72 bytes unsynced
    assert log.log_end_offset == 72
    assert log.append(E36, 1) == (72, 108)  # syncs, rolls, appends
    assert log.try_append(E36, 1) == (108, 144)  # the new segment: no roll due
    no_fsync = Log(tmp_path / "u-0", LogConfig(fsync=False, segment_bytes=50), clock=clock)
    for i in range(4):
        assert no_fsync.try_append(E36, 1) == (36 * i, 36 * i + 36)  # nothing to sync
    log.close()
    no_fsync.close()


def test_flush_in_a_thread_while_appending(make_log: Callable[..., Log]) -> None:
    log = make_log(flush_interval_messages=1_000_000)
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            log.flush()

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(300):
            log.append(encode_message_set([b"m%d" % i]), 1)
            log.read(0, 1 << 20)
    finally:
        stop.set()
        thread.join()
    log.flush()
    values = [m.value for m in decode_message_set(log.read(0, 1 << 20)).messages]
    assert values == [b"m%d" % i for i in range(300)]


# -- OFFSETS ---------------------------------------------------------------------------


def test_offsets_latest_and_earliest_shape(make_log: Callable[..., Log]) -> None:
    log = three_segments(make_log)
    assert log.offsets_before(-1, 10) == [240, 216, 108, 0]
    assert log.offsets_before(-1, 1) == [240]
    assert log.offsets_before(-1, 2) == [240, 216]
    assert log.offsets_before(-2, 10) == [0]
    assert log.offsets_before(-1, 0) == []
    with pytest.raises(ValueError, match="max_offsets"):
        log.offsets_before(-1, -1)


def test_offsets_by_time(make_log: Callable[..., Log], clock: Clock) -> None:
    log = three_segments(make_log)
    paths = [s.path for s in log.segments]
    base = clock.ms - 10 * HOUR_MS
    for i, path in enumerate(paths):
        set_mtime(path, base + i * HOUR_MS)
    assert log.offsets_before(base - 1, 10) == []
    assert log.offsets_before(base, 10) == [0]
    assert log.offsets_before(base + HOUR_MS + 5, 10) == [108, 0]
    assert log.offsets_before(base + 5 * HOUR_MS, 10) == [216, 108, 0]
    assert log.offsets_before(base + 5 * HOUR_MS, 2) == [216, 108]
    # The log-end entry carries "now", so it only counts for a time >= now.
    assert log.offsets_before(clock.ms - 1, 10) == [216, 108, 0]
    assert log.offsets_before(clock.ms, 10) == [240, 216, 108, 0]
    assert log.offsets_before(-3, 10) == []  # just a time nothing is before
    assert log.offsets_before(clock.ms, 10, now_ms=clock.ms + 1) == [216, 108, 0]


def test_offsets_of_an_empty_partition(make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log()
    set_mtime(log.segments[0].path, clock.ms - 1000)
    assert log.offsets_before(-1, 10) == [0]
    assert log.offsets_before(-2, 10) == [0]
    assert log.offsets_before(clock.ms, 10) == [0]
    assert log.offsets_before(clock.ms - 2000, 10) == []


# -- recovery --------------------------------------------------------------------------


def _flip_last_crc(path: Path, entry_start: int) -> None:
    with path.open("r+b") as f:
        f.seek(entry_start + 4 + 2)  # size, magic, attributes, then the CRC
        byte = f.read(1)
        f.seek(entry_start + 4 + 2)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize(
    ("damage", "expected_end"),
    [
        ("garbage", 108),
        ("partial_entry", 108),
        ("flipped_crc", 72),
        ("zeros", 108),
        ("short_tail", 108),
        ("oversized_length", 108),
    ],
)
def test_recovery_truncates_a_torn_newest_segment(
    make_log: Callable[..., Log], impl: ModuleType, damage: str, expected_end: int
) -> None:
    log = make_log(segment_bytes=140)
    for _ in range(4):
        log.append(E36, 1)
    for _ in range(3):
        log.append(E36, 1)  # segment 144: three entries
    assert [s.start for s in log.segments] == [0, 144]
    path = log.segments[-1].path
    log.close()
    if damage == "flipped_crc":
        _flip_last_crc(path, 72)
    else:
        tail = {
            "garbage": b"\xde\xad\xbe\xef" * 8,
            "partial_entry": E36[:20],
            "zeros": bytes(4096),
            "short_tail": b"\x00\x00\x00",
            "oversized_length": struct.pack(">i", 1 << 30) + b"\x01\x00" + bytes(20),
        }[damage]
        with path.open("ab") as f:
            f.write(tail)
    log = make_log(segment_bytes=140)
    assert path.stat().st_size == expected_end
    assert log.log_end_offset == log.flushed_end_offset == 144 + expected_end
    assert log.read(144, 10_000) == E36 * (expected_end // 36)
    assert log.append(E36, 1) == (144 + expected_end, 180 + expected_end)
    assert len(decode_message_set(log.read(144, 10_000)).messages) == expected_end // 36 + 1


def test_recovery_in_windows_smaller_than_entries(
    make_log: Callable[..., Log], impl: ModuleType
) -> None:
    log = make_log()
    sizes = [5, 3000, 1, 70_000, 10, 200]
    for n in sizes:
        log.append(entry(n), 1)
    good_end = log.log_end_offset
    path = log.segments[-1].path
    log.close()
    with path.open("ab") as f:
        f.write(entry(100_000)[:50_000])  # a big torn entry
    log = make_log(recovery_window=64)
    assert log.log_end_offset == good_end
    messages = decode_message_set(log.read(0, 1 << 20)).messages
    assert [len(m.value) for m in messages] == sizes


def test_recovery_stops_at_a_bad_entry_past_the_first_window(
    make_log: Callable[..., Log], impl: ModuleType
) -> None:
    log = make_log()
    for _ in range(20):
        log.append(E36, 1)
    path = log.segments[-1].path
    log.close()
    _flip_last_crc(path, 36 * 13)
    log = make_log(recovery_window=100)
    assert log.log_end_offset == 36 * 13


def test_recovery_keeps_a_codec_3_entry_with_a_good_crc(
    make_log: Callable[..., Log], impl: ModuleType
) -> None:
    # 0.7.2's recovery checks size and CRC only; an undefined codec is the reader's problem.
    payload = b"abc"
    odd = struct.pack(">iBBI", 6 + len(payload), 1, 3, zlib.crc32(payload)) + payload
    log = make_log()
    log.append(E36 + odd + E36, 3)
    log.close()
    log = make_log()
    assert log.log_end_offset == 72 + len(odd)


def test_older_segments_are_trusted(make_log: Callable[..., Log]) -> None:
    log = three_segments(make_log)
    first = log.segments[0].path
    log.close()
    _flip_last_crc(first, 72)
    log = make_log(segment_bytes=100)
    assert [(s.start, s.size) for s in log.segments] == [(0, 108), (108, 108), (216, 24)]


def test_segments_with_a_gap_are_refused(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / segment_file_name(0)).write_bytes(E36)
    (directory / segment_file_name(40)).write_bytes(E36)
    with pytest.raises(CorruptLogError, match="do not follow"):
        Log(directory, LogConfig())


def test_bad_segment_name_is_refused_and_other_files_ignored(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "notes.txt").write_text("ignored")
    (directory / segment_file_name(0)).write_bytes(E36)
    log = Log(directory, LogConfig(fsync=False))
    assert log.log_end_offset == 36
    log.close()
    (directory / "abc.kafka").write_bytes(b"")
    with pytest.raises(CorruptLogError):
        Log(directory, LogConfig())


def test_data_survives_close_and_reopen(make_log: Callable[..., Log]) -> None:
    log = make_log(flush_interval_messages=500)
    log.append(E36 * 3, 3)
    assert log.flushed_end_offset == 0
    log.close()
    assert log.closed
    log.flush()  # a no-op once closed
    with pytest.raises(LogClosedError):
        log.read(0, 100)
    with pytest.raises(LogClosedError):
        log.append(E36, 1)
    log = make_log(flush_interval_messages=500)
    assert log.flushed_end_offset == 108
    assert log.read(0, 1000) == E36 * 3


def test_a_crash_keeps_written_but_unflushed_data(make_log: Callable[..., Log]) -> None:
    log = make_log(flush_interval_messages=500)
    log.append(E36 * 2, 2)
    log.abandon()
    log = make_log(flush_interval_messages=500)
    assert log.flushed_end_offset == 72  # after recovery everything on disk is flushed


# -- retention -------------------------------------------------------------------------


def test_retention_by_age(make_log: Callable[..., Log], clock: Clock) -> None:
    log = three_segments(make_log, retention_ms=6 * HOUR_MS)
    paths = [s.path for s in log.segments]
    set_mtime(paths[0], clock.ms - 10 * HOUR_MS)
    set_mtime(paths[1], clock.ms - 5 * HOUR_MS)
    set_mtime(paths[2], clock.ms - 7 * HOUR_MS)  # not leading: never reached
    assert log.delete_old_segments(clock.ms) == 1
    assert not paths[0].exists()
    assert log.start_offset == 108
    for offset in (0, 107):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset, 100)
    assert log.read(108, 1000) == E36 * 3
    assert log.offsets_before(-2, 10) == [108]
    assert log.offsets_before(-1, 10) == [240, 216, 108]
    assert log.delete_old_segments(clock.ms) == 0


def test_retention_deleting_everything_starts_at_the_old_end(
    make_log: Callable[..., Log], clock: Clock, tmp_path: Path
) -> None:
    log = three_segments(make_log, retention_ms=HOUR_MS)
    for segment in log.segments:
        set_mtime(segment.path, clock.ms - 2 * HOUR_MS)
    assert log.delete_old_segments(clock.ms) == 3
    assert sorted(p.name for p in (tmp_path / "test-0").iterdir()) == [segment_file_name(240)]
    assert log.start_offset == log.log_end_offset == 240
    assert log.read(240, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.offsets_before(-1, 10) == [240]
    assert log.offsets_before(-2, 10) == [240]
    assert log.append(E36, 1) == (240, 276)
    assert log.read(240, 100) == E36


def test_retention_keeps_an_empty_active_segment_and_touches_it(
    make_log: Callable[..., Log], clock: Clock
) -> None:
    log = make_log(segment_bytes=0, retention_ms=HOUR_MS)
    log.append(E36, 1)
    log.append(b"", 0)  # rolls: segments 0 (36 bytes) and 36 (empty)
    for segment in log.segments:
        set_mtime(segment.path, clock.ms - 2 * HOUR_MS)
    assert log.delete_old_segments(clock.ms) == 1
    [only] = log.segments
    assert (only.start, only.size, only.mtime_ms) == (36, 0, clock.ms)
    assert log.delete_old_segments(clock.ms) == 0


def test_retention_of_an_untouched_empty_log_deletes_nothing(
    make_log: Callable[..., Log], clock: Clock
) -> None:
    log = make_log(retention_ms=HOUR_MS, retention_bytes=0)
    set_mtime(log.segments[0].path, clock.ms - 2 * HOUR_MS)
    assert log.delete_old_segments(clock.ms) == 0
    assert [s.start for s in log.segments] == [0]


@pytest.mark.parametrize(
    ("limit", "deleted", "starts"),
    [
        (-1, 0, [0, 108, 216]),
        (241, 0, [0, 108, 216]),
        (200, 0, [0, 108, 216]),  # deleting 108 would leave less than the limit
        (132, 1, [108, 216]),  # exactly the limit remains
        (24, 2, [216]),
        (0, 3, [240]),  # everything: a fresh segment at the old end
    ],
)
def test_retention_by_size(
    make_log: Callable[..., Log], clock: Clock, limit: int, deleted: int, starts: list[int]
) -> None:
    log = three_segments(make_log, retention_bytes=limit)
    assert log.delete_old_segments(clock.ms) == deleted
    assert [s.start for s in log.segments] == starts
    assert log.log_end_offset == 240


def test_size_retention_uses_flushed_sizes(make_log: Callable[..., Log], clock: Clock) -> None:
    log = make_log(segment_bytes=50, flush_interval_messages=500, retention_bytes=0)
    log.append(E36 * 2, 2)
    log.append(E36, 1)  # rolls; segment 72 holds 36 unflushed bytes
    assert log.delete_old_segments(clock.ms) == 1
    assert [(s.start, s.size, s.flushed_size) for s in log.segments] == [(72, 36, 0)]


# -- LogManager ------------------------------------------------------------------------


def make_manager(log_dir: Path, clock: Clock, **fields: int) -> LogManager:
    counts = {"three": 3, "my-dashed-topic": 5}
    config = LogConfig(fsync=False, **{"flush_interval_messages": 1, **fields})
    return LogManager(
        log_dir,
        partitions_for=lambda topic: counts.get(topic, 1),
        config_for=lambda topic: config,
        clock=clock,
    )


def test_manager_creates_and_reloads_logs(tmp_path: Path, clock: Clock) -> None:
    log_dir = tmp_path / "logs"
    manager = make_manager(log_dir, clock)
    assert manager.topics() == set()
    log, created = manager.get_or_create_log("my-dashed-topic", 4)
    assert created
    assert manager.get_or_create_log("my-dashed-topic", 4) == (log, False)
    log.append(E36, 1)
    manager.get_or_create_log("three", 0)
    assert (log_dir / "my-dashed-topic-4" / segment_file_name(0)).is_file()
    manager.close()

    (log_dir / "stray-file").write_text("skipped like 0.7.2 does")
    manager = make_manager(log_dir, clock)
    assert manager.topics() == {"my-dashed-topic", "three"}
    reloaded = manager.get_log("my-dashed-topic", 4)
    assert reloaded is not None
    assert (reloaded.topic, reloaded.partition) == ("my-dashed-topic", 4)
    assert reloaded.read(0, 100) == E36
    assert manager.get_log("three", 1) is None
    assert len(manager.all_logs()) == 2
    manager.close()


def test_manager_partition_checks(tmp_path: Path, clock: Clock) -> None:
    manager = make_manager(tmp_path, clock)
    for partition in (-1, 3, 100):
        with pytest.raises(InvalidPartitionError):
            manager.get_log("three", partition)
        with pytest.raises(InvalidPartitionError):
            manager.get_or_create_log("three", partition)
    with pytest.raises(InvalidPartitionError, match=r"valid partitions are 0\.\.2$"):
        manager.get_log("three", 3)
    with pytest.raises(InvalidPartitionError, match=r"the only valid partition is 0$"):
        manager.get_log("other", 1)
    with pytest.raises(InvalidTopicError):
        manager.get_log("", 0)
    assert manager.get_log("three", 2) is None
    assert list(tmp_path.iterdir()) == []  # a lookup creates nothing
    manager.close()


def test_manager_refuses_an_unparsable_directory(tmp_path: Path, clock: Clock) -> None:
    (tmp_path / "lost+found").mkdir()
    with pytest.raises(CorruptLogError):
        make_manager(tmp_path, clock)


def test_manager_flushes_and_cleans_up(tmp_path: Path, clock: Clock) -> None:
    manager = make_manager(
        tmp_path, clock, flush_interval_messages=500, flush_interval_ms=1000, retention_ms=HOUR_MS
    )
    busy, _ = manager.get_or_create_log("three", 0)
    idle, _ = manager.get_or_create_log("three", 1)
    busy.append(E36, 1)
    assert manager.due_for_flush(clock.ms + 999) == []
    assert manager.due_for_flush(clock.ms + 1000) == [busy]
    assert busy.flushed_end_offset == 0
    assert manager.flush_due(clock.ms + 1000) == [busy]
    assert busy.flushed_end_offset == 36
    assert manager.due_for_flush(clock.ms + 5000) == []

    for log in (busy, idle):
        set_mtime(log.segments[0].path, clock.ms - 2 * HOUR_MS)
    assert manager.cleanup(clock.ms) == 1  # busy rolls to 36; idle is empty and kept
    assert busy.start_offset == 36
    assert idle.start_offset == 0
    manager.close()

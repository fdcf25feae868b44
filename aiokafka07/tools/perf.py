"""What the performance commands share: 0.7.2's ``PerfConfig`` options, its date format,
and its CSV rows.

``producer-perf``, ``consumer-perf`` and ``simple-consumer-perf`` take the options of
0.7.2's ProducerPerformance, ConsumerPerformance and SimpleConsumerPerformance and print
the same comma-separated columns, with the same number formats, so their output can be
compared with the Java tools' line by line. As in 0.7.2:

* ``MB`` is 1024 * 1024 bytes, and the bytes counted are message *payloads*. A 0.7 log,
  and so its offsets (byte positions), also holds a 10-byte entry header per message (4
  bytes of length, magic, attributes, CRC), and compressed sets are counted by what is
  inside them, so the offsets a run moves differ from its MB column;
* rates are over the wall-clock time between the row's start and end;
* ``--reporting-interval`` is a number of messages, ``--date-format`` a
  ``java.text.SimpleDateFormat`` pattern.
"""

from __future__ import annotations

import argparse
import datetime
import re
import time
from collections.abc import Callable, Sequence

from ..cluster import Cluster, StaticCluster, ZooKeeperCluster
from ..protocol import Compression
from .common import (
    Progress,
    UsageError,
    add_progress_option,
    parse_brokers,
    positive_int,
)

__all__ = [
    "MIB",
    "Meter",
    "add_fetch_size",
    "add_perf_options",
    "add_sender_options",
    "brokerinfo_cluster",
    "compression_codec",
    "java_date_format",
    "perf_progress",
    "rate",
]

MIB = 1024 * 1024

#: 0.7.2's default ``--date-format``.
JAVA_DATE_FORMAT = "yyyy-MM-dd HH:mm:ss:SSS"

#: Formats epoch seconds as a ``--date-format`` says.
DateFormat = Callable[[float], str]

_TOKEN = re.compile(r"'([^']*)'|([A-Za-z])\2*|[^A-Za-z']+")


def java_date_format(pattern: str) -> Callable[[float], str]:
    """A formatter of epoch seconds (local time) for a ``SimpleDateFormat`` pattern.

    Supported letters: ``y M d H h m s S a E Z z`` (``MMM`` / ``MMMM`` and ``E`` / ``EEEE``
    as names); text in single quotes is literal, ``''`` is a quote. Other letters raise
    ValueError, rather than printing something unlike the Java tool.
    """
    parts: list[Callable[[datetime.datetime], str]] = []
    for match in _TOKEN.finditer(pattern):
        quoted, letter = match.group(1), match.group(2)
        text = match.group(0)
        if quoted is not None:
            parts.append(_literal(quoted or "'"))
        elif letter is None:
            parts.append(_literal(text))
        else:
            parts.append(_field(letter, len(text)))
    if "".join(m.group(0) for m in _TOKEN.finditer(pattern)) != pattern:
        raise ValueError(f"date format {pattern!r} has an unterminated quote")

    def format_time(seconds: float) -> str:
        moment = datetime.datetime.fromtimestamp(seconds).astimezone()
        return "".join(part(moment) for part in parts)

    return format_time


def _literal(text: str) -> Callable[[datetime.datetime], str]:
    return lambda _: text


def _field(letter: str, width: int) -> Callable[[datetime.datetime], str]:
    def number(value: Callable[[datetime.datetime], int]) -> Callable[[datetime.datetime], str]:
        return lambda moment: str(value(moment)).zfill(width)

    if letter == "y":
        if width == 2:
            return lambda moment: f"{moment.year % 100:02d}"
        return number(lambda moment: moment.year)
    if letter == "M":
        if width >= 3:
            return lambda moment: moment.strftime("%B" if width >= 4 else "%b")
        return number(lambda moment: moment.month)
    if letter == "E":
        return lambda moment: moment.strftime("%A" if width >= 4 else "%a")
    if letter == "S":
        # Java: the milliseconds as a number, zero-padded to the letter count.
        return number(lambda moment: moment.microsecond // 1000)
    simple: dict[str, Callable[[datetime.datetime], int]] = {
        "d": lambda moment: moment.day,
        "H": lambda moment: moment.hour,
        "h": lambda moment: moment.hour % 12 or 12,
        "m": lambda moment: moment.minute,
        "s": lambda moment: moment.second,
    }
    if letter in simple:
        return number(simple[letter])
    if letter == "a":
        return lambda moment: "AM" if moment.hour < 12 else "PM"
    if letter == "Z":
        return lambda moment: moment.strftime("%z")
    if letter == "z":
        return lambda moment: moment.strftime("%Z")
    raise ValueError(
        f"date format letter {letter!r} is not supported (use y M d H h m s S a E Z z)"
    )


def _date_format(text: str) -> Callable[[float], str]:
    try:
        return java_date_format(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_perf_options(parser: argparse.ArgumentParser, *, messages_required: bool) -> None:
    """0.7.2's ``PerfConfig``: ``--messages``, ``--reporting-interval``, ``--date-format``,
    ``--show-detailed-stats``, ``--hide-header``."""
    group = parser.add_argument_group("reporting (0.7.2 PerfConfig)")
    group.add_argument(
        "--messages",
        type=positive_int,
        required=messages_required,
        metavar="COUNT",
        help="the number of messages to send" if messages_required else
        "stop after this many messages (default: all there are)",
    )  # fmt: skip
    group.add_argument(
        "--reporting-interval",
        type=positive_int,
        default=5000,
        metavar="MESSAGES",
        help="with --show-detailed-stats, a row every this many messages (5000)",
    )
    group.add_argument(
        "--date-format",
        type=_date_format,
        default=java_date_format(JAVA_DATE_FORMAT),
        metavar="PATTERN",
        help=f"a java.text.SimpleDateFormat pattern for the times ({JAVA_DATE_FORMAT})",
    )
    group.add_argument(
        "--show-detailed-stats",
        action="store_true",
        help="a row per reporting interval (per thread) instead of one summary row",
    )
    group.add_argument("--hide-header", action="store_true", help="no header row")
    add_progress_option(group)


def compression_codec(text: str) -> Compression:
    """``--compression-codec``: 0.7.2's number (0, 1, 2) or a name."""
    try:
        return Compression.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_sender_options(parser: argparse.ArgumentParser, *, threads: int, threads_help: str) -> None:
    """``--batch-size``, ``--threads`` and ``--compression-codec``, as 0.7.2's
    ProducerPerformance and ReplayLogProducer take them."""
    parser.add_argument(
        "--batch-size", type=positive_int, default=200, metavar="N", help="messages per batch (200)"
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=threads,
        metavar="N",
        help=f"{threads_help} ({threads})",
    )
    parser.add_argument(
        "--compression-codec",
        type=compression_codec,
        default=Compression.NONE,
        metavar="CODEC",
        help="compress what is sent: 0 (none, default), 1 (gzip), 2 (snappy), or the name",
    )


def add_fetch_size(parser: argparse.ArgumentParser, what: str) -> None:
    """``--fetch-size`` (0.7.2's 1 MiB default)."""
    parser.add_argument(
        "--fetch-size",
        type=positive_int,
        default=1048576,
        metavar="BYTES",
        help=f"{what} (1048576)",
    )


def perf_progress(args: argparse.Namespace, verb: str) -> Progress:
    """The stderr status line of a run (``--progress``; by default on a terminal)."""
    return Progress(verb, enabled=args.progress)


def rate(amount: float, seconds: float) -> float:
    """``amount`` per second; 0 for an empty interval (0.7.2 prints NaN or Infinity)."""
    return amount / seconds if seconds > 0 else 0.0


class Meter:
    """Messages and payload bytes of one thread (or of the whole run), and the rows 0.7.2
    prints for them: a summary, or detailed statistics every ``interval`` messages.

    Times are taken twice: ``time.time()`` for the dates printed, ``time.perf_counter()``
    for the durations the rates divide by.
    """

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.messages = 0
        self.bytes = 0
        self.started = time.perf_counter()
        self.started_at = time.time()
        self._mark = (self.started, 0, 0)
        self._next_report = interval

    def restart(self) -> None:
        """Start the clock now (what came before was set-up, not measured)."""
        self.started = time.perf_counter()
        self.started_at = time.time()
        self._mark = (self.started, self.messages, self.bytes)

    def add(self, messages: int, size: int) -> bool:
        """Count; True when a reporting interval was completed (time for a detail row)."""
        self.messages += messages
        self.bytes += size
        if self.messages >= self._next_report:
            self._next_report = (self.messages // self.interval + 1) * self.interval
            return True
        return False

    @property
    def until_report(self) -> int:
        """How many more messages complete the current reporting interval."""
        return self._next_report - self.messages

    def detail_row(
        self,
        date_format: DateFormat,
        fields: Sequence[object],
        *,
        overall: bool = False,
        mb_decimals: int = 4,
    ) -> str:
        """``time, *fields, MB, MB.sec, nMsg, nMsg.sec``: the totals so far, and the rates
        since the previous detail row (``overall``: since the start)."""
        now = time.perf_counter()
        then, messages, size = (self.started, 0, 0) if overall else self._mark
        self._mark = (now, self.messages, self.bytes)
        elapsed = now - then
        return _row(
            [date_format(time.time()), *fields],
            self.megabytes,
            rate((self.bytes - size) / MIB, elapsed),
            self.messages,
            rate(self.messages - messages, elapsed),
            mb_decimals,
        )

    def summary_row(
        self,
        date_format: DateFormat,
        fields: Sequence[object],
        *,
        elapsed: float | None = None,
        mb_decimals: int = 4,
    ) -> str:
        """``start.time, end.time, *fields, MB, MB.sec, nMsg, nMsg.sec`` over ``elapsed``
        seconds from the start (default: until now)."""
        if elapsed is None:
            elapsed = time.perf_counter() - self.started
        times = [date_format(self.started_at), date_format(self.started_at + elapsed)]
        return _row(
            [*times, *fields],
            self.megabytes,
            rate(self.megabytes, elapsed),
            self.messages,
            rate(self.messages, elapsed),
            mb_decimals,
        )

    @property
    def megabytes(self) -> float:
        return self.bytes / MIB


def _row(
    head: Sequence[object],
    megabytes: float,
    mb_per_second: float,
    messages: int,
    per_second: float,
    mb_decimals: int,
) -> str:
    """0.7.2's number formats: MB with 2 (producer) or 4 decimals, rates with 4."""
    tail = [
        f"{megabytes:.{mb_decimals}f}",
        f"{mb_per_second:.4f}",
        str(messages),
        f"{per_second:.4f}",
    ]
    return ", ".join([*map(str, head), *tail])


def parse_brokerinfo(text: str) -> tuple[str | None, str | None]:
    """0.7.2's ``--brokerinfo``: ``zk.connect=HOST:PORT[/CHROOT]`` or
    ``broker.list=ID:HOST:PORT,...``, as (zookeeper, brokers)."""
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals or not value.strip() or key not in ("zk.connect", "broker.list"):
        raise UsageError(
            f"--brokerinfo {text!r} is neither zk.connect=HOST:PORT nor "
            "broker.list=ID:HOST:PORT,..."
        )
    value = value.strip()
    return (value, None) if key == "zk.connect" else (None, value)


def brokerinfo_cluster(args: argparse.Namespace, *, source: str | None = None) -> Cluster:
    """The cluster to produce to: ``--brokerinfo`` (0.7.2's form) or ``--brokers``, else
    ``source`` (a command reading from ``--zookeeper`` writes back there by default) or,
    for a command with no source, ``--zookeeper``. Exactly one may be given."""
    choices = {"--brokerinfo": args.brokerinfo, "--brokers": args.brokers}
    if source is None:
        choices["--zookeeper"] = args.zookeeper
    given = [name for name, value in choices.items() if value]
    if len(given) != 1 and not (source and not given):
        raise UsageError(f"give {' or '.join(choices)} (one of them)")
    zookeeper, brokers = source, args.brokers
    if args.brokerinfo:
        zookeeper, brokers = parse_brokerinfo(args.brokerinfo)
    elif source is None:
        zookeeper = args.zookeeper
    if brokers:
        return StaticCluster(parse_brokers(brokers))
    assert zookeeper is not None
    return ZooKeeperCluster(zookeeper, connection_timeout_ms=args.zk_timeout_ms)

"""What the console tools share: cluster options, discovery, tables, and I/O that never
stalls the event loop (progress displays are :mod:`.progress`'s; ``Progress`` and its
helpers ``human_bytes``, ``plural`` and ``rate`` are re-exported here).

Reading stdin and writing stdout happen in daemon threads: a terminal or a slow pipe
(``| less``) can block for as long as it likes while the event loop keeps ZooKeeper
sessions alive and connections served, and Ctrl-C still ends the process (a daemon
thread stuck in ``read`` does not keep it alive, unlike the default executor).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import queue
import random
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import IO, Any, TypeVar

from ..cluster import Cluster, StaticCluster, parse_broker_list
from ..connection import BrokerAddress, BrokerConnection
from ..errors import InvalidConfigError, KafkaConnectionError
from ..records import TopicPartition
from ..znodes import BROKER_IDS, GroupRegistry, read_brokers, read_topic_registrations, read_topics
from ..zookeeper import ZooKeeper, parse_connect_string
from .progress import Progress, human_bytes, plural, rate

T = TypeVar("T")

__all__ = [
    "SECOND_CTRL_C",
    "ChunkReader",
    "CommandError",
    "Output",
    "Progress",
    "UsageError",
    "add_cluster_options",
    "add_deprecated_seconds",
    "add_progress_option",
    "add_zk_timeout",
    "connect_string",
    "delete_tree",
    "describe_exit_status",
    "format_table",
    "fresh_group",
    "human_bytes",
    "in_daemon_thread",
    "no_partitions_error",
    "non_negative_int",
    "parse_broker_partitions",
    "parse_brokers",
    "parse_settings",
    "plural",
    "positive_float",
    "positive_int",
    "rate",
    "read_brokers",
    "refuse_live_members",
    "require_a_reachable_broker",
    "require_one_topic_selection",
    "require_zookeeper",
    "silence_stdout",
    "stop_acknowledged",
    "topic_partitions",
    "zookeeper_session",
]


class CommandError(Exception):
    """A failure the user can act on; the dispatcher prints it as one line, exit 1."""


class UsageError(CommandError):
    """Arguments that do not fit together (or a required one missing): the dispatcher
    prints the usage and the error, exit status 2, as argparse does for its own checks."""


# -- argument types --------------------------------------------------------------------


def connect_string(text: str) -> str:
    """The type of every ``--zookeeper`` option: a connect string as the library's one
    parser accepts it, refused when the command line is read (exit status 2, with what is
    wrong and the expected form) rather than after a connection timeout."""
    try:
        parse_connect_string(text)
    except InvalidConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer ≥ 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def parse_settings(items: Sequence[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` (repeatable) as ``server.properties`` keys and values; a later
    key overrides an earlier one."""
    settings: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(f"--set {item!r} is not KEY=VALUE")
        settings[key.strip()] = value.strip()
    return settings


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


#: Namespace attribute where deprecated options leave their warnings, for the
#: dispatcher to log once logging is configured (:func:`aiokafka07.cli.main`).
DEPRECATIONS = "deprecated_options"


class _SecondsToMs(argparse.Action):
    """A deprecated duration option in seconds: stores the value in milliseconds where
    its ``*-ms`` replacement stores it, and leaves a warning naming the replacement."""

    def __init__(self, option_strings: list[str], dest: str, *, replacement: str, **kw: Any):
        super().__init__(option_strings, dest, **kw)
        self.replacement = replacement

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        ms = round(values * 1000)
        setattr(namespace, self.dest, ms)
        warnings = getattr(namespace, DEPRECATIONS, None) or []
        warnings.append(
            f"{option_string} (seconds) is deprecated and goes in the next release: "
            f"use {self.replacement} {ms}"
        )
        setattr(namespace, DEPRECATIONS, warnings)


def add_deprecated_seconds(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, old: str, replacement: str
) -> None:
    """``old``, a duration option in seconds kept for one release beside its ``*-ms``
    ``replacement`` (added before, whose destination it shares): hidden from ``--help``,
    still accepted, converted to milliseconds, with a warning when used. Given both, the
    later one on the command line wins, as for a repeated option."""
    dest = replacement.lstrip("-").replace("-", "_")
    parser.add_argument(
        old,
        dest=dest,
        type=positive_float,
        action=_SecondsToMs,
        replacement=replacement,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


def add_zk_timeout(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--zk-timeout-ms``: how long a ZooKeeper connection may take before the tool gives
    up (``--zk-timeout SECONDS``, deprecated, still accepted)."""
    parser.add_argument(
        "--zk-timeout-ms",
        type=positive_int,
        default=5000,
        metavar="MS",
        help="give up connecting to ZooKeeper after this many milliseconds (5000)",
    )
    add_deprecated_seconds(parser, "--zk-timeout", "--zk-timeout-ms")


def add_cluster_options(parser: argparse.ArgumentParser, *, brokers: bool = True) -> None:
    """``--zookeeper`` (and ``--brokers`` where a static list can do) plus ``--zk-timeout-ms``.

    Which of them is required is checked by the command (argparse cannot express "one
    of" together with defaults); :func:`zookeeper_session` refuses a missing one.
    """
    group = parser.add_argument_group("cluster")
    group.add_argument(
        "-z",
        "--zookeeper",
        metavar="HOST[:PORT][,...][/CHROOT]",
        type=connect_string,
        help="ZooKeeper of the cluster (0.7.2 zk.connect; port 2181 when none is given)",
    )
    if brokers:
        group.add_argument(
            "-b",
            "--brokers",
            metavar="[ID:]HOST:PORT,...",
            help="a static broker list instead of ZooKeeper (0.7.2 broker.list); "
            "entries without ID are numbered 0, 1, ... in order",
        )
    add_zk_timeout(group)


def zookeeper_session(args: argparse.Namespace, connect: str | None = None) -> ZooKeeper:
    """A (not yet started) session on ``connect`` or ``--zookeeper``, with ``--zk-timeout-ms``."""
    connect = connect or args.zookeeper
    if not connect:
        raise UsageError("--zookeeper is required")
    return ZooKeeper(connect, connection_timeout_ms=args.zk_timeout_ms)


def require_one_topic_selection(args: argparse.Namespace) -> None:
    """Refuse a command line that names TOPICs and a ``--whitelist`` / ``--blacklist``,
    or none of them (the tools that copy topics take exactly one way to choose them)."""
    if sum(bool(x) for x in (args.topics, args.whitelist, args.blacklist)) != 1:
        raise UsageError("give TOPICs, a --whitelist or a --blacklist (one of them)")


def parse_brokers(text: str) -> dict[int, BrokerAddress]:
    """``--brokers``: ``id:host:port`` entries (0.7.2 ``broker.list``) or plain
    ``host:port`` ones, which take their position in the list as id."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    numbered = [
        entry if entry.count(":") >= 2 else f"{i}:{entry}" for i, entry in enumerate(entries)
    ]
    try:
        return parse_broker_list(",".join(numbered))
    except ValueError as exc:
        raise UsageError(f"--brokers: {exc}") from None


def parse_broker_partitions(items: Sequence[str]) -> list[tuple[int, int]]:
    """``--broker-partition 0-1,1-0`` (repeatable) as sorted (broker, partition) pairs."""
    result: set[tuple[int, int]] = set()
    for item in items:
        for name in filter(None, (part.strip() for part in item.split(","))):
            try:
                tp = TopicPartition.parse("", name)
            except ValueError as exc:
                raise UsageError(f"--broker-partition: {exc}") from None
            result.add((tp.broker_id, tp.partition))
    return sorted(result)


# -- discovery through ZooKeeper ---------------------------------------------------------


async def topic_partitions(zk: ZooKeeper, topic: str) -> list[tuple[int, int]]:
    """Every (broker, partition) registered for ``topic``, numerically sorted."""
    registrations = await read_topic_registrations(zk, topic)
    return sorted((b, p) for b, count in registrations.items() for p in range(count))


async def no_partitions_error(zk: ZooKeeper, topic: str) -> CommandError:
    """The error for ``topic`` without registered partitions: where the tool looked
    (connect string and chroot) and what ZooKeeper holds there, read now (two reads of
    children): no broker at all points at the chroot, brokers without the topic at its
    name (a few registered topics are named)."""
    brokers = await read_brokers(zk)
    if not brokers:
        found = (
            f"no broker is registered there either ({BROKER_IDS} has no children). Check "
            "the chroot: brokers register under the chroot of their own zk.connect (at the "
            "root when it has none)"
        )
    else:
        topics = await read_topics(zk)
        shown = ", ".join(topics[:10]) + (f" and {len(topics) - 10} more" if topics[10:] else "")
        found = (
            f"{plural(len(brokers), 'broker')} registered there (ids "
            f"{', '.join(map(str, sorted(brokers)))}) but none has the topic (a broker "
            f"registers a topic at its first message); registered topics: {shown or 'none'}"
        )
    return CommandError(f"topic {topic} has no partitions registered in {zk.where}: {found}")


async def delete_tree(zk: ZooKeeper, path: str) -> None:
    """Delete ``path`` and everything below it (0.7.2 ``deletePathRecursive``)."""
    for child in await zk.get_children(path):
        await delete_tree(zk, f"{path}/{child}")
    await zk.delete(path)


async def require_a_reachable_broker(
    cluster: Cluster, option: str = "--brokers", connect_timeout_ms: float = 5000
) -> None:
    """A console producer with a static broker list (``--brokers``) fails at once, with
    one line, when none of its brokers accepts a connection: a wrong address or port
    more likely than an outage. (Once it runs, a producer rides out a broker's outage
    within its delivery timeout, retrying; a ZooKeeper view lists only registered, live
    brokers, and sending finds none there at once.)"""
    if not isinstance(cluster, StaticCluster):
        return
    errors = []
    for address in cluster.brokers.values():
        try:
            conn = await BrokerConnection.open(address, connect_timeout_ms=connect_timeout_ms)
        except KafkaConnectionError as exc:
            errors.append(str(exc))
            continue
        await conn.close()
        return
    raise CommandError(f"{'; '.join(errors)}: no broker of {option} answers; nothing was sent")


async def require_zookeeper(command: str, why: str) -> None:
    """Make sure Debian's zookeeper package (and Java) is here for a local ZooKeeper.

    When it is missing, it is installed with apt-get where that is possible (root on
    Debian), saying so first; anywhere else the command fails with one line saying what
    to run and ``why`` it is needed.
    """
    from ..testing.zookeeper_server import (
        ZooKeeperNotInstalled,
        can_install_zookeeper,
        ensure_zookeeper_installed,
    )

    try:
        ensure_zookeeper_installed(install=False)
        return
    except ZooKeeperNotInstalled:
        if not can_install_zookeeper():
            raise CommandError(
                f"ZooKeeper is not installed ({why}): run 'sudo apt-get install -y zookeeper' "
                "(Debian's package, which brings Java too), then start again"
            ) from None
    print(
        f"aiokafka07 {command}: installing Debian's zookeeper package with apt-get ({why}); "
        "this takes a minute or two, once",
        flush=True,
    )
    try:
        await asyncio.to_thread(ensure_zookeeper_installed)
    except ZooKeeperNotInstalled as exc:
        raise CommandError(" ".join(str(exc).split())) from None


# -- output formatting ---------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An aligned text table; None shows as ``-``, numeric columns are right-aligned."""
    text = [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    numeric = [
        all(isinstance(row[i], int) or row[i] is None for row in rows) and bool(rows)
        for i in range(len(headers))
    ]
    lines = []
    for row in [list(headers), *text]:
        cells = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# -- stdin / stdout through daemon threads ------------------------------------------------


class ChunkReader:
    """The chunks of a binary file as an async iterator, read in a daemon thread.

    At most ``queue_size`` chunks of up to ``chunk_size`` bytes wait at a time, so any
    input streams through in bounded memory. A chunk is whatever one read returned, so
    interactive input arrives line by line. The thread reads the file descriptor itself:
    a thread blocked inside a buffered reader would hold its lock, which the interpreter
    needs at exit (after Ctrl-C, say).
    """

    def __init__(self, file: IO[bytes], chunk_size: int = 1 << 18, queue_size: int = 4) -> None:
        self.file = file
        self.chunk_size = chunk_size
        self.queue_size = queue_size

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue(self.queue_size)
        fd = self.file.fileno()
        size = self.chunk_size

        def put(item: bytes | BaseException) -> bool:
            putting = chunks.put(item)
            try:
                asyncio.run_coroutine_threadsafe(putting, loop).result()
            except BaseException:  # the loop is closing: nobody reads any more
                putting.close()  # never scheduled, perhaps: no "never awaited" warning
                return False
            return True

        def work() -> None:
            try:
                while True:
                    data = os.read(fd, size)
                    if not put(data) or not data:
                        return
            except BaseException as exc:  # e.g. an I/O error: raised in the reader
                put(exc)

        threading.Thread(target=work, name="input", daemon=True).start()
        while True:
            item = await chunks.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return
            yield item


class Output:
    """stdout for bulk output, written by a daemon thread.

    :meth:`write` hands a block of bytes over and waits until it is written, so output
    keeps pace with the reader of the pipe (back-pressure) while the event loop keeps
    running. A reader that went away (``| head``) raises :class:`BrokenPipeError`. The
    thread writes to the file descriptor itself, holding no lock of ``sys.stdout`` that
    the interpreter would need at exit.
    """

    def __init__(self, fd: int | None = None) -> None:
        self.fd = sys.stdout.fileno() if fd is None else fd
        self._queue: queue.SimpleQueue[tuple[bytes, asyncio.Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self.broken = False

    def _work(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            data, future = item
            error: BaseException | None = None
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view) :]
            except BaseException as exc:
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, error)

    async def write(self, data: bytes) -> None:
        """Write ``data`` and wait until it is written (also when cancelled meanwhile:
        what was handed over is on its way, and the caller's bookkeeping must count it).
        """
        if self.broken:
            raise BrokenPipeError("stdout is closed")
        if not data:
            return
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._work, args=(loop,), name="output", daemon=True
            )
            self._thread.start()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put((data, future))
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await future
            raise
        except BrokenPipeError:
            self.broken = True
            silence_stdout()
            raise

    def close(self) -> None:
        """Let the writer thread end once its queue is done."""
        if self._thread is not None:
            self._queue.put(None)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


async def in_daemon_thread(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a daemon thread of its own; its result or exception.

    For blocking calls that may not end when asked (a Spark job, say): a cancelled caller
    stops waiting at once, and the thread, should it hang, does not keep the process from
    exiting as the default executor's threads would.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return  # the caller stopped waiting
        if error is None:
            done.set_result(result)  # type: ignore[arg-type]
        else:
            done.set_exception(error)

    def work() -> None:
        try:
            result, error = function(*args), None
        except BaseException as exc:  # handed to the caller, whatever it is
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    name = getattr(function, "__name__", "call")
    threading.Thread(target=work, name=f"aiokafka07-{name}", daemon=True).start()
    return await done


def silence_stdout() -> None:
    """Point stdout at /dev/null once its reader is gone, so the interpreter's final
    flush does not complain about a broken pipe (the Python docs' recipe)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def stop_reason(cancelled: BaseException) -> str:
    """Why the command was cancelled, from ``cancelled``'s message (the dispatcher,
    :mod:`aiokafka07.cli`, names the signal): ``stopped by SIGTERM``, ``stopped by
    Ctrl-C``; ``stopped`` when nothing says."""
    message = cancelled.args[0] if cancelled.args else None
    return message if isinstance(message, str) and message.startswith("stopped") else "stopped"


def stop_acknowledged() -> None:
    """Tell asyncio that the cancellation by Ctrl-C / SIGTERM was handled: the command
    stops cleanly, and timeouts in its clean-up must work as timeouts again."""
    task = asyncio.current_task()
    uncancel: Any = getattr(task, "uncancel", None)  # Python 3.11+
    cancelling: Any = getattr(task, "cancelling", None)
    if uncancel is not None and cancelling is not None:
        while cancelling():
            uncancel()


# -- help and checks the newer commands share ---------------------------------------------


def add_progress_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--progress`` / ``--no-progress``: a status line on stderr, by default on a terminal."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="report progress on stderr (default: when stderr is a terminal)",
    )


#: Status 130 of a command that stops cleanly on Ctrl-C (its normal end, exit 0): only a
#: second Ctrl-C, which the dispatcher obeys at once, ends it with 130.
SECOND_CTRL_C = "a second Ctrl-C during the clean-up, which exits at once (143: SIGTERM)"


def describe_exit_status(parser: argparse.ArgumentParser, statuses: dict[int, str]) -> None:
    """End ``--help`` with the command's exit statuses (1 and 2 are the dispatcher's:
    errors and bad arguments; 130 is an interruption by Ctrl-C). Every command has this
    section; ``tests/test_cli_common.py`` checks it lists the statuses ``run`` returns."""
    statuses = {
        1: "an error, reported in one line",
        2: "bad arguments",
        130: "interrupted by Ctrl-C (143: SIGTERM)",
        **statuses,
    }
    lines = [f"  {code:<4} {text}" for code, text in sorted(statuses.items())]
    parser.epilog = "exit status:\n" + "\n".join(lines)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


async def refuse_live_members(registry: GroupRegistry, consequence: str) -> None:
    """Raise :class:`CommandError` when the group has live members, which ``consequence``
    describes (they would overwrite what the command writes, or lose their state)."""
    members = await registry.member_ids()
    if members:
        live = plural(len(members), "live member")
        raise CommandError(f"group {registry.group} has {live}; {consequence}")


async def fresh_group(zk: ZooKeeper, prefix: str) -> str:
    """``<prefix>-<0..99999>`` (0.7.2's form of a tool's own group) that no group uses yet."""
    while True:
        group = f"{prefix}-{random.randrange(100000)}"
        if not await GroupRegistry(zk, group).exists():
            return group

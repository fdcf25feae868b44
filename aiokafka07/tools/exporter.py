"""``aiokafka07 exporter``: Prometheus metrics and consumer-lag status of one 0.7 cluster.

A long-running HTTP server (aiohttp; the ``exporter`` extra, see ``INSTALL``) answering
``/metrics`` (Prometheus text format), ``/status`` and ``/status/<group>`` (lag status as
JSON) from a cache that one background task refreshes: ZooKeeper listings under watches,
committed offsets each refresh, every broker's partitions' OFFSETS pipelined on one
connection (:mod:`aiokafka07.monitor.cluster_state`). A scrape never waits on the cluster.

Safe by default: listens on 127.0.0.1 (``--host`` to change), only reads (never writes a
znode or produces), and bounds the groups and partitions listed and the time a refresh may
take. Runs until Ctrl-C or SIGTERM, its normal end (exit 0). On a terminal a status line
says what the cache holds and whether it is stale.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING

from .._install import install_hint
from ..errors import ZooKeeperError
from ..monitor.lag import DEFAULT_COMMITS, DEFAULT_MIN_STOP_MS
from ..supervisor import CrashPolicy, Supervisor
from .common import (
    SECOND_CTRL_C,
    CommandError,
    UsageError,
    add_cluster_options,
    add_progress_option,
    describe_exit_status,
    non_negative_int,
    plural,
    positive_float,
    positive_int,
    stop_acknowledged,
    stop_reason,
)

if TYPE_CHECKING:
    from ..monitor.cluster_state import ClusterMonitor
    from ..monitor.server import ExporterServer

#: The default port (next to kafka_exporter's 9308, which a 0.7 cluster's host may run too).
DEFAULT_PORT = 9307

#: How to install the ``exporter`` extra, said when it is missing: from a checkout, the
#: way the documentation installs everything (aiokafka07 is not on a package index, so
#: the index's form, ``aiokafka07[exporter]``, is given only as that, second).
INSTALL = install_hint("exporter")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Serve Prometheus metrics (/metrics) and consumer-lag status (/status, "
        "/status/GROUP, JSON) of one 0.7 cluster over HTTP, from a cache refreshed in the "
        "background. Only reads from the cluster."
    )
    add_cluster_options(parser, brokers=False)
    http = parser.add_argument_group("HTTP")
    http.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this host only)",
    )
    http.add_argument(
        "--port",
        type=non_negative_int,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0: a free one, printed at start)",
    )
    http.add_argument(
        "--cluster",
        metavar="NAME",
        help="add the label cluster=NAME to every series, to tell several clusters apart in "
        "one Prometheus (letters, digits, . _ : -; default: no cluster label)",
    )
    selection = parser.add_argument_group(
        "selection",
        "regular expressions matched against whole names, in the syntax of the consumers' "
        "--whitelist (a comma means 'or'); what does not match is not read at all",
    )
    selection.add_argument(
        "--topics",
        metavar="REGEX",
        help="only these topics: others are neither probed nor served, and no group's "
        "offsets of them are read (default: every topic)",
    )
    selection.add_argument(
        "--groups",
        metavar="REGEX",
        help="only these consumer groups: others are not read (default: every group)",
    )
    bounds = parser.add_argument_group("refresh and bounds")
    bounds.add_argument(
        "--interval-ms",
        type=positive_float,
        default=5000.0,
        metavar="MS",
        help="refresh the state this often, sooner when ZooKeeper reports a change (5000)",
    )
    bounds.add_argument(
        "--refresh-timeout-ms",
        type=positive_float,
        default=10000.0,
        metavar="MS",
        help="abandon a refresh taking longer; the last state stays served, stale (10000)",
    )
    bounds.add_argument(
        "--max-groups", type=positive_int, default=1000, metavar="N", help="groups listed (1000)"
    )
    bounds.add_argument(
        "--max-partitions",
        type=positive_int,
        default=10000,
        metavar="N",
        help="broker-partitions listed, and group partitions listed (10000 each)",
    )
    lag = parser.add_argument_group("lag status")
    lag.add_argument(
        "--window",
        type=positive_int,
        default=DEFAULT_COMMITS,
        metavar="COMMITS",
        help=f"commits in each partition's sliding window ({DEFAULT_COMMITS}; at least 2)",
    )
    lag.add_argument(
        "--min-stop-ms",
        type=positive_int,
        default=DEFAULT_MIN_STOP_MS,
        metavar="MS",
        help=f"least time without a commit, with lag, that is STOP ({DEFAULT_MIN_STOP_MS})",
    )
    messages = parser.add_argument_group(
        "lag in messages",
        "each refresh counts the messages between committed offsets and log ends by "
        "reading them, within these bounds; beyond them the count is estimated "
        '(method="estimate")',
    )
    messages.add_argument(
        "--messages-range-bytes", type=non_negative_int, default=256 << 20, metavar="BYTES",
        help="a group partition further behind than this is estimated, not read (256 MiB)",
    )  # fmt: skip
    messages.add_argument(
        "--messages-budget-bytes", type=non_negative_int, default=32 << 20, metavar="BYTES",
        help="bytes read per refresh in all (32 MiB; 0: no reading)",
    )  # fmt: skip
    messages.add_argument(
        "--messages-partition-bytes", type=non_negative_int, default=8 << 20, metavar="BYTES",
        help="bytes read per refresh per partition (8 MiB)",
    )  # fmt: skip
    messages.add_argument(
        "--messages-max-ms", type=non_negative_int, default=1000, metavar="MS",
        help="no read starts later than this into a refresh's counting (1000)",
    )  # fmt: skip
    add_progress_option(parser)
    describe_exit_status(
        parser,
        {
            0: "stopped by Ctrl-C or SIGTERM, the normal end",
            130: SECOND_CTRL_C,
        },
    )


async def run(args: argparse.Namespace) -> int:
    if not args.zookeeper:
        raise UsageError("--zookeeper is required")
    if args.window < 2:
        raise UsageError("--window needs at least 2 commits")
    try:
        from ..monitor.cluster_state import ClusterMonitor
        from ..monitor.message_lag import MessageCounter
        from ..monitor.server import ExporterServer
        from ..monitor.status import LagTracker
    except ImportError as exc:
        raise CommandError(
            f"the exporter needs prometheus-client and aiohttp, the exporter extra ({exc}): "
            f"{INSTALL}"
        ) from None
    tracker = LagTracker(commits=args.window, min_stop_ms=int(args.min_stop_ms))
    try:  # a filter that is not a regex, a cluster name that is not one: before connecting
        monitor = ClusterMonitor(
            args.zookeeper,
            interval_ms=args.interval_ms,
            refresh_timeout_ms=args.refresh_timeout_ms,
            max_groups=args.max_groups,
            max_partitions=args.max_partitions,
            connection_timeout_ms=args.zk_timeout_ms,
            on_refresh=tracker.observe,
            message_counter=MessageCounter(
                max_range_bytes=args.messages_range_bytes,
                refresh_bytes=args.messages_budget_bytes,
                partition_bytes=args.messages_partition_bytes,
                max_seconds=args.messages_max_ms / 1000,
            ),
            topics=args.topics,
            groups=args.groups,
        )
        server = ExporterServer(
            monitor, tracker, host=args.host, port=args.port, cluster=args.cluster
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    began = time.monotonic()
    stopped = "stopped"
    try:
        await monitor.start()
    except ZooKeeperError as exc:
        raise CommandError(str(exc)) from None
    try:
        try:
            await server.start()
        except OSError as exc:
            raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc}") from None
        print(
            f"aiokafka07 exporter: serving {server.url}/metrics and {server.url}/status "
            f"for {args.zookeeper}",
            file=sys.stderr,
            flush=True,
        )
        enabled = sys.stderr.isatty() if args.progress is None else args.progress
        status = Supervisor("exporter status line")
        if enabled:
            status.spawn("line", _status_line(monitor), policy=CrashPolicy.LOG)
        try:
            await asyncio.Event().wait()  # until Ctrl-C / SIGTERM cancels us
        except asyncio.CancelledError as cancelled:
            stop_acknowledged()  # the normal way to stop
            stopped = stop_reason(cancelled)
        finally:
            await status.aclose()
            if enabled:  # the line as it ended, kept on the terminal
                sys.stderr.write(f"\r\x1b[K{describe(monitor)}\n")
                sys.stderr.flush()
    finally:
        try:
            await server.close()
        finally:
            await monitor.close()
    print(closing_line(stopped, time.monotonic() - began, monitor, server), file=sys.stderr)
    return 0


def closing_line(
    stopped: str, seconds: float, monitor: ClusterMonitor, server: ExporterServer
) -> str:
    """The line the exporter ends with, so a service's log says it stopped cleanly and
    what it did: ``aiokafka07 exporter: stopped by SIGTERM after 3600.2 s: 721 refreshes,
    1,804 requests answered, 0 refused (busy)``."""
    return (
        f"aiokafka07 exporter: {stopped} after {seconds:.1f} s: "
        f"{monitor.refreshes:,} {'refresh' if monitor.refreshes == 1 else 'refreshes'}, "
        f"{server.answered:,} {'request' if server.answered == 1 else 'requests'} answered, "
        f"{server.refused:,} refused (busy)"
    )


def describe(monitor: ClusterMonitor) -> str:
    """One line on what the cache holds: ``3 brokers (3 up), 12 partitions, 2 groups;
    refreshed 0.4 s ago`` (``; STALE: <why>`` while it is stale)."""
    state = monitor.state
    brokers = [b for b in state.brokers if b.registered]
    up = sum(b.up for b in brokers)
    line = (
        f"{plural(len(brokers), 'broker')} ({up} up), "
        f"{plural(len(state.partitions), 'partition')}, {plural(len(state.groups), 'group')}"
    )
    if state.refreshed_at is not None:
        line += f"; refreshed {max(time.time() - state.refreshed_at, 0):.1f} s ago"
    if monitor.is_stale:
        line += f"; STALE: {monitor.last_error or 'not refreshed yet'}"
    return line


async def _status_line(monitor: ClusterMonitor) -> None:
    while True:
        sys.stderr.write(f"\r\x1b[K{describe(monitor)}")
        sys.stderr.flush()
        await asyncio.sleep(1.0)

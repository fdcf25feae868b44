"""``aiokafka07 bridge``: copy 0.7 topics into a modern Kafka cluster, exactly once.

A front end to :class:`aiokafka07.bridge.Bridge` (its module docstring explains the
design): one transaction per batch, positions kept in the target, so a run stopped in
any way, SIGKILL included, continues where the last committed transaction ended. The
first Ctrl-C (or SIGTERM) ends the run after the transaction in progress.

``--metrics-port`` serves Prometheus metrics and ``/health`` while it runs
(:mod:`aiokafka07.bridge.server`; prometheus-client and aiohttp, the ``exporter``
extra). The closing lines say what was copied, the lag, and what recovery skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._install import install_hint
from ..bridge import Bridge, BridgeMetrics, key_before
from ..errors import BridgeError
from .common import (
    SECOND_CTRL_C,
    CommandError,
    Progress,
    UsageError,
    add_progress_option,
    connect_string,
    describe_exit_status,
    human_bytes,
    non_negative_int,
    plural,
    positive_float,
    positive_int,
    require_one_topic_selection,
    stop_acknowledged,
    stop_reason,
)

if TYPE_CHECKING:
    from ..bridge.server import BridgeMetricsServer

#: What --metrics-port needs besides the bridge extra, said when it is missing.
METRICS_INSTALL = install_hint("bridge,exporter")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Copy TOPICs (or the topics a --whitelist / --blacklist selects) from a 0.7 cluster "
        "into a modern Kafka cluster (0.11 and later) through aiokafka, exactly once: each "
        "batch is one transaction, and a restarted run continues where the last committed "
        f"one ended. Needs the bridge extra: {install_hint('bridge')}. "
        "'aiokafka07 bridge offsets --group G' moves a 0.7 group's committed offsets to the "
        "target (see its --help); a topic named 'offsets' is copied with "
        "--whitelist offsets."
    )
    parser.add_argument("topics", nargs="*", metavar="TOPIC")
    parser.add_argument("--whitelist", metavar="REGEX", help="topics matching (whole names)")
    parser.add_argument("--blacklist", metavar="REGEX", help="topics not matching")
    parser.add_argument(
        "--zookeeper",
        required=True,
        metavar="HOST[:PORT][/CHROOT]",
        type=connect_string,
        help="the 0.7 cluster",
    )
    parser.add_argument(
        "--bootstrap-servers",
        required=True,
        metavar="HOST:PORT,...",
        help="the target cluster",
    )
    parser.add_argument(
        "--name",
        default="bridge",
        help="the bridge's name on the target: transactional id aiokafka07-bridge-NAME, "
        "checkpoint key NAME (bridge)",
    )
    parser.add_argument(
        "--checkpoint-topic",
        default="aiokafka07-bridge-checkpoints",
        metavar="TOPIC",
        help="target topic holding the checkpoints, in its partition 0 "
        "(aiokafka07-bridge-checkpoints)",
    )
    parser.add_argument(
        "--key-separator",
        metavar="TEXT",
        help="key each record with the message's bytes before the first TEXT (default: no "
        "key; each 0.7 broker-partition then goes to one target partition)",
    )
    parser.add_argument(
        "--create-partitions",
        type=positive_int,
        metavar="N",
        help="create a target topic that does not exist, with N partitions (default: a "
        "missing topic is an error)",
    )
    parser.add_argument(
        "--from-latest",
        action="store_true",
        help="broker-partitions without a checkpoint start at the log end (default: earliest)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=10000,
        metavar="N",
        help="messages per transaction, at most (10000)",
    )
    parser.add_argument(
        "--linger-ms",
        type=positive_float,
        default=100.0,
        metavar="MS",
        help="how long a transaction waits for more messages (100)",
    )
    for side in ("producer", "consumer"):
        parser.add_argument(
            f"--{side}-option",
            action="append",
            default=[],
            type=client_option,
            metavar="NAME=VALUE",
            help=f"a keyword argument for aiokafka's {side} on the target (security_protocol, "
            "sasl_mechanism, ...; true/false/integers are converted); repeatable",
        )
    parser.add_argument(
        "--lag-interval-ms",
        type=positive_float,
        default=1000.0,
        metavar="MS",
        help="read the 0.7 log ends for the lag this often (1000); a broker not answering "
        "within MS + 2000 has its partitions' lag unknown until it answers",
    )
    metrics = parser.add_argument_group("metrics (prometheus-client and aiohttp)")
    metrics.add_argument(
        "--metrics-port",
        type=non_negative_int,
        metavar="PORT",
        help="serve Prometheus metrics (/metrics) and /health on PORT while running (0: a "
        "free port; the address is printed at start); needs the exporter extra",
    )
    metrics.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address the metrics listen on (default 127.0.0.1: this host only)",
    )
    metrics.add_argument(
        "--metrics-cluster",
        metavar="NAME",
        help="add the label cluster=NAME to every series served, as the exporter's "
        "--cluster (name the 0.7 cluster copied from, as its exporter does)",
    )
    add_progress_option(parser)
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no summary at the end (the line saying how it stopped stays)",
    )
    describe_exit_status(
        parser,
        {
            0: "stopped by Ctrl-C or SIGTERM, the normal end, after the transaction in progress",
            1: "an error, reported in one line (target unreachable, topic missing there, "
            "record too large, ...); the next run continues after the last committed "
            "transaction",
            130: SECOND_CTRL_C,
        },
    )


def client_option(text: str) -> tuple[str, object]:
    """``NAME=VALUE`` for an aiokafka client; ``true``/``false`` and integers converted."""
    name, equals, value = text.partition("=")
    if not equals or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    if value in ("true", "false"):
        return name, value == "true"
    if value.lstrip("-").isdigit():
        return name, int(value)
    return name, value


#: Broker-partitions named in the progress line, most behind first.
LAG_SHOWN = 4


def lag_note(metrics: BridgeMetrics) -> str:
    """``3 transactions, lag 12.0 KiB: orders/0-1 8.0 KiB, orders/1-0 4.0 KiB``: the
    bytes of the 0.7 logs not copied yet, in total and for the broker-partitions most
    behind (``?`` for one whose log end is not known yet)."""
    lags = sorted(
        metrics.partitions.items(),
        key=lambda item: -1 if item[1].lag_bytes is None else item[1].lag_bytes,
        reverse=True,
    )
    total = metrics.lag_bytes
    parts = [
        f"{source.topic}/{source.name} "
        + ("?" if lag.lag_bytes is None else human_bytes(lag.lag_bytes))
        for source, lag in lags[:LAG_SHOWN]
    ]
    more = f" (+{len(lags) - LAG_SHOWN} more)" if len(lags) > LAG_SHOWN else ""
    head = (
        f"{metrics.transactions} transactions, lag {'?' if total is None else human_bytes(total)}"
    )
    return f"{head}: {', '.join(parts)}{more}" if parts else head


def recovery_note(metrics: BridgeMetrics) -> str:
    """``recovery skipped 37 messages found already on the target (orders 20, payments
    17)``: the messages read again from 0.7 that recovery had found on the target past
    the last checkpoint, so not written again."""
    if not metrics.skipped:
        return "recovery skipped nothing: no message was found already on the target"
    per_topic = ", ".join(f"{t} {c.skipped}" for t, c in metrics.topics.items() if c.skipped)
    return (
        f"recovery skipped {plural(metrics.skipped, 'message')} found already on the target "
        f"({per_topic})"
    )


def metrics_server(bridge: Bridge, args: argparse.Namespace) -> BridgeMetricsServer | None:
    """The server --metrics-port asks for (None without it); a one-line error when its
    packages are missing, before anything connects."""
    if args.metrics_port is None:
        if args.metrics_cluster is not None:
            raise UsageError("--metrics-cluster labels the series of --metrics-port: give both")
        return None
    try:
        from ..bridge.server import BridgeMetricsServer
    except ImportError as exc:
        raise CommandError(
            f"--metrics-port needs prometheus-client and aiohttp, the exporter extra ({exc}): "
            f"{METRICS_INSTALL}"
        ) from None
    try:
        return BridgeMetricsServer(
            bridge, host=args.metrics_host, port=args.metrics_port, cluster=args.metrics_cluster
        )
    except ValueError as exc:  # a cluster name that is not one
        raise UsageError(str(exc)) from None


async def run(args: argparse.Namespace) -> int:
    require_one_topic_selection(args)
    separator = args.key_separator
    if separator == "":
        raise UsageError("--key-separator must not be empty")
    try:
        bridge = Bridge(
            args.zookeeper,
            args.bootstrap_servers,
            args.topics,
            whitelist=args.whitelist,
            blacklist=args.blacklist,
            name=args.name,
            key=key_before(separator.encode()) if separator else None,
            start="latest" if args.from_latest else "earliest",
            checkpoint_topic=args.checkpoint_topic,
            batch_size=args.batch_size,
            linger_ms=args.linger_ms,
            create_partitions=args.create_partitions,
            lag_interval_ms=args.lag_interval_ms,
            producer_options=dict(args.producer_option),
            consumer_options=dict(args.consumer_option),
        )
    except BridgeError as exc:
        raise UsageError(str(exc)) from None
    progress = Progress("bridged", enabled=args.progress, detail=lambda: lag_note(bridge.metrics))
    seen = [0, 0]

    def on_batch(metrics: BridgeMetrics) -> None:
        progress.add(metrics.messages - seen[0], metrics.bytes - seen[1])
        seen[:] = metrics.messages, metrics.bytes

    server = metrics_server(bridge, args)
    async with contextlib.AsyncExitStack() as serving:
        if server is not None:
            try:
                await serving.enter_async_context(server)
            except OSError as exc:
                raise CommandError(
                    f"cannot listen on {args.metrics_host}:{args.metrics_port}: {exc}"
                ) from None
            print(
                f"aiokafka07 bridge: serving {server.url}/metrics and {server.url}/health",
                file=sys.stderr,
                flush=True,
            )
        began = time.monotonic()
        stopped = await _copy(bridge, progress, on_batch)
    print(stop_line(stopped, time.monotonic() - began, bridge.metrics), file=sys.stderr)
    if not args.quiet:
        print(f"{progress.summary()}; {lag_note(bridge.metrics)}", file=sys.stderr)
        print(recovery_note(bridge.metrics), file=sys.stderr, flush=True)
    return 0


def stop_line(stopped: str, seconds: float, metrics: BridgeMetrics) -> str:
    """The first closing line, so a service's log says the bridge stopped cleanly and
    where the next run continues: ``aiokafka07 bridge: stopped by SIGTERM after 3600.2 s:
    721 transactions committed, 0 aborted; the next run continues after the last one``."""
    return (
        f"aiokafka07 bridge: {stopped} after {seconds:.1f} s: "
        f"{plural(metrics.transactions, 'transaction')} committed, {metrics.aborted:,} "
        "aborted; the next run continues after the last one"
    )


async def _copy(
    bridge: Bridge, progress: Progress, on_batch: Callable[[BridgeMetrics], None]
) -> str:
    """Run the bridge until Ctrl-C / SIGTERM (then end after the transaction in
    progress: ``stopped by SIGTERM``, what is returned) or an error (one line)."""
    stop = asyncio.Event()
    async with progress:
        task = asyncio.ensure_future(bridge.run(stop, on_batch=on_batch))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as cancelled:
            stop_acknowledged()  # Ctrl-C / SIGTERM: end after the transaction in progress
            stop.set()
            try:
                await task
            except BridgeError as exc:
                raise CommandError(str(exc)) from exc
            return stop_reason(cancelled)
        except BridgeError as exc:
            raise CommandError(str(exc)) from exc
    return "ended"

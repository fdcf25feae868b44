"""``aiokafka07 cluster``: a local development cluster in one command.

A real ZooKeeper (Debian's ``zookeeper`` package, installed first when missing and
running as root) and N embedded brokers, each in a process of its own, on loopback, at
the addresses the README's quick starts use: ZooKeeper at 127.0.0.1:2181, brokers at
127.0.0.1:9092, 9093, ... Brokers flush every produce request, so a produced message is
visible to consumers at once, and confirmed at once; ``--flush shipped`` runs 0.7.2's
shipped ``server.properties`` instead (a flush every 10,000 messages or about every
second: what real clusters run, where a confirmation waits up to about 2 s). The connect
strings are printed, then the cluster runs until Ctrl-C / SIGTERM, which stops every
process and says so. The data lives in a temporary directory removed at the end, or in
``--data-dir``, kept so that the next start resumes with the same topics, messages and
offsets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from ..testing.flush import FLUSH, flush_properties
from ..testing.local import local_cluster
from ..testing.process import BrokerStartError
from ..testing.zookeeper_server import ZooKeeperStartError
from .common import (
    SECOND_CTRL_C,
    CommandError,
    describe_exit_status,
    parse_settings,
    positive_int,
    require_zookeeper,
    stop_acknowledged,
)

LOG_LEVEL = logging.WARNING

ZOOKEEPER_PORT = 2181
BROKER_PORT = 9092


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run ZooKeeper and N embedded brokers on loopback, each in a process of its own, "
        f"until Ctrl-C: ZooKeeper at 127.0.0.1:{ZOOKEEPER_PORT}, brokers at "
        f"127.0.0.1:{BROKER_PORT}, {BROKER_PORT + 1}, ... (the README's quick starts). "
        "Every produced message is visible at once (--flush shipped: as 0.7.2's "
        "server.properties)."
    )
    parser.add_argument(
        "-n", "--brokers", type=positive_int, default=2, help="number of brokers (default 2)"
    )
    parser.add_argument(
        "--partitions", type=positive_int, default=2, help="partitions per topic per broker (2)"
    )
    parser.add_argument(
        "--zookeeper-port",
        type=int,
        default=ZOOKEEPER_PORT,
        metavar="PORT",
        help=f"ZooKeeper's port (default {ZOOKEEPER_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=BROKER_PORT,
        help=f"the first broker's port, the next ones follow (default {BROKER_PORT}; "
        "0 picks free ones)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="keep ZooKeeper's data and the brokers' logs here, across runs "
        "(default: a temporary directory, removed at the end)",
    )
    parser.add_argument(
        "--flush",
        choices=sorted(FLUSH),
        default="every-message",
        help="how the brokers flush: every-message (the default: a message is readable "
        "and confirmed at once), or shipped (0.7.2's config/server.properties: every "
        "10,000 messages or about every second, what real clusters run)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server.properties key for every broker (repeatable)",
    )

    describe_exit_status(
        parser,
        {
            0: "stopped by Ctrl-C or SIGTERM, the normal end",
            1: "an error, reported in one line (a port in use, a broker or ZooKeeper died)",
            130: SECOND_CTRL_C,
        },
    )


@contextlib.asynccontextmanager
async def _reported() -> AsyncIterator[None]:
    """A process that would not start (a port in use, say) is the user's to fix: one line."""
    try:
        yield
    except (ZooKeeperStartError, BrokerStartError) as exc:
        raise CommandError(str(exc)) from None


def say(text: str) -> None:
    print(f"aiokafka07 cluster: {text}", flush=True)


async def run(args: argparse.Namespace) -> int:
    settings = {**flush_properties(args.flush), **parse_settings(args.set)}
    for name, value in (("--zookeeper-port", args.zookeeper_port), ("--port", args.port)):
        if not 0 <= value <= 65535 - args.brokers:
            raise CommandError(f"{name} {value} is not a port")
    await require_zookeeper("cluster", "the brokers register in it")
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="aiokafka07-cluster-"))
    failure: str | None = None
    try:
        async with (
            _reported(),
            local_cluster(
                root,
                brokers=args.brokers,
                partitions=args.partitions,
                zookeeper_port=args.zookeeper_port,
                port=args.port,
                settings=settings,
            ) as cluster,
        ):
            assert cluster.zookeeper is not None
            print(f"zookeeper: {cluster.zookeeper}", flush=True)
            print(f"brokers: {cluster.broker_list}", flush=True)
            kept = "kept" if args.data_dir else "removed at the end"
            print(f"data: {cluster.root} ({kept}; broker logs in broker-<id>.log)", flush=True)
            flushing = (
                "messages visible at once (--flush shipped: as 0.7.2's server.properties)"
                if args.flush == "every-message"
                else "0.7.2's shipped flush: a message is visible (and confirmed) after "
                "10,000 more in its partition, or within about 2 s"
            )
            say(
                f"{args.brokers} brokers with {args.partitions} partitions per topic, "
                f"{flushing}; Ctrl-C stops everything"
            )
            try:
                failure = await cluster.wait_for_failure()
            except asyncio.CancelledError:
                stop_acknowledged()  # Ctrl-C / SIGTERM: the normal way to stop
                say("stopping the brokers and ZooKeeper")
            stopping = time.monotonic()
    finally:
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if failure is not None:
        raise CommandError(f"{failure}; stopped the rest")
    removed = "" if args.data_dir else f", removed {root}"
    say(f"stopped in {time.monotonic() - stopping:.1f} s{removed}")
    return 0

"""``aiokafka07 broker``: run an embedded Kafka 0.7.2-compatible broker until stopped.

Options map onto 0.7.2 ``server.properties`` keys (``--set`` takes any key a 0.7.2 broker
reads; keys it accepts without reading are ignored with a warning), so a broker can be
started from an existing properties file. Ctrl-C / SIGTERM stop it cleanly (logs flushed,
registration removed), exit status 0, and so does the end of standard input with
``--stop-on-stdin-close``; the newest segment is recovered at every start.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from ..broker import Broker, BrokerConfig
from ..broker.config import parse_properties
from .common import (
    SECOND_CTRL_C,
    ChunkReader,
    UsageError,
    connect_string,
    describe_exit_status,
    parse_settings,
    stop_acknowledged,
)

LOG_LEVEL = logging.INFO


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run an embedded broker that speaks the Kafka 0.7.2 protocol, stores logs as 0.7.2 "
        "does and registers in ZooKeeper. Options override --config; --set takes any 0.7.2 "
        "server.properties key."
    )
    parser.add_argument("--config", type=Path, help="a 0.7.2 server.properties file")
    parser.add_argument("--broker-id", type=int, help="brokerid (default 0)")
    parser.add_argument(
        "--port", type=int, help="port to listen on (0 picks a free one; default 6667)"
    )
    parser.add_argument("--hostname", help="address to bind and register (default 127.0.0.1)")
    parser.add_argument("--log-dir", type=Path, help="log.dir: where partition logs live")
    parser.add_argument(
        "--zookeeper", metavar="HOST[:PORT][/CHROOT]", type=connect_string, help="zk.connect"
    )
    parser.add_argument(
        "--no-zookeeper", action="store_true", help="run standalone (enable.zookeeper=false)"
    )
    parser.add_argument("--partitions", type=int, help="num.partitions (default 1)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any server.properties key, e.g. --set log.flush.interval=1",
    )
    parser.add_argument(
        "--stop-on-stdin-close",
        action="store_true",
        help="also stop cleanly when standard input closes (for a supervising process that "
        "holds the other end of a pipe: the broker then stops with it)",
    )
    describe_exit_status(
        parser,
        {
            0: "stopped by Ctrl-C or SIGTERM (or the end of stdin with --stop-on-stdin-close): "
            "logs flushed, registration removed",
            1: "an error, reported in one line (the port in use, the broker id registered "
            "by another broker, ZooKeeper unreachable)",
            130: SECOND_CTRL_C,
        },
    )


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    """The broker's configuration: --config, then --set, then the dedicated options."""
    properties: dict[str, str] = {}
    if args.config is not None:
        properties.update(parse_properties(args.config.read_text()))
    properties.update(parse_settings(args.set))
    for key, value in (
        ("brokerid", args.broker_id),
        ("port", args.port),
        ("hostname", args.hostname),
        ("log.dir", args.log_dir),
        ("zk.connect", args.zookeeper),
        ("num.partitions", args.partitions),
    ):
        if value is not None:
            properties[key] = str(value)
    if args.no_zookeeper:
        properties["enable.zookeeper"] = "false"
    properties.setdefault("brokerid", "0")
    if "log.dir" not in properties:
        raise UsageError("--log-dir (log.dir) is required")
    zookeeper = properties.get("enable.zookeeper", "true").strip().lower() == "true"
    if zookeeper and "zk.connect" not in properties:
        raise UsageError("--zookeeper (zk.connect) is required unless --no-zookeeper is given")
    return BrokerConfig.from_properties(properties)


async def run(args: argparse.Namespace) -> int:
    config = broker_config(args)
    broker = Broker(config)
    try:
        await broker.start()
        print(
            f"broker {broker.broker_id} listening on {broker.host}:{broker.port} "
            f"(log.dir {config.log_dir})",
            flush=True,
        )
        if args.stop_on_stdin_close:
            async for _ in ChunkReader(sys.stdin.buffer):
                pass  # whatever is written is ignored; the end of the input stops us
        else:
            await asyncio.Event().wait()  # until Ctrl-C / SIGTERM cancels us
    except asyncio.CancelledError:
        stop_acknowledged()
    finally:
        if broker.running:
            await broker.stop()  # which logs "broker N stopped"
    return 0

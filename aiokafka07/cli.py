"""Console tools: ``aiokafka07 <command>`` (also ``python -m aiokafka07 <command>``).

Commands:

``broker``  run an embedded Kafka 0.7.2-compatible broker until Ctrl-C / SIGTERM.

Errors print one clear line and exit non-zero; ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from .broker import Broker, BrokerConfig
from .broker.config import parse_properties
from .errors import KafkaError

__all__ = ["main"]


def _broker_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "broker",
        help="run an embedded Kafka 0.7.2-compatible broker",
        description="Run an embedded broker that speaks the Kafka 0.7.2 protocol, stores logs "
        "as 0.7.2 does and registers in ZooKeeper. Options override --config; "
        "--set takes any 0.7.2 server.properties key.",
    )
    p.add_argument("--config", type=Path, help="a 0.7.2 server.properties file")
    p.add_argument("--broker-id", type=int, help="brokerid (default 0)")
    p.add_argument("--port", type=int, help="port to listen on (0 picks a free one; default 6667)")
    p.add_argument("--hostname", help="address to bind and register (default 127.0.0.1)")
    p.add_argument("--log-dir", type=Path, help="log.dir: where partition logs live")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="zk.connect")
    p.add_argument(
        "--no-zookeeper", action="store_true", help="run standalone (enable.zookeeper=false)"
    )
    p.add_argument("--partitions", type=int, help="num.partitions (default 1)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any server.properties key, e.g. --set log.flush.interval=1",
    )


def _broker_config(args: argparse.Namespace) -> BrokerConfig:
    properties: dict[str, str] = {}
    if args.config is not None:
        properties.update(parse_properties(args.config.read_text()))
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"--set {item!r} is not KEY=VALUE")
        properties[key.strip()] = value.strip()
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
        raise ValueError("--log-dir (log.dir) is required")
    if properties.get("enable.zookeeper", "true") == "true" and "zk.connect" not in properties:
        raise ValueError("--zookeeper (zk.connect) is required unless --no-zookeeper is given")
    return BrokerConfig.from_properties(properties)


async def _run_broker(config: BrokerConfig) -> None:
    broker = Broker(config)
    await broker.start()
    print(
        f"broker {broker.broker_id} listening on {broker.host}:{broker.port} "
        f"(log.dir {config.log_dir})",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await broker.stop()
        print(f"broker {broker.broker_id} stopped", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console tools; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="aiokafka07", description="Tools for Apache Kafka 0.7 clusters."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _broker_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.debug:
        # aiozk logs tracebacks for every failed connection attempt; our ZooKeeper layer
        # reports connection trouble and expiry in one line of its own.
        logging.getLogger("aiozk").setLevel(logging.CRITICAL)
    try:
        if args.command == "broker":
            asyncio.run(_run_broker(_broker_config(args)))
    except (KafkaError, ValueError, OSError) as exc:
        if args.debug:
            raise
        print(f"aiokafka07 {args.command}: error: {exc}", file=sys.stderr)
        return 1
    return 0

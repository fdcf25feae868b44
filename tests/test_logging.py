"""The library's logging manners.

* Lifecycle and rebalances are logged at INFO (producer and group member started and
  closed with their settings, connections opened and lost, ZooKeeper sessions, brokers,
  what a rebalance assigned and how long it took), and nothing is logged per message at
  INFO; DEBUG adds wire detail per request, still not per message.
* Every logger is ``aiokafka07.<module>``; the library installs no handler but a
  NullHandler on ``aiokafka07`` and leaves the root logger alone (only the CLI configures
  logging).
"""

from __future__ import annotations

import ast
import asyncio
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from aiokafka07 import BrokerAddress, BrokerConnection, Producer
from aiokafka07.group import Consumer
from aiokafka07.testing import KafkaCluster

from .wire import eventually

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "aiokafka07"
TOPIC = "events"
# Entry points own the process and may configure logging there (and only there).
ENTRY_POINTS = ("cli.py", "tools")


def ours(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("aiokafka07") and r.levelno >= level]


def messages(records: list[logging.LogRecord], logger: str) -> list[str]:
    return [r.getMessage() for r in records if r.name == logger]


def one(lines: list[str], start: str) -> str:
    found = [line for line in lines if line.startswith(start)]
    assert found, f"nothing starts with {start!r} in {lines}"
    return found[0]


async def consume(consumer: Consumer, count: int) -> None:
    for _ in range(count):
        await asyncio.wait_for(consumer.getone(), 10)


async def test_lifecycle_and_rebalances_at_info_nothing_per_message(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka07")
    fast = {"auto_offset_reset": "smallest", "auto_commit_interval_ms": 50}
    async with (
        kafka_cluster(1, num_partitions=2),
        Producer(zookeeper=zookeeper, linger_ms=1) as producer,
    ):
        # The topic exists on both partitions before anyone consumes.
        for partition in (0, 1):
            await producer.send_and_wait(TOPIC, b"first", partition=(0, partition))
        await eventually(lambda: len(producer.cluster.partitions(TOPIC)) == 2)
        async with Consumer(TOPIC, group="g", zookeeper=zookeeper, **fast) as first:
            await consume(first, 2)

            # The hot path: 500 messages produced, consumed and committed.
            before = len(ours(caplog))
            for i in range(500):
                await producer.send(TOPIC, f"message {i}".encode())
            await producer.flush()
            await consume(first, 500)
            await asyncio.sleep(0.2)  # a few auto-commits
            assert ours(caplog)[before:] == []

            # A second member: both rebalance; the first one gives a partition up.
            async with Consumer(TOPIC, group="g", zookeeper=zookeeper, **fast) as second:
                await eventually(lambda: first.rebalances == 2)
                assert len(first.assignment()) == len(second.assignment()) == 1

    records = ours(caplog)
    producer_lines = messages(records, "aiokafka07.producer")
    started = one(producer_lines, "producer started on <ZooKeeperCluster")
    assert "compression none, confirm True (retry when unconfirmed)" in started
    assert "linger_ms 1," in started
    sent_bytes = 2 * len(b"first") + sum(len(f"message {i}") for i in range(500))
    assert one(producer_lines, "producer closed:").startswith(
        f"producer closed: 502 messages ({sent_bytes} bytes) sent in"
    )
    assert one(producer_lines, "producer closed:").endswith(", 0 retried, 0 failed, 0 unknown")
    assert any(
        line.startswith("connected to broker 0 at 127.0.0.1:")
        for line in messages(records, "aiokafka07.connection")
    )
    zk_lines = messages(records, "aiokafka07.zookeeper")
    assert any(" open at 127.0.0.1:" in line for line in zk_lines)
    assert any(line.endswith(" closed") for line in zk_lines)
    assert any(
        line.startswith("broker 0 at 127.0.0.1:") and line.endswith("joined")
        for line in messages(records, "aiokafka07.cluster")
    )
    assert any(
        line.startswith("broker 0 registered in ZooKeeper as")
        for line in messages(records, "aiokafka07.broker")
    )

    group = messages(records, "aiokafka07.group")
    first_id, second_id = first.consumer_id, second.consumer_id
    joined = one(group, f"{first_id} joined group g at {zookeeper} with subscription")
    assert '{ "events": 1 }, 1 streams, auto_offset_reset smallest' in joined
    assert "auto_commit every 50 ms" in joined
    rebalance = one(group, f"{first_id}: rebalance 1 of group g done in ")
    assert rebalance.endswith("(1 attempts, 1 members): owns events [0-0 0-1]")
    assert f"{first_id}: assigned events [0-0 0-1], revoked nothing" in group
    # Range assignment over thread ids in sort order: the older member keeps 0-0.
    assert first_id < second_id
    again = one(group, f"{first_id}: rebalance 2 of group g done in ")
    assert again.endswith("(1 attempts, 2 members): owns events [0-0]")
    assert f"{first_id}: assigned nothing, revoked events [0-1]" in group
    assert f"{second_id}: assigned events [0-1], revoked nothing" in group
    assert one(group, f"{second_id}: rebalance 1 of group g done in ")
    assert f"{first_id} left group g" in group
    assert f"{second_id} left group g" in group


async def test_debug_has_wire_detail_per_request_not_per_message(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with (
        kafka_cluster(1, num_partitions=1),
        Producer(zookeeper=zookeeper, batch_size=1000, linger_ms=50) as producer,
    ):
        await producer.send_and_wait(TOPIC, b"first")
        caplog.set_level(logging.DEBUG, logger="aiokafka07")
        before = len(caplog.records)
        futures = [await producer.send(TOPIC, b"m%d" % i) for i in range(1000)]
        await asyncio.gather(*futures)
        records = [r for r in caplog.records[before:] if r.name.startswith("aiokafka07")]
    wire = [r.getMessage() for r in records]
    assert any(
        line.startswith("producing to broker 0 at 127.0.0.1:") and " messages, " in line
        for line in wire
    )
    assert any(" requests, " in line and line.endswith(" bytes") for line in wire)
    # 1000 messages went out in a few requests; so did the log lines.
    assert len(records) < 50, wire


async def test_a_lost_connection_is_logged_at_info(
    kafka_cluster: Callable[..., KafkaCluster], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka07")
    async with kafka_cluster(1, zookeeper=None) as cluster:
        broker_id, host, port = cluster.bootstrap[0]
        conn = await BrokerConnection.open(BrokerAddress(broker_id, host, port))
        await cluster.stop_broker(broker_id)
        await eventually(lambda: conn.closed)
    lines = messages(ours(caplog), "aiokafka07.connection")
    assert f"connected to broker 0 at {host}:{port}" in lines
    assert f"connection to broker 0 at {host}:{port} lost" in lines


async def test_closing_a_connection_yourself_is_not_a_loss(
    kafka_cluster: Callable[..., KafkaCluster], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka07")
    async with kafka_cluster(1, zookeeper=None) as cluster:
        broker_id, host, port = cluster.bootstrap[0]
        conn = await BrokerConnection.open(BrokerAddress(broker_id, host, port))
        await conn.close()
    assert messages(ours(caplog), "aiokafka07.connection") == [
        f"connected to broker 0 at {host}:{port}"
    ]


def test_importing_the_library_installs_no_handlers() -> None:
    """In a fresh interpreter: import every module, then look at every logger."""
    script = """
import logging, pkgutil, importlib
import aiokafka07
for module in pkgutil.walk_packages(aiokafka07.__path__, "aiokafka07."):
    # spark needs the optional pyspark; __main__ runs the command line.
    if not module.name.startswith("aiokafka07.spark") and module.name != "aiokafka07.__main__":
        importlib.import_module(module.name)
assert logging.getLogger().handlers == [], logging.getLogger().handlers
top = logging.getLogger("aiokafka07")
assert [type(h) for h in top.handlers] == [logging.NullHandler], top.handlers
assert top.level == logging.NOTSET and top.propagate
for name, logger in logging.root.manager.loggerDict.items():
    if name.startswith("aiokafka07.") and isinstance(logger, logging.Logger):
        assert logger.handlers == [] and logger.level == logging.NOTSET, name
# aiozk, which the library runs, gets a NullHandler and nothing else.
aiozk = logging.getLogger("aiozk")
assert [type(h) for h in aiozk.handlers] == [logging.NullHandler], aiozk.handlers
assert aiozk.level == logging.NOTSET and aiozk.propagate
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


def _library_files() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in (*ENTRY_POINTS, "spark")
    ]


def test_loggers_are_named_for_the_package_and_nothing_configures_logging() -> None:
    names = set()
    for path in _library_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if node.func.attr == "getLogger":
                (arg,) = node.args
                assert isinstance(arg, ast.Constant), f"{where}: name the logger literally"
                if arg.value == "aiozk":  # the one third-party logger: see zookeeper.py
                    assert path.name == "zookeeper.py", where
                    continue
                assert arg.value == "aiokafka07" or arg.value.startswith("aiokafka07."), where
                names.add(arg.value)
            assert node.func.attr not in ("basicConfig", "dictConfig", "fileConfig"), where
            if node.func.attr == "addHandler":
                (handler,) = node.args
                assert isinstance(handler, ast.Call), where
                assert ast.unparse(handler.func) == "logging.NullHandler", where
    assert {
        "aiokafka07",
        "aiokafka07.broker",
        "aiokafka07.cluster",
        "aiokafka07.connection",
        "aiokafka07.group",
        "aiokafka07.pool",
        "aiokafka07.producer",
        "aiokafka07.simple",
        "aiokafka07.zookeeper",
    } <= names


# A ZooKeeper nobody listens on: aiozk logs a traceback for every connection attempt.
UNREACHABLE = """
import asyncio, logging, sys
from aiokafka07.errors import ZooKeeperError
from aiokafka07.zookeeper import ZooKeeper

SETUP

async def main():
    for _ in range(2):
        try:
            await ZooKeeper("127.0.0.1:1", connection_timeout_ms=1000).start()
        except ZooKeeperError as exc:
            print("typed:", type(exc).__name__)

asyncio.run(main())
"""


def _unreachable(setup: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", UNREACHABLE.replace("SETUP", setup)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("setup", "where"),
    [
        ("", None),  # nothing configured: nothing printed, aiozk's tracebacks included
        ("logging.basicConfig()", "stderr"),  # the application's root handler gets them
        (  # an application that routes aiozk's records itself keeps doing so
            "logging.getLogger('aiozk').addHandler(logging.StreamHandler(sys.stdout))\n"
            "logging.getLogger('aiozk').propagate = False",
            "stdout",
        ),
    ],
    ids=["unconfigured", "basicConfig", "own-aiozk-handler"],
)
def test_the_library_prints_nothing_until_the_application_configures_logging(
    setup: str, where: str | None
) -> None:
    result = _unreachable(setup)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("typed: ZooKeeperError") == 2
    if where is None:
        assert result.stderr == ""
        return
    shown = result.stderr if where == "stderr" else result.stdout
    assert "Couldn't connect to 127.0.0.1:1" in shown
    assert "Couldn't connect" not in (result.stdout if where == "stderr" else result.stderr)

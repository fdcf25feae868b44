"""``aiokafka07 consume``'s 0.7.2 ConsoleConsumer options as real processes: the checksum
formatter (checked against the CRCs stored in the broker's log), formatter properties, a
formatter of one's own, and ``--skip-message-on-error``, with the group's offsets
committed exactly as far as the output went."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from aiokafka07 import Producer
from aiokafka07.connection import BrokerConnection
from aiokafka07.testing import KafkaCluster

from .test_cli_common import fails, ok, run_cli
from .test_cli_produce_consume import committed
from .wire import address_of

FORMATTER_MODULE = """
def make(properties):
    prefix = properties.get("prefix", "")

    def format_record(record):
        if b"bad" in record.value:
            raise ValueError("cannot format " + record.value.decode())
        return prefix + record.value.decode() + "\\n"

    return format_record
"""


async def stored_crcs(cluster: KafkaCluster, topic: str) -> list[int]:
    """The CRC field of every (uncompressed) entry of partition 0, read from the raw log."""
    async with await BrokerConnection.open(address_of(cluster)) as conn:
        data = (await conn.fetch(topic, 0, 0, 1 << 20)).message_set
    crcs, pos = [], 0
    while pos + 4 <= len(data):
        size, magic = struct.unpack_from(">iB", data, pos)
        crcs.append(struct.unpack_from(">I", data, pos + 5 + magic)[0])
        pos += 4 + size
    return crcs


async def send_in_one_batch(zookeeper: str, topic: str, values: list[bytes]) -> None:
    async with Producer(zookeeper=zookeeper, linger_ms=1000) as producer:
        futures = [await producer.send(topic, value) for value in values]
        await producer.flush()
        for future in futures:
            await future


async def test_checksum_formatter_prints_the_stored_crcs(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    values = [b"hello", b"", "ünïcödé".encode(), bytes(range(256))]
    async with kafka_cluster(1, num_partitions=1) as cluster:
        await send_in_one_batch(zookeeper, "sums", values)
        crcs = await stored_crcs(cluster, "sums")
        assert crcs == [zlib.crc32(v) for v in values]
        assert crcs[0] == 0x3610A686  # PROTOCOL: the CRC-32 of "hello"
        consume = ["consume", "sums", "--zookeeper", zookeeper, "--from-beginning", "-n", "4"]
        out = await ok(*consume, "-f", "checksum", "-q")
        assert out.decode().splitlines() == [f"checksum:{crc}" for crc in crcs]
        # 0.7.2's class name and its "topic" property.
        out = await ok(*consume, "--formatter", "kafka.consumer.ChecksumMessageFormatter",
                       "--property", "topic=sums", "-q")  # fmt: skip
        assert out.decode().splitlines() == [f"sums-checksum:{crc}" for crc in crcs]
        errors = [  # bad arguments: usage, one error line, status 2
            await fails(*consume, "-f", "raw", "--property", "topic=x", status=2),
            await fails(*consume, "-f", "checksum", "--property", "colour=red", status=2),
            await fails(*consume, "-f", "nonsense", status=2),
            await fails(*consume, "-f", "checksum", "--property", "novalue", status=2),
        ]
        assert errors[0].endswith("formatter raw takes no --property (got ['topic'])\n")
        assert errors[1].endswith("formatter checksum takes --property topic, not colour\n")
        assert (
            "unknown formatter 'nonsense': use raw, json, hex, length-prefixed, checksum"
            in (errors[2])
        )
        assert errors[3].endswith("--property 'novalue' is not KEY=VALUE\n")
        # A formatter that does not import is an error of the installation: status 1.
        error = await fails(*consume, "-f", "no_such_module_here:make")
        assert "cannot import no_such_module_here" in error


@pytest.fixture
def formatter_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``fmt_module:make`` importable by the tools run as subprocesses."""
    (tmp_path / "fmt_module.py").write_text(FORMATTER_MODULE)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    return "fmt_module:make"


async def test_a_failing_formatter_stops_or_skips(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str, formatter_module: str
) -> None:
    values = [b"m%d" % i for i in range(10)]
    values[5] = b"bad one"
    zk = ["--zookeeper", zookeeper]
    async with kafka_cluster(1, num_partitions=1):
        await send_in_one_batch(zookeeper, "f", values)
        ends = []  # the next offset after each message: 10-byte header + payload
        for value in values:
            ends.append((ends[-1] if ends else 0) + 10 + len(value))
        consume = ["consume", "f", *zk, "--group", "readers", "-f", formatter_module,
                   "--property", "prefix=> ", "--timeout-ms", "3000"]  # fmt: skip
        # Without --skip-message-on-error: the messages before it, then one error line;
        # the group's offset is where the printing stopped, though all ten were fetched.
        code, out, err = await run_cli(*consume, "--from-beginning")
        assert code == 1
        assert out.decode().splitlines() == [f"> m{i}" for i in range(5)]
        assert err.strip() == (
            f"aiokafka07 consume: error: cannot format a message of f 0-0 (next offset "
            f"{ends[5]}): ValueError: cannot format bad one (--skip-message-on-error skips "
            "such messages)"
        )
        assert await committed(zookeeper, "readers", "f") == {"0-0": ends[4]}
        # With it: reported, skipped, and the group goes on to the end.
        code, out, err = await run_cli(*consume, "--skip-message-on-error")
        assert code == 0, err
        assert out.decode().splitlines() == [f"> m{i}" for i in range(6, 10)]
        lines = err.strip().splitlines()
        assert lines[0] == (
            f"aiokafka07 consume: warning: skipping a message of f 0-0 (next offset "
            f"{ends[5]}): ValueError: cannot format bad one"
        )
        assert lines[-1].startswith("consumed 4 messages (")
        assert lines[-1].endswith(" (1 message skipped)")
        assert await committed(zookeeper, "readers", "f") == {"0-0": ends[-1]}
        # Simple mode the same, with nothing committed.
        code, out, _ = await run_cli("consume", "f", *zk, "--offset", "0", "-n", "9", "-q",
                                     "-f", formatter_module, "--skip-message-on-error")  # fmt: skip
        assert code == 0
        assert out.decode().splitlines() == [f"m{i}" for i in range(10) if i != 5]

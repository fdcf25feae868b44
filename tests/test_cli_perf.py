"""``producer-perf``, ``consumer-perf``, ``simple-consumer-perf`` and ``replay-log`` as real
processes against embedded brokers and a real ZooKeeper. The figures are checked against
what was sent (known counts and sizes), the brokers' log ends and the printed times."""

from __future__ import annotations

import asyncio
import collections
import datetime
import signal
from collections.abc import Callable

from aiokafka07 import LATEST, Producer
from aiokafka07.protocol import Compression
from aiokafka07.testing import KafkaCluster
from aiokafka07.zookeeper import ZooKeeper

from .test_cli_common import fails, ok, run_cli, start_cli, stop_cli
from .test_cli_offsets_groups import broker_offsets
from .test_cli_produce_consume import committed, parse_json, registered, shallow_codecs, value_of
from .wire import eventually

MIB = 1024 * 1024
#: A magic-1 entry's header in the log: 4 bytes of length, magic, attributes, CRC.
ENTRY_HEADER = 10

PRODUCER_HEADER = (
    "start.time, end.time, compression, message.size, batch.size, total.data.sent.in.MB, "
    "MB.sec, total.data.sent.in.nMsg, nMsg.sec"
)
CONSUMER_HEADER = (
    "start.time, end.time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
)


def java_time(text: str) -> float:
    """Epoch seconds of 0.7.2's default date format, ``yyyy-MM-dd HH:mm:ss:SSS``."""
    moment = datetime.datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S")
    return moment.timestamp() + int(text[20:]) / 1000


def check_summary(row: str, messages: int, payload: int, mb_decimals: int) -> list[str]:
    """Check a summary row's totals and rates; return its fields."""
    fields = row.split(", ")
    start, end = java_time(fields[0]), java_time(fields[1])
    megabytes, mb_rate, count, rate = fields[-4:]
    assert int(count) == messages
    assert megabytes == f"{payload / MIB:.{mb_decimals}f}"
    # The rates divide by the time between the printed start and end, which are rounded to
    # the millisecond: the rate lies within what those roundings allow.
    elapsed = end - start
    assert elapsed >= 0
    low, high = elapsed + 0.0015, max(elapsed - 0.0015, 1e-9)
    if messages:
        assert messages / low <= float(rate) <= messages / high, (row, elapsed)
        assert payload / MIB / low - 5e-5 <= float(mb_rate) <= payload / MIB / high + 5e-5
    else:
        assert float(rate) == float(mb_rate) == 0
    return fields


async def test_producer_perf_sends_what_it_reports(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=1) as cluster:
        # Sync: 1001 messages over 2 threads in batches of 50 -> 0.7.2 sends 2 * 10 * 50.
        out = await ok("producer-perf", "--topic", "pp", "--messages", "1001",
                       "--message-size", "100", "--batch-size", "50", "--threads", "2",
                       "--zookeeper", zookeeper)  # fmt: skip
        lines = out.decode().splitlines()
        assert lines[0] == PRODUCER_HEADER
        assert len(lines) == 2
        fields = check_summary(lines[1], 1000, 1000 * 100, mb_decimals=2)
        assert fields[2:5] == ["0", "100", "50"]
        # The log holds payload and a 10-byte header per message: offsets are bytes.
        assert await broker_offsets_one(cluster, "pp") == 1000 * (100 + ENTRY_HEADER)

        # Async, gzip, a static broker list in 0.7.2's form, a row per thread and interval.
        out = await ok("producer-perf", "--topic", "pz", "--messages", "300", "--async",
                       "--compression-codec", "1", "--threads", "3", "--batch-size", "20",
                       "--message-size", "64", "--brokerinfo",
                       f"broker.list=0:127.0.0.1:{cluster.broker(0).port}",
                       "--show-detailed-stats", "--reporting-interval", "50")  # fmt: skip
        lines = out.decode().splitlines()
        assert lines[0] == (
            "time, compression, thread.id, message.size, batch.size, total.data.sent.in.MB, "
            "MB.sec, total.data.sent.in.nMsg, nMsg.sec"
        )
        rows = [line.split(", ") for line in lines[1:]]
        assert sorted((r[2], r[7]) for r in rows) == sorted(
            (str(t), str(n)) for t in range(3) for n in (50, 100)
        )
        for row in rows:
            assert (row[1], row[3], row[4]) == ("1", "64", "20")
            assert row[5] == f"{int(row[7]) * 64 / MIB:.2f}"
            java_time(row[0])
        await registered(zookeeper, cluster, "pz")
        assert await shallow_codecs(cluster, "pz") == {Compression.GZIP}
        # What arrived: every message, of the size reported.
        out = await ok("simple-consumer-perf", "--server", f"kafka://127.0.0.1:{cluster.broker(0).port}",
                       "--topic", "pz")  # fmt: skip
        check_summary(out.decode().splitlines()[1], 300, 300 * 64, mb_decimals=4)

        error = await fails("producer-perf", "--topic", "x", "--messages", "1", "--zookeeper",
                            zookeeper, "--brokers", cluster.broker_list, status=2)  # fmt: skip
        assert "give --brokerinfo or --brokers or --zookeeper (one of them)" in error
        error = await fails("producer-perf", "--topic", "x", "--messages", "1", "--brokerinfo",
                            "zk=nowhere", status=2)  # fmt: skip
        assert "is neither zk.connect=HOST:PORT nor broker.list" in error
        usage = await fails("producer-perf", "--topic", "x", "--zookeeper", zookeeper, status=2)
        assert "the following arguments are required: --messages" in usage
        usage = await fails("producer-perf", "--topic", "x", "--messages", "1", "--zookeeper",
                            zookeeper, "--date-format", "yyyy-QQ", status=2)  # fmt: skip
        assert "date format letter 'Q' is not supported" in usage


async def broker_offsets_one(cluster: KafkaCluster, topic: str) -> int:
    """The log end of partition 0 of broker 0."""
    from aiokafka07 import SimpleConsumer

    async with SimpleConsumer("127.0.0.1", cluster.broker(0).port) as consumer:
        return (await consumer.offsets_before(topic, 0, LATEST, 1))[0]


async def produce_fixed(zookeeper: str, topic: str, count: int, size: int) -> None:
    """``count`` messages of ``size`` bytes spread over the topic's partitions."""
    async with Producer(zookeeper=zookeeper, batch_size=50) as producer:
        for i in range(count):
            await producer.send(topic, bytes([i % 251]) * size)


async def test_consumer_perf_reads_and_counts_everything(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    zk = ["--zookeeper", zookeeper]
    async with kafka_cluster(2, num_partitions=2) as cluster:
        await ok("producer-perf", "--topic", "cp", "--messages", "1000", "--batch-size", "25",
                 "--threads", "4", *zk)  # fmt: skip
        await registered(zookeeper, cluster, "cp")
        out = await ok("consumer-perf", "--topic", "cp", *zk, "--threads", "3",
                       "--consumer-timeout-ms", "1500")  # fmt: skip
        lines = out.decode().splitlines()
        assert lines[0] == CONSUMER_HEADER
        fields = check_summary(lines[1], 1000, 1000 * 100, mb_decimals=4)
        assert fields[2] == "1048576"
        async with ZooKeeper(zookeeper) as session:  # its own group is gone again
            assert await session.get_children("/consumers") == []

        # --messages counts for the run: exactly that many handed out, and committed.
        out = await ok("consumer-perf", "--topic", "cp", *zk, "--group", "counted",
                       "--messages", "300", "--hide-header")  # fmt: skip
        check_summary(out.decode().strip(), 300, 300 * 100, mb_decimals=4)
        stored = await committed(zookeeper, "counted", "cp")
        assert sum(stored.values()) == 300 * (100 + ENTRY_HEADER)
        # A named group is started over (0.7.2 deletes its data), unless it has members.
        out = await ok("consumer-perf", "--topic", "cp", *zk, "--group", "counted",
                       "--consumer-timeout-ms", "1000", "--from-latest",
                       "--hide-header")  # fmt: skip
        check_summary(out.decode().strip(), 0, 0, mb_decimals=4)
        from aiokafka07.group import Consumer

        async with Consumer("cp", group="busy", zookeeper=zookeeper):
            error = await fails("consumer-perf", "--topic", "cp", *zk, "--group", "busy")
            assert "group busy has 1 live member; deleting its data would break it" in error

        # Detailed rows per stream; Ctrl-C ends the run cleanly (exit 0).
        proc = await start_cli("consumer-perf", "--topic", "cp", *zk, "--threads", "1",
                               "--fetch-size", "2000", "--show-detailed-stats",
                               "--reporting-interval", "100", "--consumer-timeout-ms",
                               "60000")  # fmt: skip
        assert proc.stdout is not None
        header = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert header.decode().strip() == (
            "time, thread.id, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
            "nMsg.sec"
        )
        rows = []
        while len(rows) < 10:  # 1000 messages, a row every 100: all read
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, "consumer-perf ended early"
            rows.append(line.decode().strip().split(", "))
        code, out, err = await stop_cli(proc, signal.SIGINT)
        assert code == 0, err
        assert "Traceback" not in err
        assert [row[5] for row in rows] == [str(n) for n in range(100, 1001, 100)]
        assert all(row[1] == "0" and row[2] == "2000" for row in rows)
        assert [row[3] for row in rows] == [f"{n * 100 / MIB:.4f}" for n in range(100, 1001, 100)]


async def test_simple_consumer_perf_reads_one_partition(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=1) as cluster:
        await produce_fixed(zookeeper, "sp", 500, 200)
        server = ["--server", f"kafka://127.0.0.1:{cluster.broker(0).port}", "--topic", "sp"]
        out = await ok("simple-consumer-perf", *server, "--fetch-size", "4096")
        lines = out.decode().splitlines()
        assert lines[0] == CONSUMER_HEADER
        fields = check_summary(lines[1], 500, 500 * 200, mb_decimals=4)
        assert fields[2] == "4096"
        out = await ok("simple-consumer-perf", *server, "--messages", "123", "--hide-header")
        check_summary(out.decode().strip(), 123, 123 * 200, mb_decimals=4)
        out = await ok("simple-consumer-perf", *server, "--from-latest", "--hide-header")
        check_summary(out.decode().strip(), 0, 0, mb_decimals=4)
        # Detailed: a row whenever more than the interval was read since the last row.
        out = await ok("simple-consumer-perf", *server, "--fetch-size", "2100",
                       "--show-detailed-stats", "--reporting-interval", "100",
                       "--date-format", "HH:mm:ss.SSS 'ms'")  # fmt: skip
        lines = out.decode().splitlines()
        assert (
            lines[0]
            == "time, fetch.size, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
        )
        counts = [int(line.split(", ")[4]) for line in lines[1:]]
        assert counts
        assert counts == sorted(counts)
        assert counts[-1] <= 500
        assert all(b - a > 100 for a, b in zip([0, *counts], counts, strict=False))
        for line in lines[1:]:
            stamp, fetch_size, megabytes = line.split(", ")[:3]
            datetime.datetime.strptime(stamp, "%H:%M:%S.%f ms")
            assert fetch_size == "2100"
            assert megabytes == f"{int(line.split(', ')[4]) * 200 / MIB:.4f}"
        error = await fails("simple-consumer-perf", "--server", "kafka://127.0.0.1:1",
                            "--topic", "sp")  # fmt: skip
        assert error.endswith("cannot connect to 127.0.0.1:1: Connect call failed ('127.0.0.1', 1)")


async def test_replay_log_copies_a_topic_once(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    zk = ["--zookeeper", zookeeper]
    async with kafka_cluster(2, num_partitions=2) as cluster:
        lines = [f"event {i}" for i in range(200)]
        await ok("produce", "in", *zk, "--compression", "gzip",
                 stdin="".join(f"{line}\n" for line in lines).encode())  # fmt: skip
        await registered(zookeeper, cluster, "in")
        code, out, err = await run_cli("replay-log", *zk, "--inputtopic", "in",
                                       "--outputtopic", "out", "--compression-codec", "snappy",
                                       "--batch-size", "30", "--threads", "2")  # fmt: skip
        assert code == 0, err
        assert out == b""
        assert err.startswith("replayed 200 messages (")
        assert err.strip().endswith(" from in to out")
        await registered(zookeeper, cluster, "out")
        assert await shallow_codecs(cluster, "out") == {Compression.SNAPPY}
        copied = parse_json(await ok("consume", "out", *zk, "--from-beginning", "-n", "200",
                                     "-f", "json", "-q", "--timeout-ms", "5000"))  # fmt: skip
        assert sorted(value_of(r).decode() for r in copied) == sorted(lines)
        # Nothing was written to ZooKeeper for the replay (0.7.2 uses a group).
        async with ZooKeeper(zookeeper) as session:
            assert await session.get_children("/consumers") == []
        # --messages, --async and a static target in 0.7.2's --brokerinfo form.
        code, _, err = await run_cli("replay-log", *zk, "--inputtopic", "in", "--outputtopic",
                                     "some", "--messages", "50", "--async", "--brokerinfo",
                                     f"broker.list={cluster.broker_list}")  # fmt: skip
        assert code == 0, err
        assert err.startswith("replayed 50 messages (")
        total = sum((await broker_offsets(cluster, "some", LATEST)).values())
        some = parse_json(await ok("consume", "some", "--brokers", cluster.broker_list,
                                   "--broker-partition", "0-0,0-1,1-0,1-1", "--offset", "0",
                                   "-f", "json", "-q", "--timeout-ms", "1000"))  # fmt: skip
        assert len(some) == 50
        assert total == sum(len(value_of(r)) + ENTRY_HEADER for r in some)
        assert collections.Counter(value_of(r).decode() for r in some) <= collections.Counter(lines)
        error = await fails("replay-log", *zk, "--inputtopic", "in", "--outputtopic", "in",
                            status=2)  # fmt: skip
        assert "--outputtopic is --inputtopic on the same cluster" in error
        error = await fails("replay-log", *zk, "--inputtopic", "nothing", "--outputtopic", "o")
        assert f"topic nothing has no partitions registered in ZooKeeper at {zookeeper} (" in error


async def test_producer_perf_stops_on_ctrl_c_with_a_row(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=1):
        proc = await start_cli("producer-perf", "--topic", "cc", "--messages", "100000000",
                               "--threads", "2", "--zookeeper", zookeeper, "--async",
                               "--show-detailed-stats", "--reporting-interval", "1000")  # fmt: skip
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)  # the header
        first = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert first.decode().split(", ")[7] == "1000"
        code, _, err = await stop_cli(proc, signal.SIGINT)
        assert code == 130, err
        assert "Traceback" not in err
        assert "interrupted: the row counts what was delivered until then" in err


async def test_replay_log_stops_on_ctrl_c_after_delivering_what_it_read(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    zk = ["--zookeeper", zookeeper]
    async with kafka_cluster(1, num_partitions=1) as cluster:
        await produce_fixed(zookeeper, "long", 100, 10)
        await registered(zookeeper, cluster, "long")
        # A batch of 10, then a pause far longer than the test: stopped in the pause.
        proc = await start_cli("replay-log", *zk, "--inputtopic", "long", "--outputtopic",
                               "copy", "--batch-size", "10", "--delay-btw-batch-ms",
                               "600000")  # fmt: skip

        async def copied() -> int:
            try:
                return await broker_offsets_one(cluster, "copy")
            except Exception:
                return 0  # not created yet

        await eventually(copied, timeout=30)
        code, out, err = await stop_cli(proc, signal.SIGINT)
        assert out == b""
        assert code == 130, err
        assert "Traceback" not in err
        assert err.startswith("replayed 10 messages (100 B) in ")
        assert err.strip().endswith(" from long to copy (interrupted)")
        assert await broker_offsets_one(cluster, "copy") == 10 * (10 + ENTRY_HEADER)


NEW_COMMANDS = [
    "update-offsets",
    "verify-rebalance",
    "replay-log",
    "producer-perf",
    "consumer-perf",
    "simple-consumer-perf",
]


async def test_new_commands_document_their_exit_statuses() -> None:
    results = await asyncio.gather(*(run_cli(name, "--help") for name in NEW_COMMANDS))
    for name, (code, out, _) in zip(NEW_COMMANDS, results, strict=True):
        assert code == 0
        epilog = out.decode().split("exit status:\n", 1)[1].splitlines()
        statuses = {line.split()[0] for line in epilog if line.strip()}
        assert {"0", "1", "2", "130"} <= statuses, name

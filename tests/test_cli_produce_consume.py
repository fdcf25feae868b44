"""``aiokafka07 produce`` and ``consume`` as real processes against embedded brokers and a
real ZooKeeper: what goes in comes out, where the Java hash says, in each codec and
format; group offsets land in ZooKeeper exactly as far as the output went."""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import os
import random
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka07 import Producer
from aiokafka07.connection import BrokerConnection
from aiokafka07.partitioner import java_partition_index, java_string_hash
from aiokafka07.protocol import Compression, decode_message_set, encode_message_set, gzip_compress
from aiokafka07.testing import KafkaCluster
from aiokafka07.zookeeper import ZooKeeper

from .test_cli_common import ok, run_cli, start_cli, stop_cli
from .wire import address_of, eventually

Records = list[dict[str, Any]]


def parse_json(out: bytes) -> Records:
    return [json.loads(line) for line in out.decode().splitlines()]


def value_of(record: dict[str, Any]) -> bytes:
    if record["encoding"] == "base64":
        return base64.b64decode(record["value"])
    assert record["encoding"] == "utf-8"
    return str(record["value"]).encode()


def parse_length_prefixed(out: bytes) -> list[bytes]:
    values, pos = [], 0
    while pos < len(out):
        size = int.from_bytes(out[pos : pos + 4], "big")
        values.append(out[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return values


async def registered(zookeeper: str, cluster: KafkaCluster, topic: str) -> None:
    """Wait until every broker holding ``topic`` registered it (that is asynchronous, and
    a group consumer only sees registered partitions)."""
    holders = {str(b) for b, broker in cluster.brokers.items() if topic in broker.logs.topics()}
    assert holders
    async with ZooKeeper(zookeeper) as zk:
        path = f"/brokers/topics/{topic}"
        await eventually(lambda: _has(zk, path, holders))


async def _has(zk: ZooKeeper, path: str, children: set[str]) -> bool:
    return children <= set(await zk.get_children(path))


async def committed(zookeeper: str, group: str, topic: str) -> dict[str, int]:
    async with ZooKeeper(zookeeper) as zk:
        root = f"/consumers/{group}/offsets/{topic}"
        return {
            name: int(await zk.get_data(f"{root}/{name}") or "")
            for name in await zk.get_children(root)
        }


def last_offsets(records: Records, owned: Iterable[str] = ()) -> dict[str, int]:
    """Per "b-p", the offset of the last record printed: what the group must commit; 0
    (where --from-beginning started) for ``owned`` partitions nothing came from."""
    result = dict.fromkeys(owned, 0)
    for record in records:
        result[f"{record['broker_id']}-{record['partition']}"] = record["offset"]
    return result


async def shallow_codecs(cluster: KafkaCluster, topic: str) -> set[Compression]:
    """The codecs of the top-level entries stored for ``topic`` on every broker."""
    codecs = set()
    for broker_id, broker in cluster.brokers.items():
        async with await BrokerConnection.open(address_of(cluster, broker_id)) as conn:
            for partition in range(broker.config.num_partitions):
                response = await conn.fetch(topic, partition, 0, 1 << 20)
                entries = decode_message_set(response.message_set, shallow=True).messages
                codecs |= {m.compression for m in entries}
    return codecs


async def test_lines_round_trip_in_every_codec(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(2, num_partitions=2) as cluster:
        zk = ["--zookeeper", zookeeper]
        lines = [f"line {i} {'x' * (i % 7)}" for i in range(300)]
        text = ("\r\n".join(lines[:10]) + "\n" + "\n".join(lines[10:])).encode()  # no final \n
        for codec in ("none", "gzip", "snappy"):
            topic = f"lines-{codec}"
            code, _, err = await run_cli(
                "produce", topic, *zk, "--compression", codec, "--batch-size", "50", stdin=text
            )
            assert code == 0, err
            assert err.startswith("produced 300 messages (")
            assert err.strip().endswith(f" to {topic}")
            await registered(zookeeper, cluster, topic)
            assert await shallow_codecs(cluster, topic) == {Compression.parse(codec)}
            out = await ok(
                "consume",
                topic,
                *zk,
                "--from-beginning",
                "-n",
                "300",
                "--timeout-ms",
                "5000",
                "-f",
                "json",
                "-q",
            )
            records = parse_json(out)
            assert sorted(value_of(r) for r in records) == sorted(x.encode() for x in lines)
            by_partition = collections.defaultdict(list)
            for record in records:
                assert record["topic"] == topic
                by_partition[(record["broker_id"], record["partition"])].append(record)
            for got in by_partition.values():  # in produce order within each partition
                offsets = [r["offset"] for r in got]
                assert offsets == sorted(offsets)
                numbers = [int(value_of(r).split()[1]) for r in got]
                assert numbers == sorted(numbers), (codec, numbers)
        # A whitelist subscribes to all three topics; a blacklist to none of them.
        out = await ok("consume", *zk, "--whitelist", "lines-.*", "--from-beginning",
                       "-n", "900", "--timeout-ms", "5000", "-f", "json", "-q")  # fmt: skip
        counts = collections.Counter(r["topic"] for r in parse_json(out))
        assert counts == {f"lines-{codec}": 300 for codec in ("none", "gzip", "snappy")}
        out = await ok("consume", *zk, "--blacklist", "lines-.*", "--from-beginning",
                       "--timeout-ms", "300", "-q")  # fmt: skip
        assert out == b""


async def test_length_prefixed_binary_and_output_formats(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    rng = random.Random(7)
    values = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) for _ in range(50)]
    values += [b"plain text", "ünïcödé".encode(), b"with\nnewline"]
    data = b"".join(len(v).to_bytes(4, "big") + v for v in values)
    async with kafka_cluster(1, num_partitions=1):
        zk = ["--zookeeper", zookeeper]
        await ok("produce", "bin", *zk, "--format", "length-prefixed", "--compression", "gzip",
                 stdin=data)  # fmt: skip
        consume = ["consume", "bin", *zk, "--from-beginning", "-q"]
        out = await ok(*consume, "--max-messages", str(len(values)), "-f", "length-prefixed")
        assert parse_length_prefixed(out) == values
        records = parse_json(await ok(*consume, "--max-messages", str(len(values)), "-f", "json"))
        assert [value_of(r) for r in records] == values
        encodings = {v: r["encoding"] for v, r in zip(values, records, strict=True)}
        assert encodings[b"plain text"] == "utf-8"
        assert records[values.index("ünïcödé".encode())]["value"] == "ünïcödé"
        assert "base64" in encodings.values()
        hexed = await ok(*consume, "--max-messages", "3", "-f", "hex")
        assert hexed.decode().splitlines() == [v.hex() for v in values[:3]]
        raw = await ok(*consume, "--max-messages", "3")  # raw is the default
        assert raw == b"".join(v + b"\n" for v in values[:3])
        # A truncated record: what came before is sent, then one clear error.
        code, _, err = await run_cli("produce", "bin", *zk, "--format", "length-prefixed",
                                     stdin=data[:-3])  # fmt: skip
        assert code == 1
        assert err.strip().endswith(
            f"error: stdin: the input ends inside record {len(values)} "
            f"({4 + len(values[-1]) - 3} bytes after the last complete record)"
        )


async def test_keys_land_on_the_java_hash_partition(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(2, num_partitions=2) as cluster:
        # Both brokers register the topic first, so the producer sees all four partitions.
        async with Producer(zookeeper=zookeeper) as producer:
            for target in [(0, 0), (1, 0)]:
                await producer.send_and_wait("keyed", b"warm-up", partition=target)
        await registered(zookeeper, cluster, "keyed")
        keys = [f"user-{i}" for i in range(40)] + ["ключ", "日本"]
        lines = "".join(f"{key}\tvalue of {key}\n" for key in keys).encode()
        await ok("produce", "keyed", "--zookeeper", zookeeper, "--key-separator", r"\t",
                 stdin=lines)  # fmt: skip
        count = str(len(keys) + 2)
        out = await ok("consume", "keyed", "--zookeeper", zookeeper, "--from-beginning",
                       "-n", count, "--timeout-ms", "5000", "-f", "json", "-q")  # fmt: skip
        candidates = [(0, 0), (0, 1), (1, 0), (1, 1)]  # numerically sorted, as 0.7.2 does
        placed = {
            value_of(r).decode().removeprefix("value of "): (r["broker_id"], r["partition"])
            for r in parse_json(out)
            if value_of(r) != b"warm-up"
        }
        assert placed.keys() == set(keys)
        for key in keys:
            assert placed[key] == candidates[java_partition_index(java_string_hash(key), 4)], key
        assert len(set(placed.values())) == 4


async def test_group_offsets_follow_the_output(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(2, num_partitions=2) as cluster:
        zk = ["--zookeeper", zookeeper]
        await ok("produce", "g", *zk, stdin=b"".join(b"m%03d\n" % i for i in range(100)))
        await registered(zookeeper, cluster, "g")
        json_args = ["-f", "json", "-q"]
        # --max-messages: exactly that many printed, and exactly those committed.
        first = parse_json(await ok("consume", "g", *zk, "--group", "g1", "--from-beginning",
                                    "--max-messages", "10", *json_args))  # fmt: skip
        assert len(first) == 10
        partitions = {f"{b}-{p}" for b in (0, 1) for p in (0, 1)}
        stored = await committed(zookeeper, "g1", "g")
        assert stored.keys() <= partitions
        assert stored == last_offsets(first, owned=stored)
        # Ctrl-C while waiting for more: everything was printed and is committed.
        proc = await start_cli("consume", "g", *zk, "--group", "g1", *json_args)
        assert proc.stdout is not None
        rest: Records = []
        while len(rest) < 90:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, "consume ended early"
            rest.append(json.loads(line))
        code, out, err = await stop_cli(proc, signal.SIGINT)
        assert code == 0, err
        assert out == b""
        assert "Traceback" not in err
        values = sorted(value_of(r) for r in first + rest)
        assert values == [b"m%03d" % i for i in range(100)]
        stored = await committed(zookeeper, "g1", "g")
        assert stored == last_offsets(first + rest, owned=stored)
        async with ZooKeeper(zookeeper) as zk_session:
            assert await zk_session.get_children("/consumers/g1/ids") == []  # left the group
        # SIGTERM right away: a clean stop too; the group resumes where it was.
        await ok("produce", "g", *zk, stdin=b"late\n")
        proc = await start_cli("consume", "g", *zk, "--group", "g1", *json_args)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        code, out, err = await stop_cli(proc, signal.SIGTERM)
        assert code == 0, err
        assert [value_of(json.loads(x)) for x in (line + out).splitlines()] == [b"late"]
        # Without --group: a fresh console-consumer group, deleted at exit (0.7.2).
        one = parse_json(await ok("consume", "g", *zk, "--from-beginning", "-n", "1", *json_args))
        assert len(one) == 1
        async with ZooKeeper(zookeeper) as zk_session:
            assert await zk_session.get_children("/consumers") == ["g1"]
        # --from-beginning with the named group starts over (0.7.2 deletes its offsets).
        again = await ok("consume", "g", *zk, "--group", "g1", "--from-beginning",
                         "--max-messages", "101", *json_args)  # fmt: skip
        assert len(parse_json(again)) == 101


async def test_simple_mode_static_brokers_and_broken_pipe(
    kafka_cluster: Callable[..., KafkaCluster],
) -> None:
    async with kafka_cluster(2, zookeeper=None) as cluster:
        brokers = ["--brokers", cluster.broker_list]
        lines = b"".join(b"%05d %s\n" % (i, b"y" * 90) for i in range(3000))
        await ok("produce", "s", *brokers, "--batch-size", "100", stdin=lines)
        # With --brokers: partition 0 of each broker unless --broker-partition.
        out = await ok("consume", "s", *brokers, "--from-beginning", "-n", "3000",
                       "--timeout-ms", "10000", "-f", "json", "-q")  # fmt: skip
        records = parse_json(out)
        assert sorted(value_of(r) for r in records) == lines.splitlines()
        assert {(r["broker_id"], r["partition"]) for r in records} == {(0, 0), (1, 0)}
        # --offset: from the middle of one partition, where a message starts.
        mine = [r for r in records if (r["broker_id"], r["partition"]) == (1, 0)]
        start = mine[9]["offset"]
        out = await ok("consume", "s", *brokers, "--broker-partition", "1-0", "--offset",
                       str(start), "-n", "5", "-q")  # fmt: skip
        assert out.splitlines() == [value_of(r) for r in mine[10:15]]
        # The reader of the output goes away: a quiet exit 0, no traceback.
        command = (
            f"'{sys.executable}' -m aiokafka07 consume s --brokers {cluster.broker_list} "
            "--from-beginning --timeout-ms 10000 | head -n 2; echo status ${PIPESTATUS[0]} >&2"
        )
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert len(out.splitlines()) == 2
        assert "Traceback" not in err.decode()
        assert "BrokenPipe" not in err.decode()
        assert err.decode().strip().endswith("status 0")


async def test_consuming_what_is_not_there_says_why_once(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1):
        wrong_chroot = f"{zookeeper}-wrong"
        cases = [
            (
                ("nothere", "-z", zookeeper),
                f"topic nothere has no partitions registered in ZooKeeper at {zookeeper} (",
            ),
            (("--whitelist", "zz.*", "-z", zookeeper), "no registered topic is selected by"),
            (
                ("nothere", "-z", wrong_chroot),
                f"topic nothere has no partitions registered in ZooKeeper at {wrong_chroot} "
                f"(chroot /{wrong_chroot.partition('/')[2]}): no broker is registered there "
                "either (/brokers/ids has no children). Check the chroot",
            ),
        ]
        results = await asyncio.gather(
            *(run_cli("consume", *args, "--timeout-ms", "500") for args, _ in cases)
        )
        for (_, reason), (code, out, err) in zip(cases, results, strict=True):
            assert code == 0, err
            assert out == b""
            lines = err.splitlines()
            assert len(lines) == 2, err
            assert lines[0].startswith(f"aiokafka07 consume: warning: {reason}"), err
            assert lines[0].endswith("; waiting"), err
            assert lines[1].startswith("consumed 0 messages (0 B) in "), err
        # Simple mode has nothing to wait for: the same reason, as the error.
        code, _, err = await run_cli("consume", "nothere", "--simple", "-z", wrong_chroot)
        assert code == 1
        assert (
            f"error: topic nothere has no partitions registered in ZooKeeper at {wrong_chroot}"
            in err
        )
        assert "no broker is registered there either" in err


async def test_a_topic_created_while_consuming_is_printed_from_its_first_message(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """The issue's scenario: ``consume chat -z`` waits for a topic that does not exist yet,
    then ``produce`` sends two lines; both are printed. The partition appeared after the
    consumer subscribed, so everything in it is new to it (the default "largest" applies
    only to partitions that existed then)."""
    async with kafka_cluster(1) as cluster:
        proc = await start_cli("consume", "chat", "-z", zookeeper)
        assert proc.stdout is not None
        assert proc.stderr is not None
        waiting = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert b"topic chat has no partitions" in waiting, waiting
        # Typed one at a time: the first line creates the topic (its broker registers it
        # after writing the line), the second comes once the consumer can see it.
        producer = await start_cli("produce", "chat", "-z", zookeeper, stdin=True)
        assert producer.stdin is not None
        producer.stdin.write(b"first\n")
        await producer.stdin.drain()
        await eventually(lambda: "chat" in cluster.broker(0).logs.topics(), 30)
        await registered(zookeeper, cluster, "chat")
        producer.stdin.write(b"second\n")
        producer.stdin.close()
        code, _, err = await stop_cli(producer, 0)  # (signal 0: none; it ends at EOF)
        assert code == 0, err
        lines = [await asyncio.wait_for(proc.stdout.readline(), 30) for _ in range(2)]
        code, out, err = await stop_cli(proc, signal.SIGINT)
        assert code == 0, err
        assert lines + out.splitlines(keepends=True) == [b"first\n", b"second\n"]


async def test_console_producer_compression_level(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """``--compression-level`` is gzip's: the stored wrapper is deflated at that level;
    with another codec it is a usage error (exit 2) and nothing is sent."""
    lines = [f"a line of text to deflate, number {i}" for i in range(20)]
    async with kafka_cluster(1, num_partitions=1) as cluster:
        zk = ["--zookeeper", zookeeper]
        code, _, err = await run_cli(
            "produce", "lvl", *zk, "--compression", "snappy", "--compression-level", "1",
            stdin=b"x\n",
        )  # fmt: skip
        assert code == 2, err
        assert "--compression-level is gzip's" in err
        await ok("produce", "lvl", *zk, "--compression", "gzip", "--compression-level", "1",
                 "--batch-size", "100", "--linger-ms", "5000",
                 stdin="\n".join(lines).encode())  # fmt: skip
        # (Lingering 5 s: every line is read before the batch goes, one wrapper however
        # slowly a busy machine feeds them; stdin's end sends it at once.)
        async with await BrokerConnection.open(address_of(cluster, 0)) as conn:
            response = await conn.fetch("lvl", 0, 0, 1 << 20)
        (wrapper,) = decode_message_set(response.message_set, shallow=True).messages
        inner = encode_message_set([line.encode() for line in lines])
        assert wrapper.value == gzip_compress(inner, 1) != gzip_compress(inner)

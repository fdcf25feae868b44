"""``aiokafka07 offsets``, ``groups``, ``export-offsets`` and ``import-offsets`` as real
processes: the numbers they print are checked against the brokers and ZooKeeper."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from aiokafka07 import EARLIEST, LATEST, Producer, SimpleConsumer
from aiokafka07.group import Consumer
from aiokafka07.testing import KafkaCluster
from aiokafka07.zookeeper import ZooKeeper

from .test_cli_common import fails, ok
from .test_cli_produce_consume import committed, registered


async def fill(zookeeper: str, cluster: KafkaCluster, topic: str, count: int) -> None:
    """``count`` messages on each of the four partitions of a two-broker cluster."""
    async with Producer(zookeeper=zookeeper) as producer:
        for broker_id in (0, 1):
            for partition in (0, 1):
                for i in range(count):
                    await producer.send(topic, b"%s-%d" % (topic.encode(), i),
                                        partition=(broker_id, partition))  # fmt: skip
    await registered(zookeeper, cluster, topic)


async def broker_offsets(cluster: KafkaCluster, topic: str, time: int) -> dict[str, int]:
    result = {}
    for broker_id, broker in cluster.brokers.items():
        async with SimpleConsumer("127.0.0.1", broker.port) as consumer:
            for partition in (0, 1):
                offsets = await consumer.offsets_before(topic, partition, time, 1)
                result[f"{broker_id}-{partition}"] = offsets[0]
    return result


async def test_offsets_table_and_json_match_the_brokers(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(2, num_partitions=2) as cluster:
        await fill(zookeeper, cluster, "o", 7)
        latest = await broker_offsets(cluster, "o", LATEST)
        assert all(offset > 0 for offset in latest.values())
        table = (await ok("offsets", "o", "--zookeeper", zookeeper)).decode().splitlines()
        assert table[0].split() == ["TOPIC", "PARTITION", "BROKER", "OFFSETS", "(latest)"]
        shown = {row.split()[1]: int(row.split()[3]) for row in table[1:]}
        assert shown == latest
        ports = {row.split()[1]: row.split()[2] for row in table[1:]}
        assert ports["1-0"] == f"127.0.0.1:{cluster.broker(1).port}"
        document = json.loads(await ok("offsets", "o", "--zookeeper", zookeeper, "--json",
                                       "--time", "earliest", "--max", "3"))  # fmt: skip
        assert document["time"] == "earliest"
        assert {
            f"{p['broker_id']}-{p['partition']}": p["offsets"] for p in document["partitions"]
        } == {name: [0] for name in latest}
        # A static broker list, chosen partitions, and several offsets (newest first).
        static = ["--brokers", cluster.broker_list, "--broker-partition", "1-1"]
        document = json.loads(await ok("offsets", "o", *static, "--max", "5", "--json"))
        assert document["partitions"] == [
            {"broker_id": 1, "partition": 1, "host": "127.0.0.1",
             "port": cluster.broker(1).port, "offsets": [latest["1-1"], 0]},
        ]  # fmt: skip
        assert (await broker_offsets(cluster, "o", EARLIEST)) == dict.fromkeys(latest, 0)
        error = await fails("offsets", "unknown", "--zookeeper", zookeeper)
        assert f"topic unknown has no partitions registered in ZooKeeper at {zookeeper} (" in error
        assert "2 brokers registered there (ids 0, 1) but none has the topic" in error


async def test_groups_list_describe_and_offsets_round_trip(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str, tmp_path: Path
) -> None:
    zk = ["--zookeeper", zookeeper]
    async with kafka_cluster(2, num_partitions=2) as cluster:
        await fill(zookeeper, cluster, "lag", 10)
        await ok("consume", "lag", *zk, "--group", "readers", "--from-beginning",
                 "--max-messages", "15", "-q")  # fmt: skip
        listing = json.loads(await ok("groups", *zk, "--json"))
        assert listing == [{"group": "readers", "members": 0, "topics": ["lag"]}]
        table = (await ok("groups", "list", *zk)).decode()
        assert re.search(r"^readers\s+0\s+lag$", table, re.MULTILINE), table

        stored = await committed(zookeeper, "readers", "lag")
        log_end = await broker_offsets(cluster, "lag", LATEST)
        described = json.loads(await ok("groups", "describe", "readers", *zk, "--json"))
        assert described["members"] == []
        rows = {f"{r['broker_id']}-{r['partition']}": r for r in described["partitions"]}
        assert rows.keys() == log_end.keys()
        for name, row in rows.items():
            assert row["topic"] == "lag"
            assert row["log_end"] == log_end[name]
            assert row["committed"] == stored.get(name)
            assert row["lag"] == (None if name not in stored else log_end[name] - stored[name])
            assert row["owner"] is None
        expected_total = sum(log_end[n] - stored[n] for n in stored)
        assert described["total_lag"] == expected_total > 0
        text = (await ok("groups", "describe", "readers", *zk)).decode()
        assert text.startswith("group readers: 0 live members\n")
        assert f"total lag: {expected_total} bytes" in text
        assert re.search(r"^TOPIC\s+PARTITION\s+COMMITTED\s+LOG END\s+LAG\s+OWNER$", text, re.M)

        # Export, then import into another group: the same committed offsets.
        saved = tmp_path / "readers.json"
        await ok("export-offsets", "readers", str(saved), *zk)
        exported = json.loads(saved.read_text())
        assert exported["group"] == "readers"
        assert exported["offsets"] == {"lag": stored}
        await ok("import-offsets", "copy", str(saved), *zk)
        assert await committed(zookeeper, "copy", "lag") == stored
        # 0.7.2's own line format, through stdout and stdin.
        lines = await ok("export-offsets", "readers", "-", *zk, "--format", "zk")
        assert sorted(lines.decode().splitlines()) == sorted(
            f"/consumers/readers/offsets/lag/{name}:{offset}" for name, offset in stored.items()
        )
        await ok("import-offsets", "zkcopy", "-", *zk, stdin=lines)
        assert await committed(zookeeper, "zkcopy", "lag") == stored

        # With a live member: described with its subscription and owners; import refused.
        async with Consumer("lag", group="readers", zookeeper=zookeeper) as member:
            described = json.loads(await ok("groups", "describe", "readers", *zk, "--json"))
            assert described["members"] == [
                {"id": member.consumer_id, "subscription": {"topics": {"lag": 1}}}
            ]
            owners = {r["owner"] for r in described["partitions"]}
            assert owners == {f"{member.consumer_id}-0"}
            rewound = tmp_path / "rewound.json"
            rewound.write_text(json.dumps({"offsets": {"lag": dict.fromkeys(log_end, 0)}}))
            error = await fails("import-offsets", "readers", str(rewound), *zk)
            assert "group readers has 1 live member; they would overwrite" in error
            preview = await ok("import-offsets", "readers", str(rewound), *zk, "--dry-run")
            moved = sum(1 for offset in stored.values() if offset)
            assert f"would change {moved} of 4 offsets of group readers" in preview.decode()
        await ok("import-offsets", "readers", str(rewound), *zk)
        assert await committed(zookeeper, "readers", "lag") == dict.fromkeys(log_end, 0)
        async with ZooKeeper(zookeeper) as session:  # the copies are separate groups
            assert sorted(await session.get_children("/consumers")) == ["copy", "readers", "zkcopy"]
        bad = tmp_path / "bad.json"
        bad.write_text('{"offsets": {"lag": {"0-0": -1}}}')
        error = await fails("import-offsets", "readers", str(bad), *zk)
        assert error.endswith("offset -1 of lag/0-0 is not an offset >= 0")
        error = await fails("export-offsets", "nobody", "-", *zk)
        assert error.endswith("there is no consumer group 'nobody' in ZooKeeper")


async def test_describe_never_counts_an_unreadable_log_end_as_zero(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """A committed offset on a broker that is not registered (its log end cannot be
    read): the total lag is unknown, not the sum of the others."""
    zk = ["--zookeeper", zookeeper]
    async with kafka_cluster(2, num_partitions=2) as cluster:
        await fill(zookeeper, cluster, "gone", 5)
        async with ZooKeeper(zookeeper) as client:
            for name in ("0-0", "9-0"):  # broker 9 was never there
                await client.write_persistent(f"/consumers/partial/offsets/gone/{name}", "0")
        described = json.loads(await ok("groups", "describe", "partial", *zk, "--json"))
        rows = {f"{r['broker_id']}-{r['partition']}": r for r in described["partitions"]}
        assert rows["0-0"]["lag"] > 0
        assert rows["9-0"]["lag"] is None
        assert described["total_lag"] is None
        assert described["unknown_partitions"] == 1
        text = (await ok("groups", "describe", "partial", *zk)).decode()
        assert "total lag: unknown (1 partitions' log ends could not be read" in text

"""``aiokafka07 update-offsets`` and ``verify-rebalance`` as real processes against
embedded brokers and a real ZooKeeper: what they write and judge is checked against the
brokers, the znodes and real group members."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from aiokafka07 import EARLIEST, LATEST
from aiokafka07.group import Consumer
from aiokafka07.testing import KafkaCluster
from aiokafka07.znodes import GroupRegistry, Registration
from aiokafka07.zookeeper import ZooKeeper

from .test_cli_common import fails, ok, run_cli, start_cli
from .test_cli_offsets_groups import broker_offsets, fill
from .test_cli_produce_consume import committed


async def test_update_offsets_to_earliest_and_latest(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    zk = ["--zookeeper", zookeeper]
    async with kafka_cluster(2, num_partitions=2) as cluster:
        await fill(zookeeper, cluster, "u", 10)
        latest = await broker_offsets(cluster, "u", LATEST)
        assert all(offset > 0 for offset in latest.values())
        out = await ok("update-offsets", "latest", "readers", "u", *zk)
        # 0.7.2's lines, in its order: the partition names sorted as strings.
        assert out.decode().splitlines() == [
            *(f"updating partition {n} with new offset: {latest[n]}" for n in sorted(latest)),
            "updated the offset for 4 partitions",
        ]
        assert await committed(zookeeper, "readers", "u") == latest
        # The group now starts at the end: nothing to read.
        consume = ["consume", "u", *zk, "--group", "readers", "--timeout-ms", "500", "-q"]
        assert await ok(*consume) == b""
        await ok("update-offsets", "earliest", "readers", "u", *zk)
        assert await committed(zookeeper, "readers", "u") == dict.fromkeys(latest, 0)
        assert await broker_offsets(cluster, "u", EARLIEST) == dict.fromkeys(latest, 0)
        everything = await ok(*consume, "-n", "40")
        assert sorted(everything.split()) == sorted(
            b"u-%d" % i for i in range(10) for _ in range(4)
        )

        # A live member would overwrite the offsets: refused, unless --force; --dry-run
        # shows the change and writes nothing.
        async with Consumer("u", group="readers", zookeeper=zookeeper):
            error = await fails("update-offsets", "earliest", "readers", "u", *zk)
            assert "group readers has 1 live member; they would overwrite" in error
            preview = await ok("update-offsets", "earliest", "readers", "u", *zk, "--dry-run")
            assert preview.decode().splitlines()[-1] == "would update the offset for 4 partitions"
            assert f"would update partition 1-1 with new offset: 0 (now {latest['1-1']})" in (
                preview.decode()
            )
            assert await committed(zookeeper, "readers", "u") == latest
        error = await fails("update-offsets", "latest", "readers", "nothing", *zk)
        assert (
            f"topic nothing has no partitions registered in ZooKeeper at {zookeeper} (chroot /"
            in error
        )
        assert "but none has the topic" in error

        # A broker that cannot be asked: nothing is written (0.7.2 stops half-way).
        await ok("update-offsets", "earliest", "readers", "u", *zk)
        await cluster.stop_broker(1)
        async with ZooKeeper(zookeeper) as session:  # its topic registration stays behind
            await session.create_ephemeral("/brokers/topics/u/1", "2")
            error = await fails("update-offsets", "latest", "readers", "u", *zk)
        assert "broker 1 is unavailable (not registered)" in error
        assert error.endswith("nothing was written")
        assert await committed(zookeeper, "readers", "u") == dict.fromkeys(latest, 0)


async def verify(zookeeper: str, group: str, *extra: str) -> tuple[int, dict[str, object]]:
    code, out, err = await run_cli("verify-rebalance", group, "--zookeeper", zookeeper, "--json",
                                   *extra)  # fmt: skip
    assert code in (0, 3), err
    return code, json.loads(out)


async def test_verify_rebalance_judges_owners_against_the_assignment(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(2, num_partitions=2) as cluster:
        await fill(zookeeper, cluster, "v", 1)
        error = await fails("verify-rebalance", "nobody", "--zookeeper", zookeeper)
        assert error.endswith("there is no consumer group 'nobody' in ZooKeeper")
        # Members registered by hand (as a Java member would be), owners claimed one by one.
        async with ZooKeeper(zookeeper) as session:
            group = GroupRegistry(session, "hand")
            await group.register("hand_a", Registration({"v": 1}))
            await group.register("hand_b", Registration({"v": 1}))
            code, report = await verify(zookeeper, "hand")
            assert code == 3
            assert report["members"] == ["hand_a", "hand_b"]
            rows = {row["partition"]: row for row in report["partitions"]}  # type: ignore[attr-defined]
            # The range assignment: the first two names to hand_a-0, the last two to hand_b-0.
            assert {name: row["expected"] for name, row in rows.items()} == {
                "0-0": "hand_a-0", "0-1": "hand_a-0", "1-0": "hand_b-0", "1-1": "hand_b-0",
            }  # fmt: skip
            assert {row["status"] for row in rows.values()} == {"no owner"}
            await group.claim("v", "0-0", "hand_a-0")
            await group.claim("v", "0-1", "gone_c-0")  # a thread of no live member
            await group.claim("v", "1-0", "hand_a-0")  # live, but not where it belongs
            await group.claim("v", "1-1", "hand_b-0")
            code, report = await verify(zookeeper, "hand")
            assert code == 3
            statuses = {row["partition"]: row["status"] for row in report["partitions"]}  # type: ignore[attr-defined]
            assert statuses == {
                "0-0": "ok", "0-1": "not a member", "1-0": "moving to hand_b-0", "1-1": "ok",
            }  # fmt: skip
            code, out, _ = await run_cli("verify-rebalance", "hand", "--zookeeper", zookeeper)
            assert code == 3
            text = out.decode()
            assert text.splitlines()[0].split() == ["TOPIC", "PARTITION", "OWNER", "STATUS"]
            assert text.splitlines()[-1] == (
                "rebalance failed: 2 of 4 partitions not owned as the range assignment says "
                "(2 live members)"
            )
            await group.release("v", "0-1")
            await group.release("v", "1-0")
            await group.claim("v", "0-1", "hand_a-0")
            await group.claim("v", "1-0", "hand_b-0")
            code, out, _ = await run_cli("verify-rebalance", "hand", "--zookeeper", zookeeper)
            assert code == 0
            assert out.decode().splitlines()[-1] == (
                "rebalance ok: all 4 partitions of 1 topic are owned as the range assignment "
                "says (2 live members)"
            )
            await group.unregister("hand_a")
            await group.unregister("hand_b")
            code, out, _ = await run_cli("verify-rebalance", "hand", "--zookeeper", zookeeper)
            assert code == 3
            assert out.decode().strip() == (
                "rebalance failed: group hand has no live members, so nothing owns its partitions"
            )

        # Real members, a whitelist one among them: --wait-ms until the group has settled.
        waiting = await start_cli("verify-rebalance", "real", "--zookeeper", zookeeper,
                                  "--wait-ms", "60000", "--json")  # fmt: skip
        async with (
            Consumer("v", group="real", zookeeper=zookeeper, streams=2) as first,
            Consumer(group="real", zookeeper=zookeeper, whitelist="v|w") as second,
        ):
            out, err = await asyncio.wait_for(waiting.communicate(), 60)
            assert waiting.returncode == 0, err
            report = json.loads(out)
            owners = {row["partition"]: row["owner"] for row in report["partitions"]}
            assert sorted(owners) == ["0-0", "0-1", "1-0", "1-1"]
            threads = {f"{first.consumer_id}-0", f"{first.consumer_id}-1",
                       f"{second.consumer_id}-0"}  # fmt: skip
            assert set(owners.values()) <= threads
            assert all(row["owner"] == row["expected"] for row in report["partitions"])

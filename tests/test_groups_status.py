"""``aiokafka07 groups status`` as a real process against a real ZooKeeper and brokers: a
consumer that keeps up is OK, one that stops while producers write goes STOP, a stuck
committer (0.7's Java consumer rewrites the same offset every interval) is STALL and then
STOP once it stops writing, and an offset past the log end is ERR. The exit status says
the worst status."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiokafka07 import LATEST, Producer, SimpleConsumer
from aiokafka07.group import Consumer
from aiokafka07.testing import KafkaCluster
from aiokafka07.tools.groups import EXIT_ERR, EXIT_STALL, EXIT_STOP
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

from .test_cli_common import run_cli, start_cli, stop_cli
from .test_cli_produce_consume import registered

INTERVAL_MS = 300  # the groups' auto-commit interval, and the sampling interval
#: STOP after two intervals without a commit (the default, 20 s, is 0.7's two intervals).
MIN_STOP_MS = 2 * INTERVAL_MS


async def status(zookeeper: str, group: str, samples: int) -> tuple[int, dict[str, Any]]:
    """Run ``groups status GROUP --json``: its exit status and the group's report."""
    code, out, err = await run_cli(
        "groups", "status", group, "--zookeeper", zookeeper, "--json",
        "--samples", str(samples), "--interval-ms", str(INTERVAL_MS),
        "--min-stop-ms", str(MIN_STOP_MS),
    )  # fmt: skip
    assert code in (0, 3, 4, 5, 6), err
    (report,) = json.loads(out)["groups"]
    return code, report


async def written(zookeeper: str, cluster: KafkaCluster, topic: str, count: int) -> None:
    """``count`` messages written to ``topic`` and the topic registered."""
    async with Producer(zookeeper=zookeeper) as producer:
        for i in range(count):
            await producer.send(topic, b"message %d" % i)
    await registered(zookeeper, cluster, topic)


def statuses(report: dict[str, Any]) -> set[str]:
    return {p["status"] for p in report["partitions"]}


@contextlib.asynccontextmanager
async def producing(zookeeper: str, topic: str) -> AsyncIterator[None]:
    """Keep writing to ``topic`` (about 50 messages a second) while inside."""

    async def write(producer: Producer) -> None:
        for i in range(1_000_000):
            await producer.send(topic, b"message %d" % i)
            await asyncio.sleep(0.02)

    async with Producer(zookeeper=zookeeper) as producer:
        writer = asyncio.ensure_future(write(producer))
        try:
            yield
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer


async def log_end(cluster: KafkaCluster, topic: str) -> int:
    """OFFSETS latest of ``topic`` 0-0."""
    async with SimpleConsumer("127.0.0.1", cluster.broker(0).port) as consumer:
        (offset,) = await consumer.offsets_before(topic, 0, LATEST, 1)
    return offset


async def test_a_consumer_that_keeps_up_is_ok_and_stop_once_it_stops_reading(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1) as cluster:
        await written(zookeeper, cluster, "reads", 20)
        async with Consumer(
            "reads", group="keeps-up", zookeeper=zookeeper, auto_commit_interval_ms=INTERVAL_MS
        ) as consumer:
            for _ in range(20):
                await asyncio.wait_for(consumer.getone(), 30)
            await consumer.commit()
            committed = time.monotonic()  # its last commit: STOP counts from here
            code, report = await status(zookeeper, "keeps-up", 3)
            assert (code, report["status"]) == (0, "OK"), report
            (partition,) = report["partitions"]
            assert partition["lag"] == 0
            assert partition["reason"] == "caught up (lag 0)"
            # It stops reading (still a member), producers go on: no commit moves any more,
            # so STOP once two intervals passed since its last commit (its window is one
            # commit, of span 0), never STALL (it writes nothing it did not move).
            async with producing(zookeeper, "reads"):
                for _ in range(20):
                    code, report = await status(zookeeper, "keeps-up", 2)
                    assert report["status"] in ("OK", "STOP"), report
                    if code == EXIT_STOP:
                        break
                assert (code, report["status"]) == (EXIT_STOP, "STOP"), report
            assert time.monotonic() - committed > 2 * INTERVAL_MS / 1000
            (partition,) = report["partitions"]
            assert partition["lag"] > 0
            assert partition["reason"].startswith("no commit for ")


async def test_a_stuck_committer_is_stall_then_stop_when_it_stops_writing(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """0.7.2's Java consumer rewrites every owned offset each auto-commit interval, moved
    or not: a live but stuck one makes commits that do not move (STALL); once it stops
    writing (it died), STOP."""
    async with kafka_cluster(1) as cluster, ZooKeeper(zookeeper) as zk:
        await written(zookeeper, cluster, "stuck", 20)
        registry = GroupRegistry(zk, "java")
        rewrites = 0

        async def rewrite() -> None:  # the Java consumer's auto-commit, a stuck one
            nonlocal rewrites
            while True:
                await registry.commit("stuck", "0-0", 100)
                rewrites += 1
                await asyncio.sleep(INTERVAL_MS / 1000 / 4)

        async with producing(zookeeper, "stuck"):
            committer = asyncio.ensure_future(rewrite())
            try:
                code, report = await status(zookeeper, "java", 4)
                assert (code, report["status"]) == (EXIT_STALL, "STALL"), report
                (partition,) = report["partitions"]
                assert partition["committed"] == 100
                assert partition["lag"] > 0
                assert partition["reason"].startswith("offset 100 did not move over 4 commits")
                assert rewrites >= 4
            finally:
                committer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await committer
            for _ in range(20):
                code, report = await status(zookeeper, "java", 2)
                assert report["status"] in ("OK", "STOP"), report
                if code == EXIT_STOP:
                    break
            assert (code, report["status"]) == (EXIT_STOP, "STOP"), report


async def test_an_offset_past_the_log_end_is_err(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1) as cluster, ZooKeeper(zookeeper) as zk:
        await written(zookeeper, cluster, "past", 5)
        end = await log_end(cluster, "past")
        registry = GroupRegistry(zk, "ahead")
        await registry.commit("past", "0-0", end)
        code, report = await status(zookeeper, "ahead", 1)
        assert (code, statuses(report)) == (0, {"OK"}), report
        await registry.commit("past", "0-0", end + 1000)  # e.g. a bad import-offsets
        code, report = await status(zookeeper, "ahead", 1)
        assert (code, report["status"]) == (EXIT_ERR, "ERR"), report
        (partition,) = report["partitions"]
        assert partition["lag"] == -1000
        assert partition["reason"] == f"committed offset {end + 1000} is past the log end {end}"


async def test_an_unreadable_log_end_is_err_and_the_total_unknown(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """A committed offset on a broker that is not registered: that partition is ERR with
    its lag unknown, and the group's total lag is unknown (null; "unknown" in the
    table), not the sum of the partitions that could be read."""
    async with kafka_cluster(1) as cluster, ZooKeeper(zookeeper) as zk:
        await written(zookeeper, cluster, "half", 5)
        registry = GroupRegistry(zk, "half-known")
        await registry.commit("half", "0-0", 0)
        await registry.commit("half", "9-0", 0)  # broker 9 was never there
        code, report = await status(zookeeper, "half-known", 1)
        assert code == EXIT_ERR, report
        rows = {f"{p['broker_id']}-{p['partition']}": p for p in report["partitions"]}
        assert rows["0-0"]["lag"] > 0
        assert (rows["0-0"]["lag_messages"], rows["0-0"]["lag_messages_method"]) == (5, "exact")
        assert rows["9-0"]["lag"] is None
        assert rows["9-0"]["lag_messages"] is None  # unknown, never 0
        assert rows["9-0"]["status"] == "ERR"
        assert report["total_lag"] is None
        assert report["total_lag_messages"] is None
        code, out, _ = await run_cli(
            "groups", "status", "--zookeeper", zookeeper, "--samples", "1",
        )  # fmt: skip
        line = next(x for x in out.decode().splitlines() if x.startswith("half-known"))
        assert line.split()[1:4] == ["2", "unknown", "unknown"], line


async def test_lag_in_messages_counts_compressed_messages(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """The lag in messages of the last sample is the messages written and not consumed,
    a gzip or snappy wrapper counted as the messages in it; JSON and tables show it."""
    async with kafka_cluster(1) as cluster, ZooKeeper(zookeeper) as zk:
        await written(zookeeper, cluster, "mixed", 7)
        consumed = await log_end(cluster, "mixed")
        for codec in ("gzip", "snappy"):
            async with Producer(zookeeper=zookeeper, compression=codec) as producer:
                futures = [
                    await producer.send("mixed", b"%s %d" % (codec.encode(), i)) for i in range(30)
                ]
                await asyncio.gather(*futures)
        await written(zookeeper, cluster, "mixed", 5)
        await GroupRegistry(zk, "mixed").commit("mixed", "0-0", consumed)
        _, report = await status(zookeeper, "mixed", 1)  # OK, or STOP on a slow start
        (partition,) = report["partitions"]
        assert (partition["lag_messages"], partition["lag_messages_method"]) == (65, "exact")
        assert partition["lag"] == await log_end(cluster, "mixed") - consumed
        assert (report["total_lag_messages"], report["total_lag_messages_method"]) == (65, "exact")
        _, out, _ = await run_cli(
            "groups", "status", "mixed", "--zookeeper", zookeeper, "--samples", "1",
        )  # fmt: skip
        header, row = out.decode().splitlines()[:2]
        assert header.split()[:7] == [
            "TOPIC",
            "PARTITION",
            "COMMITTED",
            "LOG",
            "END",
            "LAG",
            "MESSAGES",
        ]
        assert row.split()[5] == "65", row


async def test_the_first_ctrl_c_judges_what_was_sampled(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    async with kafka_cluster(1) as cluster, ZooKeeper(zookeeper) as zk:
        await written(zookeeper, cluster, "cut", 1)
        await GroupRegistry(zk, "cut").commit("cut", "0-0", await log_end(cluster, "cut"))
        proc = await start_cli(
            "groups", "status", "cut", "--zookeeper", zookeeper, "--json", "--progress",
            "--samples", "1000", "--interval-ms", "100",
        )  # fmt: skip
        assert proc.stderr is not None
        seen = b""
        while not re.search(rb"[1-9]\d*/1000", seen):  # the progress bar counts samples
            chunk = await asyncio.wait_for(proc.stderr.read(4096), 60)
            assert chunk, seen
            seen += chunk
        code, out, err = await stop_cli(proc)
        assert code == 0, err
        document = json.loads(out)
        assert 1 <= document["samples"] < 1000
        assert document["groups"][0]["status"] == "OK"


async def test_the_exporter_and_groups_status_give_one_document(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str
) -> None:
    """One evaluator, one set of defaults, one shape: a group that read a third of a topic,
    committed and left is STOP for both the exporter's /status/<group> and ``groups status
    --json`` given the same ``--min-stop-ms``, in the same document (every key, status,
    lag in bytes and in messages; only how long ago the commit was differs)."""
    from aiokafka07.monitor.cluster_state import ClusterMonitor
    from aiokafka07.monitor.server import ExporterServer
    from aiokafka07.monitor.status import LagTracker

    from .test_exporter import get

    async with kafka_cluster(1) as cluster:
        await written(zookeeper, cluster, "one-doc", 30)
        async with Consumer("one-doc", group="one-doc", zookeeper=zookeeper) as consumer:
            for _ in range(10):
                await asyncio.wait_for(consumer.getone(), 30)
            await consumer.commit()
        tracker = LagTracker(min_stop_ms=MIN_STOP_MS)
        monitor = ClusterMonitor(zookeeper, on_refresh=tracker.observe, interval_ms=200.0)
        async with monitor, ExporterServer(monitor, tracker, port=0) as server:
            for _ in range(100):
                code, text = await get(server, "/status/one-doc")
                exported = json.loads(text)
                if code == 200 and exported["status"] == "STOP":
                    break
                await asyncio.sleep(0.1)
            assert exported["status"] == "STOP", exported
            code, sampled = await status(zookeeper, "one-doc", 2)
        assert code == EXIT_STOP
        assert exported.pop("stale") is False

        def shown(document: dict[str, Any]) -> str:
            """The document with how long ago the commit was left out."""
            return re.sub(r"no commit for \d+ ms", "no commit for _ ms", json.dumps(document))

        assert shown(exported) == shown(sampled)
        (partition,) = sampled["partitions"]
        assert partition["lag_messages"] == 20
        assert partition["lag_messages_method"] == "exact"
        assert set(partition) >= {"broker_id", "owner", "unknown"}

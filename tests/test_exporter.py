"""``aiokafka07 exporter``: /metrics and /status scraped over HTTP, parsed with
prometheus_client's own parser, compared with the truth read through the library; a
broker killed and restarted, ZooKeeper stopped and started again, a group deleted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aiokafka07 import Producer
from aiokafka07.monitor.cluster_state import ClusterMonitor
from aiokafka07.monitor.lag import LagStatus
from aiokafka07.monitor.server import ExporterServer
from aiokafka07.monitor.status import LagTracker
from aiokafka07.testing.process import start_broker_process, stop_broker_process
from aiokafka07.testing.scrapers import scrape_while
from aiokafka07.tools.common import delete_tree
from aiokafka07.znodes import GroupRegistry, group_path
from aiokafka07.zookeeper import ZooKeeper

from .groups import log_ends, own_zookeeper, produce
from .wire import eventually

TOPIC = "events"
PARTS = [(0, 0), (0, 1), (1, 0), (1, 1)]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@contextlib.asynccontextmanager
async def exporter(
    connect: str, tracker: LagTracker | None = None, **options: Any
) -> AsyncIterator[tuple[ClusterMonitor, ExporterServer]]:
    """A monitor refreshing every 200 ms and its server on a free loopback port."""
    tracker = tracker or LagTracker()
    options = {"interval_ms": 200.0, "min_interval_ms": 50.0, **options}
    monitor = ClusterMonitor(connect, on_refresh=tracker.observe, **options)
    server = ExporterServer(monitor, tracker, port=0)
    async with monitor, server:
        yield monitor, server


async def get(server: ExporterServer, path: str) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(server.url + path) as response,
    ):
        return response.status, await response.text()


async def scrape(server: ExporterServer) -> Samples:
    """Every sample of /metrics: (name, sorted labels) → value."""
    status, text = await get(server, "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def by_labels(
    samples: Samples, name: str, **fixed: str
) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``name`` whose labels include ``fixed``, by their other labels."""
    found = {}
    for (sample, labels), value in samples.items():
        if sample != name or any(dict(labels).get(k) != v for k, v in fixed.items()):
            continue
        found[tuple((k, v) for k, v in labels if k not in fixed)] = value
    return found


def partition_key(broker: int, partition: int, topic: str = TOPIC) -> tuple[tuple[str, str], ...]:
    return (("broker", str(broker)), ("partition", str(partition)), ("topic", topic))


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_metrics_and_status_match_the_cluster(kafka_cluster: Any, zookeeper: str) -> None:
    """Log offsets, committed offsets, lag (log end - committed) and owners, for every
    partition of two groups, as the library reads them."""
    async with (
        kafka_cluster(2, zookeeper=zookeeper, num_partitions=2) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        await produce(producer, TOPIC, PARTS, 5, "a")
        first = await log_ends(cluster, TOPIC)
        await produce(producer, TOPIC, PARTS, 7, "b", pad=10)
        ends = await log_ends(cluster, TOPIC)
        behind, caught_up = GroupRegistry(zk, "behind"), GroupRegistry(zk, "caught-up")
        for name in ends:
            await behind.commit(TOPIC, name, first[name])
            await caught_up.commit(TOPIC, name, ends[name])
        async with exporter(zookeeper) as (monitor, server):
            assert await monitor.wait_refreshed(10)
            samples = await scrape(server)

    assert value(samples, "kafka07_brokers") == 2
    for broker in ("0", "1"):
        assert value(samples, "kafka07_broker_up", broker=broker) == 1
        assert value(samples, "kafka07_broker_registered", broker=broker) == 1
    newest = by_labels(samples, "kafka07_topic_partition_newest_offset")
    assert newest == {partition_key(*map(int, n.split("-"))): e for n, e in ends.items()}
    oldest = by_labels(samples, "kafka07_topic_partition_oldest_offset")
    assert set(oldest.values()) == {0}
    for group, committed in (("behind", first), ("caught-up", ends)):
        lag = by_labels(samples, "kafka07_group_partition_lag_bytes", group=group)
        offsets = by_labels(samples, "kafka07_group_partition_committed_offset", group=group)
        for name, end in ends.items():
            key = partition_key(*map(int, name.split("-")))
            assert offsets[key] == committed[name]
            assert lag[key] == end - committed[name]
        assert len(lag) == len(ends)
        total = sum(ends[n] - committed[n] for n in ends)
        assert value(samples, "kafka07_group_lag_bytes", group=group) == total
    assert value(samples, "kafka07_group_lag_bytes", group="behind") > 0
    assert value(samples, "kafka07_exporter_stale") == 0
    assert value(samples, "kafka07_exporter_zookeeper_connected") == 1


async def test_status_json_and_owner(kafka_cluster: Any, zookeeper: str) -> None:
    """/status and /status/<group> give each partition's lag and the worst status; the
    owner shows as an info metric; an unknown group is a 404."""
    async with (
        kafka_cluster(1, zookeeper=zookeeper, num_partitions=2) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        await produce(producer, TOPIC, [(0, 0), (0, 1)], 3, "a")
        ends = await log_ends(cluster, TOPIC)
        registry = GroupRegistry(zk, "g")
        await registry.commit(TOPIC, "0-0", ends["0-0"])
        await registry.commit(TOPIC, "0-1", ends["0-1"] + 1000)  # past the log end: ERR
        await registry.claim(TOPIC, "0-0", "g_host-1-0")
        async with exporter(zookeeper) as (monitor, server):
            assert await monitor.wait_refreshed(10)
            code, text = await get(server, "/status/g")
            assert code == 200
            everything = json.loads((await get(server, "/status"))[1])
            assert (await get(server, "/status/nobody"))[0] == 404
            samples = await scrape(server)
    document = json.loads(text)
    assert document["status"] == "ERR"
    assert document["stale"] is False
    rows = {f"{p['broker_id']}-{p['partition']}": p for p in document["partitions"]}
    assert rows["0-0"]["lag"] == 0
    assert rows["0-0"]["status"] == "OK"
    assert rows["0-0"]["owner"] == "g_host-1-0"
    assert rows["0-1"]["lag"] == -1000
    assert rows["0-1"]["status"] == "ERR"
    assert [g["group"] for g in everything["groups"]] == ["g"]
    owner = by_labels(samples, "kafka07_group_partition_owner_info", group="g")
    assert owner == {tuple(sorted((*partition_key(0, 0), ("owner", "g_host-1-0")))): 1}
    assert value(samples, "kafka07_group_status", group="g") == LagStatus.ERR
    assert (
        value(samples, "kafka07_group_partition_status", group="g", **dict(partition_key(0, 0)))
        == LagStatus.OK
    )


async def test_stall_then_stop(kafka_cluster: Any, zookeeper: str) -> None:
    """A consumer rewriting the same offset with lag goes STALL once its window is full,
    then STOP once it stops committing for longer than the minimum."""
    async with (
        kafka_cluster(1, zookeeper=zookeeper, num_partitions=1) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        await produce(producer, TOPIC, [(0, 0)], 3, "a")
        registry = GroupRegistry(zk, "stuck")
        tracker = LagTracker(commits=3, min_stop_ms=1500)
        async with exporter(zookeeper, tracker) as (monitor, server):

            async def partition_status() -> str:
                document = json.loads((await get(server, "/status/stuck"))[1])
                return str(document["partitions"][0]["status"])

            for _ in range(3):
                await registry.commit(TOPIC, "0-0", 10)  # behind the log end, never moving
                await monitor.wait_refreshed(10)
                await monitor.wait_refreshed(10)  # a refresh that began after the commit
            assert await partition_status() == "STALL"
            await eventually(lambda: _is(partition_status(), "STOP"), 10)
            samples = await scrape(server)
        assert value(samples, "kafka07_group_status", group="stuck") == LagStatus.STOP
        del cluster


async def _is(status: Any, expected: str) -> bool:
    return bool(await status == expected)


async def test_deleted_group_disappears(kafka_cluster: Any, zookeeper: str) -> None:
    async with (
        kafka_cluster(1, zookeeper=zookeeper) as cluster,
        ZooKeeper(zookeeper) as zk,
    ):
        await GroupRegistry(zk, "short-lived").commit(TOPIC, "0-0", 0)
        await GroupRegistry(zk, "kept").commit(TOPIC, "0-0", 0)
        async with exporter(zookeeper) as (monitor, server):
            assert await monitor.wait_refreshed(10)
            samples = await scrape(server)
            assert value(samples, "kafka07_group_members", group="short-lived") == 0
            await delete_tree(zk, group_path("short-lived"))

            async def gone() -> bool:
                samples = await scrape(server)
                return value(samples, "kafka07_group_members", group="short-lived") is None

            await eventually(gone, 10)
            samples = await scrape(server)
            assert not any(dict(labels).get("group") == "short-lived" for _, labels in samples)
            assert value(samples, "kafka07_group_members", group="kept") == 0
            assert (await get(server, "/status/short-lived"))[0] == 404
        del cluster


@contextlib.asynccontextmanager
async def broker_processes(
    tmp_path: Path, connect: str
) -> AsyncIterator[dict[int, tuple[asyncio.subprocess.Process, Any]]]:
    """Brokers 0 and 1 (2 partitions each) in processes of their own, with ``events``
    registered on both; stopped at the end (a test may replace an entry)."""
    brokers = {}
    try:
        for broker_id in (0, 1):
            brokers[broker_id] = await start_broker_process(
                tmp_path / f"b{broker_id}", broker_id=broker_id, partitions=2, zookeeper=connect
            )
        async with Producer(zookeeper=connect) as producer:
            await produce(producer, TOPIC, PARTS, 3, "a")
        yield brokers
    finally:
        for process, _ in brokers.values():
            await stop_broker_process(process)


async def test_survives_a_broker_killed_and_restarted(tmp_path: Path) -> None:
    """A killed broker shows down at once (then unregistered, once its session expired)
    while scrapes answer and nothing is stale; restarted, it is up again."""
    async with (
        own_zookeeper() as zk_server,
        broker_processes(tmp_path, zk_server.connect_string) as brokers,
        exporter(zk_server.connect_string, request_timeout_ms=1000.0) as (_, server),
    ):
        await eventually(lambda: _has_partitions(server, 4), 20)
        process, _ = brokers[1]
        process.kill()
        await process.wait()
        await eventually(lambda: _equals(server, 0, "kafka07_broker_up", broker="1"), 20)
        samples = await scrape(server)
        assert value(samples, "kafka07_broker_up", broker="0") == 1
        assert value(samples, "kafka07_exporter_stale") == 0
        await eventually(lambda: _equals(server, 0, "kafka07_broker_registered", broker="1"), 30)
        assert await _has_partitions(server, 2)  # broker 0's
        brokers[1] = await start_broker_process(
            tmp_path / "b1", broker_id=1, partitions=2, zookeeper=zk_server.connect_string
        )
        await eventually(lambda: _equals(server, 1, "kafka07_broker_up", broker="1"), 20)
        await eventually(lambda: _has_partitions(server, 4), 20)


async def test_survives_zookeeper_stopped_and_started(tmp_path: Path) -> None:
    """ZooKeeper stopped: the last values are served, marked stale; started again: fresh
    values (stale 0, a new refresh) within 10 s of its return. The refresh interval is a
    minute: the return itself must wake the refresher (about half a second when quiet:
    the reconnection backoff, then a refresh; 2.1 s was seen in a loaded CI run)."""
    async with (
        own_zookeeper() as zk_server,
        broker_processes(tmp_path, zk_server.connect_string),
        exporter(zk_server.connect_string, interval_ms=60_000.0) as (_, server),
    ):
        await eventually(lambda: _has_partitions(server, 4), 20)
        before = await scrape(server)
        await asyncio.to_thread(zk_server.stop)
        await eventually(lambda: _equals(server, 1, "kafka07_exporter_stale"), 10)
        during = await scrape(server)
        assert value(during, "kafka07_exporter_zookeeper_connected") == 0
        newest = "kafka07_topic_partition_newest_offset"
        assert by_labels(during, newest) == by_labels(before, newest)
        assert len(by_labels(during, newest)) == 4
        await asyncio.sleep(1.0)  # and still answering a while later
        assert value(await scrape(server), "kafka07_exporter_stale") == 1
        assert json.loads((await get(server, "/status"))[1])["stale"] is True
        refreshes = value(during, "kafka07_exporter_refreshes_total") or 0

        await asyncio.to_thread(zk_server.start)
        back = time.monotonic()

        async def fresh() -> bool:
            samples = await scrape(server)
            return (
                value(samples, "kafka07_exporter_stale") == 0
                and (value(samples, "kafka07_exporter_refreshes_total") or 0) > refreshes
            )

        await eventually(fresh, 10)
        waited = time.monotonic() - back
        print(f"fresh values {waited:.2f} s after ZooKeeper's return")
        assert waited < 10.0


async def _equals(server: ExporterServer, expected: float, name: str, **labels: str) -> bool:
    return value(await scrape(server), name, **labels) == expected


async def _has_partitions(server: ExporterServer, count: int) -> bool:
    samples = await scrape(server)
    return len(by_labels(samples, "kafka07_topic_partition_newest_offset")) == count


@pytest.mark.parametrize(
    ("stop", "said"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")], ids=["int", "term"]
)
async def test_command_serves_and_stops_on_ctrl_c(
    kafka_cluster: Any, zookeeper: str, stop: signal.Signals, said: str
) -> None:
    """The tool: says where it serves (127.0.0.1 by default), answers /metrics, shows
    its status line, and the first SIGINT or SIGTERM stops it cleanly (exit 0), with a
    last line that says so and counts what it did (a service's log shows a clean stop)."""
    async with kafka_cluster(1, zookeeper=zookeeper):
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aiokafka07", "exporter", "--zookeeper", zookeeper,
            "--port", "0", "--interval-ms", "200", "--progress",
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert process.stderr is not None
        try:
            line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
            assert line.startswith("aiokafka07 exporter: serving http://127.0.0.1:")
            url = line.split()[3]
            assert url.endswith("/metrics")
            timeout = aiohttp.ClientTimeout(total=5)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                scrapes = 0

                async def brokers_up() -> bool:
                    nonlocal scrapes
                    async with session.get(url) as response:
                        text = await response.text()
                    scrapes += 1
                    return 'kafka07_broker_up{broker="0"} 1.0' in text

                await eventually(brokers_up, 20)
            process.send_signal(stop)
            assert await asyncio.wait_for(process.wait(), 20) == 0
            rest = (await process.stderr.read()).decode()
            assert "error" not in rest
            # The status line (forced on with --progress; on a terminal by default).
            assert "1 broker (1 up)" in rest
            last = rest.rstrip("\n").rsplit("\n", 1)[-1]
            closing = re.fullmatch(
                rf"aiokafka07 exporter: stopped by {said} after [0-9.]+ s: ([0-9,]+) "
                r"refresh(?:es)?, ([0-9,]+) requests? answered, 0 refused \(busy\)",
                last,
            )
            assert closing is not None, last
            assert int(closing[1].replace(",", "")) >= 1
            assert int(closing[2].replace(",", "")) == scrapes
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.mark.parametrize("port", ["-1", "x"])
def test_bad_port_is_refused(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    from aiokafka07.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["exporter", "--zookeeper", "127.0.0.1:1", "--port", port])
    assert exited.value.code == 2
    assert "--port" in capsys.readouterr().err


def test_without_the_extra_it_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without aiohttp (or prometheus-client) the command says how to install the extra:
    in a checkout, as the documentation installs everything; the package index's form
    only as such (aiokafka07 is not published, so a reader with a checkout who ran it got
    an error)."""
    from aiokafka07.cli import main

    monkeypatch.setitem(sys.modules, "aiohttp", None)  # import aiohttp fails
    monkeypatch.delitem(sys.modules, "aiokafka07.monitor.server")
    assert main(["exporter", "--zookeeper", "127.0.0.1:1"]) == 1
    error = capsys.readouterr().err
    assert "the exporter needs prometheus-client and aiohttp" in error
    checkout = "in a checkout of aiokafka07, python -m pip install -e '.[exporter]'"
    published = "a package installed from an index: python -m pip install 'aiokafka07[exporter]'"
    assert checkout in error
    assert error.index(checkout) < error.index(published)


async def test_bounds_on_groups_and_partitions(kafka_cluster: Any, zookeeper: str) -> None:
    """At most --max-groups groups and --max-partitions partitions are listed; what is
    left out counts as a ``limit`` error."""
    async with (
        kafka_cluster(1, zookeeper=zookeeper, num_partitions=2) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        await produce(producer, TOPIC, [(0, 0), (0, 1)], 1, "a")
        for group in ("a", "b", "c"):
            await GroupRegistry(zk, group).commit(TOPIC, "0-0", 0)
            await GroupRegistry(zk, group).commit(TOPIC, "0-1", 0)
        async with exporter(zookeeper, max_groups=2, max_partitions=1) as (monitor, server):
            assert await monitor.wait_refreshed(10)
            samples = await scrape(server)
        del cluster
    assert set(by_labels(samples, "kafka07_group_members")) == {
        (("group", "a"),),
        (("group", "b"),),
    }
    assert len(by_labels(samples, "kafka07_topic_partition_newest_offset")) == 1
    assert len(by_labels(samples, "kafka07_group_partition_committed_offset")) == 1
    assert (value(samples, "kafka07_exporter_errors_total", kind="limit") or 0) > 0


async def tree(zk: ZooKeeper, path: str = "/") -> dict[str, tuple[str | None, int]]:
    """Every znode under ``path``: its data and last write time."""
    found = await zk.data_and_mtime(path)
    nodes = {} if found is None else {path: found}
    for child in await zk.get_children(path):
        nodes.update(await tree(zk, f"{path.rstrip('/')}/{child}"))
    return nodes


async def test_only_reads(kafka_cluster: Any, zookeeper: str) -> None:
    """Refreshing and answering scrapes writes nothing: every znode is as it was, and
    the log ends have not moved."""
    async with (
        kafka_cluster(1, zookeeper=zookeeper, num_partitions=2) as cluster,
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        await produce(producer, TOPIC, [(0, 0), (0, 1)], 2, "a")
        await GroupRegistry(zk, "g").commit(TOPIC, "0-0", 0)
        before, ends = await tree(zk), await log_ends(cluster, TOPIC)
        async with exporter(zookeeper) as (monitor, server):
            for _ in range(3):
                assert await monitor.wait_refreshed(10)
                await scrape(server)
                await get(server, "/status")
        assert await tree(zk) == before
        assert await log_ends(cluster, TOPIC) == ends


async def test_unknown_lag_is_never_zero(tmp_path: Path) -> None:
    """A SIGSTOPped broker's group partitions are unknown, not zero: ERR with the
    reason, counted in kafka07_group_partitions_unknown, left out of no sum (the group's
    kafka07_group_lag_bytes and kafka07_group_lag_messages are absent, /status says
    total_lag and total_lag_messages null, partial); their lag in messages is absent,
    under either method; the other broker's partitions keep their lag; nothing is
    stale; SIGCONT: back."""
    async with (
        own_zookeeper() as zk_server,
        broker_processes(tmp_path, zk_server.connect_string) as brokers,
        ZooKeeper(zk_server.connect_string) as zk,
    ):
        registry = GroupRegistry(zk, "g")
        for broker, partition in PARTS:
            await registry.commit(TOPIC, f"{broker}-{partition}", 0)
        async with exporter(zk_server.connect_string, request_timeout_ms=1000.0) as (_, server):
            await eventually(lambda: _has_partitions(server, 4), 20)
            before = await scrape(server)
            whole = value(before, "kafka07_group_lag_bytes", group="g")
            assert whole is not None
            assert whole > 0
            # 3 messages written to each partition, none consumed: counted.
            assert value(before, "kafka07_group_lag_messages", group="g", topic=TOPIC) == 12
            counted = by_labels(before, "kafka07_group_partition_lag_messages", group="g")
            assert sorted(counted.values()) == [3] * 4
            assert {dict(k)["method"] for k in counted} == {"exact"}
            process, _ = brokers[1]
            process.send_signal(signal.SIGSTOP)
            try:
                await eventually(
                    lambda: _equals(server, 2, "kafka07_group_partitions_unknown", group="g"), 20
                )
                samples = await scrape(server)
                assert value(samples, "kafka07_group_lag_bytes", group="g") is None
                assert value(samples, "kafka07_group_lag_messages", group="g", topic=TOPIC) is None
                messages = by_labels(samples, "kafka07_group_partition_lag_messages", group="g")
                assert sorted(dict(k)["broker"] for k in messages) == ["0", "0"]
                assert set(messages.values()) == {3}
                assert value(samples, "kafka07_group_status", group="g") == LagStatus.ERR
                statuses = by_labels(samples, "kafka07_group_partition_status", group="g")
                lags = by_labels(samples, "kafka07_group_partition_lag_bytes", group="g")
                for broker, partition in PARTS:
                    key = partition_key(broker, partition)
                    if broker == 1:
                        assert statuses[key] == LagStatus.ERR
                        assert key not in lags
                    else:
                        assert lags[key] > 0
                assert value(samples, "kafka07_exporter_stale") == 0
                status, text = await get(server, "/status/g")
                document = json.loads(text)
                assert status == 200
                assert document["stale"] is False
                assert document["total_lag"] is None
                assert document["total_lag_messages"] is None
                assert document["total_lag_messages_method"] is None
                assert document["partial"] is True
                assert document["unknown_partitions"] == 2
                for row in document["partitions"]:
                    if row["broker_id"] == 1:
                        assert row["status"] == "ERR"
                        assert row["lag"] is None
                        assert row["lag_messages"] is None
                        assert row["lag_messages_method"] is None
                        assert "broker 1 did not answer OFFSETS" in row["unknown"]
                        assert row["reason"].startswith("lag unknown: broker 1")
                    else:
                        assert row["unknown"] is None
                        assert row["lag"] > 0
                        assert row["lag_messages"] == 3
                everything = json.loads((await get(server, "/status"))[1])
                assert [g["total_lag"] for g in everything["groups"]] == [None]
            finally:
                process.send_signal(signal.SIGCONT)
            await eventually(
                lambda: _equals(server, 0, "kafka07_group_partitions_unknown", group="g"), 20
            )
            after = await scrape(server)
            assert value(after, "kafka07_group_lag_bytes", group="g") == whole
            assert value(after, "kafka07_group_lag_messages", group="g", topic=TOPIC) == 12


async def test_fresh_under_scrapes_back_to_back(kafka_cluster: Any, zookeeper: str) -> None:
    """20 clients (another process) scraping /metrics back to back do not starve the
    refresher: the state's age stays within a few refresh intervals, ZooKeeper's
    requests never time out, and a refresh's series are formatted once, not per scrape.
    (Formatting every scrape on the refresher's loop kept state_age growing for as long
    as the scrapes went on, with ZooKeeper errors.)"""
    topics, partitions = 8, 25  # 400 broker-partitions, 2 groups of 200 partitions
    async with (
        kafka_cluster(2, zookeeper=zookeeper, num_partitions=partitions),
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        targets = [(b, p) for b in range(2) for p in range(partitions)]
        for t in range(topics):
            await produce(producer, f"pressure-{t}", targets, 1, "x")
        for g in range(2):
            registry = GroupRegistry(zk, f"pressure-{g}")
            await asyncio.gather(
                *(registry.commit(f"pressure-{g}", f"{b}-{p}", 0) for b, p in targets)
            )
        interval = 1.0
        async with exporter(zookeeper, interval_ms=interval * 1000, min_interval_ms=200.0) as (
            monitor,
            server,
        ):
            assert await monitor.wait_refreshed(20)
            await scrape(server)  # formatted once before the pressure starts
            errors, refreshes, renders = (
                monitor.errors["zookeeper"],
                monitor.refreshes,
                server.renders,
            )
            seconds = 8.0
            ages: list[float] = []
            took: list[float] = []  # each refresh's own duration

            def sample() -> None:
                state = monitor.state
                assert state.refreshed_at is not None
                assert state.refresh_seconds is not None
                ages.append(time.time() - state.refreshed_at)
                took.append(state.refresh_seconds)

            report = await scrape_while(f"{server.url}/metrics", 20, seconds, sample)
            statuses = report["statuses"]
            assert set(statuses) == {"200"}  # none turned away: 8 at once, the rest wait
            served = statuses["200"]
            assert served >= 40  # back to back: many scrapes per refresh
            # Within 3 intervals; on a machine so busy that a refresh itself takes longer
            # than that, within an interval and two refreshes' time: the refresher is
            # never held up by the scrapes (starved, the age grew for all 8 s).
            assert max(ages) < max(3 * interval, interval + 2 * max(took) + 0.5), (ages, took)
            assert monitor.errors["zookeeper"] == errors
            assert monitor.refreshes - refreshes >= seconds / interval / 2
            # One formatting per refresh (and per interval without one), not per scrape.
            assert (
                server.renders - renders <= monitor.refreshes - refreshes + seconds / interval + 1
            )
            assert served > 3 * (server.renders - renders)


async def test_scrapes_beyond_the_bound_wait_then_get_503(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """max_scrapes requests are answered at once; another waits for a turn, and one that
    waited scrape_wait_ms gets 503 saying so (the exporter stays responsive)."""
    async with (
        kafka_cluster(1, zookeeper=zookeeper),
        exporter(zookeeper) as (monitor, _),
    ):
        assert await monitor.wait_refreshed(10)
        tracker = LagTracker()
        async with ExporterServer(
            monitor, tracker, port=0, max_scrapes=1, scrape_wait_ms=200.0
        ) as server:
            assert (await get(server, "/metrics"))[0] == 200
            # A scrape under way holds the only turn (on the server's own loop).
            turns, loop = server._turns, server._loop
            assert turns is not None
            assert loop is not None
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(turns.acquire(), loop))
            started = time.monotonic()
            status, text = await get(server, "/metrics")
            assert status == 503
            assert "1 requests are being answered" in text
            assert 0.2 <= time.monotonic() - started < 2
            waiting = asyncio.ensure_future(get(server, "/status"))
            await asyncio.sleep(0.05)
            loop.call_soon_threadsafe(turns.release)
            assert (await waiting)[0] == 200
    with pytest.raises(ValueError, match="max_scrapes"):
        ExporterServer(monitor, tracker, port=0, max_scrapes=0)

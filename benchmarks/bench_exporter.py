"""The exporter: a scrape answered from the cache, for 1,000 broker-partitions and 50 groups.

A real ZooKeeper (Debian's package) and two embedded brokers in processes of their own,
``--partitions`` partitions per topic each, ``--topics`` topics: 2 x 50 x 10 = 1,000
broker-partitions by default. ``--groups`` groups (50) each commit an offset for every
partition of one topic (written to ZooKeeper as 0.7.2 does), so the scrape carries
1,000 partitions' offsets and rates, and every group partition's committed offset, lag,
age and status. The exporter (:class:`~aiokafka07.monitor.cluster_state.ClusterMonitor`
and its HTTP server) runs in this process; its cache is filled by one refresh, then
``--rounds`` (>= 5) rounds each time, interleaved:

* **scrape**: ``/metrics``'s body as the server builds it (``generate_latest`` of the
  exporter's collector over the cached state, with the lag windows judged);
* **floor**: ``generate_latest`` of a plain ``prometheus_client`` registry holding the same
  samples (the same names, labels and values, as gauges set beforehand): formatting alone;
* **HTTP**: a GET of ``/metrics`` over loopback, as Prometheus would scrape it.

Printed: the median and spread (min..max) of each, the ratio scrape / floor per round,
the absolute time of a scrape (the issue asks for under 1 s), the number of samples, the
time the refresh took, and the load before and after. No verdict.

Run: ``python benchmarks/bench_exporter.py [--partitions N] [--topics T] [--groups G]
[--rounds R] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import tempfile
import time
from typing import Any

import aiohttp
from common import load, ratios, spread, start_broker
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aiokafka07 import Producer
from aiokafka07.monitor.cluster_state import ClusterMonitor
from aiokafka07.monitor.server import ExporterServer
from aiokafka07.monitor.status import LagTracker
from aiokafka07.testing import ZooKeeperServer
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

BROKERS = 2


def floor_registry(text: str) -> CollectorRegistry:
    """A plain registry with the samples of ``text`` as gauges (the formatting floor)."""
    registry = CollectorRegistry(auto_describe=False)
    gauges: dict[str, Gauge] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            gauge = gauges.get(sample.name)
            if gauge is None:
                gauge = Gauge(
                    sample.name, family.documentation, sorted(sample.labels), registry=registry
                )
                gauges[sample.name] = gauge
            (gauge.labels(**sample.labels) if sample.labels else gauge).set(sample.value)
    return registry


async def build(connect: str, topics: int, partitions: int, groups: int) -> None:
    """Register the topics on both brokers (a message to every broker-partition) and
    commit an offset for every partition of one topic per group."""
    broker_partitions = [(b, p) for b in range(BROKERS) for p in range(partitions)]
    async with Producer(zookeeper=connect) as producer, ZooKeeper(connect) as zk:
        futures = []
        for t in range(topics):
            for broker, partition in broker_partitions:
                futures.append(
                    await producer.send(f"topic-{t}", b"x" * 100, partition=(broker, partition))
                )
        await asyncio.gather(*futures)
        commits = []
        for g in range(groups):
            registry = GroupRegistry(zk, f"group-{g}")
            topic = f"topic-{g % topics}"
            commits += [registry.commit(topic, f"{b}-{p}", 0) for b, p in broker_partitions]
        for start in range(0, len(commits), 500):
            await asyncio.gather(*commits[start : start + 500])


async def run(topics: int, partitions: int, groups: int, rounds: int) -> dict[str, Any]:
    results: dict[str, Any] = {
        "broker_partitions": BROKERS * partitions * topics,
        "groups": groups,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "load_before": load(),
    }
    with tempfile.TemporaryDirectory() as tmp, ZooKeeperServer() as zk_server:
        connect = zk_server.connect_string
        brokers = [
            await start_broker(f"{tmp}/b{b}", partitions=partitions, zookeeper=connect, broker_id=b)
            for b in range(BROKERS)
        ]
        try:
            await build(connect, topics, partitions, groups)
            tracker = LagTracker()
            monitor = ClusterMonitor(
                connect,
                interval_ms=3_600_000.0,  # one refresh fills the cache; rounds read it
                refresh_timeout_ms=60_000.0,
                on_refresh=tracker.observe,
            )
            async with monitor, ExporterServer(monitor, tracker, port=0) as server:
                if not await monitor.wait_refreshed(120):
                    raise RuntimeError(f"no refresh: {monitor.last_error}")
                body = server.scrape().decode()
                floor = floor_registry(body)
                results["samples"] = sum(
                    len(f.samples) for f in text_string_to_metric_families(body)
                )
                results["scrape_bytes"] = len(body)
                results["refresh_s"] = monitor.state.refresh_seconds
                scrape_s, floor_s, http_s = [], [], []
                async with aiohttp.ClientSession() as session:
                    for _ in range(rounds):
                        started = time.perf_counter()
                        server.scrape()
                        scrape_s.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        generate_latest(floor)
                        floor_s.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        async with session.get(f"{server.url}/metrics") as response:
                            await response.read()
                        http_s.append(time.perf_counter() - started)
            results["scrape_s"] = spread(scrape_s)
            results["floor_s"] = spread(floor_s)
            results["http_s"] = spread(http_s)
            results["scrape_over_floor"] = ratios(scrape_s, floor_s)
        finally:
            for process, _ in brokers:
                process.terminate()
                await process.wait()
    results["load_after"] = load()
    return results


def render(r: dict[str, Any]) -> str:
    def seconds(f: dict[str, float]) -> str:
        return f"{f['median'] * 1000:.1f} ms ({f['min'] * 1000:.1f}..{f['max'] * 1000:.1f})"

    ratio = r["scrape_over_floor"]
    return "\n".join(
        [
            f"Exporter: {r['broker_partitions']:,} broker-partitions on {BROKERS} brokers "
            f"(own processes), {r['groups']} groups, {r['samples']:,} samples "
            f"({r['scrape_bytes']:,} B); {r['rounds']} interleaved rounds, {r['cpus']} CPUs, "
            f"load {' '.join(f'{x:.2f}' for x in r['load_before'])} before, "
            f"{' '.join(f'{x:.2f}' for x in r['load_after'])} after",
            f"  scrape from the cache   {seconds(r['scrape_s'])}",
            f"  floor (plain registry)  {seconds(r['floor_s'])}",
            f"  ratio scrape / floor    {ratio['median']:.2f}x "
            f"({ratio['min']:.2f}..{ratio['max']:.2f})",
            f"  HTTP GET /metrics       {seconds(r['http_s'])}",
            f"  the refresh that filled the cache took {r['refresh_s'] * 1000:.0f} ms",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=50, help="per topic per broker")
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("aiozk").setLevel(logging.CRITICAL)
    results = asyncio.run(run(args.topics, args.partitions, args.groups, max(1, args.rounds)))
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

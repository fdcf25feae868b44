"""The exporter: a scrape answered from the cache, for 1,000 broker-partitions and 50 groups.

A real ZooKeeper (Debian's package) and two embedded brokers in processes of their own,
``--partitions`` partitions per topic each, ``--topics`` topics: 2 x 50 x 10 = 1,000
broker-partitions by default. ``--groups`` groups (50) each commit an offset for every
partition of one topic (written to ZooKeeper as 0.7.2 does), so the scrape carries
1,000 partitions' offsets and rates, and every group partition's committed offset, lag,
age and status. The exporter (:class:`~aiokafka07.monitor.cluster_state.ClusterMonitor`
and its HTTP server) runs in this process; its cache is filled by one refresh, then
``--rounds`` (>= 5) rounds each time, interleaved:

* **format**: what the server does once per refresh (``generate_latest`` of the
  exporter's collector over the cached state, with the lag windows judged);
* **floor**: ``generate_latest`` of a plain ``prometheus_client`` registry holding the same
  samples (the same names, labels and values, as gauges set beforehand): formatting alone;
* **scrape**: ``/metrics``'s body as a scrape gets it between refreshes (the text kept
  from the last formatting, and the dozen live series formatted);
* **HTTP**: a GET of ``/metrics`` over loopback, as Prometheus would scrape it.

Then **scrape pressure** (``--pressure-seconds``, 0 skips it): a monitor refreshing at
its default interval (5 s) with its server, scraped by ``--scrapers`` clients (20) back to
back from another process (:mod:`aiokafka07.testing.scrapers`) on ``--pressure-groups``
groups (2) of all 1,000 partitions; the state's age sampled every 0.1 s. Printed: the
largest age over the refresh interval (the bound asked: 2), ZooKeeper errors meanwhile,
refreshes and formattings, scrapes answered and their latency, and what a refresh, a
formatting and a kept scrape each cost.

Printed: the median and spread (min..max) of each, the ratio format / floor per round,
the number of samples, the time the refresh took, and the load before and after. No
verdict.

Run: ``python benchmarks/bench_exporter.py [--partitions N] [--topics T] [--groups G]
[--rounds R] [--pressure-seconds S] [--scrapers C] [--pressure-groups G] [--json]``.
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
from common import commit_offsets, load, milliseconds, ratios, spread, start_broker
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aiokafka07 import Producer
from aiokafka07.monitor.cluster_state import ClusterMonitor
from aiokafka07.monitor.collector import ClusterCollector, registry_for
from aiokafka07.monitor.server import ExporterServer
from aiokafka07.monitor.status import LagTracker
from aiokafka07.testing import ZooKeeperServer
from aiokafka07.testing.scrapers import scrape_while

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


async def build(connect: str, topics: int, partitions: int, pressure_groups: int) -> None:
    """Register the topics on both brokers (a message to every broker-partition) and
    commit an offset for every partition of every topic per pressure group."""
    async with Producer(zookeeper=connect) as producer:
        futures = []
        for t in range(topics):
            for broker, partition in broker_partitions(partitions):
                futures.append(
                    await producer.send(f"topic-{t}", b"x" * 100, partition=(broker, partition))
                )
        await asyncio.gather(*futures)
    await commit_offsets(
        connect,
        {
            (f"pressure-{g}", f"topic-{t}", b, p): 0
            for g in range(pressure_groups)
            for t in range(topics)
            for b, p in broker_partitions(partitions)
        },
    )


async def build_groups(connect: str, topics: int, partitions: int, groups: int) -> None:
    """Commit offset 0 for every partition of one topic per group."""
    await commit_offsets(
        connect,
        {
            (f"group-{g}", f"topic-{g % topics}", b, p): 0
            for g in range(groups)
            for b, p in broker_partitions(partitions)
        },
    )


def broker_partitions(partitions: int) -> list[tuple[int, int]]:
    return [(b, p) for b in range(BROKERS) for p in range(partitions)]


async def pressure(connect: str, seconds: float, scrapers: int) -> dict[str, Any]:
    """A monitor at its default interval scraped by ``scrapers`` clients back to back."""
    monitor = ClusterMonitor(connect)
    tracker = LagTracker()
    monitor.on_refresh = tracker.observe
    interval = monitor.interval_ms / 1000
    async with monitor, ExporterServer(monitor, tracker, port=0) as server:
        if not await monitor.wait_refreshed(120):
            raise RuntimeError(f"no refresh: {monitor.last_error}")
        await server.scrape()
        errors, refreshes, renders = monitor.errors["zookeeper"], monitor.refreshes, server.renders
        refresh_s: list[float] = []
        render_s: list[float] = []
        ages = []

        def sample() -> None:
            state = monitor.state
            assert state.refreshed_at is not None
            assert state.refresh_seconds is not None
            ages.append(time.time() - state.refreshed_at)
            if not refresh_s or refresh_s[-1] != state.refresh_seconds:
                refresh_s.append(state.refresh_seconds)
            rendered = server.health.render_seconds
            if rendered is not None and (not render_s or render_s[-1] != rendered):
                render_s.append(rendered)

        answered = await scrape_while(f"{server.url}/metrics", scrapers, seconds, sample)
        kept = []
        for _ in range(7):
            started = time.perf_counter()
            await server.scrape()
            kept.append(time.perf_counter() - started)
        return {
            "seconds": seconds,
            "scrapers": scrapers,
            "interval_s": interval,
            "max_age_over_interval": max(ages) / interval,
            "zookeeper_errors": monitor.errors["zookeeper"] - errors,
            "refreshes": monitor.refreshes - refreshes,
            "formattings": server.renders - renders,
            "answers": answered["statuses"],
            "latency_ms": answered["latency_ms"],
            "refresh_s": spread(refresh_s),
            "format_s": spread(render_s) if render_s else None,
            "kept_scrape_s": spread(kept),
        }


async def run(
    topics: int,
    partitions: int,
    groups: int,
    rounds: int,
    pressure_seconds: float,
    scrapers: int,
    pressure_groups: int,
) -> dict[str, Any]:
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
            await build(connect, topics, partitions, pressure_groups if pressure_seconds else 0)
            if pressure_seconds:
                results["pressure"] = await pressure(connect, pressure_seconds, scrapers)
            await build_groups(connect, topics, partitions, groups)
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
                formatting = registry_for(ClusterCollector(monitor, tracker))
                body = generate_latest(formatting).decode()
                floor = floor_registry(body)
                results["samples"] = sum(
                    len(f.samples) for f in text_string_to_metric_families(body)
                )
                results["scrape_bytes"] = len(body)
                results["refresh_s"] = monitor.state.refresh_seconds
                format_s, floor_s, scrape_s, http_s = [], [], [], []
                async with aiohttp.ClientSession() as session:
                    for _ in range(rounds):
                        started = time.perf_counter()
                        generate_latest(formatting)
                        format_s.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        generate_latest(floor)
                        floor_s.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        await server.scrape()
                        scrape_s.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        async with session.get(f"{server.url}/metrics") as response:
                            await response.read()
                        http_s.append(time.perf_counter() - started)
            results["format_s"] = spread(format_s)
            results["floor_s"] = spread(floor_s)
            results["scrape_s"] = spread(scrape_s)
            results["http_s"] = spread(http_s)
            results["format_over_floor"] = ratios(format_s, floor_s)
        finally:
            for process, _ in brokers:
                process.terminate()
                await process.wait()
    results["load_after"] = load()
    return results


def render(r: dict[str, Any]) -> str:
    ratio = r["format_over_floor"]
    lines = [
        f"Exporter: {r['broker_partitions']:,} broker-partitions on {BROKERS} brokers "
        f"(own processes), {r['groups']} groups, {r['samples']:,} samples "
        f"({r['scrape_bytes']:,} B); {r['rounds']} interleaved rounds, {r['cpus']} CPUs, "
        f"load {' '.join(f'{x:.2f}' for x in r['load_before'])} before, "
        f"{' '.join(f'{x:.2f}' for x in r['load_after'])} after",
        f"  format (once a refresh) {milliseconds(r['format_s'])}",
        f"  floor (plain registry)  {milliseconds(r['floor_s'])}",
        f"  ratio format / floor    {ratio['median']:.2f}x "
        f"({ratio['min']:.2f}..{ratio['max']:.2f})",
        f"  scrape (kept text)      {milliseconds(r['scrape_s'])}",
        f"  HTTP GET /metrics       {milliseconds(r['http_s'])}",
        f"  the refresh that filled the cache took {r['refresh_s'] * 1000:.0f} ms",
    ]
    p = r.get("pressure")
    if p is not None:
        answers = ", ".join(f"{count} x {status}" for status, count in p["answers"].items())
        formatted = "-" if p["format_s"] is None else milliseconds(p["format_s"])
        lines += [
            f"scrape pressure: {p['scrapers']} clients back to back from another process for "
            f"{p['seconds']:.0f} s, refresh interval {p['interval_s']:.0f} s",
            f"  largest state age / interval  {p['max_age_over_interval']:.2f}",
            f"  ZooKeeper errors meanwhile    {p['zookeeper_errors']}",
            f"  refreshes {p['refreshes']}, formattings {p['formattings']}; answers: {answers}",
            f"  scrape latency seen by the clients: median {p['latency_ms']['median']:.1f} ms, "
            f"max {p['latency_ms']['max']:.1f} ms",
            f"  a refresh {milliseconds(p['refresh_s'])}; "
            f"a formatting (worker thread) {formatted}; "
            f"a kept scrape {milliseconds(p['kept_scrape_s'])}",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=50, help="per topic per broker")
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pressure-seconds", type=float, default=30.0, help="0: no pressure")
    parser.add_argument("--scrapers", type=int, default=20)
    parser.add_argument("--pressure-groups", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("aiozk").setLevel(logging.CRITICAL)
    results = asyncio.run(
        run(
            args.topics,
            args.partitions,
            args.groups,
            max(1, args.rounds),
            max(0.0, args.pressure_seconds),
            max(1, args.scrapers),
            max(0, args.pressure_groups),
        )
    )
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

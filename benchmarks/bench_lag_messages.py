"""The exporter's lag in messages: what counting costs a refresh, on 1,000 broker-partitions.

A real ZooKeeper (Debian's package) and two embedded brokers in processes of their own
(flushing every message, so a log end shows what was written), ``--topics`` topics of
``--partitions`` partitions per broker: 2 x 10 x 50 = 1,000 broker-partitions by default.
Every partition gets a backlog of ``--backlog`` messages of 100 bytes (half of the
partitions' as gzip wrappers of 50 messages), and two groups commit on every partition:
``behind`` at 0, ``half`` in the middle. Two monitors in this process read the same cluster:

* **floor**: counting off (``MessageCounter(refresh_bytes=0)``): OFFSETS and ZooKeeper only;
* **counting**: the exporter's defaults.

Printed: the counting monitor's first refresh (the cold one, reading the whole backlog
within its budget: bytes read, exact and estimated ranges, and whether the exact total
equals the messages written), then ``--rounds`` interleaved rounds of the steady state,
each after ``--append`` more messages were written to every partition: a refresh of each
monitor, the bytes the counting one read, and the ratio counting / floor per round
(median and min..max). The load before and after. No verdict.

Run: ``python benchmarks/bench_lag_messages.py [--partitions N] [--topics T] [--backlog M]
[--append K] [--rounds R] [--json]``.
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

from common import commit_offsets, load, milliseconds, ratios, spread, start_broker

from aiokafka07.connection import BrokerAddress, BrokerConnection
from aiokafka07.errors import ZooKeeperError
from aiokafka07.monitor.cluster_state import ClusterMonitor, ClusterState
from aiokafka07.monitor.message_lag import MessageCounter
from aiokafka07.protocol import LATEST, encode_message_set
from aiokafka07.protocol.requests import encode_produce_request
from aiokafka07.testing import ZooKeeperServer

BROKERS = 2


def message_set(partition: int, count: int, tag: str) -> bytes:
    """``count`` messages of 100 bytes; on odd partitions as gzip wrappers of 50."""
    values = [f"{tag}-{i:08d}".encode().ljust(100, b".") for i in range(count)]
    if partition % 2 == 0:
        return encode_message_set(values)
    return b"".join(
        encode_message_set(values[i : i + 50], compression="gzip") for i in range(0, count, 50)
    )


async def write(
    connections: dict[int, BrokerConnection], topics: int, partitions: int, count: int, tag: str
) -> dict[tuple[str, int, int], int]:
    """``count`` messages to every broker-partition, pipelined; wait until every log end
    shows them; return the log ends."""
    expected = {}
    for b, connection in connections.items():
        for t in range(topics):
            for p in range(partitions):
                (before,) = await connection.offsets(f"topic-{t}", p, LATEST, 1) or (0,)
                data = message_set(p, count, tag)
                await connection.send(encode_produce_request(f"topic-{t}", p, data))
                expected[(f"topic-{t}", b, p)] = before + len(data)
    deadline = time.monotonic() + 120
    for (topic, b, p), end in expected.items():
        while True:
            (now,) = await connections[b].offsets(topic, p, LATEST, 1) or (0,)
            if now >= end:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} {b}-{p} did not reach {end}")
            await asyncio.sleep(0.01)
    return expected


def group_partitions(state: ClusterState) -> int:
    return sum(len(g.partitions) for g in state.groups)


async def refreshed(monitor: ClusterMonitor) -> float:
    """One refresh; its seconds. A ZooKeeper request that timed out (a loaded machine:
    each gives up after 2 s) is tried again, up to 5 times; the figure is the refresh
    that succeeded."""
    for attempt in range(5):
        try:
            state = await monitor.refresh()
        except ZooKeeperError:
            if attempt == 4:
                raise
            await asyncio.sleep(1)
            continue
        assert state.refresh_seconds is not None
        return state.refresh_seconds
    raise AssertionError("unreachable")


async def run(
    topics: int, partitions: int, backlog: int, append: int, rounds: int
) -> dict[str, Any]:
    results: dict[str, Any] = {
        "broker_partitions": BROKERS * partitions * topics,
        "backlog": backlog,
        "append": append,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "load_before": load(),
    }
    with tempfile.TemporaryDirectory() as tmp, ZooKeeperServer() as zk_server:
        connect = zk_server.connect_string
        brokers = [
            await start_broker(
                f"{tmp}/b{b}",
                partitions=partitions,
                zookeeper=connect,
                broker_id=b,
                flush="every-message",
            )
            for b in range(BROKERS)
        ]
        connections = {
            b: await BrokerConnection.open(BrokerAddress(b, "127.0.0.1", port))
            for b, (_, port) in enumerate(brokers)
        }
        try:
            first = await write(connections, topics, partitions, backlog // 2, "a")
            await write(connections, topics, partitions, backlog - backlog // 2, "b")
            offsets = {}
            for (topic, b, p), middle in first.items():
                offsets[("behind", topic, b, p)] = 0
                offsets[("half", topic, b, p)] = middle
            await commit_offsets(connect, offsets)
            floor = ClusterMonitor(
                connect, interval_ms=3_600_000.0, message_counter=MessageCounter(refresh_bytes=0)
            )
            counting = ClusterMonitor(
                connect, interval_ms=3_600_000.0, refresh_timeout_ms=60_000.0,
                message_counter=MessageCounter(refresh_bytes=0),
            )  # fmt: skip
            async with floor, counting:
                wanted = 2 * results["broker_partitions"]
                for monitor in (floor, counting):  # wait for every topic's registration
                    deadline = time.monotonic() + 120
                    while group_partitions(monitor.state) < wanted:
                        if time.monotonic() > deadline:
                            raise RuntimeError("the groups' partitions were not all seen")
                        await asyncio.sleep(0.5)
                        await refreshed(monitor)
                # Counting starts now (its refreshes so far read nothing).
                counting.message_counter = counter = MessageCounter()
                results["floor_first_s"] = await refreshed(floor)
                results["cold_s"] = await refreshed(counting)
                stats = counter.stats
                results["cold"] = {
                    "bytes_read": stats.bytes_read,
                    "fetches": stats.fetches,
                    "count_s": stats.seconds,
                    "exhausted": stats.exhausted,
                    "exact": stats.exact,
                    "estimated": stats.estimated,
                    "unknown": stats.unknown,
                }
                behind = next(g for g in counting.state.groups if g.group == "behind")
                total = behind.lag_messages()
                results["cold"]["behind_total"] = None if total is None else total.messages
                results["cold"]["behind_method"] = None if total is None else total.method
                results["written"] = backlog * results["broker_partitions"]
                floor_s, counting_s, read = [], [], []
                for r in range(rounds):
                    await write(connections, topics, partitions, append, f"r{r}")
                    floor_s.append(await refreshed(floor))
                    counting_s.append(await refreshed(counting))
                    read.append(counter.stats.bytes_read)
                results["floor_s"] = spread(floor_s)
                results["counting_s"] = spread(counting_s)
                results["counting_over_floor"] = ratios(counting_s, floor_s)
                results["steady_bytes_read"] = spread(read)
                results["steady_exact"] = counter.stats.exact
                results["steady_estimated"] = counter.stats.estimated
        finally:
            for connection in connections.values():
                await connection.close()
            for process, _ in brokers:
                process.terminate()
                await process.wait()
    results["load_after"] = load()
    return results


def render(r: dict[str, Any]) -> str:
    cold = r["cold"]
    ratio = r["counting_over_floor"]
    same = "equals" if cold["behind_total"] == r["written"] else "differs from"
    return "\n".join(
        [
            f"Lag in messages: {r['broker_partitions']:,} broker-partitions on {BROKERS} "
            f"brokers (own processes), 2 groups; backlog {r['backlog']} messages of 100 B per "
            f"partition (odd partitions gzip); {r['rounds']} interleaved rounds, "
            f"{r['cpus']} CPUs, load {' '.join(f'{x:.2f}' for x in r['load_before'])} before, "
            f"{' '.join(f'{x:.2f}' for x in r['load_after'])} after",
            f"  cold refresh (reads the backlog) {r['cold_s'] * 1000:.0f} ms, of which counting "
            f"{cold['count_s'] * 1000:.0f} ms: {cold['bytes_read']:,} B in {cold['fetches']} "
            f"fetches; budget spent: {cold['exhausted']}; ranges exact {cold['exact']}, "
            f"estimated {cold['estimated']}, unknown {cold['unknown']}",
            f"  group 'behind' total: {cold['behind_total']} ({cold['behind_method']}), "
            f"{same} the {r['written']:,} messages written",
            f"  (floor's first refresh {r['floor_first_s'] * 1000:.0f} ms)",
            f"steady state, {r['append']} new messages per partition before each round:",
            f"  refresh, counting off (floor) {milliseconds(r['floor_s'])}",
            f"  refresh, counting             {milliseconds(r['counting_s'])}",
            f"  ratio counting / floor        {ratio['median']:.2f}x "
            f"({ratio['min']:.2f}..{ratio['max']:.2f})",
            f"  bytes read per refresh        {r['steady_bytes_read']['median']:,.0f} "
            f"({r['steady_bytes_read']['min']:,.0f}..{r['steady_bytes_read']['max']:,.0f}); "
            f"ranges exact {r['steady_exact']}, estimated {r['steady_estimated']}",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=50, help="per topic per broker")
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--backlog", type=int, default=200, help="messages per partition")
    parser.add_argument("--append", type=int, default=10, help="messages per partition a round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("aiozk").setLevel(logging.CRITICAL)
    results = asyncio.run(
        run(
            max(1, args.topics),
            max(1, args.partitions),
            max(2, args.backlog),
            max(1, args.append),
            max(1, args.rounds),
        )
    )
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

"""Bridge throughput, as ratios to two floors measured in the same run.

Workload: ``--messages`` messages of 100 B (30 random bytes, 70 filler; key: the 7 bytes
before a ``:``) in uncompressed sets of 1000, in a topic per round (the bridge does not
copy again what the modern cluster holds), over 4 partitions of one embedded 0.7 broker
in its own process (registered in a ZooKeeper of its own). The modern cluster is librdkafka's mock
cluster (3 brokers, in its own process; a test double, not a Kafka broker: figures against
a real cluster will differ). Three measurements run interleaved, in a rotating order,
``--rounds`` times (>= 5):

* **read floor**: the library's own 0.7 read, :meth:`SimpleConsumer.batches` over the 4
  partitions at once, every message handed out;
* **produce floor**: aiokafka's transactional producer writing the same number of
  records (same sizes, keys and headers as the bridge's) to the same mock cluster, one
  transaction per ``--batch-size``, through its fastest path (``create_batch`` /
  ``send_batch``, as the bridge writes), round-robin over 4 partitions, each transaction
  waiting for its acknowledgements before committing;
* **bridge**: :class:`aiokafka07.bridge.Bridge` copying the topic (a fresh bridge name
  each round, so each round copies everything), from its start until the last
  transaction's commit.

Measured: wall-clock seconds per measurement, as messages per second. The figures printed
are the bridge's rate over each floor's rate of the same round: the median over rounds
with the min-max spread, plus the median rates, and the load average before and after.
The script prints the ratios only, never a verdict against a fixed number.

Run: ``python benchmarks/bench_bridge.py [--messages N] [--rounds R] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import load, ratios, spread, start_broker, write_segments

from aiokafka07 import SimpleConsumer
from aiokafka07.bridge import Bridge, key_before
from aiokafka07.bridge.positions import Position, headers_for
from aiokafka07.protocol import encode_message_set
from aiokafka07.records import TopicPartition
from aiokafka07.testing import ZooKeeperServer

PAYLOAD = 100
PARTITIONS = 4
TOPIC = "bridged"
MOCK = Path(__file__).resolve().parents[1] / "tests" / "mock_target.py"
VARIANTS = ("read_floor", "produce_floor", "bridge")


def write_backlog(log_dir: Path, topic: str, messages: int) -> int:
    rng = random.Random(7)
    payloads = [
        f"k{rng.randrange(10**6):06d}:".encode() + rng.randbytes(21) + b"m" * (PAYLOAD - 30)
        for _ in range(1000)
    ]
    per_partition = max(1, messages // PARTITIONS // 1000)
    write_segments(log_dir, topic, PARTITIONS, encode_message_set(payloads), per_partition)
    return per_partition * 1000 * PARTITIONS


async def read_floor(port: int, topic: str, expected: int) -> float:
    async with SimpleConsumer("127.0.0.1", port, broker_id=0) as simple:

        async def one(partition: int) -> int:
            count = 0
            async for batch in simple.batches(topic, partition, 0):
                count += len(batch.messages)
            return count

        began = time.perf_counter()
        count = sum(await asyncio.gather(*(one(p) for p in range(PARTITIONS))))
        wall = time.perf_counter() - began
    assert count == expected, (count, expected)
    return wall


async def produce_floor(bootstrap: str, expected: int, batch: int, round_: int) -> float:
    from aiokafka import AIOKafkaProducer

    rng = random.Random(3)
    source = TopicPartition("floor", 0, 0)
    value = b"k000000:" + rng.randbytes(21) + b"m" * (PAYLOAD - 30)
    headers = headers_for(source, Position(123456789, 12))
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"bench-floor-{round_}",
        enable_idempotence=True,
        acks="all",
    )
    await producer.start()
    try:
        began = time.perf_counter()
        sent = 0
        while sent < expected:
            n = min(batch, expected - sent)
            await producer.begin_transaction()
            # aiokafka's fastest path: records appended to batches, a send_batch per
            # full batch, round-robin over the partitions as the bridge spreads keys.
            futures = []
            batches = [producer.create_batch() for _ in range(PARTITIONS)]
            for i in range(n):
                partition = i % PARTITIONS
                if (
                    batches[partition].append(
                        key=value[:7], value=value, timestamp=None, headers=headers
                    )
                    is None
                ):
                    full, batches[partition] = batches[partition], producer.create_batch()
                    futures.append(await producer.send_batch(full, "floor", partition=partition))
                    batches[partition].append(
                        key=value[:7], value=value, timestamp=None, headers=headers
                    )
            for partition, last in enumerate(batches):
                if last.record_count():
                    futures.append(await producer.send_batch(last, "floor", partition=partition))
            await asyncio.gather(*futures)
            await producer.commit_transaction()
            sent += n
        return time.perf_counter() - began
    finally:
        await producer.stop()


async def bridge_run(
    zookeeper: str, bootstrap: str, topic: str, expected: int, batch: int, round_: int
) -> float:
    stop = asyncio.Event()
    bridge = Bridge(
        zookeeper,
        bootstrap,
        [topic],
        name=f"bench-{round_}",
        key=key_before(b":"),
        batch_size=batch,
        linger_ms=50,
        # The mock cluster's transaction markers fail aiokafka's CRC check.
        consumer_options={"check_crcs": False},
    )

    def done(stats: Any) -> None:
        if stats.messages >= expected:
            stop.set()

    began = time.perf_counter()
    await bridge.run(stop, on_batch=done)
    wall = time.perf_counter() - began
    assert bridge.metrics.messages == expected, (bridge.metrics.messages, expected)
    return wall


async def main(messages: int, rounds: int, batch: int) -> dict[str, Any]:
    results: dict[str, Any] = {"rounds": rounds, "cpus": os.cpu_count(), "load_before": load()}
    with tempfile.TemporaryDirectory(prefix="bench-bridge-") as tmp, ZooKeeperServer() as zk:
        # A topic per round: records already on the mock cluster (from an earlier round) would
        # be found at recovery and not copied again.
        topics = [f"{TOPIC}{r}" for r in range(rounds)]
        expected = write_backlog(Path(tmp), topics[0], messages)
        for topic in topics[1:]:
            write_backlog(Path(tmp), topic, messages)
        results["messages"] = expected
        broker, port = await start_broker(tmp, partitions=PARTITIONS, zookeeper=zk.connect_string)
        mock = await asyncio.create_subprocess_exec(
            sys.executable,
            str(MOCK),
            *topics,
            "floor",
            "aiokafka07-bridge-checkpoints",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert mock.stdout is not None
            line = await asyncio.wait_for(mock.stdout.readline(), 60)
            bootstrap = line.decode().split()[1]
            await asyncio.sleep(0.5)  # topic registrations
            walls: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for r in range(rounds):
                order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
                for variant in order:
                    print(f"round {r}: {variant}", file=sys.stderr, flush=True)
                    if variant == "read_floor":
                        walls[variant].append(await read_floor(port, topics[r], expected))
                    elif variant == "produce_floor":
                        walls[variant].append(await produce_floor(bootstrap, expected, batch, r))
                    else:
                        walls[variant].append(
                            await bridge_run(
                                zk.connect_string, bootstrap, topics[r], expected, batch, r
                            )
                        )
        finally:
            mock.kill()
            await mock.wait()
            broker.terminate()
            await broker.wait()
    rates = {v: [expected / w for w in walls[v]] for v in VARIANTS}
    results["rates"] = {v: spread(rates[v]) for v in VARIANTS}
    results["bridge_over_read_floor"] = ratios(rates["bridge"], rates["read_floor"])
    results["bridge_over_produce_floor"] = ratios(rates["bridge"], rates["produce_floor"])
    results["load_after"] = load()
    return results


def render(r: dict[str, Any]) -> str:
    def ratio(f: dict[str, float]) -> str:
        return f"{f['median']:.3f}x ({f['min']:.3f}..{f['max']:.3f})"

    lines = [
        f"{r['messages']} messages x {PAYLOAD} B, {r['rounds']} rounds, {r['cpus']} CPUs",
        f"load before {r['load_before']}, after {r['load_after']}",
    ]
    for v in VARIANTS:
        lines.append(f"{v:14} {r['rates'][v]['median']:>12.0f} msg/s (median)")
    lines.append(f"bridge / read floor     {ratio(r['bridge_over_read_floor'])}")
    lines.append(f"bridge / produce floor  {ratio(r['bridge_over_produce_floor'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=10000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(main(args.messages, args.rounds, args.batch_size))
    print(json.dumps(figures) if args.json else render(figures))

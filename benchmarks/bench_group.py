"""The group consumer: throughput, memory on a large backlog, and rebalance convergence.

A real ZooKeeper (Debian's package) and an embedded broker in its own process; the
consumers run here. The backlog is written straight into the broker's log directory as
0.7.2 segment files before it starts (the broker's recovery validates them), so producing
it costs neither time nor memory in this process.

* **Throughput**: one group member reads a backlog of ``--messages`` 100-byte messages
  over 4 partitions (uncompressed, gzip, snappy), ``async for record in consumer``.
* **Memory**: the peak of this process's resident memory above its baseline while one
  member reads a ``--memory-mb`` backlog (the target: near the configured prefetch, 4 MiB
  per stream, not growing with the backlog).
* **Convergence**: 8 members of one group on a 64-partition topic; the time from a 9th
  member joining, and from one leaving, until every partition has exactly one owner among
  the members' in-process assignments (target: under 1 s).

Run: ``python benchmarks/bench_group.py [--messages N] [--memory-mb M] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from common import start_broker

from aiokafka07.group.consumer import Consumer
from aiokafka07.protocol import encode_message_set
from aiokafka07.testing import ZooKeeperServer

PAYLOAD = 100
MB = 1e6


def write_backlog(log_dir: Path, topic: str, partitions: int, messages: int, codec: str) -> None:
    """0.7.2 segment files: <log.dir>/<topic>-<p>/00000000000000000000.kafka."""
    rng = random.Random(11)
    payloads = [rng.randbytes(30) + b"m" * (PAYLOAD - 30) for _ in range(1000)]
    chunk = encode_message_set(payloads, compression=codec)
    per_partition = messages // partitions // 1000
    for p in range(partitions):
        directory = log_dir / f"{topic}-{p}"
        directory.mkdir(parents=True)
        with open(directory / f"{0:020d}.kafka", "wb") as segment:
            for _ in range(per_partition):
                segment.write(chunk)


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def consume_all(connect: str, topic: str, expected: int) -> dict[str, float]:
    peak = baseline = rss()
    count = 0
    async with Consumer(
        topic, group=f"bench-{topic}", zookeeper=connect, auto_offset_reset="smallest"
    ) as consumer:
        start = time.perf_counter()
        async for _record in consumer:
            count += 1
            if count % 100_000 == 0:
                peak = max(peak, rss())
            if count >= expected:
                break
        elapsed = time.perf_counter() - start
    return {
        "messages_per_s": count / elapsed,
        "payload_mb_per_s": count * PAYLOAD / elapsed / MB,
        "peak_rss_growth_mb": (peak - baseline) / MB,
    }


def owners(members: list[Consumer]) -> list[Any]:
    return [tp for m in members if not m.closed for tp in m.assignment()]


async def converge(members: list[Consumer], partitions: int, timeout: float = 30) -> float:
    start = time.perf_counter()
    while True:
        owned = owners(members)
        if len(owned) == partitions and len(set(owned)) == partitions:
            return time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"no convergence: {len(set(owned))} of {partitions} owned")
        await asyncio.sleep(0.005)


async def convergence(connect: str) -> dict[str, float]:
    members = [
        Consumer("wide", group="conv", zookeeper=connect, auto_commit=False) for _ in range(8)
    ]
    for member in members:
        await member.start()
    await converge(members, 64)
    joiner = Consumer("wide", group="conv", zookeeper=connect, auto_commit=False)
    start = time.perf_counter()
    await joiner.start()
    members.append(joiner)
    await converge(members, 64)
    joined = time.perf_counter() - start
    start = time.perf_counter()
    await members[0].close()
    await converge(members[1:], 64)
    left = time.perf_counter() - start
    for member in members[1:]:
        await member.close()
    return {"join_s": joined, "leave_s": left}


async def run(messages: int, memory_mb: int) -> dict[str, Any]:
    logging.getLogger("aiokafka07").setLevel(logging.WARNING)
    results: dict[str, Any] = {"messages": messages}
    memory_messages = memory_mb * 1_000_000 // (PAYLOAD + 10)
    with tempfile.TemporaryDirectory(prefix="bench-group-") as tmp, ZooKeeperServer() as zk:
        log_dir = Path(tmp)
        for codec in ("none", "gzip", "snappy"):
            write_backlog(log_dir, f"backlog-{codec}", 4, messages, codec)
        write_backlog(log_dir, "memory", 4, memory_messages, "none")
        (log_dir / "wide-0").mkdir()
        (log_dir / "wide-0" / f"{0:020d}.kafka").write_bytes(b"")
        proc, _ = await start_broker(
            str(log_dir),
            partitions=4,
            zookeeper=zk.connect_string,
            settings={"topic.partition.count.map": "wide:64"},
        )
        try:
            await asyncio.sleep(0.5)  # topic registrations
            for codec in ("none", "gzip", "snappy"):
                expected = messages // 4 // 1000 * 4 * 1000
                results[codec] = await consume_all(zk.connect_string, f"backlog-{codec}", expected)
            memory = await consume_all(zk.connect_string, "memory", memory_messages // 4000 * 4000)
            results["memory"] = {"backlog_mb": memory_mb, **memory}
            results["convergence"] = await convergence(zk.connect_string)
        finally:
            proc.terminate()
            await proc.wait()
    return results


def render(r: dict[str, Any]) -> str:
    lines = [
        "Group consumer (one member, 4 partitions, broker in its own process), "
        f"{r['messages']:,} x {PAYLOAD} B"
    ]
    for codec in ("none", "gzip", "snappy"):
        f = r[codec]
        lines.append(
            f"  {codec:<7} {f['messages_per_s']:>11,.0f} msgs/s {f['payload_mb_per_s']:7.1f} MB/s"
        )
    m = r["memory"]
    lines.append(
        f"  {m['backlog_mb']} MB backlog: peak RSS growth {m['peak_rss_growth_mb']:.1f} MB "
        f"at {m['messages_per_s']:,.0f} msgs/s"
    )
    c = r["convergence"]
    verdict = "ok" if max(c["join_s"], c["leave_s"]) < 1 else "ABOVE TARGET"
    lines.append(
        f"  8 members, 64 partitions: converged {c['join_s'] * 1000:.0f} ms after a join, "
        f"{c['leave_s'] * 1000:.0f} ms after a leave  [target < 1 s: {verdict}]"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--memory-mb", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = asyncio.run(run(args.messages, args.memory_mb))
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

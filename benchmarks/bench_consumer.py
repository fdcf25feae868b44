"""SimpleConsumer throughput and pipelined request rate over loopback.

The embedded broker runs in its own process (one core); the consumer measured runs here
(the other core), as a user's consumer process would.

* **messages().** A backlog of ``--messages`` 100-byte uncompressed messages (one
  partition, produced beforehand) iterated with ``async for record in
  consumer.messages(...)``, touching every value; 1 MiB fetches, the next one in flight
  while a batch is handed out. Also ``batches()`` (one result per fetch) for reference.
  Target: at least 1.3 million messages/s (the official Java 0.7.2 consumer's rate here).
* **Pipelining.** ``--requests`` small fetches (one 100-byte message each) on one
  connection: one at a time (await each answer) against all issued at once (answers
  matched in order). Requests per second for both, and the ratio.

Run: ``python benchmarks/bench_consumer.py [--messages N] [--requests N] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from typing import Any

from common import start_broker

from aiokafka07 import BrokerAddress, BrokerConnection, SimpleConsumer

PAYLOAD = 100
BATCH = 1000
TOPIC = "backlog"
MB = 1e6


async def produce_backlog(conn: BrokerConnection, messages: int) -> int:
    rng = random.Random(3)
    payloads = [rng.randbytes(30) + b"v" * (PAYLOAD - 30) for _ in range(BATCH)]
    for _ in range(messages // BATCH):
        await conn.produce(TOPIC, 0, payloads)
    end = await conn.produce(TOPIC, 0, [], confirm=True)
    assert end is not None
    return end


async def wait_visible(consumer: SimpleConsumer, end: int) -> None:
    for _ in range(200):
        (latest,) = await consumer.offsets_before(TOPIC, 0, -1, 1)
        if latest >= end:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the backlog never became visible")


async def time_messages(consumer: SimpleConsumer, expected: int) -> dict[str, float]:
    count = size = 0
    start = time.perf_counter()
    async for record in consumer.messages(TOPIC, 0, 0):
        count += 1
        size += len(record.value)
    elapsed = time.perf_counter() - start
    if count != expected:
        raise RuntimeError(f"iterated {count} messages, expected {expected}")
    return {"messages_per_s": count / elapsed, "payload_mb_per_s": size / elapsed / MB}


async def time_batches(consumer: SimpleConsumer, expected: int) -> dict[str, float]:
    count = 0
    start = time.perf_counter()
    async for batch in consumer.batches(TOPIC, 0, 0):
        count += len(batch.messages)
    elapsed = time.perf_counter() - start
    if count != expected:
        raise RuntimeError(f"received {count} messages, expected {expected}")
    return {"messages_per_s": count / elapsed, "payload_mb_per_s": count * PAYLOAD / elapsed / MB}


async def time_requests(conn: BrokerConnection, requests: int) -> dict[str, float]:
    size = 4 + 6 + PAYLOAD
    start = time.perf_counter()
    for i in range(requests):
        await conn.fetch(TOPIC, 0, (i % 1000) * size, size)
    serial = requests / (time.perf_counter() - start)
    start = time.perf_counter()
    answers = await asyncio.gather(
        *(conn.fetch(TOPIC, 0, (i % 1000) * size, size) for i in range(requests))
    )
    pipelined = requests / (time.perf_counter() - start)
    if any(len(a.message_set) != size for a in answers):
        raise RuntimeError("a pipelined fetch got the wrong answer")
    return {"serial_per_s": serial, "pipelined_per_s": pipelined, "ratio": pipelined / serial}


async def run(messages: int, requests: int) -> dict[str, Any]:
    messages -= messages % BATCH
    with tempfile.TemporaryDirectory(prefix="bench-consumer-") as log_dir:
        proc, port = await start_broker(log_dir)
        try:
            conn = await BrokerConnection.open(BrokerAddress(0, "127.0.0.1", port))
            end = await produce_backlog(conn, messages)
            async with SimpleConsumer("127.0.0.1", port, broker_id=0) as consumer:
                await wait_visible(consumer, end)
                results: dict[str, Any] = {"messages": messages, "backlog_bytes": end}
                results["messages_iter"] = await time_messages(consumer, messages)
                results["batches_iter"] = await time_batches(consumer, messages)
            results["requests"] = {"count": requests, **await time_requests(conn, requests)}
            await conn.close()
        finally:
            proc.terminate()
            await proc.wait()
    return results


def render(r: dict[str, Any]) -> str:
    m, b, q = r["messages_iter"], r["batches_iter"], r["requests"]
    verdict = "ok" if m["messages_per_s"] >= 1.3e6 else "BELOW TARGET"
    return "\n".join(
        [
            f"SimpleConsumer over loopback: {r['messages']:,} messages of {PAYLOAD} B "
            f"({r['backlog_bytes'] / MB:.0f} MB), broker in its own process",
            f"  messages() iteration  {m['messages_per_s']:>12,.0f} msgs/s "
            f"{m['payload_mb_per_s']:7.1f} MB/s   [target >= 1,300,000: {verdict}]",
            f"  batches() iteration   {b['messages_per_s']:>12,.0f} msgs/s "
            f"{b['payload_mb_per_s']:7.1f} MB/s",
            f"  {q['count']:,} small fetches on one connection: one at a time "
            f"{q['serial_per_s']:,.0f}/s, pipelined {q['pipelined_per_s']:,.0f}/s "
            f"({q['ratio']:.1f}x)",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = asyncio.run(run(args.messages, args.requests))
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

"""Producer throughput for 100-byte messages to one embedded broker over loopback.

The broker runs in its own process (one core); the producer measured runs here (the other
core). Each run sends ``--messages`` messages with ``await producer.send(...)`` in a loop,
then ``flush()``; the rate counts until every message is delivered (confirmed by the broker
in confirm mode), and the broker's log end is checked against what was sent. Memory stays
bounded by the producer's buffer: the peak of queued bytes is sampled and printed.
Target: at least 300,000 messages/s uncompressed (the official Java 0.7.2 async producer
does about 250,000/s here).

Run: ``python benchmarks/bench_producer.py [--messages N] [--json]``.
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

from aiokafka07 import SimpleConsumer
from aiokafka07.producer import Producer

PAYLOAD = 100
MB = 1e6
RUNS = (
    ("none", True),
    ("gzip", True),
    ("snappy", True),
    ("none", False),
)


async def one_run(port: int, messages: int, codec: str, confirm: bool) -> dict[str, Any]:
    topic = f"bench-{codec}-{'confirm' if confirm else 'fire'}"
    rng = random.Random(5)
    payloads = [rng.randbytes(40) + b"p" * (PAYLOAD - 40) for _ in range(1000)]
    peak = 0
    async with Producer(
        brokers=f"0:127.0.0.1:{port}", compression=codec, confirm=confirm, linger_ms=5
    ) as producer:
        start = time.perf_counter()
        for i in range(messages):
            await producer.send(topic, payloads[i % 1000])
            if i % 1000 == 0:
                peak = max(peak, producer.metrics.queued_bytes)
        await producer.flush()
        elapsed = time.perf_counter() - start
        metrics = producer.metrics
    if metrics.messages_sent != messages or metrics.messages_failed:
        raise RuntimeError(f"{metrics.messages_sent} of {messages} delivered")
    return {
        "codec": codec,
        "confirm": confirm,
        "messages_per_s": messages / elapsed,
        "payload_mb_per_s": messages * PAYLOAD / elapsed / MB,
        "requests": metrics.requests_sent,
        "peak_queued_bytes": peak,
        "topic": topic,
    }


async def run(messages: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-producer-") as log_dir:
        proc, port = await start_broker(log_dir, partitions=4)
        try:
            results = [await one_run(port, messages, c, k) for c, k in RUNS]
            async with SimpleConsumer("127.0.0.1", port) as consumer:
                for r in results:  # every message is in the broker's logs
                    count = 0
                    for partition in range(4):
                        async for batch in consumer.batches(r["topic"], partition, 0):
                            count += len(batch.messages)
                    if count != messages:
                        raise RuntimeError(f"{r['topic']}: {count} of {messages} in the log")
        finally:
            proc.terminate()
            await proc.wait()
    return {"messages": messages, "runs": results}


def render(r: dict[str, Any]) -> str:
    lines = [
        f"Producer, {r['messages']:,} messages of {PAYLOAD} B to one broker (own process), "
        "static mode, linger 5 ms, batches of 1000",
    ]
    for run in r["runs"]:
        mode = "confirm" if run["confirm"] else "no confirm"
        verdict = ""
        if run["codec"] == "none":
            verdict = "  [target >= 300,000: " + (
                "ok]" if run["messages_per_s"] >= 300_000 else "BELOW TARGET]"
            )
        lines.append(
            f"  {run['codec']:<7}{mode:<11}{run['messages_per_s']:>11,.0f} msgs/s "
            f"{run['payload_mb_per_s']:6.1f} MB/s  peak buffer {run['peak_queued_bytes'] / MB:5.1f}"
            f" MB{verdict}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = asyncio.run(run(args.messages))
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

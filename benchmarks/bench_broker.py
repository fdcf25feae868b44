"""Produce ingest and fetch serve rates of the embedded broker over loopback.

The broker must never be the bottleneck of client benchmarks, so this measures it alone:
the broker runs as its own process (``python -m aiokafka07 broker``, one core) and the
load comes from this process (the other core) over raw sockets, with the codec only used
to build the requests. No ZooKeeper, no fsync (as in test clusters).

* **Ingest.** ``--connections`` sockets each pipeline PRODUCE requests of 1000 messages of
  100 bytes (uncompressed, then snappy) to their own partition; the rate counts from the
  first byte sent to the OFFSETS answers that prove every produce was appended.
* **Serve.** One socket pipelines FETCH requests of 1 MiB windows over the partitions
  written above (4 in flight) and counts the bytes received. The broker serves raw log
  ranges, so no client-side decoding is timed here.

Run: ``python benchmarks/bench_broker.py [--messages N] [--connections C] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from typing import Any

from common import start_broker

from aiokafka07.protocol import (
    FrameSplitter,
    decode_offsets_response,
    encode_fetch_request,
    encode_message_set,
    encode_offsets_request,
    encode_produce_request,
)

BATCH = 1000
PAYLOAD = 100
WINDOW = 1 << 20
MB = 1e6


def make_batches(count: int, compression: str) -> list[bytes]:
    rng = random.Random(7)
    payloads = [rng.randbytes(40) + b"x" * (PAYLOAD - 40) for _ in range(BATCH)]
    one = encode_message_set(payloads, compression=compression)
    return [one] * count


async def produce(port: int, topic: str, partition: int, batches: list[bytes]) -> int:
    """Pipeline the produces, then wait for an OFFSETS answer (proof they were appended)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    for batch in batches:
        writer.write(encode_produce_request(topic, partition, batch))
        sent += len(batch)
        await writer.drain()
    writer.write(encode_offsets_request(topic, partition, -1, 1))
    splitter = FrameSplitter()
    while True:
        frames = splitter.feed(await reader.read(65536))
        if frames:
            break
    writer.close()
    return sent


async def latest(port: int, topic: str, partition: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode_offsets_request(topic, partition, -1, 1))
    splitter = FrameSplitter()
    frames: list[bytes] = []
    while not frames:
        frames = splitter.feed(await reader.read(65536))
    writer.close()
    return decode_offsets_response(frames[0]).offsets[0]


async def measure_ingest(
    port: int, topic: str, connections: int, messages: int, codec: str
) -> dict[str, float]:
    per_connection = max(1, messages // BATCH // connections)
    batches = make_batches(per_connection, codec)
    start = time.perf_counter()
    sent = await asyncio.gather(*(produce(port, topic, p, batches) for p in range(connections)))
    elapsed = time.perf_counter() - start
    total_messages = per_connection * BATCH * connections
    # Wait for the flusher, then check every byte was appended.
    for _ in range(100):
        ends = [await latest(port, topic, p) for p in range(connections)]
        if sum(ends) == sum(sent):
            break
        await asyncio.sleep(0.05)
    else:
        raise RuntimeError(f"broker appended {sum(ends)} of {sum(sent)} bytes")
    return {
        "messages_per_s": total_messages / elapsed,
        "wire_mb_per_s": sum(sent) / elapsed / MB,
        "payload_mb_per_s": total_messages * PAYLOAD / elapsed / MB,
        "seconds": elapsed,
    }


async def measure_serve(port: int, topic: str, partitions: int) -> dict[str, float]:
    ends = [await latest(port, topic, p) for p in range(partitions)]
    requests = [
        encode_fetch_request(topic, p, offset, WINDOW)
        for p, end in enumerate(ends)
        for offset in range(0, end, WINDOW)
    ]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    splitter = FrameSplitter()
    received = 0
    in_flight = 0
    pending = list(reversed(requests))
    start = time.perf_counter()
    answered = 0
    while answered < len(requests):
        while pending and in_flight < 4:
            writer.write(pending.pop())
            in_flight += 1
        data = await reader.read(1 << 20)
        if not data:
            raise RuntimeError("broker closed the connection")
        for frame in splitter.feed(data):
            received += len(frame) - 2
            in_flight -= 1
            answered += 1
    elapsed = time.perf_counter() - start
    writer.close()
    if received != sum(ends):
        raise RuntimeError(f"served {received} of {sum(ends)} bytes")
    entry = 4 + 6 + PAYLOAD
    return {
        "wire_mb_per_s": received / elapsed / MB,
        "messages_per_s": received / entry / elapsed,
        "seconds": elapsed,
    }


async def run(messages: int, connections: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as log_dir:
        proc, port = await start_broker(
            log_dir,
            partitions=connections,
            settings={
                "log.flush.interval": "10000",
                "log.default.flush.scheduler.interval.ms": "50",
                "log.default.flush.interval.ms": "50",
            },
        )
        try:
            results: dict[str, Any] = {"messages": messages, "connections": connections}
            results["ingest_none"] = await measure_ingest(
                port, "plain", connections, messages, "none"
            )
            results["ingest_snappy"] = await measure_ingest(
                port, "snappy", connections, messages, "snappy"
            )
            results["serve"] = await measure_serve(port, "plain", connections)
        finally:
            proc.terminate()
            await proc.wait()
    return results


def render(r: dict[str, Any]) -> str:
    rows = (
        ("produce ingest, uncompressed", r["ingest_none"]),
        ("produce ingest, snappy (deep-validated)", r["ingest_snappy"]),
        ("fetch serve, 1 MiB windows, 4 in flight", r["serve"]),
    )
    lines = [
        "embedded broker (separate process) over loopback, 100-byte messages, batches of 1000",
        f"  {r['messages']:,} messages per run, {r['connections']} producer connections, "
        f"{os.cpu_count()} cores",
    ]
    for label, f in rows:
        rate = f"{f['messages_per_s']:>12,.0f} msgs/s"
        lines.append(f"  {label:<40} {rate} {f['wire_mb_per_s']:>8.1f} MB/s on the wire")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = asyncio.run(run(args.messages, args.connections))
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

"""Produce ingest and fetch serve rates of the embedded broker over loopback, as ratios to
a floor measured in the same run.

The broker must never be the bottleneck of client benchmarks, so this measures it alone:
the broker runs as its own process (``python -m aiokafka07 broker``, one core) and the
load comes from this process (the other core) over raw sockets, with the codec only used
to build the requests. No ZooKeeper, no fsync (as in test clusters).

* **Ingest.** ``--connections`` sockets each pipeline PRODUCE requests of 1000 messages of
  100 bytes (uncompressed, then snappy) to their own partition; the rate counts from the
  first byte sent to the OFFSETS answers that prove every produce was appended.
* **Serve.** One socket pipelines FETCH requests of 1 MiB windows over the partitions
  written by the first repetition (4 in flight) and counts the bytes received. The broker
  serves raw log ranges, so no client-side decoding is timed here.
* **The floor** is a server in a process of its own too, on asyncio like the broker, that
  does the least any such server must: it splits the same request frames and drops the
  PRODUCE ones, answers OFFSETS at once, and answers each fetch with the same number of
  bytes from memory. The same client code runs against both.

``--reps`` (>= 5) repetitions, interleaved (each runs every measurement once, in a
rotating order); printed are the rates' medians and spreads (min..max), each broker rate
as a ratio to the floor's rate in the same repetition, and the load average before and
after. No verdict against a fixed number.

Run: ``python benchmarks/bench_broker.py [--messages N] [--connections C] [--reps R]
[--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import struct
import sys
import tempfile
import time
from typing import Any, cast

from common import load, ratios, spread, start_broker

from aiokafka07.protocol import (
    FrameSplitter,
    RequestType,
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
ENTRY = 4 + 6 + PAYLOAD  # an uncompressed message on the wire
#: The measurements of one repetition: ingest (the data serve reads) first, then serve.
INGEST = ("floor_ingest_none", "ingest_none", "floor_ingest_snappy", "ingest_snappy")
SERVE = ("floor_serve", "serve")


def make_batches(count: int, compression: str) -> list[bytes]:
    rng = random.Random(7)
    payloads = [rng.randbytes(40) + b"x" * (PAYLOAD - 40) for _ in range(BATCH)]
    one = encode_message_set(payloads, compression=compression)
    return [one] * count


# -- the floor: a server that splits frames and does nothing else ------------------------


class FloorServer(asyncio.Protocol):
    """Drops PRODUCE frames, answers a fetch with the number of bytes it asks for (a
    2-byte error code, then zeros from memory), anything else (OFFSETS) with a
    10-byte answer."""

    ZEROS = memoryview(bytes(WINDOW))
    OTHER = struct.pack(">ihiq", 14, 0, 1, 0)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's do not subclass it
        self.transport = transport
        self.splitter = FrameSplitter(min_size=2)

    def data_received(self, data: bytes) -> None:
        for body in self.splitter.feed(data):
            (kind,) = struct.unpack_from(">h", body)
            if kind == RequestType.PRODUCE:
                continue
            if kind == RequestType.FETCH:
                (size,) = struct.unpack_from(">i", body, 2)
                self.transport.write(struct.pack(">ih", size + 2, 0))
                self.transport.write(self.ZEROS[:size])
            else:
                self.transport.write(self.OTHER)


def floor_server() -> None:
    """(In a process of its own.) Serve :class:`FloorServer` on loopback; print the port;
    stop when stdin closes."""

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(FloorServer, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.to_thread(sys.stdin.read)
        server.close()

    asyncio.run(serve())


async def start_floor() -> tuple[asyncio.subprocess.Process, int]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--floor-server",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    if not line:
        raise RuntimeError("the floor server did not start")
    return process, int(line)


# -- the client, the same against both -----------------------------------------------


async def produce(port: int, topic: str, partition: int, batches: list[bytes]) -> int:
    """Pipeline the produces, then wait for an OFFSETS answer (proof they were read, and
    by the broker appended)."""
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
    port: int, topic: str, connections: int, messages: int, codec: str, *, broker: bool
) -> dict[str, float]:
    per_connection = max(1, messages // BATCH // connections)
    batches = make_batches(per_connection, codec)
    before = [await latest(port, topic, p) for p in range(connections)] if broker else []
    start = time.perf_counter()
    sent = await asyncio.gather(*(produce(port, topic, p, batches) for p in range(connections)))
    elapsed = time.perf_counter() - start
    total_messages = per_connection * BATCH * connections
    if broker:  # wait for the flusher, then check every byte was appended
        for _ in range(100):
            ends = [await latest(port, topic, p) for p in range(connections)]
            if sum(ends) - sum(before) == sum(sent):
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"broker appended {sum(ends) - sum(before)} of {sum(sent)} bytes")
    return {
        "messages_per_s": total_messages / elapsed,
        "wire_mb_per_s": sum(sent) / elapsed / MB,
        "payload_mb_per_s": total_messages * PAYLOAD / elapsed / MB,
        "seconds": elapsed,
    }


def fetches(topic: str, ends: list[int], *, broker: bool) -> list[bytes]:
    """The FETCH requests of 1 MiB windows over the first ``ends`` bytes of each
    partition; for the floor, requests of the same answer sizes (type FETCH, then the
    size)."""
    requests = []
    for partition, end in enumerate(ends):
        for offset in range(0, end, WINDOW):
            size = min(WINDOW, end - offset)  # (later repetitions append past ``end``)
            if broker:
                requests.append(encode_fetch_request(topic, partition, offset, size))
            else:
                requests.append(struct.pack(">ihi", 6, RequestType.FETCH, size))
    return requests


async def measure_serve(port: int, requests: list[bytes], expected: int) -> dict[str, float]:
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
            raise RuntimeError("the server closed the connection")
        for frame in splitter.feed(data):
            received += len(frame) - 2
            in_flight -= 1
            answered += 1
    elapsed = time.perf_counter() - start
    writer.close()
    if received != expected:
        raise RuntimeError(f"served {received} of {expected} bytes")
    return {
        "wire_mb_per_s": received / elapsed / MB,
        "messages_per_s": received / ENTRY / elapsed,
        "seconds": elapsed,
    }


# -- the whole run -------------------------------------------------------------------


async def run(messages: int, connections: int, reps: int) -> dict[str, Any]:
    results: dict[str, Any] = {
        "messages": messages,
        "connections": connections,
        "reps": reps,
        "cpus": os.cpu_count(),
        "load_before": load(),
    }
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in INGEST + SERVE}
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
        floor, floor_port = await start_floor()
        try:
            serve_requests: dict[bool, list[bytes]] = {}
            served = 0
            for rep in range(reps):
                for names in (INGEST, SERVE):
                    shift = rep % len(names)
                    for name in names[shift:] + names[:shift]:
                        broker = not name.startswith("floor_")
                        server = port if broker else floor_port
                        if name in SERVE:
                            if not serve_requests:  # the data of the first repetition
                                ends = [await latest(port, "plain", p) for p in range(connections)]
                                served = sum(ends)
                                for side in (True, False):
                                    serve_requests[side] = fetches("plain", ends, broker=side)
                            sample = await measure_serve(server, serve_requests[broker], served)
                        else:
                            codec = name.rsplit("_", 1)[1]
                            topic = "plain" if codec == "none" else codec
                            sample = await measure_ingest(
                                server, topic, connections, messages, codec, broker=broker
                            )
                        samples[name].append(sample)
        finally:
            proc.terminate()
            assert floor.stdin is not None
            floor.stdin.close()
            try:
                await asyncio.wait_for(floor.wait(), 10)
            except asyncio.TimeoutError:
                floor.kill()
                await floor.wait()
            await proc.wait()
    for name, runs in samples.items():
        figures = {key: spread([r[key] for r in runs]) for key in runs[0] if key != "seconds"}
        if not name.startswith("floor_"):
            # The broker's rate over the floor's, in the same repetition (same bytes).
            floor_runs = samples[f"floor_{name}"]
            figures["over_floor"] = ratios(
                [f["seconds"] for f in floor_runs], [r["seconds"] for r in runs]
            )
        results[name] = figures
    results["load_after"] = load()
    return results


def render(r: dict[str, Any]) -> str:
    def ratio(f: dict[str, float]) -> str:
        return f"{f['median']:.2f}x ({f['min']:.2f}..{f['max']:.2f})"

    rows = (
        ("produce ingest, uncompressed", "ingest_none"),
        ("produce ingest, snappy (deep-validated)", "ingest_snappy"),
        ("fetch serve, 1 MiB windows, 4 in flight", "serve"),
    )
    lines = [
        "embedded broker (separate process) over loopback, 100-byte messages, batches of 1000",
        f"  {r['messages']:,} messages per run, {r['connections']} producer connections, "
        f"{r['reps']} interleaved repetitions, {r['cpus']} CPUs, load "
        f"{' '.join(f'{x:.2f}' for x in r['load_before'])} before, "
        f"{' '.join(f'{x:.2f}' for x in r['load_after'])} after",
        "  medians (min..max); the broker's rate over the floor server's in the same "
        "repetition (same bytes, same client)",
    ]
    for label, name in rows:
        f, floor = r[name], r[f"floor_{name}"]
        rate = f"{f['messages_per_s']['median']:>12,.0f} msgs/s"
        lines.append(
            f"  {label:<40} {rate} {f['wire_mb_per_s']['median']:>8.1f} MB/s on the wire; "
            f"floor {floor['wire_mb_per_s']['median']:.1f} MB/s; broker / floor "
            f"{ratio(f['over_floor'])}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--floor-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        floor_server()
        return
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    results = asyncio.run(run(args.messages, args.connections, args.reps))
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

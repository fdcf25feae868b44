"""What hostile bytes cost: a broker under a gzip bomb, a client decoding 22 bytes that
declare 3.3 GiB, a consumer started inside a message.

* **Bomb.** A broker in its own process; a healthy client sends OFFSETS requests back to
  back. ``--reps`` times, interleaved: a quiet window (the floor), then a window in which
  another client produces a gzip wrapper holding ``--bomb-mib`` MiB (one-MiB messages of
  zeros, about 1/1000 of that compressed). Reported: the healthy client's median and
  slowest round trip in each window and their ratio to the floor, how long the broker
  took to refuse the bomb, and the broker's peak RSS (VmHWM) against its
  ``max.decompressed.bytes`` bound.
* **22 bytes.** A child process under a 1 GiB address-space limit decodes the snappy
  wrapper whose block declares 3,572,681,096 bytes; its peak RSS is reported as a ratio
  to the same child decoding a small valid set (the floor), with the outcome.
* **Mid-message offset.** ``SimpleConsumer.batches`` from an offset inside a message:
  where the payload reads as a size larger than the log (for a fetch size larger and
  smaller than the log), and where the bytes read as a size within the log. Requests
  until the typed error (FETCH and OFFSETS, counted by an in-process broker) and the
  time, as a ratio to the time of the first batch from a valid offset (the floor), each
  repetition trying every position in turn.

Every figure is a ratio to a floor measured in the same run (or to the broker's own
configured bound), over ``--reps`` interleaved repetitions, with the median and spread
and the load average before and after; none is judged against a fixed number.

Run: ``python benchmarks/bench_hostile.py [--reps N] [--bomb-mib N] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ratios, spread, start_broker

from aiokafka07 import BrokerAddress, BrokerConnection, SimpleConsumer
from aiokafka07.broker import Broker, BrokerConfig
from aiokafka07.errors import KafkaError
from aiokafka07.protocol import LATEST, encode_produce_request
from aiokafka07.testing.hostile import SNAPPY_3_GIB, gzip_bomb, peak_rss

MIB = 1 << 20


async def round_trips(conn: BrokerConnection, stop: asyncio.Event) -> list[float]:
    times = []
    while not stop.is_set():
        began = time.perf_counter()
        await conn.offsets("healthy", 0, LATEST, 1)
        times.append(time.perf_counter() - began)
    return times


async def window(address: BrokerAddress, bomb: bytes | None, quiet_s: float) -> dict[str, float]:
    """The healthy client's round trips while ``bomb`` is refused (or for ``quiet_s``)."""
    healthy = await BrokerConnection.open(address, request_timeout_ms=60_000)
    stop = asyncio.Event()
    task = asyncio.create_task(round_trips(healthy, stop))
    await asyncio.sleep(0.05)
    began = time.perf_counter()
    if bomb is None:
        await asyncio.sleep(quiet_s)
    else:
        reader, writer = await asyncio.open_connection(address.host, address.port)
        writer.write(encode_produce_request("bombed", 0, bomb))
        await writer.drain()
        if await asyncio.wait_for(reader.read(1), 120) != b"":
            raise RuntimeError("the broker answered a produce")
        writer.close()
    elapsed = time.perf_counter() - began
    stop.set()
    times = await task
    await healthy.close()
    return {
        "window_s": elapsed,
        "round_trips": len(times),
        "median_s": statistics.median(times),
        "max_s": max(times),
    }


async def measure_bomb(reps: int, bomb_mib: int) -> dict[str, Any]:
    bomb = gzip_bomb(bomb_mib)
    bound = BrokerConfig(broker_id=0, log_dir=Path("."), enable_zookeeper=False)
    with tempfile.TemporaryDirectory() as tmp:
        process, port = await start_broker(tmp)
        address = BrokerAddress(0, "127.0.0.1", port)
        try:
            await window(address, None, 0.2)  # warm up
            before = peak_rss(process.pid)
            quiet, bombed = [], []
            for _ in range(reps):
                hit = await window(address, bomb, 0)
                bombed.append(hit)
                quiet.append(await window(address, None, hit["window_s"]))
            after = peak_rss(process.pid)
        finally:
            process.terminate()
            await process.wait()
    floor = statistics.median(q["median_s"] for q in quiet)
    return {
        "bomb_mib": bomb_mib,
        "bomb_compressed_bytes": len(bomb),
        "bound_bytes": bound.decompression_bound(),
        "refused_after_s": spread([b["window_s"] for b in bombed]),
        "healthy_median_s": {
            "quiet": spread([q["median_s"] for q in quiet]),
            "bomb": spread([b["median_s"] for b in bombed]),
        },
        "healthy_max_s": {
            "quiet": spread([q["max_s"] for q in quiet]),
            "bomb": spread([b["max_s"] for b in bombed]),
        },
        "healthy_round_trips_during_bomb": spread([b["round_trips"] for b in bombed]),
        "slowest_over_quiet_median": max(b["max_s"] for b in bombed) / floor,
        # Per repetition, the bomb window against the quiet window next to it.
        "median_over_quiet": ratios(
            [b["median_s"] for b in bombed], [q["median_s"] for q in quiet]
        ),
        "slowest_over_quiet": ratios([b["max_s"] for b in bombed], [q["max_s"] for q in quiet]),
        "broker_peak_rss_bytes": {"before": before, "after": after},
        "peak_rss_over_bound": after / bound.decompression_bound(),
    }


CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from aiokafka07.errors import KafkaError
from aiokafka07.protocol import decode_message_set, encode_message_set
data = bytes.fromhex(sys.argv[1]) if len(sys.argv) > 1 else encode_message_set([b"x" * 20])
try:
    outcome = f"{len(decode_message_set(data).messages)} messages"
except KafkaError as exc:
    outcome = type(exc).__name__
print(outcome, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def child_decode(data: bytes | None) -> tuple[str, int | None]:
    args = [sys.executable, "-c", CHILD] + ([data.hex()] if data is not None else [])
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        return f"died with status {result.returncode}", None
    outcome, rss = result.stdout.rsplit(" ", 1)
    return outcome, int(rss)


def measure_snappy(reps: int) -> dict[str, Any]:
    floors, hostile, outcomes = [], [], set()
    for _ in range(reps):
        outcome, rss = child_decode(None)
        assert rss is not None, outcome
        floors.append(rss)
        outcome, rss = child_decode(SNAPPY_3_GIB)
        outcomes.add(outcome)
        if rss is not None:
            hostile.append(rss)
    result: dict[str, Any] = {"outcomes": sorted(outcomes), "floor_rss_bytes": spread(floors)}
    if hostile:
        result["rss_bytes"] = spread(hostile)
        result["rss_over_floor"] = statistics.median(hostile) / statistics.median(floors)
    return result


async def measure_mid_message(reps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = BrokerConfig(
            broker_id=0,
            log_dir=Path(tmp),
            port=0,
            enable_zookeeper=False,
            log_flush_interval=1,
            log_flush_fsync=False,  # every message visible as soon as it is appended
        )
        async with Broker(config) as broker:
            conn = await BrokerConnection.open(BrokerAddress(0, broker.host, broker.port))
            payloads = [b"\x00\xd3\x4c\x8f view %06d" % i for i in range(20_000)]
            await conn.produce("pv", 0, payloads, confirm=True)
            await conn.close()
            positions = (
                ("floor_valid_offset", 0, 1024),
                # At 10 (a payload's start) the "size" is 13,847,695, past the log end.
                ("size_past_log_end_fetch_larger_than_log", 10, 1 << 20),
                ("size_past_log_end_fetch_smaller_than_log", 10, 1024),
                # At 5 (attributes and CRC), a "size" within the log: read, then refused.
                ("size_within_log", 5, 1024),
            )
            counts: dict[str, list[int]] = {name: [] for name, _, _ in positions}
            times: dict[str, list[float]] = {name: [] for name, _, _ in positions}
            errors: dict[str, set[str]] = {name: set() for name, _, _ in positions}
            for _ in range(reps):  # interleaved: each repetition tries every position
                for name, offset, fetch_size in positions:
                    before = broker.requests_handled
                    began = time.perf_counter()
                    async with SimpleConsumer(broker.host, broker.port, fetch_size=fetch_size) as c:
                        try:
                            await anext(c.batches("pv", 0, offset))
                            errors[name].add("none: a batch")
                        except KafkaError as exc:
                            errors[name].add(type(exc).__name__)
                        except StopAsyncIteration:
                            errors[name].add("none: nothing")
                    times[name].append(time.perf_counter() - began)
                    counts[name].append(broker.requests_handled - before)
            floor = times["floor_valid_offset"]
            cases: dict[str, Any] = {
                name: {
                    "requests": spread(counts[name]),
                    "seconds": spread(times[name]),
                    "seconds_over_floor": ratios(times[name], floor),
                    "outcome": sorted(errors[name]),
                }
                for name, _, _ in positions
            }
    return cases


def spread_text(f: dict[str, float]) -> str:
    return f"{f['median']:.2f}x ({f['min']:.2f}..{f['max']:.2f})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--bomb-mib", type=int, default=512)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = {
        "load_average": os.getloadavg(),
        "bomb": await measure_bomb(args.reps, args.bomb_mib),
        "snappy_22_bytes": measure_snappy(args.reps),
        "mid_message_offset": await measure_mid_message(args.reps),
        "load_average_after": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    bomb = figures["bomb"]
    print(f"load average {figures['load_average']}, after {figures['load_average_after']}")
    print(
        f"bomb: {bomb['bomb_mib']} MiB in {bomb['bomb_compressed_bytes']} bytes, refused after "
        f"{bomb['refused_after_s']['median']:.3f} s (median of {args.reps}); healthy client "
        f"slowest round trip {bomb['healthy_max_s']['bomb']['max'] * 1000:.1f} ms "
        f"({bomb['slowest_over_quiet_median']:.1f}x the quiet median; per repetition, "
        f"median {spread_text(bomb['median_over_quiet'])} and slowest "
        f"{spread_text(bomb['slowest_over_quiet'])} those of the quiet window); broker peak RSS "
        f"{bomb['broker_peak_rss_bytes']['after'] / MIB:.0f} MiB "
        f"({bomb['peak_rss_over_bound']:.2f}x the bound of {bomb['bound_bytes']})"
    )
    snappy = figures["snappy_22_bytes"]
    print(f"22 bytes: {snappy['outcomes']}, peak RSS {snappy.get('rss_over_floor', 0):.2f}x floor")
    for name, case in figures["mid_message_offset"].items():
        print(
            f"mid-message {name}: {case['outcome']} after {case['requests']['median']} requests, "
            f"{case['seconds']['median'] * 1000:.1f} ms, "
            f"{spread_text(case['seconds_over_floor'])} the floor"
        )


if __name__ == "__main__":
    asyncio.run(main())

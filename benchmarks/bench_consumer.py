"""SimpleConsumer and group consumer throughput, and pipelined request rate over loopback,
as ratios to a floor measured in the same run.

The embedded broker runs in its own process (one core), registered in a real ZooKeeper
(Debian's package) for the group consumer; the consumer measured runs here (the other
core), as a user's consumer process would.

* **Iteration.** A backlog of ``--messages`` 100-byte uncompressed messages (one
  partition, produced beforehand) read four ways, interleaved, ``--reps`` times (>= 5).
  Two floors, each the cheapest honest client doing the same work, with no component of
  aiokafka07's beyond the codec (``common.RawFetcher``): a bare asyncio connection
  writing a MULTIFETCH of ``fetch_size`` as soon as the answer before it is decoded with
  the same C decoder (``decode_messages_into``, CRCs checked), reading each answer by
  its size prefix straight into one buffer of its size (an ``asyncio.BufferedProtocol``:
  no stream buffer, no copy). The **raw
  floor** counts each decoded list (the work of ``consumer.batches()``, one result per
  fetch); the **raw generator floor** is that client as an async generator yielding one
  record at a time (the work of ``async for record in consumer.messages(...)``), every
  value touched. Each figure is this process's CPU time (``time.process_time()``) per
  message; ``batches()`` is given as a ratio to the raw floor and ``messages()`` to the
  raw generator floor of the same repetition; also the wall-clock rates.
  ``record_batches()`` (one :class:`~aiokafka07.RecordBatch` per fetch, decoded into
  columns) runs in the same rotation, counting each batch's length as ``batches()`` does,
  against the raw floor.
* **Record batches (group consumer).** A backlog of ``--messages`` 100-byte messages over
  4 partitions (uncompressed, and snappy: 1,000 messages a wrapper), written as 0.7.2
  segment files before the broker starts, read three ways, interleaved, ``--reps`` times
  (>= 5), each counting every message and a byte total:

  - the **checking floor** (``common.RawFetcher.checked``): the raw client's MULTIFETCH
    loop over the same 4 partitions, each answer walked in C without a Python object per
    message (``count_message_set``): every size, magic byte and CRC checked, wrappers
    decompressed and the CRC of every message inside them checked too, the least any
    checking consumer does; it counts the messages and the bytes it checked;
  - ``getmany()`` of a group member (a fresh group each run, from the smallest offset),
    counting the records of each call and adding up ``len(record.value)`` of each;
  - ``getmany_batches()`` of a group member, counting ``len(batch)`` and adding up
    ``batch.nbytes`` (the values' bytes) of each batch.

  Printed per codec: messages per wall-clock second and CPU us per message of each, and,
  per repetition, ``getmany_batches()``'s rate over ``getmany()``'s and over the
  checking floor's (and ``getmany()``'s over the floor), median and spread; the same
  ratios of CPU speed (the other's CPU time per message over this one's). Last, the
  floor's over ``getmany()``'s: the most ``getmany_batches()`` / ``getmany()`` can reach,
  since a reader that checks every message between one MULTIFETCH and the next, as the
  floor does (the group consumer's fetcher keeps one MULTIFETCH at a time per broker),
  is no faster than the floor, beyond run-to-run noise.
* **Pipelining.** ``--requests`` small fetches (one 100-byte message each) on one
  connection: one at a time (await each answer) against all issued at once (answers
  matched in order), ``--reps`` times in turns. Requests per second for both, and their
  ratio per repetition.

Printed: medians with the spread (min..max) of every figure and ratio, and the machine's
load average before and after. No verdict: the ratios say how far above the floor the
consumer is on this machine, now.

Run: ``python benchmarks/bench_consumer.py [--messages N] [--requests N] [--reps R]
[--loop L] [--json]``. ``--messages`` sizes both backlogs.

``--loop``: the event loop(s), see ``common.on_each_loop``.
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

from common import (
    RawFetcher,
    Run,
    add_loop_option,
    count_batches,
    count_checked,
    count_records,
    fresh_member,
    load,
    on_each_loop,
    ratios,
    spread,
    start_broker,
    timed,
    write_segments,
)

from aiokafka07 import BrokerAddress, BrokerConnection, SimpleConsumer
from aiokafka07.protocol import encode_message_set
from aiokafka07.testing import ZooKeeperServer

PAYLOAD = 100
BATCH = 1000
TOPIC = "backlog"
MB = 1e6
MODES = ("raw", "raw_generator", "batches", "messages", "record_batches")
#: Each mode's floor: the raw client doing the same work.
FLOOR_OF = {"batches": "raw", "messages": "raw_generator", "record_batches": "raw"}
#: The group consumer's backlog: partitions and codecs.
PARTITIONS = 4
CODECS = ("none", "snappy")
#: The group consumer's reads, the checking floor first.
GROUP_MODES = ("checked", "getmany", "getmany_batches")
#: The rate ratios printed for them: (numerator, denominator), per repetition.
GROUP_RATIOS = (
    ("getmany_batches", "getmany"),
    ("getmany_batches", "checked"),
    ("getmany", "checked"),
    # The most getmany_batches() / getmany() can be (see the module docstring).
    ("checked", "getmany"),
)
#: The group consumer's default fetch size, which the checking floor uses too.
FETCH_SIZE = 1 << 20
#: A group read that gets nothing for this long ends (and the figure is refused).
IDLE_MS = 30_000


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


async def read_messages(consumer: SimpleConsumer) -> int:
    count = size = 0
    async for record in consumer.messages(TOPIC, 0, 0):
        count += 1
        size += len(record.value)
    return count


async def read_batches(consumer: SimpleConsumer) -> int:
    count = 0
    async for batch in consumer.batches(TOPIC, 0, 0):
        count += len(batch.messages)
    return count


async def read_record_batches(consumer: SimpleConsumer) -> int:
    count = 0
    async for batch in consumer.record_batches(TOPIC, 0, 0):
        count += len(batch)
    return count


async def iteration(
    client: RawFetcher, consumer: SimpleConsumer, expected: int, reps: int
) -> dict[str, Any]:
    size = consumer.fetch_size
    readers = {
        "raw": lambda: count_batches(client.batches(TOPIC, [0], size)),
        "raw_generator": lambda: count_records(client.records(TOPIC, [0], size)),
        "messages": lambda: read_messages(consumer),
        "batches": lambda: read_batches(consumer),
        "record_batches": lambda: read_record_batches(consumer),
    }
    runs: dict[str, list[Run]] = {mode: [] for mode in MODES}
    for rep in range(reps):  # interleaved, in a rotating order
        shift = rep % len(MODES)
        for mode in MODES[shift:] + MODES[:shift]:
            run = await timed(readers[mode])
            if run.count != expected:
                raise RuntimeError(f"{mode} read {run.count} messages, expected {expected}")
            runs[mode].append(run)
    figures: dict[str, Any] = {}
    for mode in MODES:
        cpu = [r.cpu_us for r in runs[mode]]
        figures[mode] = {
            "cpu_us_per_message": spread(cpu),
            "messages_per_s": spread([r.rate for r in runs[mode]]),
        }
        if mode in FLOOR_OF:
            floor = [r.cpu_us for r in runs[FLOOR_OF[mode]]]
            figures[mode]["floor"] = FLOOR_OF[mode]
            figures[mode]["cpu_ratio_to_floor"] = ratios(cpu, floor)
    return figures


# -- record batches of the group consumer ---------------------------------------------


def write_group_backlog(log_dir: Path, codec: str, messages: int) -> int:
    """About ``messages`` over :data:`PARTITIONS` segment files of topic
    ``group-<codec>`` (sets of 1000 messages, one wrapper each when compressed); returns
    how many were written."""
    rng = random.Random(11)
    payloads = [rng.randbytes(30) + b"m" * (PAYLOAD - 30) for _ in range(BATCH)]
    chunk = encode_message_set(payloads, compression=codec)
    per_partition = max(messages // PARTITIONS // BATCH, 1)
    write_segments(log_dir, f"group-{codec}", PARTITIONS, chunk, per_partition)
    return per_partition * BATCH * PARTITIONS


async def checked_read(port: int, topic: str) -> int:
    """The checking floor (see the module docstring) over every partition of ``topic``."""
    client = await RawFetcher.open(port)
    try:
        return await count_checked(client.checked(topic, range(PARTITIONS), FETCH_SIZE))
    finally:
        await client.close()


async def group_read(connect: str, topic: str, expected: int, mode: str) -> Run:
    """A fresh group member reading ``topic`` from the start with ``getmany()`` or
    ``getmany_batches()`` (``mode``) until it has ``expected`` messages; the read alone
    is timed (not the join)."""
    consumer = fresh_member(connect, topic, IDLE_MS)
    await consumer.start()
    try:

        async def by_records() -> int:
            count = size = 0
            while count < expected:
                got = await consumer.getmany(timeout_ms=IDLE_MS)
                if not got:
                    break
                for records in got.values():
                    count += len(records)
                    for record in records:
                        size += len(record.value)
            return count

        async def by_batches() -> int:
            count = size = 0
            while count < expected:
                got = await consumer.getmany_batches(timeout_ms=IDLE_MS)
                if not got:
                    break
                for batch in got.values():
                    count += len(batch)
                    size += batch.nbytes
            return count

        return await timed(by_batches if mode == "getmany_batches" else by_records)
    finally:
        await consumer.close(commit=False)


async def record_batches(
    connect: str, port: int, topics: dict[str, int], reps: int
) -> dict[str, Any]:
    """The group section (see the module docstring): per codec, every mode interleaved
    in a rotating order, ``reps`` times."""
    results: dict[str, Any] = {}
    for codec in CODECS:
        topic, expected = f"group-{codec}", topics[codec]
        runs: dict[str, list[Run]] = {mode: [] for mode in GROUP_MODES}
        for rep in range(reps):
            shift = rep % len(GROUP_MODES)
            for mode in GROUP_MODES[shift:] + GROUP_MODES[:shift]:
                if mode == "checked":
                    run = await timed(lambda topic=topic: checked_read(port, topic))
                else:
                    run = await group_read(connect, topic, expected, mode)
                if run.count != expected:
                    raise RuntimeError(f"{mode} read {run.count} messages, expected {expected}")
                runs[mode].append(run)
        figures: dict[str, Any] = {"messages": expected}
        for mode in GROUP_MODES:
            figures[mode] = {
                "cpu_us_per_message": spread([r.cpu_us for r in runs[mode]]),
                "messages_per_s": spread([r.rate for r in runs[mode]]),
            }
        for this, other in GROUP_RATIOS:
            name = f"{this}_over_{other}"
            figures[f"rate_{name}"] = ratios(
                [r.rate for r in runs[this]], [r.rate for r in runs[other]]
            )
            # CPU speed: the other's CPU time per message over this one's.
            figures[f"cpu_speed_{name}"] = ratios(
                [r.cpu_us for r in runs[other]], [r.cpu_us for r in runs[this]]
            )
        results[codec] = figures
    return results


async def pipelining(conn: BrokerConnection, requests: int, reps: int) -> dict[str, Any]:
    size = 4 + 6 + PAYLOAD

    async def serial() -> float:
        start = time.perf_counter()
        for i in range(requests):
            await conn.fetch(TOPIC, 0, (i % 1000) * size, size)
        return requests / (time.perf_counter() - start)

    async def pipelined() -> float:
        start = time.perf_counter()
        answers = await asyncio.gather(
            *(conn.fetch(TOPIC, 0, (i % 1000) * size, size) for i in range(requests))
        )
        rate = requests / (time.perf_counter() - start)
        if any(len(a.message_set) != size for a in answers):
            raise RuntimeError("a pipelined fetch got the wrong answer")
        return rate

    one_at_a_time: list[float] = []
    all_at_once: list[float] = []
    for rep in range(reps):
        if rep % 2:
            all_at_once.append(await pipelined())
            one_at_a_time.append(await serial())
        else:
            one_at_a_time.append(await serial())
            all_at_once.append(await pipelined())
    return {
        "count": requests,
        "serial_per_s": spread(one_at_a_time),
        "pipelined_per_s": spread(all_at_once),
        "pipelined_over_serial": ratios(all_at_once, one_at_a_time),
    }


async def run(messages: int, requests: int, reps: int) -> dict[str, Any]:
    logging.getLogger("aiokafka07").setLevel(logging.WARNING)
    messages -= messages % BATCH
    results: dict[str, Any] = {
        "messages": messages,
        "reps": reps,
        "cpus": os.cpu_count(),
        "load_before": load(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-consumer-") as log_dir, ZooKeeperServer() as zk:
        topics = {c: write_group_backlog(Path(log_dir), c, messages) for c in CODECS}
        proc, port = await start_broker(log_dir, partitions=PARTITIONS, zookeeper=zk.connect_string)
        try:
            conn = await BrokerConnection.open(BrokerAddress(0, "127.0.0.1", port))
            try:
                end = await produce_backlog(conn, messages)
                results["backlog_bytes"] = end
                async with SimpleConsumer("127.0.0.1", port, broker_id=0) as consumer:
                    await wait_visible(consumer, end)
                    client = await RawFetcher.open(port)
                    try:
                        results["iteration"] = await iteration(client, consumer, messages, reps)
                    finally:
                        await client.close()
                results["requests"] = await pipelining(conn, requests, reps)
                results["record_batches"] = await record_batches(
                    zk.connect_string, port, topics, reps
                )
            finally:
                await conn.close()
        finally:
            proc.terminate()
            await proc.wait()
    results["load_after"] = load()
    return results


def render(r: dict[str, Any]) -> str:
    def ratio(f: dict[str, float]) -> str:
        return f"{f['median']:.2f}x ({f['min']:.2f}..{f['max']:.2f})"

    def rate(f: dict[str, float]) -> str:
        return f"{f['median']:,.0f} ({f['min']:,.0f}..{f['max']:,.0f})"

    lines = [
        f"SimpleConsumer over loopback: {r['messages']:,} messages of {PAYLOAD} B "
        f"({r['backlog_bytes'] / MB:.0f} MB), broker in its own process; {r['reps']} "
        f"interleaved repetitions, {r['cpus']} CPUs, load "
        f"{' '.join(f'{x:.2f}' for x in r['load_before'])} before, "
        f"{' '.join(f'{x:.2f}' for x in r['load_after'])} after",
        "  CPU us/message (median), ratio to its floor in the same repetition "
        "(min..max), msgs/s (min..max)",
    ]
    labels = {
        "raw": "raw floor",
        "raw_generator": "raw generator floor",
        "batches": "batches() / raw floor",
        "messages": "messages() / raw generator floor",
        "record_batches": "record_batches() / raw floor",
    }
    for mode in MODES:
        f = r["iteration"][mode]
        rel = ratio(f["cpu_ratio_to_floor"]) if mode in FLOOR_OF else ""
        lines.append(
            f"    {labels[mode]:<33} {f['cpu_us_per_message']['median']:6.3f} us  {rel:<20} "
            f"{rate(f['messages_per_s'])} msgs/s"
        )
    q = r["requests"]
    lines.append(
        f"  {q['count']:,} small fetches on one connection: one at a time "
        f"{rate(q['serial_per_s'])}/s, pipelined {rate(q['pipelined_per_s'])}/s; "
        f"pipelined / one at a time {ratio(q['pipelined_over_serial'])}"
    )
    lines.extend(render_record_batches(r["record_batches"]))
    return "\n".join(lines)


def render_record_batches(figures: dict[str, Any]) -> list[str]:
    """The group section's lines: each read's rate and CPU, then the ratios."""

    def ratio(f: dict[str, float]) -> str:
        return f"{f['median']:.2f}x ({f['min']:.2f}..{f['max']:.2f})"

    labels = {
        "checked": "checking floor (every CRC)",
        "getmany": "getmany()",
        "getmany_batches": "getmany_batches()",
    }
    lines = []
    for codec, f in figures.items():
        lines.append(
            f"  group consumer, {codec}: {f['messages']:,} messages over {PARTITIONS} "
            "partitions; msgs/s median (min..max), CPU us/message"
        )
        for mode in GROUP_MODES:
            rate = f[mode]["messages_per_s"]
            lines.append(
                f"    {labels[mode]:<28} {rate['median']:>12,.0f} ({rate['min']:,.0f}.."
                f"{rate['max']:,.0f}) msgs/s  {f[mode]['cpu_us_per_message']['median']:6.3f} us"
            )
        for this, other in GROUP_RATIOS:
            name = f"{this}_over_{other}"
            lines.append(
                f"    {labels[this]} / {labels[other]}: rate {ratio(f[f'rate_{name}'])}, "
                f"CPU speed {ratio(f[f'cpu_speed_{name}'])}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    add_loop_option(parser)
    args = parser.parse_args()
    if args.messages < BATCH:
        parser.error(f"--messages must be at least {BATCH}")
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    results = on_each_loop(args.loop, lambda: run(args.messages, args.requests, args.reps))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("\n\n".join(f"on {loop}:\n{render(r)}" for loop, r in results["loops"].items()))


if __name__ == "__main__":
    main()

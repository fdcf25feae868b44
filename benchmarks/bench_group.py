"""The group consumer: CPU per message against a floor, memory on a large backlog, and the
time a rebalance of 8 members over 64 partitions takes.

A real ZooKeeper (Debian's package) and an embedded broker in its own process; the
consumers run here. Backlogs are written straight into the broker's log directory as 0.7.2
segment files before it starts (the broker's recovery validates them), so producing them
costs neither time nor memory in this process.

* **CPU per message.** One group member reads a backlog of ``--messages`` 100-byte
  messages over 4 partitions (uncompressed, and snappy): with ``async for record in
  consumer``, and with ``getmany()`` (counting the records of each batch). The floors are
  the cheapest honest clients doing the same work, with no component of aiokafka07's
  beyond the codec (``common.RawFetcher``): a bare asyncio stream reading the same 4
  partitions of the same broker process with one MULTIFETCH at a time (the next written
  as soon as the answer before it is decoded, with the same C decoder, CRCs checked,
  wrappers expanded); the **raw floor** counts each decoded list (``getmany()``'s work),
  the **raw generator floor** yields one record at a time from an async generator
  (``async for``'s work). All four are interleaved, ``--reps`` times (>= 5); each figure
  is this process's CPU time (``time.process_time()``) per message, and the ratio of
  ``getmany()`` to the raw floor and of ``async for`` to the raw generator floor of the
  same repetition. Printed: the medians and the spread (min..max) of the ratios, the
  wall-clock rates, and the machine's load.
* **Memory.** The peak resident memory (``ru_maxrss``) of a fresh process that joins a group
  and reads a ``--memory-mb`` backlog with ``async for``, against the same process reading
  a backlog 100 times smaller (the floor, in the same run): their ratio near 1 means flat
  (the prefetch is bounded at 4 MiB per stream, not by the backlog).
* **Rebalance.** 8 members of one group on a 64-partition topic; then, ``--reps`` times, a
  9th member joins and later leaves. Timed: from the join (the leave) until every partition
  is owned by exactly one member, each member owning its 0.7.2 share, in the members'
  in-process assignments; also the leaving member's ``close()`` alone. Median and
  spread, in milliseconds: there is no floor to compare with in the same run, and no
  verdict either. With ``--baseline PATH`` (a checkout of another version, e.g. ``git
  worktree add /tmp/base REV``) the same is timed for both versions in fresh processes,
  one repetition each in turn (alternating which goes first), and printed with the
  ratio this / baseline per repetition.

No figure is judged against a fixed number: what a machine does at one moment says little
on another.

Run: ``python benchmarks/bench_group.py [--messages N] [--memory-mb M] [--reps R]
[--baseline PATH] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    RawFetcher,
    Run,
    count_batches,
    count_records,
    fresh_member,
    load,
    ratios,
    spread,
    start_broker,
    timed,
    write_segments,
)

from aiokafka07.group.consumer import Consumer
from aiokafka07.protocol import encode_message_set
from aiokafka07.testing import ZooKeeperServer

PAYLOAD = 100
PARTITIONS = 4
MB = 1e6
CODECS = ("none", "snappy")
#: A read that gets nothing for this long ends (and the figure is refused).
IDLE_MS = 30_000
MODES = ("raw", "raw_generator", "getmany", "async_for")
#: Each mode's floor: the raw client doing the same work.
FLOOR_OF = {"getmany": "raw", "async_for": "raw_generator"}
#: The group consumer's default fetch size, which the raw client uses too.
FETCH_SIZE = 1 << 20


def write_backlog(log_dir: Path, topic: str, partitions: int, messages: int, codec: str) -> int:
    """About ``messages`` over ``partitions`` segment files; returns how many messages
    were written (whole sets of 1000 per partition)."""
    rng = random.Random(11)
    payloads = [rng.randbytes(30) + b"m" * (PAYLOAD - 30) for _ in range(1000)]
    chunk = encode_message_set(payloads, compression=codec)
    per_partition = messages // partitions // 1000
    write_segments(log_dir, topic, partitions, chunk, per_partition)
    return per_partition * 1000 * partitions


async def raw_read(port: int, topic: str, expected: int, mode: str) -> Run:
    """A floor: the raw client over the topic's partitions, by lists or by records."""
    client = await RawFetcher.open(port)
    partitions = range(PARTITIONS)
    try:
        if mode == "raw":
            run = await timed(lambda: count_batches(client.batches(topic, partitions, FETCH_SIZE)))
        else:
            run = await timed(lambda: count_records(client.records(topic, partitions, FETCH_SIZE)))
    finally:
        await client.close()
    if run.count != expected:
        raise RuntimeError(f"{mode} read {run.count}, expected {expected}")
    return run


async def group_read(connect: str, topic: str, expected: int, mode: str) -> Run:
    consumer = fresh_member(connect, topic, IDLE_MS)
    await consumer.start()
    try:

        async def by_iteration() -> int:
            count = 0
            async for _record in consumer:
                count += 1
                if count >= expected:
                    break
            return count

        async def by_batches() -> int:
            count = 0
            while count < expected:
                batch = await consumer.getmany(timeout_ms=IDLE_MS)
                if not batch:
                    break
                for records in batch.values():
                    count += len(records)
            return count

        run = await timed(by_iteration if mode == "async_for" else by_batches)
    finally:
        await consumer.close(commit=False)
    if run.count != expected:
        raise RuntimeError(f"{mode} read {run.count} messages, expected {expected}")
    return run


async def cpu_per_message(
    connect: str, port: int, topics: dict[str, int], reps: int
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for codec in CODECS:
        topic, expected = f"backlog-{codec}", topics[codec]
        runs: dict[str, list[Run]] = {mode: [] for mode in MODES}
        for rep in range(reps):  # interleaved, in a rotating order
            shift = rep % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                if mode in FLOOR_OF:
                    run = await group_read(connect, topic, expected, mode)
                else:
                    run = await raw_read(port, topic, expected, mode)
                runs[mode].append(run)
        figures: dict[str, Any] = {}
        for mode in MODES:
            figures[mode] = {
                "cpu_us_per_message": spread([r.cpu_us for r in runs[mode]]),
                "messages_per_s": spread([r.count / r.wall for r in runs[mode]]),
            }
            if mode in FLOOR_OF:
                figures[mode]["floor"] = FLOOR_OF[mode]
                figures[mode]["cpu_ratio_to_floor"] = ratios(
                    [r.cpu_us for r in runs[mode]], [f.cpu_us for f in runs[FLOOR_OF[mode]]]
                )
        results[codec] = figures
    return results


# -- memory -----------------------------------------------------------------------------


def memory_child(connect: str, topic: str, expected: int) -> None:
    """(In a fresh process.) Read ``topic`` with ``async for``; print the peak RSS."""

    async def main() -> int:
        count = 0
        async with Consumer(
            topic,
            group="bench-memory",
            zookeeper=connect,
            auto_offset_reset="smallest",
            consumer_timeout_ms=IDLE_MS,
        ) as consumer:
            async for _record in consumer:
                count += 1
                if count >= expected:
                    break
        return count

    count = asyncio.run(main())
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"messages": count, "peak_rss_mb": peak_kb * 1024 / MB}))


def peak_rss(connect: str, topic: str, expected: int) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, __file__, "--memory-child", connect, topic, str(expected)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    figures: dict[str, float] = json.loads(result.stdout)
    if figures["messages"] != expected:
        raise RuntimeError(f"the memory run read {figures['messages']} of {expected}")
    return figures


# -- rebalance --------------------------------------------------------------------------


async def converged(members: list[Consumer], partitions: int, timeout: float = 30) -> float:
    """Seconds until every partition has one owner and each member its 0.7.2 share."""
    per, extra = divmod(partitions, len(members))
    shares = sorted([per + 1] * extra + [per] * (len(members) - extra))
    start = time.perf_counter()
    while True:
        owned = [tp for m in members for tp in m.assignment()]
        sizes = sorted(len(m.assignment()) for m in members)
        if len(owned) == partitions == len(set(owned)) and sizes == shares:
            return time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"no convergence: {len(set(owned))} of {partitions} owned")
        await asyncio.sleep(0.002)


async def rebalances(connect: str, reps: int, group: str = "conv") -> dict[str, Any]:
    def new_member() -> Consumer:
        return Consumer("wide", group=group, zookeeper=connect, auto_commit=False)

    members = [new_member() for _ in range(8)]
    began = time.perf_counter()
    await asyncio.gather(*(m.start() for m in members))
    await converged(members, 64)
    first = time.perf_counter() - began
    joins: list[float] = []
    leaves: list[float] = []
    closes: list[float] = []
    try:
        for _ in range(reps):
            joiner = new_member()
            began = time.perf_counter()
            await joiner.start()
            await converged([*members, joiner], 64)
            joins.append(time.perf_counter() - began)
            began = time.perf_counter()
            await joiner.close()
            closes.append(time.perf_counter() - began)
            await converged(members, 64)
            leaves.append(time.perf_counter() - began)
    finally:
        await asyncio.gather(*(m.close() for m in members))
    return {
        "first_s": first,
        "join_s": spread(joins),
        "leave_s": spread(leaves),
        "close_s": spread(closes),
    }


def rebalance_child(connect: str, group: str) -> None:
    """(In a fresh process, maybe importing another version of aiokafka07 through
    PYTHONPATH.) One group's first join, a 9th member's join, close and leave; JSON."""
    logging.getLogger("aiokafka07").setLevel(logging.WARNING)
    print(json.dumps(asyncio.run(rebalances(connect, 1, group))))


def rebalances_against(connect: str, baseline: str, reps: int) -> dict[str, Any]:
    """The rebalance figures of this checkout and of the aiokafka07 at ``baseline`` (a
    checkout of another version), each repetition in fresh processes, alternating which
    goes first; each figure's ratio (this / baseline) is taken within one repetition."""
    sides: dict[str, list[dict[str, Any]]] = {"current": [], "baseline": []}
    for rep in range(reps):
        order = ("current", "baseline") if rep % 2 == 0 else ("baseline", "current")
        for side in order:
            env = dict(os.environ)
            if side == "baseline":
                env["PYTHONPATH"] = os.pathsep.join(
                    p for p in (baseline, env.get("PYTHONPATH")) if p
                )
            result = subprocess.run(
                [sys.executable, __file__, "--rebalance-child", connect, f"ab-{side}-{rep}"],
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
                env=env,
            )
            sides[side].append(json.loads(result.stdout))
    figures: dict[str, Any] = {"baseline_path": baseline}
    for name in ("first_s", "join_s", "leave_s", "close_s"):

        def value(run: dict[str, Any], name: str = name) -> float:
            x = run[name]
            return float(x["median"] if isinstance(x, dict) else x)

        current = [value(r) for r in sides["current"]]
        base = [value(r) for r in sides["baseline"]]
        figures[name] = {
            "current": spread(current),
            "baseline": spread(base),
            "current_over_baseline": ratios(current, base),
        }
    return figures


# -- the whole run ----------------------------------------------------------------------


async def run(
    messages: int, memory_mb: int, reps: int, baseline: str | None = None
) -> dict[str, Any]:
    logging.getLogger("aiokafka07").setLevel(logging.WARNING)
    results: dict[str, Any] = {
        "messages": messages,
        "reps": reps,
        "cpus": os.cpu_count(),
        "load_before": load(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-group-") as tmp, ZooKeeperServer() as zk:
        log_dir = Path(tmp)
        topics = {
            c: write_backlog(log_dir, f"backlog-{c}", PARTITIONS, messages, c) for c in CODECS
        }
        large = max(memory_mb * 1_000_000 // (PAYLOAD + 10), PARTITIONS * 1000)
        sizes = {
            "large": write_backlog(log_dir, "memory-large", PARTITIONS, large, "none"),
            "small": write_backlog(
                log_dir, "memory-small", PARTITIONS, max(large // 100, PARTITIONS * 1000), "none"
            ),
        }
        (log_dir / "wide-0").mkdir()
        (log_dir / "wide-0" / f"{0:020d}.kafka").write_bytes(b"")
        proc, port = await start_broker(
            str(log_dir),
            partitions=PARTITIONS,
            zookeeper=zk.connect_string,
            settings={"topic.partition.count.map": "wide:64"},
        )
        try:
            await asyncio.sleep(0.5)  # topic registrations
            results["cpu"] = await cpu_per_message(zk.connect_string, port, topics, reps)
            memory = {
                name: peak_rss(zk.connect_string, f"memory-{name}", count)
                for name, count in sizes.items()
            }
            results["memory"] = {
                "backlog_mb": memory_mb,
                "large": memory["large"],
                "small": memory["small"],
                "growth_mb": memory["large"]["peak_rss_mb"] - memory["small"]["peak_rss_mb"],
                "large_over_small": memory["large"]["peak_rss_mb"] / memory["small"]["peak_rss_mb"],
            }
            results["rebalance"] = await rebalances(zk.connect_string, reps)
            if baseline is not None:
                results["rebalance_ab"] = await asyncio.to_thread(
                    rebalances_against, zk.connect_string, baseline, reps
                )
        finally:
            proc.terminate()
            await proc.wait()
    results["load_after"] = load()
    return results


def render(r: dict[str, Any]) -> str:
    def ratio(f: dict[str, float]) -> str:
        return f"{f['median']:.2f}x ({f['min']:.2f}..{f['max']:.2f})"

    lines = [
        f"Group consumer: {r['messages']:,} x {PAYLOAD} B over {PARTITIONS} partitions, broker "
        f"in its own process, {r['reps']} interleaved repetitions, {r['cpus']} CPUs, load "
        f"{' '.join(f'{x:.2f}' for x in r['load_before'])} before, "
        f"{' '.join(f'{x:.2f}' for x in r['load_after'])} after"
    ]
    for codec, figures in r["cpu"].items():
        lines.append(f"  {codec}: CPU us/message (median), ratio to its floor (min..max), rate")
        labels = {
            "raw": "raw floor",
            "raw_generator": "raw generator floor",
            "getmany": "getmany() / raw floor",
            "async_for": "async for / raw generator floor",
        }
        for mode in MODES:
            f = figures[mode]
            rel = "  " + ratio(f["cpu_ratio_to_floor"]) if mode in FLOOR_OF else ""
            lines.append(
                f"    {labels[mode]:<32} {f['cpu_us_per_message']['median']:6.3f} us{rel:<22} "
                f"{f['messages_per_s']['median']:>11,.0f} msgs/s"
            )
    m = r["memory"]
    lines.append(
        f"  peak RSS reading {m['backlog_mb']} MB: {m['large']['peak_rss_mb']:.1f} MB; "
        f"reading {m['small']['messages'] * (PAYLOAD + 10) / MB:g} MB: "
        f"{m['small']['peak_rss_mb']:.1f} MB "
        f"(growth {m['growth_mb']:+.1f} MB, {m['large_over_small']:.2f}x)"
    )
    b = r["rebalance"]
    lines.append(
        f"  8 members, 64 partitions: first join {b['first_s'] * 1000:.0f} ms; a 9th joins "
        f"{b['join_s']['median'] * 1000:.0f} ms ({b['join_s']['min'] * 1000:.0f}.."
        f"{b['join_s']['max'] * 1000:.0f}), leaves {b['leave_s']['median'] * 1000:.0f} ms "
        f"({b['leave_s']['min'] * 1000:.0f}..{b['leave_s']['max'] * 1000:.0f}), of which its "
        f"close() {b['close_s']['median'] * 1000:.0f} ms"
    )
    ab = r.get("rebalance_ab")
    if ab is not None:
        lines.append(
            f"  against the baseline at {ab['baseline_path']} (fresh processes, alternating): "
            "ms this / baseline, ratio (min..max)"
        )
        for name, label in (
            ("first_s", "first join"),
            ("join_s", "a 9th joins"),
            ("leave_s", "it leaves"),
            ("close_s", "its close()"),
        ):
            f = ab[name]
            lines.append(
                f"    {label:<12} {f['current']['median'] * 1000:7.0f} / "
                f"{f['baseline']['median'] * 1000:7.0f}  {ratio(f['current_over_baseline'])}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--memory-mb", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--baseline",
        metavar="PATH",
        help="also time the rebalances of the aiokafka07 in this checkout of another version "
        "(e.g. made with 'git worktree add PATH REV'), interleaved with this one's",
    )
    parser.add_argument("--memory-child", nargs=3, metavar=("CONNECT", "TOPIC", "COUNT"))
    parser.add_argument("--rebalance-child", nargs=2, metavar=("CONNECT", "GROUP"))
    args = parser.parse_args()
    if args.memory_child:
        connect, topic, count = args.memory_child
        memory_child(connect, topic, int(count))
        return
    if args.rebalance_child:
        rebalance_child(*args.rebalance_child)
        return
    if args.baseline is not None and not (Path(args.baseline) / "aiokafka07").is_dir():
        parser.error(f"--baseline {args.baseline}: no aiokafka07 package there")
    results = asyncio.run(run(args.messages, args.memory_mb, max(1, args.reps), args.baseline))
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

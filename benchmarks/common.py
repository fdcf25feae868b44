"""Shared by the benchmark scripts: an embedded broker in its own process (so the broker
and the client measured each get a core and do not share a GIL), backlogs written as 0.7.2
segment files before it starts, the median-and-spread summary every figure uses, a timed
run (CPU and wall seconds), and the machine's load.

No script prints a verdict against a fixed number: what one machine does at one moment
says little on another, so every figure that compares is a ratio to a floor or a peer
measured in the same run, interleaved with it, over repetitions (median and min..max),
with the load average before and after."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from aiokafka07.broker.log import segment_file_name
from aiokafka07.testing.process import start_broker_process

__all__ = ["Run", "load", "ratios", "spread", "start_broker", "timed", "write_segments"]


async def start_broker(
    log_dir: str,
    *,
    partitions: int = 1,
    settings: dict[str, str] | None = None,
    zookeeper: str | None = None,
    broker_id: int = 0,
) -> tuple[asyncio.subprocess.Process, int]:
    """Start ``python -m aiokafka07 broker`` (no fsync, 4 MiB socket buffers; registered
    in ``zookeeper`` if given); return it and its port."""
    options = {
        "socket.send.buffer": "4194304",
        "socket.receive.buffer": "4194304",
        **(settings or {}),
    }
    process, address = await start_broker_process(
        log_dir, broker_id=broker_id, partitions=partitions, zookeeper=zookeeper, settings=options
    )
    return process, address.port


def spread(values: Sequence[float]) -> dict[str, float]:
    """The median of repeated measurements, with their min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratios(values: Sequence[float], floors: Sequence[float]) -> dict[str, float]:
    """:func:`spread` of ``value / floor`` per repetition (each value over the floor
    measured next to it)."""
    return spread([v / f for v, f in zip(values, floors, strict=True)])


def load() -> list[float]:
    """The load average over 1, 5 and 15 minutes (printed before and after a run)."""
    return list(os.getloadavg())


class Run:
    """One timed read or write: CPU seconds of this process and wall seconds for
    ``count`` messages."""

    def __init__(self, count: int, cpu: float, wall: float) -> None:
        self.count, self.cpu, self.wall = count, cpu, wall

    @property
    def cpu_us(self) -> float:
        """CPU microseconds per message."""
        return self.cpu / self.count * 1e6

    @property
    def rate(self) -> float:
        """Messages per wall-clock second."""
        return self.count / self.wall


async def timed(work: Callable[[], Awaitable[int]]) -> Run:
    """Run ``work`` (which returns how many messages it handled) and time it."""
    cpu, wall = time.process_time(), time.perf_counter()
    count = await work()
    return Run(count, time.process_time() - cpu, time.perf_counter() - wall)


def write_segments(
    log_dir: Path, topic: str, partitions: int, chunk: bytes, sets: int
) -> list[int]:
    """Backlog for a broker not yet started: ``sets`` copies of the message set ``chunk``
    in one 0.7.2 segment file ``<log.dir>/<topic>-<p>/00000000000000000000.kafka`` per
    partition (the broker's recovery validates them). Returns each partition's size."""
    sizes = []
    for p in range(partitions):
        directory = log_dir / f"{topic}-{p}"
        directory.mkdir(parents=True)
        with open(directory / segment_file_name(0), "wb") as segment:
            for _ in range(sets):
                segment.write(chunk)
            sizes.append(segment.tell())
    return sizes

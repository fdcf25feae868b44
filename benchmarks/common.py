"""Shared by the benchmark scripts: an embedded broker in its own process (so the broker
and the client measured each get a core and do not share a GIL), backlogs written as 0.7.2
segment files before it starts, and the median-and-spread summary every figure uses."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Sequence
from pathlib import Path

from aiokafka07.broker.log import segment_file_name
from aiokafka07.testing.process import start_broker_process

__all__ = ["spread", "start_broker", "write_segments"]


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

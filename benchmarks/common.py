"""Shared by the benchmark scripts: an embedded broker in its own process, so the broker
and the client measured each get a core and do not share a GIL."""

from __future__ import annotations

import asyncio

from aiokafka07.testing.process import start_broker_process

__all__ = ["start_broker"]


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

"""Shared by the benchmark scripts: an embedded broker in its own process, so the broker
and the client measured each get a core and do not share a GIL."""

from __future__ import annotations

import asyncio
import re
import sys

__all__ = ["start_broker"]


async def start_broker(
    log_dir: str,
    *,
    partitions: int = 1,
    settings: dict[str, str] | None = None,
    zookeeper: str | None = None,
    broker_id: int = 0,
) -> tuple[asyncio.subprocess.Process, int]:
    """Start ``python -m aiokafka07 broker`` (no fsync; registered in ``zookeeper`` if
    given); return it and its port."""
    options = {
        "log.flush.fsync": "false",
        "socket.send.buffer": "4194304",
        "socket.receive.buffer": "4194304",
        **(settings or {}),
    }
    args = [arg for key, value in options.items() for arg in ("--set", f"{key}={value}")]
    args += ["--zookeeper", zookeeper] if zookeeper else ["--no-zookeeper"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aiokafka07", "broker", "--port", "0", "--broker-id",
        str(broker_id), "--log-dir", log_dir, "--partitions", str(partitions), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    match = re.search(rb":(\d+) \(log.dir", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"broker did not start: {line!r}")
    return proc, int(match.group(1))

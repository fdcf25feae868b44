"""An embedded broker in a process of its own (``python -m aiokafka07 broker``).

For measurements and demos: a broker in its own process gets its own core and GIL, as a
real broker would, instead of sharing the event loop of the client being measured.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from ..connection import BrokerAddress

__all__ = ["start_broker_process"]

_LISTENING = re.compile(rb"broker (\d+) listening on ([\d.]+):(\d+)")


async def start_broker_process(
    log_dir: str | Path,
    *,
    broker_id: int = 0,
    partitions: int = 1,
    zookeeper: str | None = None,
    settings: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> tuple[asyncio.subprocess.Process, BrokerAddress]:
    """Start a broker on a free loopback port (no fsync; registered in ``zookeeper`` when
    given, else standalone) and return the process and its address once it listens.

    ``settings`` are further ``server.properties`` keys. Stop it with ``terminate()``
    (a clean stop: logs flushed, registration removed).
    """
    options = {"log.flush.fsync": "false", **(settings or {})}
    args = [arg for key, value in options.items() for arg in ("--set", f"{key}={value}")]
    args += ["--zookeeper", zookeeper] if zookeeper else ["--no-zookeeper"]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aiokafka07", "broker", "--port", "0", "--broker-id",
        str(broker_id), "--log-dir", str(log_dir), "--partitions", str(partitions), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout)
    except asyncio.TimeoutError:
        line = b""
    match = _LISTENING.search(line)
    if match is None:
        process.kill()
        await process.wait()
        raise RuntimeError(f"broker {broker_id} did not start: {line!r}")
    return process, BrokerAddress(broker_id, match.group(2).decode(), int(match.group(3)))

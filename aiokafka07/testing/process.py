"""An embedded broker in a process of its own (``python -m aiokafka07 broker``).

For measurements, demos and the local development cluster: a broker in its own process
gets its own core and GIL, as a real broker would, instead of sharing the event loop of
the client being measured.

The process runs in a session of its own, so the terminal's Ctrl-C reaches only the
program that started it, which then stops its brokers in order. It holds the read end of
a pipe as its standard input and stops cleanly when that closes: when
:func:`stop_broker_process` closes it, and also when the starting process dies, however
it dies, so no broker outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from ..connection import BrokerAddress
from ..timeouts import wait_for
from ..validation import check_ms

__all__ = ["BrokerStartError", "start_broker_process", "stop_broker_process"]

_LISTENING = re.compile(rb"broker (\d+) listening on ([\d.]+):(\d+)")


class BrokerStartError(RuntimeError):
    """The broker process did not come up; the message carries the tail of its log."""


async def start_broker_process(
    log_dir: str | Path,
    *,
    broker_id: int = 0,
    partitions: int = 1,
    zookeeper: str | None = None,
    port: int = 0,
    settings: Mapping[str, str] | None = None,
    log_file: str | Path | None = None,
    timeout_ms: float = 60000.0,
    timeout: float | None = None,
) -> tuple[asyncio.subprocess.Process, BrokerAddress]:
    """Start a broker on loopback (``port`` 0: a free one; no fsync; registered in
    ``zookeeper`` when given, else standalone) and return the process and its address
    once it listens.

    ``settings`` are further ``server.properties`` keys. The broker's own log (INFO) is
    appended to ``log_file`` when given, else dropped. Stop it with
    :func:`stop_broker_process` (or ``terminate()``): a clean stop, logs flushed and
    registration removed. It must listen within ``timeout_ms`` (``timeout``, in seconds,
    is its deprecated form).
    """
    limit_ms = check_ms("start_broker_process", "timeout_ms", timeout_ms, timeout, above=True)
    options = {"log.flush.fsync": "false", **(settings or {})}
    args = [arg for key, value in options.items() for arg in ("--set", f"{key}={value}")]
    args += ["--zookeeper", zookeeper] if zookeeper else ["--no-zookeeper"]
    # The child appends to its log through its own copy of this descriptor.
    stderr = (
        os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if log_file is not None
        else asyncio.subprocess.DEVNULL
    )
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aiokafka07", "broker", "--port", str(port), "--broker-id",
            str(broker_id), "--log-dir", str(log_dir), "--partitions", str(partitions),
            "--stop-on-stdin-close", *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
    finally:
        if log_file is not None:
            os.close(stderr)
    assert process.stdout is not None
    try:
        line = await wait_for(process.stdout.readline(), limit_ms / 1000)
    except asyncio.TimeoutError:
        line = b""
    except BaseException:  # cancelled: the caller never learns of this process
        await stop_broker_process(process, timeout_ms=5000)
        raise
    match = _LISTENING.search(line)
    if match is None:
        await stop_broker_process(process, timeout_ms=5000)
        where = f"; its log {log_file} ends with:\n{_tail(log_file)}" if log_file else ""
        raise BrokerStartError(f"broker {broker_id} did not start{where}")
    return process, BrokerAddress(broker_id, match.group(2).decode(), int(match.group(3)))


async def stop_broker_process(
    process: asyncio.subprocess.Process,
    timeout: float | None = None,
    *,
    timeout_ms: float = 10000.0,
) -> int:
    """Stop a broker started by :func:`start_broker_process` and return its exit status.

    Closing its standard input asks for a clean stop; SIGKILL follows after ``timeout_ms``
    (``timeout``, in seconds, is its deprecated form). Safe to call on a process that has
    already ended.
    """
    limit_ms = check_ms("stop_broker_process", "timeout_ms", timeout_ms, timeout)
    if process.stdin is not None and not process.stdin.is_closing():
        process.stdin.close()
    try:
        return await wait_for(process.wait(), limit_ms / 1000)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        return await process.wait()


def _tail(path: str | Path, lines: int = 20) -> str:
    try:
        text = Path(path).read_bytes()[-16384:].decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])

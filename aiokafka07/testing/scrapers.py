"""Scrape pressure: clients fetching a URL back to back, in a process of their own.

An exporter must stay fresh however hard it is scraped; a test or a benchmark proves it
by scraping it from *another* process (Prometheus servers are other processes: clients
on the exporter's own event loop would also take the loop's time from it).

:func:`scrape_while` starts ``python -m aiokafka07.testing.scrapers URL CLIENTS
SECONDS`` and calls a function of the caller's every 0.1 s until it ends. That process
runs ``CLIENTS`` concurrent clients (aiohttp, the ``exporter`` extra), each fetching
``URL`` again as soon as its last answer was read, for ``SECONDS``, then prints one JSON
line: the answers by HTTP status, and their latency (median and max, ms). It exits 1 if
any request failed outright.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["scrape_while"]


async def scrape_while(
    url: str, clients: int, seconds: float, sample: Callable[[], None], every: float = 0.1
) -> dict[str, Any]:
    """Scrape ``url`` with ``clients`` clients back to back for ``seconds`` (in another
    process), calling ``sample()`` every ``every`` seconds meanwhile; the process's
    report (``statuses``: answers by HTTP status; ``latency_ms``: median and max).
    Raises :class:`RuntimeError` if a request failed outright; the process is killed if
    the caller's code raises."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiokafka07.testing.scrapers",
        url,
        str(clients),
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        while process.returncode is None:
            sample()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), every)
        out, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"the scrapers failed (exit status {process.returncode})")
    report: dict[str, Any] = json.loads(out)
    return report


async def _scrape(url: str, clients: int, seconds: float) -> dict[str, object]:
    import aiohttp

    statuses: collections.Counter[int] = collections.Counter()
    latencies: list[float] = []
    timeout = aiohttp.ClientTimeout(total=30)

    async def client(session: aiohttp.ClientSession) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            started = time.monotonic()
            async with session.get(url) as response:
                await response.read()
                statuses[response.status] += 1
            latencies.append(time.monotonic() - started)

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return {
        "statuses": {str(status): count for status, count in sorted(statuses.items())},
        "latency_ms": {
            "median": statistics.median(latencies) * 1000 if latencies else None,
            "max": max(latencies) * 1000 if latencies else None,
        },
    }


def main() -> None:
    url, clients, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print(json.dumps(asyncio.run(_scrape(url, clients, seconds))))


if __name__ == "__main__":
    main()

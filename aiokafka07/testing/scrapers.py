"""Scrape pressure: clients fetching a URL back to back, in a process of their own.

An exporter must stay fresh however hard it is scraped; a test or a benchmark proves it
by scraping it from *another* process (Prometheus servers are other processes: clients
on the exporter's own event loop would also take the loop's time from it).

:func:`start_scrapers` starts ``python -m aiokafka07.testing.scrapers URL CLIENTS
SECONDS``: ``CLIENTS`` concurrent clients (aiohttp, the ``exporter`` extra), each
fetching ``URL`` again as soon as its last answer was read, for ``SECONDS``; it prints
one JSON line: the answers by HTTP status, and each answer's latency (median and max,
ms). Exits 1 if any request failed outright.
"""

from __future__ import annotations

import asyncio
import collections
import json
import statistics
import sys
import time

__all__ = ["start_scrapers"]


async def start_scrapers(url: str, clients: int, seconds: float) -> asyncio.subprocess.Process:
    """The scraping process (stdout piped: :func:`asyncio.subprocess.Process.communicate`
    gives its JSON line)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiokafka07.testing.scrapers",
        url,
        str(clients),
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )


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

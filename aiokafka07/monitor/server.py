"""The exporter's HTTP server (aiohttp): ``/metrics`` and the lag status as JSON.

Every answer is built from the :class:`~aiokafka07.monitor.cluster_state.ClusterMonitor`'s
cached state: a request never waits on ZooKeeper or a broker, so scrapes cannot pile up
behind a slow cluster. Routes:

``/metrics``
    the Prometheus text format (``prometheus_client.generate_latest`` of a registry holding
    only the cluster's collector);
``/status``, ``/status/<group>``
    every group's (or one group's) lag status as JSON, the worst of its partitions
    (404 for a group not in the state);
``/``
    a short page naming the others.

Only GET. Listening on 127.0.0.1 unless told otherwise is the tool's default.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .cluster_state import ClusterMonitor
from .collector import ClusterCollector, registry_for
from .status import LagTracker

__all__ = ["ExporterServer"]

_INDEX = """<html><head><title>aiokafka07 exporter</title></head><body>
<h1>aiokafka07 exporter</h1>
<p><a href="/metrics">/metrics</a>: Prometheus metrics of the cluster;
<a href="/status">/status</a>: consumer-group lag status (JSON).</p>
</body></html>
"""


class ExporterServer:
    """Serves ``monitor``'s state (and ``tracker``'s statuses) on ``host``:``port``.

    ``port`` 0 takes a free port; :attr:`port` is the one bound after :meth:`start`.
    """

    def __init__(
        self, monitor: ClusterMonitor, tracker: LagTracker, *, host: str = "127.0.0.1", port: int
    ) -> None:
        self.monitor = monitor
        self.tracker = tracker
        self.host = host
        self.port = port
        self.registry = registry_for(ClusterCollector(monitor, tracker))
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status)
        app.router.add_get("/status/{group}", self._group_status)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._started = False

    async def start(self) -> None:
        """Listen; :class:`OSError` when the address cannot be bound."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            raise
        self._started = True
        server: Any = site._server
        self.port = server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and end open requests."""
        if self._started or self._runner.server is not None:
            await self._runner.cleanup()
        self._started = False

    async def __aenter__(self) -> ExporterServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def scrape(self) -> bytes:
        """One scrape's body (what ``/metrics`` answers), timed for the next scrape's
        ``kafka07_exporter_scrape_duration_seconds``."""
        started = time.perf_counter()
        body = generate_latest(self.registry)
        self.monitor.scrape_seconds = time.perf_counter() - started
        return body

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(text=_INDEX, content_type="text/html")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.scrape(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _status(self, request: web.Request) -> web.Response:
        return _json(self.tracker.status(self.monitor))

    async def _group_status(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        found = self.tracker.group_status(self.monitor, group)
        if found is None:
            return _json({"error": f"no consumer group {group!r} in the state"}, status=404)
        return _json(found)


def _json(document: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(document, indent=2) + "\n", status=status, content_type="application/json"
    )

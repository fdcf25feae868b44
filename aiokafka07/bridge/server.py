"""The bridge's HTTP endpoint: ``/metrics`` for Prometheus and ``/health``.

``aiokafka07 bridge --metrics-port`` starts one; an application embedding a
:class:`~aiokafka07.bridge.Bridge` may too. It serves on the bridge's own event loop
(unlike the exporter's server, which has a loop and thread of its own for thousands of
series formatted under scrape pressure): a scrape here is a few series per 0.7
broker-partition read from one :attr:`Bridge.metrics
<aiokafka07.bridge.Bridge.metrics>` snapshot, which must be taken on the bridge's loop
anyway, and it waits on nothing.

Routes:

``/metrics``
    the Prometheus text format: :class:`~aiokafka07.bridge.collector.BridgeCollector`'s
    ``kafka07_bridge_*`` series and the standard ``process_*`` series
    (``process_start_time_seconds``: each restart of the process shows as a new value);
``/health``
    JSON ``{"phase": ..., "copying": ..., "last_commit_age_seconds": ...,
    "partitions_unknown": ..., "lag_bytes": ...}``; 200 while the bridge copies, 503
    while it starts (recovery), stops, or after it ended or failed (a readiness check:
    recovery may take a while, do not restart the process for it);
``/``
    a short page naming the others.

Needs ``prometheus-client`` and ``aiohttp`` (the ``exporter`` extra; in a checkout
``python -m pip install -e '.[bridge,exporter]'``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.process_collector import ProcessCollector

from ..monitor.collector import cluster_name, registry_for
from ..monitor.http import listen, url
from .collector import BridgeCollector

if TYPE_CHECKING:
    from .runner import Bridge

__all__ = ["BridgeMetricsServer"]

_INDEX = """<html><head><title>aiokafka07 bridge</title></head><body>
<h1>aiokafka07 bridge</h1>
<p><a href="/metrics">/metrics</a>: Prometheus metrics of the bridge;
<a href="/health">/health</a>: 200 while it copies (JSON).</p>
</body></html>
"""


class BridgeMetricsServer:
    """Serves ``bridge``'s metrics on ``host``:``port`` (an async context manager).

    ``port`` 0 takes a free port; :attr:`port` is the one bound after :meth:`start`.
    ``cluster`` adds the label ``cluster="<cluster>"`` to every series, the process
    collector's too (as the exporter's ``--cluster``; a :class:`ValueError` for a name that
    is not one). :meth:`start` and :meth:`close` are called on the bridge's event loop,
    where the requests are answered.
    """

    def __init__(
        self, bridge: Bridge, *, host: str = "127.0.0.1", port: int, cluster: str | None = None
    ) -> None:
        self.bridge = bridge
        self.host = host
        self.port = port
        #: The ``cluster`` label's value added to every series (None: no such label).
        self.cluster = None if cluster is None else cluster_name(cluster)
        self.registry = registry_for(
            BridgeCollector(bridge), ProcessCollector(registry=None), cluster=self.cluster
        )
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen; :class:`OSError` when the address cannot be bound."""
        if self._runner is not None:
            raise RuntimeError("the bridge's metrics server was started already")
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        self._runner, self.port = await listen(app, self.host, self.port)

    async def close(self) -> None:
        """Stop listening and end open requests."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> BridgeMetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        """``http://host:port`` (the port bound once started)."""
        return url(self.host, self.port)

    def scrape(self) -> bytes:
        """What ``/metrics`` answers, formatted now (on the bridge's loop)."""
        return generate_latest(self.registry)

    def health(self) -> tuple[int, dict[str, object]]:
        """What ``/health`` answers: the status (200 while copying, else 503) and the
        document."""
        metrics = self.bridge.metrics
        copying = metrics.phase == "copying"
        document: dict[str, object] = {
            "phase": metrics.phase,
            "copying": copying,
            "last_commit_age_seconds": metrics.commit_age,
            "partitions_unknown": metrics.unknown,
            "lag_bytes": metrics.lag_bytes,
        }
        return (200 if copying else 503), document

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(text=_INDEX, content_type="text/html")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.scrape(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _health(self, request: web.Request) -> web.Response:
        status, document = self.health()
        return web.Response(
            text=json.dumps(document, indent=2) + "\n",
            status=status,
            content_type="application/json",
        )

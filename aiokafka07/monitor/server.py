"""The exporter's HTTP server (aiohttp): ``/metrics`` and the lag status as JSON.

Every answer is built from the :class:`~aiokafka07.monitor.cluster_state.ClusterMonitor`'s
cached state: a request never waits on ZooKeeper or a broker, so scrapes cannot pile up
behind a slow cluster.

**Scrapes never take the refresher's time.** The HTTP side runs on an event loop of its
own, in a thread of its own: answering 20 clients scraping back to back (a megabyte each)
keeps that loop busy, and on the refresher's loop it starved the refresher (its
ZooKeeper requests timed out, the state aged for as long as the scrapes went on). The
two threads share only immutable values: the state, and its formatted text.

**Formatted once per refresh.** The series of a refresh (thousands: every partition and
group partition) and the ``/status`` documents are formatted once, for the first request
after the refresh (or after ``interval_ms`` without one, so statuses keep being judged
while the state ages): judged on the monitor's loop, which owns the lag windows, and
formatted in a worker thread. Requests meanwhile wait for that one formatting; every
other answer is the kept text with the live series (the state's age, staleness, errors)
formatted per request. At most ``max_scrapes`` requests are answered at once; one that
waits longer than ``scrape_wait_ms`` for its turn gets 503.

Routes:

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

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import textwrap
import threading
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..timeouts import wait_for
from .cluster_state import ClusterMonitor, ClusterState
from .collector import (
    HealthCollector,
    StateCollector,
    Verdicts,
    cluster_name,
    judge,
    registry_for,
)
from .http import listen, url
from .status import LagTracker

__all__ = ["ExporterServer"]

log = logging.getLogger("aiokafka07.monitor")

_INDEX = """<html><head><title>aiokafka07 exporter</title></head><body>
<h1>aiokafka07 exporter</h1>
<p><a href="/metrics">/metrics</a>: Prometheus metrics of the cluster;
<a href="/status">/status</a>: consumer-group lag status (JSON).</p>
</body></html>
"""


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    """One refresh, formatted: the series, the ``/status`` groups, each group's document."""

    state: ClusterState
    made_at: float  # time.monotonic()
    metrics: bytes
    groups: str  # the JSON list of every group's document
    group_documents: dict[str, str]


class ExporterServer:
    """Serves ``monitor``'s state (and ``tracker``'s statuses) on ``host``:``port``.

    ``port`` 0 takes a free port; :attr:`port` is the one bound after :meth:`start`.
    ``cluster`` adds the label ``cluster="<cluster>"`` to every series (one Prometheus,
    several clusters; a :class:`ValueError` for a name that is not one, see
    :func:`~aiokafka07.monitor.collector.cluster_name`). ``max_scrapes`` requests are
    answered at once; one waiting ``scrape_wait_ms`` for its turn gets 503 (module
    docstring). :meth:`start` and :meth:`close` are called on the monitor's event loop; the
    requests are answered on the server's own.
    """

    def __init__(
        self,
        monitor: ClusterMonitor,
        tracker: LagTracker,
        *,
        host: str = "127.0.0.1",
        port: int,
        max_scrapes: int = 8,
        scrape_wait_ms: float = 10_000.0,
        cluster: str | None = None,
    ) -> None:
        if max_scrapes < 1:
            raise ValueError(f"max_scrapes must be at least 1, not {max_scrapes!r}")
        if not scrape_wait_ms > 0:
            raise ValueError(f"scrape_wait_ms must be positive, not {scrape_wait_ms!r}")
        self.monitor = monitor
        self.tracker = tracker
        self.host = host
        self.port = port
        self.max_scrapes = max_scrapes
        self.scrape_wait_ms = scrape_wait_ms
        #: The ``cluster`` label's value added to every series (None: no such label).
        self.cluster = None if cluster is None else cluster_name(cluster)
        self.health = HealthCollector(monitor)
        self._health_registry = registry_for(self.health, cluster=self.cluster)
        self._snapshot: _Snapshot | None = None
        self._rendering: asyncio.Task[_Snapshot] | None = None
        #: Times a refresh's series were formatted (once per refresh, at most).
        self.renders = 0
        #: Requests answered from a snapshot, and refused (503) for want of a turn.
        self.answered = 0
        self.refused = 0
        self._home: asyncio.AbstractEventLoop | None = None  # the monitor's loop
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None  # set on the server's loop
        self._loop: asyncio.AbstractEventLoop | None = None  # the server's loop
        self._turns: asyncio.Semaphore | None = None

    async def start(self) -> None:
        """Listen (on the server's own loop and thread); :class:`OSError` when the
        address cannot be bound."""
        if self._thread is not None:
            raise RuntimeError("the exporter server was started already")
        self._home = asyncio.get_running_loop()
        listening: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._serve, args=(listening,), name="aiokafka07-exporter-http", daemon=True
        )
        self._thread.start()
        try:
            self.port = await asyncio.wrap_future(listening)
        except BaseException:
            await self._join()
            raise

    def _serve(self, listening: concurrent.futures.Future[int]) -> None:
        """The server thread: its loop runs until :meth:`close`."""
        try:
            asyncio.run(self._main(listening))
        except BaseException as exc:  # handed to start(), which raises it
            if not listening.done():
                listening.set_exception(exc)
            else:
                log.exception("the exporter's HTTP server failed")

    async def _main(self, listening: concurrent.futures.Future[int]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._turns = asyncio.Semaphore(self.max_scrapes)
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status)
        app.router.add_get("/status/{group}", self._group_status)
        runner, port = await listen(app, self.host, self.port)
        try:
            listening.set_result(port)
            await self._stop.wait()
        finally:
            await runner.cleanup()

    async def close(self) -> None:
        """Stop listening, end open requests (the server's thread ends), and wait for a
        formatting under way."""
        try:
            await self._join()
        finally:
            rendering, self._rendering = self._rendering, None
            if rendering is not None:
                rendering.cancel()  # its worker thread runs on; the task ends with it
                with contextlib.suppress(BaseException):
                    await rendering

    async def _join(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop ended already
                loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(thread.join, 30)

    async def __aenter__(self) -> ExporterServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        """``http://host:port`` (the port bound once started)."""
        return url(self.host, self.port)

    async def scrape(self) -> bytes:
        """One scrape's body (what ``/metrics`` answers): the last refresh's series as
        formatted once, then the live ones; timed for the next scrape's
        ``kafka07_exporter_scrape_duration_seconds``. On either loop."""
        started = time.perf_counter()
        snapshot = await self._current()
        body = snapshot.metrics + generate_latest(self._health_registry)
        self.monitor.scrape_seconds = time.perf_counter() - started
        return body

    def _kept(self) -> _Snapshot | None:
        """The kept snapshot while it is current: the same refresh, younger than the
        refresh interval."""
        kept = self._snapshot
        if (
            kept is not None
            and kept.state is self.monitor.state
            and time.monotonic() - kept.made_at < self.monitor.interval_ms / 1000
        ):
            return kept
        return None

    async def _current(self) -> _Snapshot:
        """:meth:`snapshot`, from either loop: the kept one at once, else the formatting
        on the monitor's loop (which owns the lag windows)."""
        kept = self._kept()
        if kept is not None:
            return kept
        home = self._home
        if home is None or home is asyncio.get_running_loop():
            return await self.snapshot()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.snapshot(), home))

    async def snapshot(self) -> _Snapshot:
        """The formatted state (on the monitor's loop): the kept one while current, else
        one formatting shared by every request that waits for it."""
        kept = self._kept()
        if kept is not None:
            return kept
        rendering = self._rendering
        if rendering is None or rendering.done():
            rendering = self._rendering = asyncio.ensure_future(self._render())
        # A request that gives up does not cancel the formatting the others wait for.
        return await asyncio.shield(rendering)

    async def _render(self) -> _Snapshot:
        """Judge the state (the lag windows change on this loop), then format it in a
        worker thread (immutable values only)."""
        state = self.monitor.state
        now_ms = int(time.time() * 1000)
        verdicts = judge(self.monitor, self.tracker, now_ms)
        documents = {
            g.group: self.tracker.group_document(g, now_ms, verdicts[g.group]) for g in state.groups
        }
        started = time.perf_counter()
        metrics, groups, group_documents = await asyncio.to_thread(
            _format, state, verdicts, documents, self.cluster
        )
        self.health.render_seconds = time.perf_counter() - started
        self.renders += 1
        snapshot = _Snapshot(state, time.monotonic(), metrics, groups, group_documents)
        self._snapshot = snapshot
        return snapshot

    # -- the server's loop ---------------------------------------------------------------

    async def _turn(self) -> bool:
        """Wait for one of the ``max_scrapes`` turns, up to ``scrape_wait_ms``."""
        assert self._turns is not None
        try:
            await wait_for(self._turns.acquire(), self.scrape_wait_ms / 1000)
        except asyncio.TimeoutError:
            return False
        return True

    async def _answered(self) -> _Snapshot | None:
        """The snapshot a request answers from, within its turn; None: no turn."""
        if not await self._turn():
            return None
        assert self._turns is not None
        try:
            return await self._current()
        finally:
            self._turns.release()

    def _busy(self) -> web.Response:
        self.refused += 1
        return web.Response(
            text=f"{self.max_scrapes} requests are being answered; none finished within "
            f"{self.scrape_wait_ms:g} ms: try again\n",
            status=503,
        )

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(text=_INDEX, content_type="text/html")

    async def _metrics(self, request: web.Request) -> web.Response:
        if not await self._turn():
            return self._busy()
        assert self._turns is not None
        try:
            body = await self.scrape()
        finally:
            self._turns.release()
        self.answered += 1
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _status(self, request: web.Request) -> web.Response:
        snapshot = await self._answered()
        if snapshot is None:
            return self._busy()
        live = {"stale": self.monitor.is_stale, "refreshed_at": snapshot.state.refreshed_at}
        self.answered += 1
        return _json_text(_with(live, "groups", snapshot.groups))

    async def _group_status(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        snapshot = await self._answered()
        if snapshot is None:
            return self._busy()
        found = snapshot.group_documents.get(group)
        if found is None:
            document = {"error": f"no consumer group {group!r} in the state"}
            return _json_text(json.dumps(document, indent=2), status=404)
        live = json.dumps({"stale": self.monitor.is_stale}, indent=2)
        self.answered += 1
        return _json_text(live[:-2] + ",\n" + found[2:])


def _format(
    state: ClusterState,
    verdicts: Verdicts,
    documents: dict[str, dict[str, Any]],
    cluster: str | None,
) -> tuple[bytes, str, dict[str, str]]:
    """The series (with the ``cluster`` label, if any) and the JSON documents of one
    refresh (run in a worker thread)."""
    metrics = generate_latest(registry_for(StateCollector(state, verdicts), cluster=cluster))
    texts = {name: json.dumps(document, indent=2) for name, document in documents.items()}
    listed = ",\n".join(textwrap.indent(text, "  ") for text in texts.values())
    groups = "[]" if not texts else f"[\n{listed}\n]"
    return metrics, groups, texts


def _with(live: dict[str, Any], key: str, text: str) -> str:
    """``live`` as indented JSON with ``key`` holding the JSON ``text`` (formatted once)."""
    head = json.dumps(live, indent=2)[:-2]
    return f'{head},\n  "{key}": {textwrap.indent(text, "  ").lstrip()}\n}}'


def _json_text(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text + "\n", status=status, content_type="application/json")

"""An aiohttp service in front of Kafka 0.7: produce over HTTP, follow topics in a browser.

``POST /topics/{topic}``
    The body is one message. An optional key (``?key=`` or an ``X-Kafka-Key`` header)
    picks the partition as a Java producer would. Answers **202** once the message is
    queued (the producer batches it and delivers it in the background), or with
    ``?wait=1`` **200** and where it went once the broker confirmed it. Errors: **400**
    invalid topic, **413** message too large, **503** (with ``Retry-After``) send queue
    full, no broker, or shutting down, **502** the broker connection failed, **504** not
    confirmed in time (it may still be delivered).
``GET /topics/{topic}/events``
    Server-Sent Events, one ``message`` event per record after a ``ready`` event naming
    the partitions. ``?group=NAME`` joins that consumer group (streams of one group share
    its partitions, and a new stream resumes where the group left off); without it every
    stream is a group of its own, a live tail. ``?from=earliest|latest`` (default latest)
    is where a new group starts, ``?limit=N`` ends the stream after N records.
``GET /stats``
    The producer's counters and the number of open streams.
``GET /metrics``
    The producer's and every open stream's consumer metrics, in the Prometheus text
    format (:mod:`aiokafka07.prometheus`, from the app's own registry); **501** naming
    the extra to install when ``prometheus-client`` is missing.
``GET /healthz``
    Liveness: the event loop turns. **200** with its lag (how long a callback queued now
    waits to run), **503** when that is over ``max_loop_lag_ms`` (something blocks it).
``GET /readyz``
    Readiness: **200** once the producer is started and its ZooKeeper session is
    connected; **503** with the reason before that, while ZooKeeper is unreachable (the
    producer then serves its last view of the cluster) and from the start of shutdown.

The application owns one :class:`~aiokafka07.Producer` for its whole life, through
``app.cleanup_ctx``: started before the first request, flushed and closed at shutdown
after ``on_shutdown`` has ended every event stream, so every message answered with 202 is
delivered (a failure is logged, with how many were lost). Each event stream is a group
member with its own ZooKeeper session, closed with the stream.

``make_app(zookeeper)`` builds the application. As a script: ``python
examples/aiohttp_app.py`` starts a local cluster, serves on a free port, runs a short
demo through HTTP and exits; ``--zookeeper HOST:PORT`` serves that cluster and
``--serve`` a local one (``--port``, default 8080), until Ctrl-C::

    curl -N 'http://127.0.0.1:8080/topics/clicks/events?from=earliest'
    curl -d 'hello' 'http://127.0.0.1:8080/topics/clicks?key=user-1&wait=1'
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import logging
import signal
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from aiohttp import web

from aiokafka07 import ConsumerRecord, Producer, ProduceResult
from aiokafka07.cluster import ZooKeeperCluster
from aiokafka07.errors import (
    ConsumerStoppedError,
    InvalidTopicError,
    KafkaConnectionError,
    KafkaError,
    MessageTooLargeError,
    NoBrokersError,
    ProducerClosedError,
    QueueFullError,
    RequestTimeoutError,
)
from aiokafka07.group import Consumer
from aiokafka07.protocol import validate_topic

try:  # the prometheus extra; without it /metrics answers 501 naming it
    import prometheus_client

    import aiokafka07.prometheus
except ImportError:
    prometheus_client = None  # type: ignore[assignment]

__all__ = ["KafkaService", "make_app", "read_events"]

log = logging.getLogger("aiohttp_app")

DEMO_TOPIC = "clicks"
#: The line of /metrics the demo prints.
METRIC_SHOWN = "aiokafka07_producer_messages_sent_total"


class KafkaService:
    """What the application shares between requests: settings, the producer, the open
    event streams, and delivery counts of the messages answered with 202."""

    def __init__(
        self,
        zookeeper: str,
        *,
        producer_options: Mapping[str, Any],
        heartbeat: float,
        max_streams: int,
        delivery_timeout: float,
        max_loop_lag_ms: float,
    ) -> None:
        self.zookeeper = zookeeper
        self.producer_options = dict(producer_options)
        self.heartbeat = heartbeat
        self.max_streams = max_streams
        self.delivery_timeout = delivery_timeout
        self.max_loop_lag_ms = max_loop_lag_ms
        self.producer: Producer | None = None
        self.streams: set[Consumer] = set()
        self.stopping = False
        self.queued = 0
        self.delivered = 0
        self.failed = 0
        # The app's own registry, so /metrics shows this app's clients only (several
        # apps may live in one process, as in the tests), with one collector for them.
        self.registry: prometheus_client.CollectorRegistry | None = None
        self.client_metrics: aiokafka07.prometheus.ClientCollector | None = None
        if prometheus_client is not None:
            self.registry = prometheus_client.CollectorRegistry()
            self.client_metrics = aiokafka07.prometheus.ClientCollector()
            self.registry.register(self.client_metrics)

    def report(self, client: Producer | Consumer) -> None:
        """Show ``client`` in /metrics (the producer as ``producer``, a stream's consumer
        under its consumer id) until :meth:`forget`."""
        if self.client_metrics is not None:
            self.client_metrics.add(client)

    def forget(self, client: Producer | Consumer) -> None:
        if self.client_metrics is not None:
            self.client_metrics.remove(client)

    def not_ready(self) -> str | None:
        """Why the service should get no traffic now, or None when it is ready."""
        producer = self.producer
        if self.stopping:
            return "shutting down"
        if producer is None:
            return "the producer is not started"
        cluster = producer.cluster
        if isinstance(cluster, ZooKeeperCluster) and not cluster.zookeeper.connected:
            return f"no ZooKeeper connection to {cluster.zookeeper.connect}"
        return None

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        """``cleanup_ctx``: the producer runs from startup until after shutdown."""
        producer = Producer(zookeeper=self.zookeeper, **self.producer_options)
        await producer.start()
        self.producer = producer
        self.report(producer)
        yield
        try:
            await producer.close()  # delivers every message still queued
        except ProducerClosedError as exc:
            log.error("shutdown: %s", exc)
        finally:
            self.forget(producer)

    async def end_streams(self, app: web.Application) -> None:
        """``on_shutdown``: close the consumer of every event stream (which commits what
        was sent), so each handler ends its response and the shutdown does not wait for
        browsers to leave; new requests get 503 from now on."""
        self.stopping = True
        await asyncio.gather(*(c.close() for c in list(self.streams)), return_exceptions=True)

    def count_delivery(self, future: asyncio.Future[ProduceResult]) -> None:
        if future.cancelled() or future.exception() is not None:
            self.failed += 1
        else:
            self.delivered += 1


SERVICE = web.AppKey("service", KafkaService)


def make_app(
    zookeeper: str,
    *,
    producer_options: Mapping[str, Any] | None = None,
    heartbeat: float = 15.0,
    max_streams: int = 100,
    delivery_timeout: float = 30.0,
    max_loop_lag_ms: float = 1000.0,
) -> web.Application:
    """The application for the cluster at ``zookeeper`` (a ZooKeeper connect string).

    ``producer_options`` go to :class:`~aiokafka07.Producer` (``linger_ms``,
    ``compression``, ``max_buffered_messages`` ...). ``heartbeat``: seconds between SSE
    keep-alive comments (which also notice browsers that left). ``max_streams``: open
    event streams allowed at once (each holds a ZooKeeper session). ``delivery_timeout``:
    how long ``?wait=1`` waits for the broker's confirmation. ``max_loop_lag_ms``: the
    event loop lag over which ``/healthz`` answers 503.
    """
    service = KafkaService(
        zookeeper,
        producer_options=producer_options or {},
        heartbeat=heartbeat,
        max_streams=max_streams,
        delivery_timeout=delivery_timeout,
        max_loop_lag_ms=max_loop_lag_ms,
    )
    app = web.Application()
    app[SERVICE] = service
    app.cleanup_ctx.append(service.lifecycle)
    app.on_shutdown.append(service.end_streams)
    app.router.add_post("/topics/{topic}", publish)
    app.router.add_get("/topics/{topic}/events", events)
    app.router.add_get("/stats", stats)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


# -- handlers ------------------------------------------------------------------------------


def _error(status: int, error: str, message: str) -> web.Response:
    headers = {"Retry-After": "1"} if status == 503 else None
    return web.json_response({"error": error, "message": message}, status=status, headers=headers)


def _status_of(exc: KafkaError) -> int:
    """The HTTP status that tells a client what to do about a failed produce."""
    if isinstance(exc, InvalidTopicError):
        return 400  # fix the request
    if isinstance(exc, MessageTooLargeError):
        return 413
    if isinstance(exc, (QueueFullError, NoBrokersError, ProducerClosedError)):
        return 503  # try again later
    if isinstance(exc, RequestTimeoutError):
        return 504
    if isinstance(exc, KafkaConnectionError):
        return 502
    return 500


async def publish(request: web.Request) -> web.Response:
    """``POST /topics/{topic}``: queue the body (202), or deliver it (``?wait=1``, 200)."""
    service = request.app[SERVICE]
    producer = service.producer
    if producer is None or service.stopping:
        return _error(503, "ShuttingDown", "the service is shutting down")
    topic = request.match_info["topic"]
    key = request.query.get("key") or request.headers.get("X-Kafka-Key")
    value = await request.read()
    try:
        if request.query.get("wait", "").lower() in ("1", "true", "yes"):
            result = await asyncio.wait_for(
                producer.send_and_wait(topic, value, key=key), service.delivery_timeout
            )
            return web.json_response(
                {
                    "topic": result.topic,
                    "broker": result.broker_id,
                    "partition": result.partition,
                    "confirmed": result.confirmed,
                }
            )
        # Never waits: a full queue is refused at once (503) instead of holding the request.
        future = producer.send_nowait(topic, value, key=key)
    except asyncio.TimeoutError:
        return _error(
            504,
            "DeliveryTimeout",
            f"not confirmed within {service.delivery_timeout} s; it may still be delivered",
        )
    except KafkaError as exc:
        return _error(_status_of(exc), type(exc).__name__, str(exc))
    service.queued += 1
    future.add_done_callback(service.count_delivery)
    return web.json_response({"queued": True, "topic": topic}, status=202)


def _sse(event: str, data: Mapping[str, Any], event_id: str | None = None) -> str:
    """One Server-Sent Event (JSON data on one line)."""
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id else "")
    return f"{head}data: {json.dumps(data)}\n\n"


def _record_event(record: ConsumerRecord) -> str:
    partition = f"{record.broker_id}-{record.partition}"
    data: dict[str, Any] = {"topic": record.topic, "partition": partition, "offset": record.offset}
    try:
        data["value"] = record.value.decode("utf-8")
    except UnicodeDecodeError:
        data["value_base64"] = base64.b64encode(record.value).decode("ascii")
    return _sse("message", data, f"{partition}@{record.offset}")


async def events(request: web.Request) -> web.StreamResponse:
    """``GET /topics/{topic}/events``: a group member's records as Server-Sent Events."""
    service = request.app[SERVICE]
    topic = request.match_info["topic"]
    start = request.query.get("from", "latest")
    try:
        validate_topic(topic)
        reset = {"latest": "largest", "earliest": "smallest"}[start]
        limit = int(request.query["limit"]) if "limit" in request.query else None
        if limit is not None and limit < 1:
            raise ValueError("limit must be positive")
    except (KafkaError, KeyError, ValueError) as exc:
        return _error(400, "BadRequest", f"{type(exc).__name__}: {exc}")
    if service.stopping or len(service.streams) >= service.max_streams:
        return _error(503, "TooManyStreams", f"{len(service.streams)} streams are open")

    group = request.query.get("group") or f"sse-{uuid.uuid4().hex[:12]}"
    consumer = Consumer(
        topic,
        group=group,
        zookeeper=service.zookeeper,
        auto_offset_reset=reset,
        auto_commit_interval_ms=1000,  # records written to the browser count as consumed
    )
    service.streams.add(consumer)
    try:
        try:
            await consumer.start()
        except KafkaError as exc:
            return _error(503, type(exc).__name__, f"cannot join group {group}: {exc}")
        service.report(consumer)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: pass events on at once
            }
        )
        await response.prepare(request)
        partitions = sorted(tp.name for tp in consumer.assignment())
        ready = {"group": group, "member": consumer.consumer_id, "partitions": partitions}
        try:
            await response.write(_sse("ready", ready).encode())
            await _pump(consumer, response, service.heartbeat, limit)
        except ConnectionResetError:
            pass  # the browser left
        except KafkaError as exc:  # e.g. a corrupt message: tell the browser, end the stream
            await response.write(_sse("error", {"error": type(exc).__name__}).encode())
        return response
    finally:
        service.streams.discard(consumer)
        service.forget(consumer)
        await consumer.close()


async def _pump(
    consumer: Consumer, response: web.StreamResponse, heartbeat: float, limit: int | None
) -> None:
    """Write records as they arrive, one write per batch, until the consumer closes (at
    shutdown) or ``limit`` records are sent; a comment line every ``heartbeat`` seconds
    keeps proxies from closing an idle stream and finds browsers that left."""
    sent = 0
    while limit is None or sent < limit:
        try:
            batches = await consumer.getmany(
                timeout_ms=heartbeat * 1000, max_records=None if limit is None else limit - sent
            )
        except ConsumerStoppedError:
            return  # shutdown closed the consumer: the stream ends
        if not batches:
            await response.write(b": keep-alive\n\n")
            continue
        chunk = [_record_event(r) for records in batches.values() for r in records]
        await response.write("".join(chunk).encode())
        sent += len(chunk)


async def stats(request: web.Request) -> web.Response:
    """``GET /stats``: producer counters, 202 deliveries, open streams."""
    service = request.app[SERVICE]
    producer = service.producer
    return web.json_response(
        {
            "producer": dataclasses.asdict(producer.metrics) if producer else None,
            "queued": service.queued,
            "delivered": service.delivered,
            "failed": service.failed,
            "streams": len(service.streams),
        }
    )


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: the app's registry in the Prometheus text format."""
    registry = request.app[SERVICE].registry
    if prometheus_client is None or registry is None:
        return _error(
            501,
            "NotInstalled",
            "/metrics needs prometheus-client: in a checkout of aiokafka07, "
            "python -m pip install -e '.[prometheus]'",
        )
    return web.Response(
        body=prometheus_client.generate_latest(registry),
        headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST},
    )


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: the event loop is alive. That this handler runs shows it turns;
    how long the loop takes to come back to it (every callback already queued runs first)
    shows whether something blocks it. A process whose loop is stuck answers nothing,
    and a liveness probe's timeout catches that."""
    service = request.app[SERVICE]
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.sleep(0)
    lag_ms = (loop.time() - began) * 1000
    if lag_ms > service.max_loop_lag_ms:
        return _error(503, "LoopBlocked", f"the event loop lags {lag_ms:.0f} ms")
    return web.json_response({"status": "alive", "loop_lag_ms": round(lag_ms, 3)})


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: 200 when requests can be served, else 503 with the reason."""
    reason = request.app[SERVICE].not_ready()
    if reason is not None:
        return _error(503, "NotReady", reason)
    return web.json_response({"status": "ready"})


# -- a client side, for the demo (and the tests) ---------------------------------------------


async def read_events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """Parse a Server-Sent Events response into ``(event, data)`` pairs (comments are
    skipped) until the server ends the stream."""
    event, data = "message", list[str]()
    async for raw in response.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


async def demo(zookeeper: str) -> None:
    """Serve on a free port and use the service over HTTP, printing what happens."""
    app = make_app(zookeeper, producer_options={"linger_ms": 1000})
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    print(f"serving on http://{host}:{port}")
    async with aiohttp.ClientSession(f"http://{host}:{port}") as http:
        stream = await http.get(f"/topics/{DEMO_TOPIC}/events", params={"limit": "6"})
        events = read_events(stream)
        _, ready = await anext(events)
        print(f"SSE stream ready: {len(ready['partitions'])} partitions of {DEMO_TOPIC}")

        posts: list[tuple[str, dict[str, str], bytes]] = [
            (DEMO_TOPIC, {"key": f"user-{n}"}, f"user-{n} clicked buy".encode())
            for n in range(1, 4)
        ] + [
            (DEMO_TOPIC, {"key": f"user-{n}", "wait": "1"}, f"user-{n} clicked home".encode())
            for n in range(4, 7)
        ]
        posts += [
            ("x" * 300, {}, b"topic name too long"),
            (DEMO_TOPIC, {}, b"x" * 1_000_001),  # over 0.7.2's max.message.size
        ]
        for topic, params, body in posts:
            async with http.post(f"/topics/{topic}", params=params, data=body) as answer:
                reply = await answer.json()
            query = "?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else ""
            shown = reply.get("error") or json.dumps(reply, sort_keys=True)
            print(f"POST /topics/{topic[:12]}{query} -> {answer.status} {shown}")
        async with http.get(f"/topics/{DEMO_TOPIC}/events", params={"from": "middle"}) as bad:
            print(f"GET /topics/{DEMO_TOPIC}/events?from=middle -> {bad.status}")

        received = [data async for event, data in events if event == "message"]
        for data in received:
            print(f"SSE message {data['partition']}@{data['offset']}: {data['value']}")
        print(f"SSE stream ended after {len(received)} messages")

        async with http.get("/readyz") as answer:
            print(f"GET /readyz -> {answer.status} {(await answer.json())['status']}")
        async with http.get("/metrics") as answer:
            text = await answer.text()
        sent = [line for line in text.splitlines() if line.startswith(METRIC_SHOWN)]
        print(f"GET /metrics -> {answer.status} {sent[0] if sent else text}")

        for n in range(20):  # queued, then shut down before the producer's linger is over
            async with http.post(f"/topics/{DEMO_TOPIC}", data=f"late {n}") as answer:
                assert answer.status == 202
    service = app[SERVICE]
    assert service.producer is not None
    unsent = service.producer.metrics.queued_messages
    print(f"queued 20 more; shutting down with {unsent} messages not yet delivered")
    await runner.cleanup()  # on_shutdown, then the producer's flush and close
    print(
        f"shut down: {service.delivered} of {service.queued} queued messages delivered, "
        f"{service.failed} failed"
    )


async def serve(app: web.Application, host: str, port: int) -> None:
    """Serve until SIGINT or SIGTERM, then shut down gracefully."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"serving on http://{host}:{port} (Ctrl-C to stop)")
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--zookeeper", help="ZooKeeper connect string of a Kafka 0.7 cluster")
    parser.add_argument("--serve", action="store_true", help="serve a local cluster")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()

    from _local import local_cluster  # the examples' helper, next to this file

    if args.zookeeper or args.serve:
        logging.basicConfig(level=logging.WARNING)
        for name in ("aiokafka07", "aiohttp.access", "aiohttp_app"):  # lifecycle, requests
            logging.getLogger(name).setLevel(logging.INFO)
        async with local_cluster(args.zookeeper, topics=[DEMO_TOPIC]) as zookeeper:
            await serve(make_app(zookeeper), args.host, args.port)
        return
    async with local_cluster(None, brokers=2, partitions=2, topics=[DEMO_TOPIC]) as zookeeper:
        await demo(zookeeper)


if __name__ == "__main__":
    asyncio.run(main())

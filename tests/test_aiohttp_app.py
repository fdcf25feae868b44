"""The aiohttp example service (examples/aiohttp_app.py) against embedded brokers and a real
ZooKeeper, through aiohttp's own test server and client.

What the HTTP side accepts comes back through the event stream; a shutdown with accepted
but unsent messages delivers every one of them and ends open streams at once; each kind of
failure gets its status code.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from aiokafka07 import SimpleConsumer, default_partition
from aiokafka07.testing import KafkaCluster, ZooKeeperServer

from .wire import eventually

ROOT = Path(__file__).resolve().parents[1]
TOPIC = "clicks"


def _load_example() -> ModuleType:
    """Import examples/aiohttp_app.py as a module (examples are not a package)."""
    spec = importlib.util.spec_from_file_location("aiohttp_app", ROOT / "examples/aiohttp_app.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


app_module = _load_example()


@pytest.fixture
async def broker(kafka_cluster: Callable[..., KafkaCluster]) -> AsyncIterator[KafkaCluster]:
    """One broker with two partitions per topic, registered in the test's ZooKeeper."""
    async with kafka_cluster(1, num_partitions=2) as cluster:
        yield cluster


async def read_topic(cluster: KafkaCluster, topic: str) -> list[bytes]:
    """Every message of ``topic`` on the cluster's brokers (partitions 0 and 1)."""
    values = []
    for broker_id, host, port in cluster.bootstrap:
        async with SimpleConsumer(host, port, broker_id=broker_id) as simple:
            for partition in (0, 1):
                offset = 0
                while True:
                    result = await simple.fetch(topic, partition, offset)
                    if not result.messages:
                        break
                    values += [m.value for m in result.messages]
                    offset = result.next_offset
    return values


async def next_message(events: AsyncIterator[tuple[str, Any]]) -> dict[str, Any]:
    async for event, data in events:
        if event == "message":
            return dict(data)
    raise AssertionError("the stream ended")


async def test_posted_messages_come_back_through_server_sent_events(
    broker: KafkaCluster, zookeeper: str
) -> None:
    app = app_module.make_app(zookeeper, producer_options={"linger_ms": 20})
    async with TestClient(TestServer(app)) as client:
        # The first message creates the topic; the producer then sees both partitions.
        first = await client.post(f"/topics/{TOPIC}?wait=1", data=b"first")
        assert first.status == 200
        assert (await first.json())["confirmed"] is True
        producer = app[app_module.SERVICE].producer
        await eventually(lambda: len(producer.cluster.partitions(TOPIC)) == 2)

        stream = await client.get(f"/topics/{TOPIC}/events", params={"limit": "7"})
        assert stream.status == 200
        assert stream.headers["Content-Type"] == "text/event-stream"
        events = app_module.read_events(stream)
        event, ready = await anext(events)
        assert event == "ready"
        assert ready["partitions"] == ["0-0", "0-1"]
        assert ready["member"].startswith(ready["group"] + "_")

        sent = {}
        for n in range(6):
            key, wait = f"user-{n}", n % 2 == 0
            params = {"key": key, **({"wait": "1"} if wait else {})}
            answer = await client.post(f"/topics/{TOPIC}", params=params, data=f"{key} hi")
            assert answer.status == (200 if wait else 202)
            body = await answer.json()
            if wait:
                sent[key] = f"{body['broker']}-{body['partition']}"
            else:
                assert body == {"queued": True, "topic": TOPIC}
        # The key may come as a header as well.
        header = await client.post(f"/topics/{TOPIC}", headers={"X-Kafka-Key": "hdr"}, data=b"h")
        assert header.status == 202

        received = [await next_message(events) for _ in range(7)]
        # A live tail: "first" was there before the stream, so it is not in it.
        by_key = {m["value"].split()[0]: m["partition"] for m in received}
        assert sorted(by_key) == ["h", *(f"user-{n}" for n in range(6))]
        assert by_key.pop("h") == ["0-0", "0-1"][default_partition("hdr", 2)]
        for key, partition in by_key.items():
            assert partition == ["0-0", "0-1"][default_partition(key, 2)]
            assert sent.get(key, partition) == partition
        assert [e async for e in events] == []  # limit=7: the server ended the stream

        stats = await (await client.get("/stats")).json()
        assert stats["producer"]["messages_failed"] == 0
        assert stats["streams"] == 0


async def test_a_stream_picks_up_a_topic_created_after_it_opened(
    broker: KafkaCluster, zookeeper: str
) -> None:
    app = app_module.make_app(zookeeper)
    async with TestClient(TestServer(app)) as client:
        stream = await client.get(
            "/topics/new-topic/events", params={"from": "earliest", "group": "browsers"}
        )
        events = app_module.read_events(stream)
        _, ready = await anext(events)
        assert ready["partitions"] == []  # nobody has written to it yet
        assert ready["group"] == "browsers"
        answer = await client.post("/topics/new-topic?wait=1", data="created it")
        assert answer.status == 200
        message = await asyncio.wait_for(next_message(events), 20)
        assert message["value"] == "created it"
        assert message["topic"] == "new-topic"


async def test_shutdown_delivers_every_accepted_message_and_ends_streams(
    broker: KafkaCluster, zookeeper: str
) -> None:
    # Nothing is sent before shutdown: a minute's linger, batches larger than the test.
    app = app_module.make_app(
        zookeeper, producer_options={"linger_ms": 60_000, "batch_size": 10_000}
    )
    server = TestServer(app)
    client = TestClient(server)
    await client.start_server()
    try:
        stream = await client.get(f"/topics/{TOPIC}/events", params={"from": "earliest"})
        events = app_module.read_events(stream)
        assert (await anext(events))[0] == "ready"
        values = [f"accepted {i}".encode() for i in range(300)]
        for value in values:
            answer = await client.post(f"/topics/{TOPIC}", data=value)
            assert answer.status == 202
        service = app[app_module.SERVICE]
        assert service.producer.metrics.queued_messages == 300
        assert service.producer.metrics.messages_sent == 0

        # The open event stream must not hold the shutdown up (aiohttp would wait 60 s).
        closing = asyncio.create_task(server.close())
        await asyncio.wait_for(closing, 15)
        assert [e async for e in events if e[0] != "message"] == []  # it ended
    finally:
        await client.close()
    assert service.delivered == 300
    assert service.failed == 0
    assert sorted(await read_topic(broker, TOPIC)) == sorted(values)


async def test_errors_get_their_status_codes(broker: KafkaCluster, zookeeper: str) -> None:
    app = app_module.make_app(
        zookeeper,
        producer_options={"linger_ms": 60_000, "max_buffered_messages": 2, "max_message_size": 100},
        max_streams=1,
    )
    async with TestClient(TestServer(app)) as client:
        bad_topic = await client.post("/topics/" + "x" * 300, data=b"v")
        assert bad_topic.status == 400
        assert (await bad_topic.json())["error"] == "InvalidTopicError"

        too_large = await client.post(f"/topics/{TOPIC}", data=b"v" * 101)
        assert too_large.status == 413
        assert (await too_large.json())["error"] == "MessageTooLargeError"

        for _ in range(2):
            assert (await client.post(f"/topics/{TOPIC}", data=b"v")).status == 202
        full = await client.post(f"/topics/{TOPIC}", data=b"v")
        assert full.status == 503
        assert full.headers["Retry-After"] == "1"
        assert (await full.json())["error"] == "QueueFullError"

        for params in ({"from": "middle"}, {"limit": "0"}, {"limit": "many"}):
            answer = await client.get(f"/topics/{TOPIC}/events", params=params)
            assert answer.status == 400, params
        assert (await client.get(f"/topics/{'y' * 300}/events")).status == 400

        first = await client.get(f"/topics/{TOPIC}/events")
        assert first.status == 200
        second = await client.get(f"/topics/{TOPIC}/events")
        assert second.status == 503
        assert (await second.json())["error"] == "TooManyStreams"
        first.close()


async def test_a_confirmation_slower_than_the_timeout_is_504_and_still_delivered(
    broker: KafkaCluster, zookeeper: str
) -> None:
    app = app_module.make_app(zookeeper, delivery_timeout=1e-6)
    async with TestClient(TestServer(app)) as client:
        answer = await client.post(f"/topics/{TOPIC}?wait=1", data=b"late")
        assert answer.status == 504
        assert "may still be delivered" in (await answer.json())["message"]
    # Accepted before the timeout: the shutdown delivered it.
    assert await read_topic(broker, TOPIC) == [b"late"]


async def test_without_brokers_a_confirmed_send_is_503(zookeeper: str) -> None:
    app = app_module.make_app(zookeeper)
    async with TestClient(TestServer(app)) as client:
        answer = await client.post(f"/topics/{TOPIC}?wait=1", data=b"v")
        assert answer.status == 503
        assert (await answer.json())["error"] == "NoBrokersError"


async def test_without_brokers_a_queued_send_is_503_with_the_reason(zookeeper: str) -> None:
    # A connect string whose chroot no broker registered in (the mistake that gave 500s).
    app = app_module.make_app(zookeeper)
    async with TestClient(TestServer(app)) as client:
        answer = await client.post(f"/topics/{TOPIC}", data=b"v")
        assert answer.status == 503
        assert answer.headers["Retry-After"] == "1"
        body = await answer.json()
        assert body["error"] == "NoBrokersError"
        assert "no live broker" in body["message"]


# -- operations: /metrics, /healthz, /readyz -------------------------------------------------


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_metrics_show_the_producer_and_each_open_stream(
    broker: KafkaCluster, zookeeper: str
) -> None:
    app = app_module.make_app(zookeeper, producer_options={"linger_ms": 1})
    async with TestClient(TestServer(app)) as client:
        for n in range(4):
            answer = await client.post(f"/topics/{TOPIC}?wait=1&key=user-{n}", data=f"v{n}")
            assert answer.status == 200
        stream = await client.get(
            f"/topics/{TOPIC}/events", params={"from": "earliest", "group": "watchers", "limit": 5}
        )
        events = app_module.read_events(stream)
        assert (await anext(events))[0] == "ready"
        offsets: dict[str, int] = {}
        for _ in range(4):
            message = await asyncio.wait_for(next_message(events), 20)
            offsets[message["partition"]] = message["offset"]  # in order per partition

        answer = await client.get("/metrics")
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        samples = parse_metrics(await answer.text())
        producer = {("client_id", "producer")}
        assert samples[("aiokafka07_producer_messages_sent_total", frozenset(producer))] == 4
        records = {
            dict(labels)["group"]: v
            for (name, labels), v in samples.items()
            if name == "aiokafka07_consumer_records_total"
        }
        assert records == {"watchers": 4}
        positions = {
            f"{dict(labels)['broker']}-{dict(labels)['partition']}": v
            for (name, labels), v in samples.items()
            if name == "aiokafka07_consumer_position_offset"
        }
        # Where each partition's last record sent to the browser ends (0.7 offsets).
        assert {p: positions[p] for p in offsets} == offsets

        # The stream ends with its fifth record; its consumer leaves /metrics with it.
        assert (await client.post(f"/topics/{TOPIC}", data=b"last")).status == 202
        assert [e async for e in events if e[0] != "message"] == []
        samples = parse_metrics(await (await client.get("/metrics")).text())
        assert not [name for name, _ in samples if name.startswith("aiokafka07_consumer_")]
        assert [name for name, _ in samples if name.startswith("aiokafka07_producer_")]

        alive = await client.get("/healthz")
        assert alive.status == 200
        assert (await alive.json())["loop_lag_ms"] >= 0
        ready = await client.get("/readyz")
        assert ready.status == 200
        assert await ready.json() == {"status": "ready"}


async def test_healthz_is_503_while_something_blocks_the_event_loop(zookeeper: str) -> None:
    @web.middleware
    async def block(request: web.Request, handler: Any) -> web.StreamResponse:
        if "X-Block" in request.headers:  # a callback that holds the loop for 0.3 s
            asyncio.get_running_loop().call_soon(time.sleep, 0.3)
        return cast(web.StreamResponse, await handler(request))

    app = app_module.make_app(zookeeper, max_loop_lag_ms=100)
    app.middlewares.append(block)
    async with TestClient(TestServer(app)) as client:
        blocked = await client.get("/healthz", headers={"X-Block": "1"})
        assert blocked.status == 503
        body = await blocked.json()
        assert body["error"] == "LoopBlocked"
        assert int(body["message"].split()[-2]) >= 300
        assert (await client.get("/healthz")).status == 200


def test_readyz_says_why_before_the_producer_started() -> None:
    service = app_module.make_app("127.0.0.1:1")[app_module.SERVICE]
    assert service.not_ready() == "the producer is not started"


async def test_readyz_is_503_while_zookeeper_is_down_and_200_once_it_is_back() -> None:
    server = ZooKeeperServer()
    await asyncio.to_thread(server.start)
    try:
        app = app_module.make_app(server.connect_string)
        async with TestClient(TestServer(app)) as client:
            assert await ready_is(client, 200)
            await asyncio.to_thread(server.stop)
            await eventually(lambda: ready_is(client, 503), 20)
            body = await (await client.get("/readyz")).json()
            assert body["error"] == "NotReady"
            assert body["message"] == f"no ZooKeeper connection to {server.connect_string}"
            assert (await client.get("/healthz")).status == 200  # alive, not ready

            await asyncio.to_thread(server.start)
            await eventually(lambda: ready_is(client, 200), 20)
    finally:
        await asyncio.to_thread(server.close)


async def ready_is(client: TestClient[Any, Any], status: int) -> bool:
    return (await client.get("/readyz")).status == status


def test_metrics_is_501_naming_the_extra_without_prometheus_client(zookeeper: str) -> None:
    """Run where prometheus_client cannot be imported (hidden, as if not installed)."""
    script = f"""
import asyncio, importlib.util, sys
sys.modules["prometheus_client"] = None  # import fails: as if not installed
from aiohttp.test_utils import TestClient, TestServer
spec = importlib.util.spec_from_file_location("app", {str(ROOT / "examples/aiohttp_app.py")!r})
app_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(app_module)

async def main():
    app = app_module.make_app({zookeeper!r})
    async with TestClient(TestServer(app)) as client:
        answer = await client.get("/metrics")
        print(answer.status, (await answer.json())["message"])
        print((await client.get("/readyz")).status)

asyncio.run(main())
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "501 /metrics needs prometheus-client: in a checkout of aiokafka07, "
        "python -m pip install -e '.[prometheus]'",
        "200",
    ]

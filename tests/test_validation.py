"""Bad configuration is refused at construction, naming the parameter, for every numeric
parameter of Producer, BrokerConnection, ConnectionPool, SimpleConsumer and the group
Consumer (wrong type, negative, zero where meaningless, not finite), and for every name
the group consumer puts in a ZooKeeper path."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka07 import (
    BrokerAddress,
    BrokerConnection,
    ConnectionPool,
    Consumer,
    Producer,
    SimpleConsumer,
)
from aiokafka07.errors import (
    InvalidConfigError,
    InvalidPartitionError,
    InvalidTopicError,
    KafkaError,
    ZooKeeperError,
)
from aiokafka07.partitioner import JavaLong
from aiokafka07.protocol import encode_message_set
from aiokafka07.znodes import GroupRegistry, Registration
from aiokafka07.zookeeper import ZooKeeper

from .garbage_server import GarbageServer

ADDRESS = BrokerAddress(0, "127.0.0.1", 1)
STATIC = "0:127.0.0.1:1"
ZK = "127.0.0.1:1"


def _id(name: str, value: Any) -> str:
    """A test id that is the same in every process (pytest-xdist's workers must collect
    the same ids): an object's default repr has its address, so only its type is named."""
    text = repr(value)
    return f"{name}=<{type(value).__name__}>" if " at 0x" in text else f"{name}={text}"


PRODUCER: list[tuple[str, Any]] = [
    ("batch_size", 0),
    ("batch_size", -1),
    ("batch_size", 1.5),
    ("batch_size", True),
    ("batch_bytes", 0),
    ("linger_ms", -1),
    ("linger_ms", float("nan")),
    ("linger_ms", "5"),
    ("max_buffered_messages", 0),
    ("max_buffered_bytes", -5),
    ("max_in_flight", 0),
    ("max_request_bytes", 0),
    ("max_request_bytes", 2**31),
    ("retries", -1),
    ("retries", "3"),
    ("retry_backoff_ms", 0),
    ("retry_backoff_ms", float("inf")),
    ("max_message_size", 0),
    ("request_timeout_ms", "x"),
    ("request_timeout_ms", 0),
    ("request_timeout_ms", -1.0),
    ("connect_timeout_ms", None),
    ("confirm", "yes"),
    ("on_unconfirmed", "maybe"),
    ("compression", "lz4"),
    ("value_serializer", "utf-8"),
    ("partitioner", 3),
    ("pool", "pool"),
]


@pytest.mark.parametrize(("name", "value"), PRODUCER, ids=[_id(n, v) for n, v in PRODUCER])
def test_producer_refuses_bad_parameters(name: str, value: Any) -> None:
    with pytest.raises(InvalidConfigError, match=name) as info:
        Producer(brokers=STATIC, **{name: value})
    # One hierarchy, and still what generic code expects.
    assert isinstance(info.value, KafkaError)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, TypeError)


def test_producer_compressed_topics_are_topic_names() -> None:
    assert Producer(brokers=STATIC, compressed_topics="abc").compressed_topics == {"abc"}
    assert Producer(brokers=STATIC, compressed_topics=["a", "b"]).compressed_topics == {"a", "b"}
    assert Producer(brokers=STATIC, compressed_topics=[]).compressed_topics is None
    with pytest.raises(InvalidTopicError):
        Producer(brokers=STATIC, compressed_topics=["ok", "no/slash"])


CONNECTION: list[tuple[str, Any]] = [
    ("connect_timeout_ms", 0),
    ("connect_timeout_ms", "5"),
    ("request_timeout_ms", -1),
    ("request_timeout_ms", float("inf")),
    ("send_buffer", 0),
    ("receive_buffer", -1),
    ("receive_buffer", 1.0),
    ("max_message_size", 0),
    ("max_unsent_bytes", 0),
    ("max_unsent_bytes", "1M"),
]


@pytest.mark.parametrize(("name", "value"), CONNECTION, ids=[_id(n, v) for n, v in CONNECTION])
def test_connection_and_pool_refuse_bad_parameters(name: str, value: Any) -> None:
    with pytest.raises(InvalidConfigError, match=name):
        BrokerConnection(ADDRESS, **{name: value})
    with pytest.raises(InvalidConfigError, match=name):
        ConnectionPool(**{name: value})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"connections_per_broker": 0},
        {"connections_per_broker": "2"},
        {"reconnect_backoff_ms": (0, 1)},
        {"reconnect_backoff_ms": (2, 1)},
        {"reconnect_backoff_ms": 5},
        {"reconnect_backoff_ms": ("50", 100)},
    ],
    ids=repr,
)
def test_pool_refuses_bad_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError, match=next(iter(kwargs))):
        ConnectionPool(**kwargs)


SIMPLE: list[tuple[str, Any]] = [
    ("port", 0),
    ("port", 70000),
    ("port", "9092"),
    ("broker_id", -1),
    ("fetch_size", 0),
    ("fetch_size", 2.5),
    ("max_fetch_size", 10),
    ("request_timeout_ms", 0),
    ("connect_timeout_ms", -2),
    ("receive_buffer", 0),
    ("pool", object()),
]


@pytest.mark.parametrize(("name", "value"), SIMPLE, ids=[_id(n, v) for n, v in SIMPLE])
def test_simple_consumer_refuses_bad_parameters(name: str, value: Any) -> None:
    with pytest.raises(InvalidConfigError, match=name):
        SimpleConsumer("127.0.0.1", **{"port": 9092, **{name: value}})


CONSUMER: list[tuple[str, Any]] = [
    ("auto_offset_reset", "earliest"),
    ("streams", "2"),
    ("fetch_size", 0),
    ("fetch_size", "1M"),
    ("fetch_size", 1.5),
    ("fetch_size", True),
    ("max_fetch_size", 10),
    ("max_decompressed_bytes", 0),
    ("max_prefetch_bytes", -1),
    ("auto_commit_interval_ms", 0),
    ("auto_commit_interval_ms", "10s"),
    ("consumer_timeout_ms", "5000"),
    ("consumer_timeout_ms", float("nan")),
    ("fetch_backoff_ms", 0),
    ("fetch_backoff_ms", None),
    ("rebalance_backoff_ms", -1),
    ("rebalance_backoff_ms", float("inf")),
    ("rebalance_max_retries", 0),
    ("rebalance_max_retries", 2.0),
    ("session_timeout_ms", "6s"),
    ("session_timeout_ms", 0),
    ("session_timeout_ms", -1),
    ("session_timeout_ms", 2**31),
    ("connection_timeout_ms", float("inf")),
    ("connection_timeout_ms", 0),
    ("connection_timeout_ms", -5),
    ("request_timeout_ms", 0),
    ("request_timeout_ms", False),
    ("consumer_timeout_ms", -1),
    ("fetch_size", 2**31),
    ("auto_commit", "no"),
    ("shallow", 1),
    ("value_deserializer", "utf-8"),
    ("listener", object()),
    ("consumer_id_suffix", "a/b"),
    ("consumer_id_suffix", ""),
    ("consumer_id_suffix", ".."),
    ("consumer_id_suffix", "a\x00b"),
    ("consumer_id_suffix", 7),
]


@pytest.mark.parametrize(("name", "value"), CONSUMER, ids=[_id(n, v) for n, v in CONSUMER])
def test_group_consumer_refuses_bad_parameters(name: str, value: Any) -> None:
    with pytest.raises(InvalidConfigError, match=name) as info:
        Consumer("t", group="g", zookeeper=ZK, **{"fetch_size": 100, name: value})
    assert isinstance(info.value, ValueError)  # what it raised before
    assert isinstance(info.value, TypeError)


#: Names that become ZooKeeper path components, as the group consumer takes them.
NAMES: list[tuple[dict[str, Any], type[KafkaError], str]] = [
    ({"group": "a/b"}, InvalidConfigError, "group"),
    ({"group": ""}, InvalidConfigError, "group"),
    ({"group": "."}, InvalidConfigError, "group"),
    ({"group": "g\x7f"}, InvalidConfigError, "group"),
    ({"group": None}, InvalidConfigError, "group"),
    ({"zookeeper": "127.0.0.1:1/a//b"}, InvalidConfigError, "chroot"),
    ({"zookeeper": "127.0.0.1:1/a/../b"}, InvalidConfigError, "chroot"),
    ({"zookeeper": "127.0.0.1:http"}, InvalidConfigError, "port"),
    ({"topics": ("a/b",)}, InvalidTopicError, "a/b"),
    ({"topics": ("",)}, InvalidTopicError, "empty"),
    ({"topics": ({"ok": 1, "..": 1},)}, InvalidTopicError, r"'\.\.'"),
    ({"topics": ("x" * 256,)}, InvalidTopicError, "255"),
    ({"topics": (3,)}, InvalidConfigError, "topics"),
    ({"topics": (), "whitelist": 3}, InvalidConfigError, "whitelist"),
    ({"topics": ("t",), "whitelist": "t"}, InvalidConfigError, "whitelist"),
]


@pytest.mark.parametrize(("options", "error", "match"), NAMES, ids=[repr(n[0]) for n in NAMES])
def test_group_consumer_refuses_bad_names(
    options: dict[str, Any], error: type[KafkaError], match: str
) -> None:
    """A group id, suffix, chroot or topic that cannot be one ZooKeeper path component is
    refused at construction (a "/" would make a deeper path, and leave its parents)."""
    kwargs: dict[str, Any] = {"group": "g", "zookeeper": ZK, **options}
    topics = kwargs.pop("topics", ("t",))
    with pytest.raises(error, match=match) as info:
        Consumer(*topics, **kwargs)
    assert isinstance(info.value, ValueError)


async def test_group_registry_refuses_bad_names_before_any_request() -> None:
    """What the tools and the Spark source use: the same checks, before any request (the
    session here is never opened, so a request would fail differently)."""
    zk = ZooKeeper(ZK)
    with pytest.raises(InvalidConfigError, match="consumer group"):
        GroupRegistry(zk, "a/b")
    registry = GroupRegistry(zk, "g")
    for topic, partition in (("a/b", "0-0"), ("..", "0-0"), ("", "0-0"), ("t", "0/0")):
        with pytest.raises(InvalidTopicError):
            await registry.commit(topic, partition, 1)
        with pytest.raises(InvalidTopicError):
            await registry.committed(topic, partition)
        with pytest.raises(InvalidTopicError):
            await registry.claim(topic, partition, "g_c-0")
        with pytest.raises(InvalidTopicError):
            await registry.owner(topic, partition)
    with pytest.raises(InvalidTopicError):
        await registry.offsets("a/b")
    with pytest.raises(InvalidTopicError):
        await registry.owned_partitions("a/b")
    with pytest.raises(InvalidConfigError, match="consumer id"):
        await registry.register("g_a/b", Registration({"t": 1}))
    # A long topic some broker registered stays usable here (no length limit).
    with pytest.raises(ZooKeeperError, match="not started"):
        await registry.committed("x" * 300, "0-0")


def test_good_parameters_pass() -> None:
    Producer(brokers=STATIC, linger_ms=0, request_timeout_ms=500, retries=0, batch_size=1)
    BrokerConnection(ADDRESS, request_timeout_ms=1, connect_timeout_ms=0.5, send_buffer=None)
    SimpleConsumer("127.0.0.1", 9092, broker_id=0, fetch_size=1, max_fetch_size=1)
    ConnectionPool(connections_per_broker=2, reconnect_backoff_ms=(10, 10))
    Consumer("t", group="g", zookeeper=ZK, fetch_size=1, max_fetch_size=1, request_timeout_ms=1)
    Consumer(
        "t",
        group="g",
        zookeeper=ZK,
        auto_commit_interval_ms=0.5,
        consumer_timeout_ms=0,
        fetch_backoff_ms=1.5,
        rebalance_max_retries=1,
        session_timeout_ms=1,
        max_decompressed_bytes=1,
        consumer_id_suffix="test-1",
    )
    Consumer("t", group="g.1_x-y", zookeeper=ZK + "/chroot/sub")
    Consumer({"t": 2}, group="g", zookeeper=ZK, streams=0)  # the map says how many


# -- arguments of calls: refused before anything reaches the wire -----------------------

BAD_FETCHES: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("fetch", {"topic": "t", "partition": -1, "offset": 0}, InvalidPartitionError),
    ("fetch", {"topic": "t", "partition": 1.0, "offset": 0}, InvalidPartitionError),
    ("fetch", {"topic": "t", "partition": 2**31, "offset": 0}, InvalidPartitionError),
    ("fetch", {"topic": "t", "partition": 0, "offset": -5}, InvalidConfigError),
    ("fetch", {"topic": "t", "partition": 0, "offset": 2**63}, InvalidConfigError),
    ("fetch", {"topic": "t", "partition": 0, "offset": "0"}, InvalidConfigError),
    ("fetch", {"topic": "t", "partition": 0, "offset": 0, "max_size": -1}, InvalidConfigError),
    ("multifetch", {"fetches": []}, InvalidConfigError),
    ("multifetch", {"fetches": [("t", 0, 0, 100), ("t", -1, 0, 100)]}, InvalidPartitionError),
    ("multifetch", {"fetches": [("t", 0, -1, 100)]}, InvalidConfigError),
    ("offsets_before", {"topic": "t", "partition": -1, "time": -1}, InvalidPartitionError),
    (
        "offsets_before",
        {"topic": "t", "partition": 0, "time": -1, "max_offsets": -1},
        InvalidConfigError,
    ),
]


@pytest.mark.parametrize(("call", "kwargs", "error"), BAD_FETCHES, ids=repr)
async def test_simple_consumer_sends_no_nonsense(
    call: str, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """A partition below 0, a negative offset, an empty multifetch: a typed error, and
    not a byte on the wire (a fake broker on loopback records every request)."""
    async with GarbageServer() as server:
        async with SimpleConsumer(server.host, server.port, request_timeout_ms=2000) as consumer:
            with pytest.raises(error):
                await getattr(consumer, call)(**kwargs)
        assert server.requests == []


@pytest.mark.parametrize(("partition", "offset"), [(-1, 0), (0, -5)])
async def test_simple_consumer_iterates_nothing_from_nonsense(partition: int, offset: int) -> None:
    async with GarbageServer() as server:
        async with SimpleConsumer(server.host, server.port, request_timeout_ms=2000) as consumer:
            with pytest.raises((InvalidPartitionError, InvalidConfigError)):
                async for _ in consumer.messages("t", partition, offset):
                    pass
        assert server.requests == []


async def test_connection_produce_to_a_partition_below_minus_one_sends_nothing() -> None:
    async with GarbageServer() as server:
        conn = await BrokerConnection.open(BrokerAddress(0, server.host, server.port))
        for produce in (
            lambda: conn.produce("t", -2, [b"x"]),
            lambda: conn.produce("t", -2, [b"x"], confirm=True),
            lambda: conn.produce_message_set("t", -7, encode_message_set([b"x"])),
            lambda: conn.multiproduce([("t", 0, [b"a"]), ("t", -2, [b"b"])]),
        ):
            with pytest.raises(InvalidPartitionError, match=r"-1 \(the broker picks\)"):
                await produce()
        assert not conn.closed
        assert conn.requests_sent == 0
        await conn.close()
    assert server.requests == []


@pytest.mark.parametrize("mode", ["zookeeper", "static"])
@pytest.mark.parametrize(
    "key",
    [3.5, object(), [1], 2**64, JavaLong(2**63)],
    ids=["float", "object", "list", "int over int64", "JavaLong over int64"],
)
async def test_producer_refuses_keys_that_route_differently_per_process(
    kafka_cluster: Any, zookeeper: str, mode: str, key: Any
) -> None:
    """A float or an object key (hashed by id: another partition in another process), a
    list, an int beyond a Java long: refused at send, in ZooKeeper mode and in static
    mode (where keys choose nothing), nothing queued or sent."""
    async with kafka_cluster(1, zookeeper=True if mode == "zookeeper" else None) as cluster:
        where = (
            {"zookeeper": zookeeper} if mode == "zookeeper" else {"brokers": cluster.broker_list}
        )
        async with Producer(**where) as producer:  # type: ignore[arg-type]
            with pytest.raises(InvalidConfigError, match="key"):
                await producer.send("keys", b"x", key=key)
            with pytest.raises(InvalidConfigError, match="key"):
                producer.send_nowait("keys", b"x", key=key)
            with pytest.raises(InvalidConfigError, match="key"):
                await producer.send_and_wait("keys", b"x", key=key)
            batch = producer.create_batch()
            batch.append(b"x")
            with pytest.raises(InvalidConfigError, match="key"):
                await producer.send_batch(batch, "keys", key=key)
            assert (producer.metrics.queued_messages, producer.metrics.requests_sent) == (0, 0)
            # Keys of the hashable kinds still go, and a serializer may turn any into one.
            await producer.send_and_wait("keys", b"ok", key="user-1")
        async with Producer(**where, key_serializer=repr) as producer:  # type: ignore[arg-type]
            await producer.send_and_wait("keys", b"ok", key=3.5)

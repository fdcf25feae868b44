"""The producer's cluster view (ZOOKEEPER §6) against a real ZooKeeper and embedded brokers.

Broker churn uses real embedded brokers; situations a broker cannot be made to produce on
demand (a lowered partition count, coalesced re-registration, garbage values) are written
directly into ZooKeeper with a second session, exactly where a 0.7.2 broker writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from aiokafka07.broker import Broker
from aiokafka07.cluster import (
    BrokerAdded,
    BrokerMoved,
    BrokerRemoved,
    Cluster,
    ClusterEvent,
    ClusterTimeoutError,
    StaticCluster,
    TopicChanged,
    ZooKeeperCluster,
    cluster_from,
    parse_broker_list,
)
from aiokafka07.connection import BrokerAddress, BrokerConnection
from aiokafka07.errors import KafkaError, ZooKeeperError
from aiokafka07.testing import KafkaCluster, ZooKeeperServer, expire_session
from aiokafka07.znodes import parse_broker_registration
from aiokafka07.zookeeper import ZooKeeper, _Session

from .wire import eventually

WAIT = 10.0  # upper bound for anything a watch should deliver
WAIT_MS = WAIT * 1000

KafkaClusterFactory = Callable[..., KafkaCluster]


# -- helpers -------------------------------------------------------------------------


async def produce(broker: Broker, topic: str, partition: int = 0) -> None:
    """Write one message, which makes the broker create (and register) the topic."""
    address = BrokerAddress(broker.broker_id, broker.host, broker.port)
    async with await BrokerConnection.open(address) as conn:
        await conn.produce(topic, partition, [b"x"], confirm=True)


async def registered(connect: str, topic: str, broker_ids: set[int]) -> None:
    """Wait until ``broker_ids`` registered ``topic`` (brokers register asynchronously)."""
    async with ZooKeeper(connect) as zk:
        for _ in range(int(WAIT / 0.05)):
            children = await zk.get_children(f"/brokers/topics/{topic}")
            if broker_ids <= {int(c) for c in children}:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"{topic} not registered by {broker_ids}")


async def next_event(
    queue: asyncio.Queue[ClusterEvent], match: Callable[[ClusterEvent], bool]
) -> ClusterEvent:
    """The first queued event ``match`` accepts (skipping others), within WAIT."""

    async def find() -> ClusterEvent:
        while True:
            event = await queue.get()
            if match(event):
                return event

    return await asyncio.wait_for(find(), WAIT)


def has(topic: str, *parts: tuple[int, int]) -> Callable[[Cluster], bool]:
    return lambda c: set(parts) <= set(c.partitions(topic))


def address(broker: Broker) -> BrokerAddress:
    return BrokerAddress(broker.broker_id, broker.host, broker.port)


@pytest.fixture
async def sim(zookeeper: str) -> AsyncIterator[ZooKeeper]:
    """A second session writing registrations where brokers would."""
    async with ZooKeeper(zookeeper) as zk:
        yield zk


async def replace(zk: ZooKeeper, changes: dict[str, str]) -> None:
    """Delete and re-create ephemeral nodes with new data in one transaction, so watchers
    see a single change (as when a broker re-registers between two reads)."""
    txn = zk.client.begin_transaction()
    for path, data in changes.items():
        txn.delete(path)
        txn.create(path, data=data, ephemeral=True)
    assert await txn.commit()


# -- parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10.0.0.12-1324306324402:10.0.0.12:9092", ("10.0.0.12", 9092)),
        ("creator:host.example:1", ("host.example", 1)),
        ("c:h:65535", ("h", 65535)),
        ("c: h :9092", ("h", 9092)),
        # More fields than 0.7.2 expects: host = second field, port = last field.
        ("c:h:extra:9093", ("h", 9093)),
    ],
)
def test_parse_broker_registration(value: str, expected: tuple[str, int]) -> None:
    assert parse_broker_registration(value) == expected


@pytest.mark.parametrize(
    "value", [None, "", "h:9092", "c:h:port", "c::9092", "c:h:0", "c:h:70000", "c:h:-1"]
)
def test_parse_broker_registration_garbage(value: str | None) -> None:
    with pytest.raises(ZooKeeperError, match="registration"):
        parse_broker_registration(value)


def test_parse_broker_list() -> None:
    assert parse_broker_list("0:a:9092, 10:b:9093,") == {
        0: BrokerAddress(0, "a", 9092),
        10: BrokerAddress(10, "b", 9093),
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "names no broker"),
        (" , ", "names no broker"),
        ("0:a", "not 'id:host:port'"),
        ("0:::1:9092", "may not contain"),
        ("x:a:9092", "not a number"),
        ("-1:a:9092", "not a number"),
        ("0:a:port", "port between"),
        ("0::9092", "needs a host"),
        ("0:a:0", "port between"),
        ("0:a:1,0:b:2", "twice"),
    ],
)
def test_parse_broker_list_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_broker_list(text)


# -- static mode ---------------------------------------------------------------------


async def test_static_cluster() -> None:
    before = asyncio.all_tasks()
    async with StaticCluster("10:b:9093,2:a:9092") as cluster:
        assert cluster.static
        events = cluster.subscribe()
        assert cluster.brokers == {2: BrokerAddress(2, "a", 9092), 10: BrokerAddress(10, "b", 9093)}
        assert cluster.partitions("any") == [(2, 0), (10, 0)]
        assert cluster.topics() == set()
        await cluster.refresh()
        await cluster.wait_for(lambda c: 10 in c.brokers, timeout_ms=100)
        with pytest.raises(ClusterTimeoutError):
            await cluster.wait_for(lambda c: 3 in c.brokers, timeout_ms=50)
        assert events.empty()
    assert asyncio.all_tasks() == before

    mapped = StaticCluster({5: BrokerAddress(None, "h", 1)})
    assert mapped.brokers == {5: BrokerAddress(5, "h", 1)}
    with pytest.raises(ValueError, match="at least one"):
        StaticCluster({})


def test_cluster_from() -> None:
    assert isinstance(cluster_from(None, "0:h:1"), StaticCluster)
    assert isinstance(cluster_from("127.0.0.1:2181/kafka", ""), ZooKeeperCluster)
    with pytest.raises(ValueError, match="not both"):
        cluster_from("127.0.0.1:2181", "0:h:1")
    with pytest.raises(ValueError, match=r"zk\.connect or broker\.list"):
        cluster_from(None, " ")
    with pytest.raises(ValueError, match=r"'h:' is not host\[:port\]"):
        cluster_from("h:", None)
    assert issubclass(ClusterTimeoutError, KafkaError)


# -- ZooKeeper mode: the initial view and bootstrap ----------------------------------


async def test_initial_view_sorts_numerically(
    kafka_cluster: KafkaClusterFactory, zookeeper: str
) -> None:
    # Brokers 2 and 10 (string order would put 10 first), topic "big" with 12 partitions.
    async with kafka_cluster(
        1, first_id=2, num_partitions=2, topic_partitions={"big": 12}
    ) as kafka:
        kafka.add_broker(10)
        await kafka.start_broker(10)
        for broker in kafka.running:
            await produce(broker, "t")
        await produce(kafka.broker(2), "big")
        await registered(zookeeper, "t", {2, 10})
        await registered(zookeeper, "big", {2})

        async with ZooKeeperCluster(zookeeper) as cluster:
            assert not cluster.static
            assert cluster.brokers == {b.broker_id: address(b) for b in kafka.running}
            assert cluster.partitions("t") == [(2, 0), (2, 1), (10, 0), (10, 1)]
            assert cluster.partitions("big") == [(2, p) for p in range(12)]
            assert cluster.topics() == {"t", "big"}


async def test_bootstrap_then_merge(kafka_cluster: KafkaClusterFactory, zookeeper: str) -> None:
    async with (
        kafka_cluster(2, num_partitions=2) as kafka,
        ZooKeeperCluster(zookeeper) as cluster,
    ):
        await cluster.wait_for(lambda c: len(c.brokers) == 2, timeout_ms=WAIT_MS)
        events = cluster.subscribe()
        # Nobody registered "new": partition 0 of every live broker, stored.
        assert cluster.partitions("new") == [(0, 0), (1, 0)]
        assert "new" in cluster.topics()
        assert await events.get() == TopicChanged("new", ((0, 0), (1, 0)))
        # Broker 0 registers it: its real partitions join; broker 1 keeps its partition 0.
        await produce(kafka.broker(0), "new")
        await cluster.wait_for(has("new", (0, 1)), timeout_ms=WAIT_MS)
        assert cluster.partitions("new") == [(0, 0), (0, 1), (1, 0)]
        await produce(kafka.broker(1), "new")
        await cluster.wait_for(has("new", (1, 1)), timeout_ms=WAIT_MS)
        assert cluster.partitions("new") == [(0, 0), (0, 1), (1, 0), (1, 1)]
        # A refresh rebuilds the view from the registrations (as 0.7.2's retry does).
        await cluster.refresh()
        assert cluster.partitions("new") == [(0, 0), (0, 1), (1, 0), (1, 1)]


async def test_no_brokers_at_all(zookeeper: str) -> None:
    # /brokers/ids does not even exist: an existence watch notices its creation.
    async with ZooKeeperCluster(zookeeper) as cluster, ZooKeeper(zookeeper) as sim:
        assert cluster.brokers == {}
        assert cluster.partitions("t") == []
        assert cluster.topics() == set()
        assert await sim.exists("/brokers/topics")  # created (persistent) by the view
        assert await sim.get_data("/brokers/topics") is None
        await sim.create_ephemeral("/brokers/ids/4", "c:127.0.0.1:4444")
        await cluster.wait_for(lambda c: 4 in c.brokers, timeout_ms=WAIT_MS)
        assert cluster.partitions("t") == [(4, 0)]


# -- ZooKeeper mode: watches ---------------------------------------------------------


async def test_brokers_join_leave_return_and_move(
    kafka_cluster: KafkaClusterFactory, zookeeper: str
) -> None:
    async with kafka_cluster(1, num_partitions=2) as kafka:
        await produce(kafka.broker(0), "t")
        await registered(zookeeper, "t", {0})
        async with ZooKeeperCluster(zookeeper) as cluster:
            events = cluster.subscribe()
            assert cluster.partitions("t") == [(0, 0), (0, 1)]

            # Joins: BrokerAdded, then its partitions once it registers the topic.
            joined = await kafka.start_broker(kafka.add_broker(1).broker_id)
            assert await next_event(events, lambda e: isinstance(e, BrokerAdded)) == (
                BrokerAdded(address(joined))
            )
            await produce(joined, "t")
            changed = await next_event(events, lambda e: isinstance(e, TopicChanged))
            assert changed == TopicChanged("t", ((0, 0), (0, 1), (1, 0), (1, 1)))

            # Leaves: BrokerRemoved, and every one of its partitions goes.
            await kafka.stop_broker(1)
            assert await next_event(events, lambda e: not isinstance(e, TopicChanged)) == (
                BrokerRemoved(1)
            )
            assert await next_event(events, lambda e: True) == TopicChanged("t", ((0, 0), (0, 1)))
            assert cluster.brokers == {0: address(kafka.broker(0))}

            # Returns (re-registering the topic it has on disk): back with its partitions.
            await kafka.start_broker(1)
            await cluster.wait_for(has("t", (1, 0), (1, 1)), timeout_ms=WAIT_MS)
            assert cluster.brokers[1] == address(kafka.broker(1))

            # Restarts on another port: whatever the interleaving, the new address wins.
            await kafka.stop_broker(1)
            kafka.broker(1).config.port = 0
            moved = await kafka.start_broker(1)
            await cluster.wait_for(lambda c: c.brokers.get(1) == address(moved), timeout_ms=WAIT_MS)
            await cluster.wait_for(has("t", (1, 0), (1, 1)), timeout_ms=WAIT_MS)


async def test_broker_moved_event(zookeeper: str, sim: ZooKeeper) -> None:
    await sim.create_ephemeral("/brokers/ids/7", "c-1:127.0.0.1:1111")
    await sim.create_ephemeral("/brokers/topics/t/7", "2")
    async with ZooKeeperCluster(zookeeper) as cluster:
        events = cluster.subscribe()
        # Re-registered at another port between two reads of /brokers/ids.
        await replace(sim, {"/brokers/ids/7": "c-2:127.0.0.1:2222"})
        assert await next_event(events, lambda e: True) == BrokerMoved(
            BrokerAddress(7, "127.0.0.1", 1111), BrokerAddress(7, "127.0.0.1", 2222)
        )
        assert cluster.partitions("t") == [(7, 0), (7, 1)]
        # Re-registered at the same address (only the creator id differs): no event.
        await replace(sim, {"/brokers/ids/7": "c-3:127.0.0.1:2222"})
        await sim.create_ephemeral("/brokers/ids/8", "c-1:127.0.0.1:3333")
        assert await next_event(events, lambda e: True) == BrokerAdded(
            BrokerAddress(8, "127.0.0.1", 3333)
        )


async def test_merge_rule(zookeeper: str, sim: ZooKeeper) -> None:
    for broker_id in (1, 2):
        await sim.create_ephemeral(f"/brokers/ids/{broker_id}", f"c:127.0.0.1:{9000 + broker_id}")
    await sim.create_ephemeral("/brokers/topics/m/1", "3")
    await sim.create_ephemeral("/brokers/topics/m/2", "1")
    await sim.create_ephemeral("/brokers/topics/m/5", "2")  # broker 5 is not alive
    async with ZooKeeperCluster(zookeeper) as cluster:
        # Union of the registrations, filtered to live brokers.
        assert cluster.partitions("m") == [(1, 0), (1, 1), (1, 2), (2, 0)]

        # Broker 1 lowers its count to 1 (and broker 2 raises to 2, so we know when the
        # change was processed): broker 1's entries stay.
        await replace(sim, {"/brokers/topics/m/1": "1", "/brokers/topics/m/2": "2"})
        await cluster.wait_for(has("m", (2, 1)), timeout_ms=WAIT_MS)
        assert cluster.partitions("m") == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]

        # Broker 1 stops listing the topic at all: still nothing removed.
        await sim.delete("/brokers/topics/m/1")
        await sim.create_ephemeral("/brokers/topics/m/3", "1")  # not alive: filtered
        await sim.create_ephemeral("/brokers/topics/other/2", "2")
        await cluster.wait_for(has("other", (2, 1)), timeout_ms=WAIT_MS)
        assert cluster.partitions("m") == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]

        # Broker 5 comes alive: the registration read earlier is merged in.
        await sim.create_ephemeral("/brokers/ids/5", "c:127.0.0.1:9005")
        await cluster.wait_for(has("m", (5, 0), (5, 1)), timeout_ms=WAIT_MS)

        # Only a broker's death removes its entries, from every topic.
        events = cluster.subscribe()
        await sim.delete("/brokers/ids/1")
        assert await next_event(events, lambda e: True) == BrokerRemoved(1)
        assert cluster.partitions("m") == [(2, 0), (2, 1), (5, 0), (5, 1)]
        await sim.delete("/brokers/ids/2")
        await cluster.wait_for(lambda c: 2 not in c.brokers, timeout_ms=WAIT_MS)
        assert cluster.partitions("other") == [(5, 0)]  # nothing left: bootstrap again


async def test_odd_and_garbage_values(
    zookeeper: str, sim: ZooKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "aiokafka07.cluster")
    # Parents with empty rather than null data, as some tools create them.
    await sim.client.create("/brokers", data=b"")
    await sim.client.create("/brokers/ids", data=b"")
    await sim.client.create("/brokers/topics", data=b"")
    await sim.create_ephemeral("/brokers/ids/1", "c:127.0.0.1:9001")
    await sim.create_ephemeral("/brokers/ids/2", "garbage")
    await sim.create_ephemeral("/brokers/ids/x", "c:127.0.0.1:9003")
    await sim.create_ephemeral("/brokers/topics/g/1", "2")
    await sim.create_ephemeral("/brokers/topics/bad/1", "0")
    await sim.create_ephemeral("/brokers/topics/worse/1", "two")
    async with ZooKeeperCluster(zookeeper) as cluster:
        assert cluster.brokers == {1: BrokerAddress(1, "127.0.0.1", 9001)}
        assert cluster.partitions("g") == [(1, 0), (1, 1)]
        assert cluster.partitions("bad") == [(1, 0)]  # skipped: bootstrap
        assert cluster.partitions("worse") == [(1, 0)]
    messages = caplog.text
    assert "'garbage'" in messages
    assert "'x' is not a broker id" in messages
    assert "'0' is not a positive integer" in messages
    assert "'two' is not a positive integer" in messages


# -- ZooKeeper trouble ---------------------------------------------------------------


async def test_session_expiry_reloads_and_rearms(
    kafka_cluster: KafkaClusterFactory, zookeeper: str, zookeeper_server: ZooKeeperServer
) -> None:
    async with (
        kafka_cluster(1, num_partitions=2) as kafka,
        ZooKeeperCluster(zookeeper, session_timeout_ms=1500) as cluster,
    ):
        await cluster.wait_for(lambda c: 0 in c.brokers, timeout_ms=WAIT_MS)
        zk = cluster.zookeeper
        old_session = zk.session_id
        assert old_session is not None
        await expire_session(
            zookeeper_server.connect_string, old_session, zk.client.session.password
        )
        # A broker joins before the client even notices; the view is kept meanwhile.
        await kafka.start_broker(kafka.add_broker(1).broker_id)
        assert cluster.brokers == {0: address(kafka.broker(0))}
        for _ in range(int(WAIT / 0.05)):
            if zk.connected and zk.session_id != old_session:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("no new session")
        # The reload on the new session finds it.
        await cluster.wait_for(lambda c: 1 in c.brokers, timeout_ms=WAIT_MS)
        await cluster.refresh()
        assert cluster.brokers == {b.broker_id: address(b) for b in kafka.running}
        # Watches work on the new session: later changes are seen.
        await kafka.start_broker(kafka.add_broker(2).broker_id)
        await cluster.wait_for(lambda c: 2 in c.brokers, timeout_ms=WAIT_MS)
        await produce(kafka.broker(2), "after")
        await cluster.wait_for(has("after", (2, 1)), timeout_ms=WAIT_MS)
        await kafka.stop_broker(0)
        await cluster.wait_for(lambda c: 0 not in c.brokers, timeout_ms=WAIT_MS)


async def write_persistent(connect: str, nodes: dict[str, str]) -> None:
    """Registrations that outlive the writing session (a server restart may expire the
    sessions of clients that are slow to notice it)."""
    async with ZooKeeper(connect) as zk:
        for path, data in nodes.items():
            await zk.ensure_path(path.rsplit("/", 1)[0])
            await zk.client.create(path, data=data)


async def test_server_restart_and_outage() -> None:
    server = ZooKeeperServer()
    await asyncio.to_thread(server.start)
    try:
        connect = f"{server.connect_string}/restart"
        await write_persistent(connect, {"/brokers/ids/1": "c:127.0.0.1:9001"})
        await write_persistent(connect, {"/brokers/topics/t/1": "2"})
        async with ZooKeeperCluster(
            connect, session_timeout_ms=4000, connection_timeout_ms=500
        ) as cl:
            assert cl.partitions("t") == [(1, 0), (1, 1)]
            session = cl.zookeeper.session_id

            # A quick restart: the session survives; what changed meanwhile is seen.
            await asyncio.to_thread(server.restart)
            await write_persistent(connect, {"/brokers/ids/2": "c:127.0.0.1:9002"})
            await write_persistent(connect, {"/brokers/topics/t/2": "2"})
            assert cl.partitions("t") == [(1, 0), (1, 1)]  # not noticed yet
            await cl.wait_for(has("t", (2, 1)), timeout_ms=2 * WAIT_MS)
            assert cl.zookeeper.session_id == session

            # A long outage: the last view is served and a refresh fails cleanly.
            await asyncio.to_thread(server.stop)
            # aiozk may take a session timeout to notice the loss.
            await eventually(lambda: not cl.zookeeper.connected, WAIT)
            view = cl.brokers
            assert view.keys() == {1, 2}
            with pytest.raises(ZooKeeperError, match="last known view"):
                await cl.refresh()
            assert cl.brokers == view
            assert cl.partitions("t") == [(1, 0), (1, 1), (2, 0), (2, 1)]

            # Back (on the old session or a new one): changes are seen again.
            await asyncio.to_thread(server.start)
            await write_persistent(connect, {"/brokers/ids/3": "c:127.0.0.1:9003"})
            await write_persistent(connect, {"/brokers/topics/t/3": "2"})
            await cl.wait_for(has("t", (3, 1)), timeout_ms=3 * WAIT_MS)
    finally:
        await asyncio.to_thread(server.close)


async def test_a_session_closed_while_disconnected_is_given_up_within_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ZooKeeper gone: ``close()`` gives the session a moment to reconnect, then gives it
    up (the server expires it) and leaves no task. aiozk's own close stops looking for a
    server and then waits for a connection to send its close request: it waited the whole
    session timeout (10 s here) and ended in a TimeoutError, logged as a warning."""
    caplog.set_level(logging.INFO, logger="aiokafka07.zookeeper")
    server = ZooKeeperServer()
    await asyncio.to_thread(server.start)
    try:
        before = asyncio.all_tasks()
        zk = ZooKeeper(server.connect_string, session_timeout_ms=10_000, connection_timeout_ms=500)
        await zk.start()
        await asyncio.to_thread(server.stop)
        await eventually(lambda: not zk.connected, WAIT)
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(zk.close(), 30)
        took = asyncio.get_running_loop().time() - started
        for _ in range(20):  # aiozk finishes its cancelled tasks a few iterations later
            await asyncio.sleep(0.01)
        assert asyncio.all_tasks() - before == set()
    finally:
        await asyncio.to_thread(server.close)
    assert took < 5, took  # the grace (1 s) and aiozk's cut-short close (1 s); loaded
    ours = [r for r in caplog.records if r.name.startswith("aiokafka07")]
    assert not [r.getMessage() for r in ours if r.levelno >= logging.WARNING]
    assert any("given up at close" in r.getMessage() for r in ours)


# -- lifecycle -----------------------------------------------------------------------


async def test_close_leaves_no_task_behind(zookeeper: str) -> None:
    async def settle() -> set[asyncio.Task[Any]]:
        for _ in range(20):  # aiozk finishes its cancelled tasks a few iterations later
            await asyncio.sleep(0.01)
        return asyncio.all_tasks()

    before = await settle()
    cluster = ZooKeeperCluster(zookeeper)
    await cluster.start()
    await cluster.start()  # idempotent
    assert len(asyncio.all_tasks()) > len(before)
    await cluster.close()
    await cluster.close()  # idempotent
    assert await settle() == before
    with pytest.raises(ZooKeeperError, match="not started"):
        await cluster.refresh()

    # Sharing a session: the cluster's own tasks and watches go, the session stays open.
    async with ZooKeeper(zookeeper) as zk:
        with_session = await settle()
        async with ZooKeeperCluster(zk) as shared:
            assert shared.partitions("t") == []
        assert zk.connected
        assert await settle() == with_session
        assert not any(zk.client.session.watch_callbacks.values())


@pytest.mark.slow  # waits out a connection timeout
async def test_start_fails_cleanly_without_zookeeper() -> None:
    before = asyncio.all_tasks()
    cluster = ZooKeeperCluster("127.0.0.1:1/x", connection_timeout_ms=300)
    with pytest.raises(ZooKeeperError, match="cannot open"):
        await cluster.start()
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert asyncio.all_tasks() == before


@pytest.mark.parametrize("how", ["closing", "closed"])
async def test_a_closed_session_stops_looking_for_a_server(how: str) -> None:
    """The search for a server ends once the session is closing or closed, whether or not
    its task's cancellation arrives: Python 3.11's ``asyncio.wait_for`` swallows one that
    comes as a connection attempt ends, and the search then went on for ever (CI's
    ``test_start_fails_cleanly_without_zookeeper`` found aiozk's repair loop left behind)."""
    session = _Session("127.0.0.1:1", 6.0, None, False, None)  # port 1: refused at once
    session.started = True
    search = asyncio.ensure_future(session.find_server(False))
    await asyncio.sleep(0.3)  # a few rounds of refused attempts and backoff
    assert not search.done()
    if how == "closing":
        session.closing = True
    else:
        session.started = False  # what aiozk's close() leaves
    await asyncio.wait({search}, timeout=2.0)  # one backoff (at most 0.5 s) and an attempt
    try:
        assert search.cancelled()
    finally:
        search.cancel()

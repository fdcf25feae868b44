"""A group's znodes on a real ZooKeeper: paths and values exactly as 0.7.2 writes them."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from aiokafka07 import BrokerAddress, BrokerConnection
from aiokafka07.errors import ZooKeeperError
from aiokafka07.group import Subscription
from aiokafka07.group.registry import GroupRegistry
from aiokafka07.testing import ZooKeeperServer, expire_session
from aiokafka07.zookeeper import ZooKeeper

from .wire import eventually


async def test_membership_paths_values_and_java_forms(zookeeper: str) -> None:
    async with ZooKeeper(zookeeper) as zk, ZooKeeper(zookeeper) as java:
        registry = GroupRegistry(zk, "g1")
        await registry.register("g1_py-1-aaaaaaaa", Subscription.of_topics({"t": 2}))
        # A Java console consumer's registration, as observed on a real cluster.
        await java.create_ephemeral("/consumers/g1/ids/g1_vm-1795259396515-cd41ee70", "*1*t|u")
        assert await zk.get_data("/consumers/g1/ids/g1_py-1-aaaaaaaa") == '{ "t": 2 }'
        assert await zk.get_data("/consumers/g1") is None  # persistent parents, null data
        members = await registry.members()
        assert list(members) == ["g1_py-1-aaaaaaaa", "g1_vm-1795259396515-cd41ee70"]
        assert members["g1_py-1-aaaaaaaa"].topics == {"t": 2}
        java_member = members["g1_vm-1795259396515-cd41ee70"]
        assert java_member.filter is not None
        assert java_member.streams_per_topic(["t", "u", "v"]) == {"t": 1, "u": 1}
        await registry.unregister("g1_py-1-aaaaaaaa")
        assert list(await registry.members()) == ["g1_vm-1795259396515-cd41ee70"]
        assert await GroupRegistry.groups(zk) == ["g1"]


async def test_unreadable_registration_is_a_typed_error(zookeeper: str) -> None:
    async with ZooKeeper(zookeeper) as zk:
        await zk.create_ephemeral("/consumers/bad/ids/bad_x", "not a registration")
        with pytest.raises(ZooKeeperError, match="not a registration"):
            await GroupRegistry(zk, "bad").members()


async def test_owner_claims_expect_conflict(zookeeper: str) -> None:
    async with ZooKeeper(zookeeper) as a, ZooKeeper(zookeeper) as b:
        ra, rb = GroupRegistry(a, "g"), GroupRegistry(b, "g")
        assert await ra.claim("t", "0-1", "g_a-0")
        assert await ra.claim("t", "0-1", "g_a-0")  # our own node: still ours
        assert not await rb.claim("t", "0-1", "g_b-0")  # previous owner not released
        assert await rb.owner("t", "0-1") == "g_a-0"
        assert await a.get_data("/consumers/g/owners/t/0-1") == "g_a-0"
        await ra.release("t", "0-1")
        await ra.release("t", "0-1")  # missing node is fine
        assert await rb.claim("t", "0-1", "g_b-0")
        assert await ra.owner("t", "0-9") is None


async def test_owners_vanish_with_the_session(
    zookeeper: str, zookeeper_server: ZooKeeperServer
) -> None:
    async with ZooKeeper(zookeeper) as a, ZooKeeper(zookeeper) as b:
        assert await GroupRegistry(a, "g").claim("t", "1-0", "g_a-0")
        await expire_session(
            zookeeper_server.connect_string, a.session_id or 0, a.client.session.password
        )
        registry = GroupRegistry(b, "g")
        await eventually(lambda: registry.claim("t", "1-0", "g_b-0"), timeout=10)
        assert await registry.owner("t", "1-0") == "g_b-0"


async def test_offsets_are_decimal_next_offsets(zookeeper: str) -> None:
    async with ZooKeeper(zookeeper) as zk:
        registry = GroupRegistry(zk, "g")
        assert await registry.committed("t", "0-0") is None
        await registry.commit("t", "0-0", 3838)
        await registry.commit("t", "1-0", 0)
        await registry.commit("t", "0-0", 4000)  # an existing node is overwritten
        assert await zk.get_data("/consumers/g/offsets/t/0-0") == "4000"
        assert await registry.offsets("t") == {"0-0": 4000, "1-0": 0}
        assert await registry.offset_topics() == ["t"]
        with pytest.raises(ValueError, match="negative"):
            await registry.commit("t", "0-0", -1)
        await zk.write_persistent("/consumers/g/offsets/t/2-0", "garbage")
        with pytest.raises(ZooKeeperError, match="not an offset"):
            await registry.committed("t", "2-0")


async def test_topic_registrations_from_real_brokers(kafka_cluster: Any, zookeeper: str) -> None:
    async with kafka_cluster(2, num_partitions=3) as cluster, ZooKeeper(zookeeper) as zk:
        for broker in cluster.running:
            conn = await BrokerConnection.open(
                BrokerAddress(broker.broker_id, broker.host, broker.port)
            )
            await conn.produce("reg", 0, [b"x"], confirm=True)
            await conn.close()
        registry = GroupRegistry(zk, "g")

        async def both() -> bool:
            return await registry.topic_registrations("reg") == {0: 3, 1: 3}

        await eventually(both)
        assert "reg" in await registry.topics()
        await zk.create_ephemeral("/brokers/topics/reg/7", "not-a-number")
        assert await registry.topic_registrations("reg") == {0: 3, 1: 3}


async def test_unreachable_zookeeper_is_a_complete_error() -> None:
    """A timeout says what went wrong, instead of ending in a bare colon."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]  # nothing listens here once the socket is closed
    async with server:
        silent_port = server.sockets[0].getsockname()[1]
        for port in (silent_port, dead):
            zk = ZooKeeper(f"127.0.0.1:{port}", connection_timeout_ms=300)
            with pytest.raises(ZooKeeperError) as info:
                await zk.start()
            assert str(info.value) == (
                f"cannot open a ZooKeeper session at 127.0.0.1:{port} within 300 ms: "
                "no server answered"
            )

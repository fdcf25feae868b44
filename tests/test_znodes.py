"""The 0.7.2 znode layout (aiokafka07.znodes): every path and value captured from a real
0.7.2 cluster is built and read back exactly, and a group's znodes on a real ZooKeeper are
written as 0.7.2 writes them."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import signal
import socket
import warnings
from pathlib import Path
from typing import Any

import pytest

from aiokafka07 import BrokerAddress, BrokerConnection, znodes
from aiokafka07.errors import ZooKeeperError
from aiokafka07.group import Subscription
from aiokafka07.testing import ZooKeeperServer, expire_session
from aiokafka07.znodes import GroupRegistry, read_topic_registrations, read_topics
from aiokafka07.zookeeper import ZooKeeper

from .wire import eventually, stopped

OBSERVED = Path(__file__).resolve().parent / "data" / "znodes-observed.txt"
_ENTRY = re.compile(r"^(/\S*) = (None|'(.*)')(?: EPHEMERAL\(owner=\w+\))?$")


def observed_znodes() -> dict[str, str | None]:
    """Every znode of the capture (path -> value; None for null data)."""
    found: dict[str, str | None] = {}
    for line in OBSERVED.read_text().splitlines():
        match = _ENTRY.match(line)
        if match:
            found[match.group(1)] = None if match.group(2) == "None" else match.group(3)
    return found


def test_every_captured_znode_is_built_and_read_back_exactly() -> None:
    nodes = observed_znodes()
    checked = dict.fromkeys(("broker", "topic", "member", "owner", "offset"), 0)
    for path, value in nodes.items():
        parts = path.split("/")[1:]
        if parts[:2] == ["brokers", "ids"] and len(parts) == 3:
            assert znodes.broker_path(int(parts[2])) == path
            host, port = znodes.parse_broker_registration(value)
            creator = value.split(":")[0] if value else ""
            started = int(creator.rsplit("-", 1)[1])
            assert znodes.format_broker_registration(host, port, started_ms=started) == value
            checked["broker"] += 1
        elif parts[:2] == ["brokers", "topics"] and len(parts) == 4:
            assert znodes.topic_broker_path(parts[2], int(parts[3])) == path
            assert znodes.parse_partition_count(parts[2], int(parts[3]), value) == 2
            checked["topic"] += 1
        elif parts[0] == "consumers" and len(parts) == 4 and parts[2] == "ids":
            assert znodes.member_path(parts[1], parts[3]) == path
            assert znodes.format_registration(znodes.parse_registration(value)) == value
            checked["member"] += 1
        elif parts[0] == "consumers" and len(parts) == 5 and parts[2] == "owners":
            assert znodes.owner_path(parts[1], parts[3], parts[4]) == path
            member, _, thread = (value or "").rpartition("-")
            assert znodes.thread_ids(member, int(thread) + 1)[-1] == value
            assert f"{znodes.ids_path(parts[1])}/{member}" in nodes or "perf" in parts[1]
            checked["owner"] += 1
        elif parts[0] == "consumers" and len(parts) == 5 and parts[2] == "offsets":
            assert znodes.offset_path(parts[1], parts[3], parts[4]) == path
            assert znodes.parse_offset_path(path) == (parts[1], parts[3], parts[4])
            assert value is not None
            assert value.isdigit()
            checked["offset"] += 1
        elif len(parts) <= 4:
            assert value in (None, ""), f"{path} is a parent: null data"
    assert all(checked.values()), checked


def test_paths_and_their_parsers_agree() -> None:
    assert znodes.topic_of_path(znodes.topic_path("t.1")) == "t.1"
    assert znodes.topic_of_path(znodes.BROKER_TOPICS) is None
    assert znodes.topic_of_path(znodes.topic_broker_path("t", 0)) is None
    assert znodes.group_path("g") == "/consumers/g"
    assert znodes.owners_path("g", "t") == "/consumers/g/owners/t"
    assert znodes.offsets_path("g") == "/consumers/g/offsets"
    assert znodes.parse_offset_path("/consumers/g/owners/t/0-1") is None
    assert znodes.parse_offset_path("/consumers/g/offsets/t/0-1/x") is None


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "x",
        "{}",
        "[1]",
        '{"t": 0}',
        '{"t": true}',
        '{"t": "2"}',
        "*0*t",
        "!x!t",
        "[" * 5000,
    ],
)
def test_unusable_registrations_are_typed_errors(value: str | None) -> None:
    with pytest.raises(ZooKeeperError):
        znodes.parse_registration(value)


@pytest.mark.parametrize("value", ["", "-1", "0", "1" * 40, " 3x", None])
def test_unusable_partition_counts_are_skipped(value: str | None) -> None:
    assert znodes.parse_partition_count("t", 0, value) is None


@pytest.mark.parametrize("name", ["a", "-1", "1" * 40, " 1"])
def test_unusable_broker_ids_are_skipped(name: str) -> None:
    assert znodes.parse_broker_id(name) is None


async def test_membership_paths_values_and_java_forms(zookeeper: str) -> None:
    async with ZooKeeper(zookeeper) as zk, ZooKeeper(zookeeper) as java:
        registry = GroupRegistry(zk, "g1")
        await registry.register(
            "g1_py-1-aaaaaaaa", Subscription.of_topics({"t": 2}).as_registration()
        )
        # A Java console consumer's registration, as observed on a real cluster.
        await java.create_ephemeral("/consumers/g1/ids/g1_vm-1795259396515-cd41ee70", "*1*t|u")
        assert await zk.get_data("/consumers/g1/ids/g1_py-1-aaaaaaaa") == '{ "t": 2 }'
        assert await zk.get_data("/consumers/g1") is None  # persistent parents, null data
        members = await registry.members()
        assert list(members) == ["g1_py-1-aaaaaaaa", "g1_vm-1795259396515-cd41ee70"]
        assert members["g1_py-1-aaaaaaaa"].topics == {"t": 2}
        java_member = Subscription.from_registration(members["g1_vm-1795259396515-cd41ee70"])
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

        async def both() -> bool:
            return await read_topic_registrations(zk, "reg") == {0: 3, 1: 3}

        await eventually(both)
        assert "reg" in await read_topics(zk)
        await zk.create_ephemeral("/brokers/topics/reg/7", "not-a-number")
        assert await read_topic_registrations(zk, "reg") == {0: 3, 1: 3}


@pytest.mark.slow  # waits out a connection timeout
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
            assert str(info.value).startswith(
                f"cannot open a ZooKeeper session at 127.0.0.1:{port}: gave up after "
            )
            assert "(connection_timeout_ms=300): " in str(info.value)
            assert str(info.value).rstrip()[-1] != ":"


async def test_writes_fenced_to_a_session_never_land_from_another(
    zookeeper: str, zookeeper_server: ZooKeeperServer
) -> None:
    """A member's commits and releases carry the session that claimed the partition:
    refused from any other session, and a release never deletes another member's claim."""
    lost: list[int] = []
    renewed: list[int] = []
    async with ZooKeeper(zookeeper) as a, ZooKeeper(zookeeper) as b:
        ra, rb = GroupRegistry(a, "g"), GroupRegistry(b, "g")
        old = a.session_id
        assert old is not None
        a.add_session_lost_listener(lambda: lost.append(old))

        async def on_new_session() -> None:
            renewed.append(a.session_id or 0)

        a.add_session_listener(on_new_session)
        assert await ra.claim("t", "0-0", "g_a-0", session=old)
        await ra.commit("t", "0-0", 10, session=old)
        await ra.release("t", "0-0", session=(b.session_id or 0))  # not that session's node
        assert await rb.owner("t", "0-0") == "g_a-0"
        await expire_session(zookeeper_server.connect_string, old, a.client.session.password)
        await eventually(lambda: renewed, timeout=10)
        assert lost == [old]  # told at once, before the new session
        assert renewed == [a.session_id] != [old]
        assert await rb.claim("t", "0-0", "g_b-0")  # the claim went with the session
        with pytest.raises(ZooKeeperError, match="not the current connected session"):
            await ra.commit("t", "0-0", 5, session=old)
        assert await rb.committed("t", "0-0") == 10
        await ra.release("t", "0-0", session=old)
        await ra.release("t", "0-0", session=a.session_id or 0)  # b's node: not ours
        assert await rb.owner("t", "0-0") == "g_b-0"
        await rb.release("t", "0-0", session=b.session_id or 0)
        assert await rb.owner("t", "0-0") is None


async def test_a_fenced_write_after_close_is_refused_and_leaves_no_coroutine_behind(
    zookeeper: str,
) -> None:
    """A claim racing the member's close finds the session gone: a typed error, and the
    write it would have made is closed, not left for the garbage collector to report
    ("coroutine ... was never awaited")."""
    zk = ZooKeeper(zookeeper)
    await zk.start()
    session = zk.session_id
    await zk.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for write in (
            zk.create_ephemeral("/consumers/g/owners/t/0-0", "g_a-0", session=session),
            zk.write_persistent("/consumers/g/offsets/t/0-0", "1", session=session),
        ):
            with pytest.raises(ZooKeeperError, match="not started"):
                await write
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


async def test_a_fenced_write_interrupted_by_a_broken_connection_is_never_sent_again() -> None:
    """aiozk sends a request again after reconnecting; a fenced write is abandoned instead
    (an unfenced one, for contrast, lands after the reconnection)."""
    server = ZooKeeperServer()
    await asyncio.to_thread(server.start)
    try:
        connect = f"{server.connect_string}/fence"
        async with ZooKeeper(connect, session_timeout_ms=20_000) as zk:
            await zk.write_persistent("/offsets/fenced", "1")
            await zk.write_persistent("/offsets/plain", "1")
            session = zk.session_id
            pid = server.pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)  # the server hears, never answers
            try:
                await eventually(lambda: stopped(pid), timeout=10)
                fenced = asyncio.create_task(
                    zk.write_persistent("/offsets/fenced", "stale", session=session)
                )
                plain = asyncio.create_task(zk.write_persistent("/offsets/plain", "late"))
                await asyncio.sleep(0.2)
                assert not fenced.done()
                assert not plain.done()
                await asyncio.to_thread(server.kill)  # the connection breaks
            finally:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGCONT)
            await asyncio.to_thread(server.start)  # same data: the session survives
            # (aiozk sees a reset connection at once, an orderly close only when its next
            # ping times out: up to about the session timeout.)
            with pytest.raises(ZooKeeperError, match="the write was abandoned"):
                await asyncio.wait_for(fenced, 40)
            await asyncio.wait_for(plain, 60)  # re-sent by aiozk once reconnected
            assert zk.session_id == session
            assert await zk.get_data("/offsets/plain") == "late"
            assert await zk.get_data("/offsets/fenced") == "1"
    finally:
        await asyncio.to_thread(server.close)

"""The group consumer under faults, with real parts: a real ZooKeeper, real brokers, a
member in a process of its own stopped with SIGSTOP past its session, a ZooKeeper server
stopped with SIGSTOP (the session lease), a broker answer spoiled on its way, rebalance
listeners that raise or hang.

Each test asserts that nothing is lost, that duplicates are only what the issue allows,
that the error reaches the application once and is logged with its traceback, and that the
group goes on.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from aiokafka07 import Producer
from aiokafka07.errors import MalformedFrameError
from aiokafka07.group.consumer import Consumer
from aiokafka07.group.coordinator import LEASE_FRACTION
from aiokafka07.records import ConsumerRecord, TopicPartition
from aiokafka07.zookeeper import ZooKeeper

from .fetch_proxy import FetchSpoilingProxy
from .groups import (
    ONE_BY_TWO,
    TOPIC,
    TWO_BY_THREE,
    Collector,
    RemoteMember,
    RemoteRecord,
    committed_offsets,
    converged_with,
    delivered,
    leave,
    log_ends,
    member,
    own_zookeeper,
    partitions_of,
    produce,
    produce_sets,
    running_cluster,
    wait_converged,
    wait_delivered,
    wait_registered,
)
from .wire import eventually, sigstop

# -- a member stopped past its session timeout, then resumed ----------------------------------


class TakeoverOffsets:
    """Where this member started each partition it was assigned (its first position)."""

    def __init__(self) -> None:
        self.consumer: Consumer | None = None
        self.starts: dict[str, list[int]] = collections.defaultdict(list)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        assert self.consumer is not None
        for tp in assigned:
            self.starts[tp.name].append(await self.consumer.position(tp))


async def test_member_stopped_past_its_session_hands_out_only_the_rest_of_its_fetch(
    kafka_cluster: Any, tmp_path: Path
) -> None:
    """A member (its own process, 1.5 s session) is stopped with SIGSTOP while it consumes;
    the other member takes its partitions over, consumes what comes meanwhile and commits
    it. Then ZooKeeper (a server of this test's own) is stopped too, so that the member,
    resumed, cannot learn yet that its session expired: its lease ran out during the stop
    (no ZooKeeper answer since), so until it has rejoined it hands out exactly the rest of
    the fetch it was in the middle of (the lease is checked per fetch, not per record), and
    nothing else: no other fetch it had buffered, nothing fetched after (the records the
    other member consumed meanwhile). ZooKeeper resumes; the member finds its session
    expired, rejoins and starts from what the other member committed. Nothing is lost; the
    only duplicates are records the stopped member was handed past the offset it had
    committed (where the other member took over), before it rejoined.

    What happened when is told by the member's own clock (``time.monotonic()``, printed
    with each record), not by when the test read the line: lines written before the stop
    may still be in the pipe after it."""
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    async with (
        own_zookeeper() as server,
        running_cluster(kafka_cluster, server.connect_string, 2, 3) as (cluster, producer, zk),
    ):
        connect = server.connect_string
        produced = await produce(producer, TOPIC, parts, 20, "a")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        remote = RemoteMember(tmp_path)
        takeover = TakeoverOffsets()
        local = member(connect, listener=takeover)
        takeover.consumer = local
        collector: Collector | None = None
        zookeeper_pid = server.pid
        assert zookeeper_pid is not None
        try:
            remote_id = await remote.start(connect, TOPIC, session_timeout_ms=1500)
            await local.start()
            collector = Collector(local)
            await eventually(lambda: converged_with(zk, local, remote_id, registrations), 20)
            remote_parts = {tp.name for tp in partitions_tps(parts)} - {
                tp.name for tp in local.assignment()
            }
            await wait_all(collector, remote, produced)

            # The remote member is busy with large fetches when it is stopped: one message
            # set per partition, which its fetch takes whole, long enough to hand out (the
            # test reads each line through a pipe) that the stop mostly comes in the middle
            # of one. (Either way the rest of its fetch is known exactly.)
            sets = await produce_sets(producer, TOPIC, parts, 1000, "b", pad=400)
            produced += [v for values in sets.values() for v in values]
            await eventually(lambda: sum(v.startswith(b"b:") for v in remote.values()) > 50, 15)
            await sigstop(remote.pid)
            stopped_at = time.monotonic()
            # Its session expires; the local member takes over, consumes, commits.
            during = await produce(producer, TOPIC, parts, 20, "c")
            produced += during
            await eventually(lambda: local.assignment() == set(partitions_tps(parts)), 20)
            await eventually(lambda: set(during) <= set(collector.values()), 20)
            ends = await log_ends(cluster, TOPIC)

            async def all_committed() -> bool:
                offsets = await committed_offsets(zk, "g", TOPIC)
                return {k: int(v or -1) for k, v in offsets.items()} == ends

            await eventually(all_committed, 10)

            def handed_out_after(moment: float) -> list[RemoteRecord]:
                return [r for r in remote.records if r.at > moment]

            def rest_of_its_fetch() -> list[bytes]:
                """The records after the last one handed out before the stop, in the fetch
                that one came in (its partition's set of "b" records)."""
                last = [r for r in remote.records if r.at < stopped_at][-1]
                fetch = sets.get(last.name, [])
                return fetch[fetch.index(last.value) + 1 :] if last.value in fetch else []

            await sigstop(zookeeper_pid)
            try:
                resumed_at = time.monotonic()
                os.kill(remote.pid, signal.SIGCONT)
                # The rest of its fetch comes at once; then nothing, though its fetcher polls
                # every 10 ms and the other member's records wait in its partitions.
                await eventually(
                    lambda: len(handed_out_after(resumed_at)) >= len(rest_of_its_fetch()), 20
                )
                await asyncio.sleep(1.5)
            finally:
                os.kill(zookeeper_pid, signal.SIGCONT)
            # It finds its session expired, registers again, and the group rebalances.
            await eventually(lambda: converged_with(zk, local, remote_id, registrations), 30)
            after = await produce(producer, TOPIC, parts, 10, "d")
            produced += after
            await wait_all(collector, remote, produced)
            await asyncio.sleep(0.3)  # room for a late duplicate to show up

            rejoined_at = min(e.at for e in remote.events if e.kind == "assigned" and (
                e.at > resumed_at))  # fmt: skip
            between = [r.value for r in handed_out_after(resumed_at) if r.at < rejoined_at]
            expected = rest_of_its_fetch()
            assert len(between) == len(expected), (len(between), len(expected), between[:3])
            assert between == expected
            counts = delivered([collector], remote.values())
            assert set(counts) == set(produced)  # nothing lost
            duplicated = {v for v, n in counts.items() if n > 1}
            assert all(counts[v] == 2 for v in duplicated)
            # Each duplicate: handed to the stopped member before it rejoined, past where
            # the other member took over: its own uncommitted work.
            own = {
                r.value
                for r in remote.records
                if r.at < rejoined_at
                and r.name in remote_parts
                and r.offset > takeover.starts[r.name][-1]
            }
            assert duplicated <= own, sorted(duplicated - own)[:5]
            # None of what the other member consumed (and committed) meanwhile came again.
            assert not set(during) & set(remote.values())
            assert max(takeover.starts[name][-1] for name in remote_parts) > 0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(zookeeper_pid, signal.SIGCONT)
            if remote.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(remote.pid, signal.SIGCONT)
            await remote.stop()
            await leave([local], [collector] if collector else [])


# -- the session lease: ZooKeeper does not answer --------------------------------------------

#: The lease test's member session timeout (ZooKeeper grants it: tickTime 200 ms).
LEASE_TEST_SESSION_MS = 1500


async def test_a_member_fetches_and_hands_out_nothing_while_its_session_is_not_confirmed(
    kafka_cluster: Any,
) -> None:
    """The session lease: once ZooKeeper has not confirmed a member's session for 2/3 of its
    timeout, the member issues no fetch and hands out no record (another member may be
    taking its partitions over), until ZooKeeper answers again; then it goes on, in the
    same session or, if it expired, after rejoining.

    ZooKeeper is a server of this test's own, stopped with SIGSTOP (it hears, never
    answers). The member finds its broker at a proxy (through the registration) that counts
    its MULTIFETCH requests; the producer is static, so it needs no ZooKeeper."""
    parts = partitions_of(ONE_BY_TWO)
    async with own_zookeeper() as server:
        connect = server.connect_string
        zookeeper_pid = server.pid
        assert zookeeper_pid is not None
        async with (
            kafka_cluster(1, zookeeper=connect, num_partitions=2) as cluster,
            ZooKeeper(connect) as zk,
        ):
            broker = cluster.broker(0)
            async with (
                Producer(brokers=f"0:{broker.host}:{broker.port}") as producer,
                FetchSpoilingProxy(broker.host, broker.port, {}) as proxy,
            ):
                first = await produce(producer, TOPIC, parts, 10, "a")
                await wait_registered(zk, TOPIC, ONE_BY_TWO)
                await zk.write_persistent("/brokers/ids/0", f"proxy:{proxy.host}:{proxy.port}")
                async with member(connect, session_timeout_ms=LEASE_TEST_SESSION_MS) as consumer:
                    await take_all(consumer, first)
                    assert proxy.multifetches > 0  # (its fetches go through the proxy)

                    await sigstop(zookeeper_pid)
                    try:
                        # The last answer confirmed the session from a request sent before
                        # now: the lease runs out within 2/3 of the timeout from now.
                        lease = LEASE_TEST_SESSION_MS / 1000 * LEASE_FRACTION
                        await asyncio.sleep(lease + 0.3)
                        fetches = proxy.multifetches
                        during = await produce(producer, TOPIC, parts, 10, "b")
                        # Its fetcher would poll every 10 ms and take them at once.
                        assert await consumer.getmany(timeout_ms=1500) == {}
                        assert proxy.multifetches == fetches
                    finally:
                        os.kill(zookeeper_pid, signal.SIGCONT)
                    # ZooKeeper answers again: the lease is renewed, or the expired session
                    # replaced and the partitions claimed again; the records come.
                    await take_all(consumer, during, timeout=30)
                    assert proxy.multifetches > fetches


async def take_all(consumer: Consumer, expected: list[bytes], timeout: float = 15) -> None:
    """``getmany`` until every one of ``expected`` was handed out (duplicates allowed)."""
    wanted, seen = set(expected), set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not wanted <= seen:
        assert loop.time() < deadline, f"{len(wanted - seen)} of {len(wanted)} never handed out"
        batch = await consumer.getmany(timeout_ms=200)
        seen.update(r.value for records in batch.values() for r in records)


def partitions_tps(parts: list[tuple[int, int]]) -> list[TopicPartition]:
    return [TopicPartition(TOPIC, b, p) for b, p in parts]


async def wait_all(collector: Collector, remote: RemoteMember, expected: list[bytes]) -> None:
    wanted = set(expected)
    await eventually(lambda: wanted <= set(delivered([collector], remote.values())), 20)


# -- a broker answers a fetch with a malformed frame --------------------------------------------

#: A well-sized MULTIFETCH answer whose one fetch response is 1 byte long (no error code).
BAD_BODY = struct.pack(">ih", 2 + 4 + 1, 0) + struct.pack(">i", 1) + b"\x00"
#: A frame whose size is below any response's: the stream cannot be read on.
BAD_FRAME = struct.pack(">i", 1) + b"\x00"


@pytest.mark.parametrize("spoiled", [BAD_BODY, BAD_FRAME], ids=["bad-body", "bad-frame-size"])
async def test_a_malformed_fetch_answer_is_raised_once_and_the_fetcher_restarts(
    kafka_cluster: Any, zookeeper: str, caplog: pytest.LogCaptureFixture, spoiled: bytes
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka07")
    async with running_cluster(kafka_cluster, zookeeper, 1, 2) as (cluster, producer, zk):
        parts = [(0, 0), (0, 1)]
        produced = await produce(producer, TOPIC, parts, 20, "m")
        await wait_registered(zk, TOPIC, {0: 2})
        broker = cluster.broker(0)
        async with FetchSpoilingProxy(broker.host, broker.port, {3: spoiled}) as proxy:
            # The group finds broker 0 at the proxy.
            await zk.write_persistent("/brokers/ids/0", f"proxy:{proxy.host}:{proxy.port}")
            async with member(zookeeper) as consumer:
                got: list[ConsumerRecord] = []
                errors: list[Exception] = []
                more: list[bytes] = []
                deadline = asyncio.get_running_loop().time() + 30
                while not errors or len(got) < len(produced) + len(more):
                    assert asyncio.get_running_loop().time() < deadline, (len(got), errors)
                    try:
                        batch = await consumer.getmany(timeout_ms=1000)
                    except MalformedFrameError as exc:
                        errors.append(exc)
                        # Data produced after the fault is fetched too.
                        more += await produce(producer, TOPIC, parts, 5, "n")
                        continue
                    got += [r for records in batch.values() for r in records]
                assert proxy.spoiled == 1
                assert len(errors) == 1  # raised once
                assert consumer.metrics.fetcher_crashes == 1
                assert await consumer.getmany(timeout_ms=200) == {}
            assert collections.Counter(r.value for r in got) == collections.Counter(produced + more)
    crashes = [
        r
        for r in caplog.records
        if r.name == "aiokafka07.group" and r.levelno == logging.ERROR and r.exc_info
    ]
    assert len(crashes) == 1
    assert "fetch-0 crashed; restarting" in crashes[0].getMessage()
    assert crashes[0].exc_info is not None
    assert isinstance(crashes[0].exc_info[1], MalformedFrameError)


# -- rebalance listeners that raise or hang ----------------------------------------------------


class RaisingListener:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append("revoked")
        raise RuntimeError("revoked: the application's bug")

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append("assigned")
        raise RuntimeError("assigned: the application's bug")


class HangingListener:
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await asyncio.Event().wait()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None


@pytest.mark.parametrize("kind", ["raises", "hangs"])
async def test_a_failing_listener_is_logged_and_the_rebalance_completes(
    kafka_cluster: Any, zookeeper: str, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    caplog.set_level(logging.INFO, logger="aiokafka07")
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    listener: RaisingListener | HangingListener = (
        RaisingListener() if kind == "raises" else HangingListener()
    )
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        produced = await produce(producer, TOPIC, parts, 10, "l")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        # A hanging listener is given up on after request_timeout_ms.
        first = member(zookeeper, listener=listener, request_timeout_ms=500)
        await asyncio.wait_for(first.start(), 15)
        members = [first]
        collectors = [Collector(first)]
        try:
            second = member(zookeeper)
            await asyncio.wait_for(second.start(), 15)  # the next member gets in
            members.append(second)
            collectors.append(Collector(second))
            await wait_converged(zk, "g", members, registrations)
            assert len(first.assignment()) == len(second.assignment()) == 3
            produced += await produce(producer, TOPIC, parts, 10, "m")
            await wait_delivered(collectors, produced)
            await asyncio.sleep(0.2)
            assert delivered(collectors) == collections.Counter(produced)
            assert first.metrics.listener_errors == (2 if kind == "raises" else 1)
        finally:
            await leave(members, collectors)
    errors = [
        r for r in caplog.records if r.name == "aiokafka07.group" and r.levelno == logging.ERROR
    ]
    if kind == "raises":
        assert isinstance(listener, RaisingListener)
        assert listener.calls[:2] == ["assigned", "revoked"]
        assert len(errors) >= 2
        assert all(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in errors)
        assert "on_partitions_assigned raised; the rebalance goes on" in errors[0].getMessage()
    else:
        assert any("did not return within 0.5 s" in r.getMessage() for r in errors)

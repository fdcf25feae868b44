"""The group consumer at its edges, with real parts (a real ZooKeeper, embedded brokers):
names that would become bad znode paths, registrations no member can read, a rebalance
listener that ignores its cancellation, and ZooKeeper itself stopped under a group.

Each test shows that no such thing stops the group: the legitimate members balance and
deliver everything, ``close()`` returns within its bound, and consumption resumes at once
when ZooKeeper returns, re-reading nothing but uncommitted work.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from aiokafka07.errors import InvalidConfigError, InvalidTopicError
from aiokafka07.group import assign_group
from aiokafka07.group.consumer import Consumer
from aiokafka07.records import TopicPartition
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

from .groups import (
    TOPIC,
    TWO_BY_THREE,
    Collector,
    delivered,
    leave,
    member,
    owner_nodes,
    partitions_of,
    produce,
    running_cluster,
    wait_converged,
    wait_delivered,
    wait_registered,
)
from .test_cli_common import fails
from .wire import eventually

# -- names that become znode path components ---------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"consumer_id_suffix": "a/b"}, InvalidConfigError),
        ({"consumer_id_suffix": ".."}, InvalidConfigError),
        ({"group": "a/b"}, InvalidConfigError),
        ({"group": "g\x00"}, InvalidConfigError),
        ({"topic": "a/b"}, InvalidTopicError),
        ({"topic": ""}, InvalidTopicError),
        ({"zookeeper_chroot": "/a//b"}, InvalidConfigError),
    ],
    ids=["suffix-slash", "suffix-dotdot", "group-slash", "group-nul", "topic-slash",
         "topic-empty", "chroot-empty-component"],
)  # fmt: skip
async def test_a_bad_name_is_refused_and_leaves_nothing_behind(
    kafka_cluster: Any, zookeeper: str, options: dict[str, Any], error: type[Exception]
) -> None:
    """Refused when the consumer is made, before anything reaches ZooKeeper; the group
    then works for the members that follow."""
    registrations = {TOPIC: TWO_BY_THREE}
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        produced = await produce(producer, TOPIC, partitions_of(TWO_BY_THREE), 5, "n")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        options = dict(options)
        topic = options.pop("topic", TOPIC)
        connect = zookeeper + options.pop("zookeeper_chroot", "")
        with pytest.raises(error):
            Consumer(topic, zookeeper=connect, **{"group": "g", **options})
        assert not await zk.exists("/consumers")  # not even an empty parent

        members = [member(zookeeper), member(zookeeper)]
        collectors: list[Collector] = []
        try:
            for m in members:
                await asyncio.wait_for(m.start(), 15)
                collectors.append(Collector(m))
            await wait_converged(zk, "g", members, registrations)
            await wait_delivered(collectors, produced)
        finally:
            await leave(members, collectors)


async def test_the_tools_refuse_bad_topic_names(zookeeper: str, tmp_path: Path) -> None:
    """The console tools name topics to the group's znodes through the same registry, so
    they refuse the same names (one error line, exit status 1) instead of reading or
    writing another path."""
    async with ZooKeeper(zookeeper) as zk:
        await GroupRegistry(zk, "g").commit(TOPIC, "0-0", 42)
    out = tmp_path / "offsets.json"
    line = await fails("export-offsets", "g", str(out), "--topic", "a/b", "--zookeeper", zookeeper)
    assert "topic 'a/b' contains the illegal character '/'" in line
    assert not out.exists()
    line = await fails("groups", "describe", "g", "--topic", "..", "--zookeeper", zookeeper)
    assert "topic '..' is a relative path component" in line
    line = await fails("groups", "describe", "a/b", "--zookeeper", zookeeper)
    assert "consumer group 'a/b' contains the illegal character '/'" in line


# -- registrations no member can read ------------------------------------------------------------

#: ``/consumers/g/ids`` children no member stands behind: null and empty data (what a
#: consumer id with a "/" left: a persistent parent, here with its child), and values that
#: are no 0.7.2 registration.
UNUSABLE: dict[str, str | None] = {
    "g_a": None,
    "g_empty": "",
    "g_garbage": "not a registration",
    "g_no_streams": '{ "events": 0 }',
}


async def test_unusable_registrations_are_skipped_and_the_group_balances(
    kafka_cluster: Any, zookeeper: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Written straight into ZooKeeper (persistent, so they never go away by themselves):
    each member skips them with one warning each, and the range assignment is computed
    over the readable members only, so the unusable entries get no partitions and the
    members agree on everything else."""
    caplog.set_level(logging.WARNING, logger="aiokafka07.group")
    registrations = {TOPIC: TWO_BY_THREE}
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        produced = await produce(producer, TOPIC, partitions_of(TWO_BY_THREE), 10, "u")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        await zk.ensure_path("/consumers/g/ids")
        for name, value in UNUSABLE.items():
            await zk.client.create(f"/consumers/g/ids/{name}", data=value)
        await zk.client.create("/consumers/g/ids/g_a/b", data='{ "events": 1 }')

        members = [member(zookeeper), member(zookeeper)]
        collectors: list[Collector] = []
        try:
            for m in members:
                await asyncio.wait_for(m.start(), 15)
                collectors.append(Collector(m))
            plan = assign_group({m.consumer_id: m.subscription for m in members}, registrations)
            wanted = {
                (TOPIC, name): thread for thread, names in plan[TOPIC].items() for name in names
            }

            async def balanced() -> bool:
                if await owner_nodes(zk, "g", [TOPIC]) != wanted:
                    return False
                return all(
                    {tp.name for tp in m.assignment()}
                    == {name for (_, name), t in wanted.items() if t.startswith(m.consumer_id)}
                    for m in members
                )

            await eventually(balanced, 15)
            assert all(len(m.assignment()) == 3 for m in members)
            await wait_delivered(collectors, produced)
            more = await produce(producer, TOPIC, partitions_of(TWO_BY_THREE), 10, "v")
            await wait_delivered(collectors, more)
            assert delivered(collectors) == collections.Counter(produced + more)
            assert sorted(await zk.get_children("/consumers/g/ids")) == sorted(
                [*UNUSABLE, *(m.consumer_id for m in members)]
            )
        finally:
            await leave(members, collectors)
    skipped = [r.getMessage() for r in caplog.records if "skipping g_" in r.getMessage()]
    for m in members:
        mine = [text for text in skipped if text.startswith(m.consumer_id)]
        # Once per unusable node and member, however many rebalances there were.
        assert sorted(text.split()[2] for text in mine) == sorted(UNUSABLE), mine
    assert any("empty consumer registration None" in text for text in skipped)


# -- a rebalance listener that ignores its cancellation ------------------------------------------


class SwallowingListener:
    """``on_partitions_revoked`` hangs and catches the cancellation of its hang, then
    waits again: until ``released`` (``forever``: it catches every cancellation)."""

    def __init__(self, *, forever: bool) -> None:
        self.forever = forever
        self.released = asyncio.Event()
        self.cancellations = 0
        self.task: asyncio.Task[Any] | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.task = asyncio.current_task()
        while True:
            try:
                await self.released.wait()
                return
            except asyncio.CancelledError:
                self.cancellations += 1
                if not self.forever and self.cancellations > 1:
                    raise

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None


@pytest.mark.parametrize("forever", [False, True], ids=["swallows-once", "swallows-always"])
async def test_a_listener_that_swallows_cancellation_is_abandoned(
    kafka_cluster: Any, zookeeper: str, caplog: pytest.LogCaptureFixture, forever: bool
) -> None:
    """The first member's revoke call is cancelled at its timeout (0.5 s), ignores it, and
    is abandoned: the group balances with the second member at once and delivers
    everything exactly once. ``close()`` cancels the call again and returns within its
    bound; a call that gave in is gone then (nothing would keep ``asyncio.run`` waiting),
    one that never does is named in a warning."""
    caplog.set_level(logging.WARNING, logger="aiokafka07")
    registrations = {TOPIC: TWO_BY_THREE}
    parts = partitions_of(TWO_BY_THREE)
    listener = SwallowingListener(forever=forever)
    async with running_cluster(kafka_cluster, zookeeper, 2, 3) as (_, producer, zk):
        produced = await produce(producer, TOPIC, parts, 10, "s")
        await wait_registered(zk, TOPIC, TWO_BY_THREE)
        first = member(zookeeper, listener=listener, request_timeout_ms=500)
        second = member(zookeeper)
        await asyncio.wait_for(first.start(), 15)
        collectors = [Collector(first)]
        try:
            await asyncio.wait_for(second.start(), 15)
            collectors.append(Collector(second))
            await wait_converged(zk, "g", [first, second], registrations)
            produced += await produce(producer, TOPIC, parts, 10, "t")
            await wait_delivered(collectors, produced)
            await asyncio.sleep(0.2)
            assert delivered(collectors) == collections.Counter(produced)
            assert listener.task is not None
            assert not listener.task.done()
            assert listener.cancellations == 1
            assert first.metrics.listener_errors == 1
        finally:
            began = time.monotonic()
            await asyncio.wait_for(first.close(), 10)
            closed_in = time.monotonic() - began
            await leave([second], collectors)
        try:
            assert closed_in < 5, closed_in
            assert listener.task is not None
            assert listener.cancellations == 2
            assert listener.task.done() is not forever
            stragglers = [t for t in asyncio.all_tasks() if "listener" in t.get_name()]
            assert stragglers == ([listener.task] if forever else [])
        finally:
            listener.released.set()  # (let a call that never gives in end with the test)
            if listener.task is not None:
                await asyncio.wait({listener.task}, timeout=5)
    messages = [r.getMessage() for r in caplog.records]
    assert any("ignored its cancellation: abandoned" in text for text in messages)
    left = [text for text in messages if "did not stop within" in text]
    assert bool(left) is forever
    if forever:
        assert "listener.on_partitions_revoked" in left[0]

"""The group consumer at its edges, with real parts (a real ZooKeeper, embedded brokers):
names that would become bad znode paths, registrations no member can read, a rebalance
listener that ignores its cancellation, and ZooKeeper itself stopped under a group.

Each test shows that no such thing stops the group: the legitimate members balance and
deliver everything, ``close()`` returns within its bound, and consumption resumes at once
when ZooKeeper returns, re-reading nothing but uncommitted work.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from aiokafka07.errors import InvalidConfigError, InvalidTopicError
from aiokafka07.group.consumer import Consumer
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

from .groups import (
    TOPIC,
    TWO_BY_THREE,
    Collector,
    leave,
    member,
    partitions_of,
    produce,
    running_cluster,
    wait_converged,
    wait_delivered,
    wait_registered,
)
from .test_cli_common import fails

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

"""``aiokafka07 groups``: the consumer groups in ZooKeeper, and how far each one is.

``groups`` (or ``groups list``) lists every group with its live member count and the
topics it has offsets or owners for. ``groups describe GROUP`` is 0.7.2's
ConsumerOffsetChecker as a readable table: the members and their subscriptions, then per
broker-partition the owning consumer thread, the committed offset, the log end (OFFSETS
latest from the broker) and the lag, with the total lag. 0.7 offsets are byte positions,
so lag is in bytes. ``--json`` prints the same as one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from ..errors import ZooKeeperError
from ..group import Subscription
from ..monitor.offsets import log_end
from ..pool import ConnectionPool
from ..records import TopicPartition
from ..znodes import GroupRegistry, read_topics
from ..zookeeper import ZooKeeper
from .common import (
    CommandError,
    UsageError,
    add_cluster_options,
    describe_exit_status,
    format_table,
    plural,
    read_brokers,
    topic_partitions,
    zookeeper_session,
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List consumer groups (default), or describe one: members, partition owners, "
        "committed offsets, log ends and lag."
    )
    parser.add_argument(
        "action", nargs="?", choices=["list", "describe"], default="list", metavar="ACTION",
        help="list (default) or describe",
    )  # fmt: skip
    parser.add_argument("group", nargs="?", metavar="GROUP", help="the group to describe")
    add_cluster_options(parser, brokers=False)
    parser.add_argument(
        "--topic", action="append", default=[], help="describe only this topic (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    describe_exit_status(parser, {0: "the groups, or the group described, were printed"})


async def run(args: argparse.Namespace) -> int:
    if args.action == "describe" and not args.group:
        raise UsageError("describe needs a GROUP")
    if args.action == "list" and args.group:
        raise UsageError(f"unexpected {args.group!r}: did you mean 'groups describe GROUP'?")
    async with zookeeper_session(args) as zk:
        if args.action == "list":
            _print_groups(await list_groups(zk), args.json)
        else:
            _print_description(await describe_group(zk, args.group, args.topic), args.json)
    return 0


async def list_groups(zk: ZooKeeper) -> list[dict[str, Any]]:
    """Every group: name, live members, topics with offsets or owners."""
    result = []
    for group in await GroupRegistry.groups(zk):
        registry = GroupRegistry(zk, group)
        topics = set(await registry.offset_topics()) | set(await registry.owner_topics())
        members = await registry.member_ids()
        result.append({"group": group, "members": len(members), "topics": sorted(topics)})
    return result


def _print_groups(groups: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(groups, indent=2))
        return
    if not groups:
        print("no consumer groups")
        return
    rows = [[g["group"], g["members"], ", ".join(g["topics"])] for g in groups]
    print(format_table(["GROUP", "MEMBERS", "TOPICS"], rows))


def _subscription_json(value: str | None) -> dict[str, Any]:
    try:
        subscription = Subscription.parse(value)
    except ZooKeeperError:
        return {"registration": value}
    if subscription.filter is not None:
        kind = "whitelist" if subscription.filter.whitelist else "blacklist"
        return {kind: subscription.filter.regex, "streams": subscription.streams}
    return {"topics": dict(subscription.topics or {})}


def _subscription_text(subscription: dict[str, Any]) -> str:
    if "topics" in subscription:
        return ", ".join(
            f"{topic} ({plural(n, 'stream')})" if n != 1 else topic
            for topic, n in subscription["topics"].items()
        )
    for kind in ("whitelist", "blacklist"):
        if kind in subscription:
            streams = plural(subscription["streams"], "stream")
            return f"{kind} {subscription[kind]!r} ({streams})"
    return f"unreadable registration {subscription['registration']!r}"


async def describe_group(zk: ZooKeeper, group: str, only_topics: list[str]) -> dict[str, Any]:
    """Members, and per broker-partition owner, committed offset, log end and lag."""
    registry = GroupRegistry(zk, group)
    if not await registry.exists():
        raise CommandError(f"there is no consumer group {group!r} in ZooKeeper")
    registrations = await registry.registrations()
    members = [
        {"id": member, "subscription": _subscription_json(value)}
        for member, value in registrations.items()
    ]
    topics = set(only_topics)
    if not topics:
        topics |= set(await registry.offset_topics())
        topics |= set(await registry.owner_topics())
        available = await read_topics(zk)
        for value in registrations.values():
            try:
                topics |= set(Subscription.parse(value).streams_per_topic(available))
            except ZooKeeperError:
                continue  # shown as unreadable; it names no topics we could use
    brokers = await read_brokers(zk)
    partitions: list[TopicPartition] = []
    committed: dict[TopicPartition, int | None] = {}
    owners: dict[TopicPartition, str | None] = {}
    for topic in sorted(topics):
        names = set(await registry.offset_partitions(topic))
        names |= set(await registry.owned_partitions(topic))
        names |= {f"{b}-{p}" for b, p in await topic_partitions(zk, topic)}
        found = []
        for name in names:
            try:
                found.append(TopicPartition.parse(topic, name))
            except ValueError:
                continue  # not a b-p node: nothing 0.7 wrote
        for tp in sorted(found):
            partitions.append(tp)
            committed[tp] = await registry.committed(topic, tp.name)
            owners[tp] = await registry.owner(topic, tp.name)
    async with ConnectionPool(connect_timeout_ms=5000, request_timeout_ms=10000) as pool:
        ends = await asyncio.gather(
            *(log_end(pool, brokers.get(tp.broker_id), tp) for tp in partitions)
        )
    rows = []
    total = 0
    for tp, end in zip(partitions, ends, strict=True):
        offset = committed[tp]
        lag = None if end is None or offset is None else end - offset
        total += lag or 0
        rows.append(
            {
                "topic": tp.topic,
                "broker_id": tp.broker_id,
                "partition": tp.partition,
                "owner": owners[tp],
                "committed": committed[tp],
                "log_end": end,
                "lag": lag,
            }
        )
    return {"group": group, "members": members, "partitions": rows, "total_lag": total}


def _print_description(description: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(description, indent=2))
        return
    members = description["members"]
    print(f"group {description['group']}: {plural(len(members), 'live member')}")
    if members:
        print()
        rows = [[m["id"], _subscription_text(m["subscription"])] for m in members]
        print(format_table(["MEMBER", "SUBSCRIPTION"], rows))
    print()
    if not description["partitions"]:
        print("no partitions: the group has no offsets, owners or subscribed topics")
        return
    rows = [
        [
            p["topic"],
            f"{p['broker_id']}-{p['partition']}",
            p["committed"],
            p["log_end"],
            p["lag"],
            p["owner"] or "none",
        ]
        for p in description["partitions"]
    ]
    print(format_table(["TOPIC", "PARTITION", "COMMITTED", "LOG END", "LAG", "OWNER"], rows))
    print(f"\ntotal lag: {description['total_lag']} bytes")

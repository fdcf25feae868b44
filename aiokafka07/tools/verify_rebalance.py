"""``aiokafka07 verify-rebalance GROUP``: 0.7.2's VerifyConsumerRebalance, with an exit status.

0.7.2's check: for every topic the group's live members consume (their subscriptions
expanded against the registered topics, as the members do), every partition registered in
ZooKeeper has an owner node, and the owner is a consumer thread of a live member that
consumes that topic. This also compares each owner with the 0.7.2 range assignment every
member computes from the same view, so a partition owned by a live thread the assignment
does not give it to shows as ``moving``: a rebalance still in progress.

One row per partition: ``ok``, ``moving to <thread>``, ``no owner`` or ``not a member``
(owned by a thread of no live member consuming the topic: a member that left without
cleaning up, whose session has not expired yet). 0.7.2 prints "Rebalance operation
successful / failed" and exits 0 either way; here the exit status says it: 0 when every
partition is ``ok``, 3 when one is not, when a member's registration cannot be read, or
when the group has no live members. ``--wait-ms MS`` checks again until the group is
balanced or the time is up (for scripts that just started or stopped a member).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from ..backoff import Backoff
from ..errors import ZooKeeperError
from ..group import Subscription, assign_group, partition_names
from ..znodes import GroupRegistry, read_topic_registrations, read_topics
from ..zookeeper import ZooKeeper
from .common import (
    CommandError,
    add_cluster_options,
    add_deprecated_seconds,
    describe_exit_status,
    format_table,
    plural,
    positive_int,
    zookeeper_session,
)

#: Exit status when the group is not balanced.
UNBALANCED = 3


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check that every partition of the topics GROUP consumes is owned by a live member, "
        "as the range assignment says (0.7.2's VerifyConsumerRebalance)."
    )
    parser.add_argument("group", metavar="GROUP")
    add_cluster_options(parser, brokers=False)
    parser.add_argument(
        "--wait-ms",
        type=positive_int,
        metavar="MS",
        help="check again until the group is balanced, for at most this many milliseconds",
    )
    add_deprecated_seconds(parser, "--wait", "--wait-ms")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    describe_exit_status(
        parser,
        {
            0: "every partition is owned by the live member the assignment gives it to",
            UNBALANCED: "a partition has no owner, a wrong or moving one, or the group has "
            "no live members",
        },
    )


async def run(args: argparse.Namespace) -> int:
    async with zookeeper_session(args) as zk:
        registry = GroupRegistry(zk, args.group)
        if not await registry.exists():
            raise CommandError(f"there is no consumer group {args.group!r} in ZooKeeper")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (args.wait_ms or 0) / 1000
        backoff = Backoff(0.1, 1.0)
        while True:
            report = await verify(zk, registry)
            left = deadline - loop.time()
            if report["balanced"] or left <= 0:
                break
            await asyncio.sleep(min(backoff.failed(), left))
    _print(report, args.json)
    return 0 if report["balanced"] else UNBALANCED


async def verify(zk: ZooKeeper, registry: GroupRegistry) -> dict[str, Any]:
    """The group's members and, per partition of the topics they consume, its owner, the
    thread the range assignment names, and the verdict."""
    members: dict[str, Subscription] = {}
    unreadable: list[str] = []
    for member, value in (await registry.registrations()).items():
        try:
            members[member] = Subscription.parse(value)
        except ZooKeeperError:
            unreadable.append(member)
    available = await read_topics(zk)
    topics = {
        topic
        for subscription in members.values()
        for topic in subscription.streams_per_topic(available)
    }
    registrations = {topic: await read_topic_registrations(zk, topic) for topic in sorted(topics)}
    assignment = assign_group(members, registrations)
    rows = []
    for topic in sorted(assignment):
        threads = assignment[topic]
        expected = {name: thread for thread, names in threads.items() for name in names}
        for name in partition_names(registrations[topic]):
            owner = await registry.owner(topic, name)
            rows.append(
                {
                    "topic": topic,
                    "partition": name,
                    "owner": owner,
                    "expected": expected.get(name),
                    "status": _status(owner, expected.get(name), threads),
                }
            )
    return {
        "group": registry.group,
        "members": sorted(members),
        "unreadable_members": unreadable,
        "partitions": rows,
        "balanced": bool(members) and not unreadable and all(row["status"] == "ok" for row in rows),
    }


def _status(owner: str | None, expected: str | None, threads: dict[str, list[str]]) -> str:
    if owner is None:
        return "no owner"
    if owner not in threads:
        return "not a member"
    if owner != expected:
        return f"moving to {expected}"
    return "ok"


def _print(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    rows = report["partitions"]
    if rows:
        table = [[r["topic"], r["partition"], r["owner"] or "none", r["status"]] for r in rows]
        print(format_table(["TOPIC", "PARTITION", "OWNER", "STATUS"], table))
        print()
    for member in report["unreadable_members"]:
        print(f"member {member}: unreadable registration (not a 0.7.2 subscription)")
    members = plural(len(report["members"]), "live member")
    group = report["group"]
    if not report["members"]:
        print(
            f"rebalance failed: group {group} has no live members, so nothing owns its partitions"
        )
    elif report["balanced"]:
        topics = len({r["topic"] for r in rows})
        print(
            f"rebalance ok: all {plural(len(rows), 'partition')} of {plural(topics, 'topic')} "
            f"are owned as the range assignment says ({members})"
        )
    else:
        bad = [r for r in rows if r["status"] != "ok"]
        print(f"rebalance failed: {len(bad)} of {plural(len(rows), 'partition')} not owned as "
              f"the range assignment says ({members})")  # fmt: skip

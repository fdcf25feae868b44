"""``aiokafka07 groups``: the consumer groups in ZooKeeper, and how far each one is.

``groups`` (or ``groups list``) lists every group with its live member count and the
topics it has offsets or owners for. ``groups describe GROUP`` is 0.7.2's
ConsumerOffsetChecker as a readable table: the members and their subscriptions, then per
broker-partition the owning consumer thread, the committed offset, the log end (OFFSETS
latest from the broker) and the lag, with the total lag. 0.7 offsets are byte positions,
so lag is in bytes. ``--json`` prints the same as one JSON document.

``groups status [GROUP]`` judges each group partition's lag the way Burrow does
(:mod:`aiokafka07.monitor.lag`): it samples the committed offsets (with the time their znode
was last written, ZooKeeper's ``mtime``) and the log ends ``--samples`` times,
``--interval-ms`` apart, and prints each partition's status, and the group's (the worst);
the exit status says the worst status found, for scripts. It also gives each partition's
lag in messages (``lag_messages``), counted between the last sample's committed offset
and log end, or estimated beyond the bound, with its method (``exact`` or ``estimate``;
the table marks an estimate with ``~``), as the exporter does
(:mod:`aiokafka07.monitor.message_lag`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from ..errors import ZooKeeperError
from ..group import Subscription
from ..monitor.cluster_state import GroupPartitionState, GroupState
from ..monitor.lag import (
    DEFAULT_COMMITS,
    DEFAULT_MIN_STOP_MS,
    LagStatus,
    LagWindow,
    OffsetSample,
    worst,
)
from ..monitor.message_lag import ESTIMATE, MessageCounter, MessageLag, PartitionRange
from ..monitor.offsets import partition_offset, probe_broker
from ..monitor.status import group_document, judge_partition
from ..pool import ConnectionPool
from ..records import TopicPartition
from ..timeouts import wait_for
from ..znodes import GroupRegistry, read_topics
from ..zookeeper import ZooKeeper
from .common import (
    CommandError,
    UsageError,
    add_cluster_options,
    add_progress_option,
    describe_exit_status,
    format_table,
    plural,
    positive_int,
    read_brokers,
    stop_acknowledged,
    topic_partitions,
    zookeeper_session,
)
from .progress import LiveCount

#: Exit statuses of ``groups status``: the worst status found (OK is 0).
EXIT_WARN = 3
EXIT_STALL = 4
EXIT_STOP = 5
EXIT_ERR = 6
EXIT_STATUS = {
    LagStatus.OK: 0,
    LagStatus.WARN: EXIT_WARN,
    LagStatus.STALL: EXIT_STALL,
    LagStatus.STOP: EXIT_STOP,
    LagStatus.ERR: EXIT_ERR,
}
#: 0.7's default ``autocommit.interval.ms``: by default one sample per commit.
DEFAULT_INTERVAL_MS = 10_000


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List consumer groups (default), describe one: members, partition owners, "
        "committed offsets, log ends and lag, or judge their lag status over samples."
    )
    parser.add_argument(
        "action", nargs="?", choices=["list", "describe", "status"], default="list",
        metavar="ACTION", help="list (default), describe or status",
    )  # fmt: skip
    parser.add_argument(
        "group", nargs="?", metavar="GROUP", help="the group to describe (status: all if none)"
    )
    add_cluster_options(parser, brokers=False)
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        help="describe or judge only this topic (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    status = parser.add_argument_group("status")
    status.add_argument(
        "--samples", type=positive_int, default=DEFAULT_COMMITS, metavar="N",
        help=f"samples to take; also the lag window, in commits (default: {DEFAULT_COMMITS}, "
        "the exporter's --window)",
    )  # fmt: skip
    status.add_argument(
        "--interval-ms", type=positive_int, default=DEFAULT_INTERVAL_MS, metavar="MS",
        help="time between samples; set it to the group's autocommit.interval.ms "
        f"(default: {DEFAULT_INTERVAL_MS}, 0.7's)",
    )  # fmt: skip
    status.add_argument(
        "--min-stop-ms", type=positive_int, default=DEFAULT_MIN_STOP_MS, metavar="MS",
        help="least time without a commit, with lag, that is STOP "
        f"(default: {DEFAULT_MIN_STOP_MS}, the exporter's)",
    )  # fmt: skip
    add_progress_option(status)
    describe_exit_status(
        parser,
        {
            0: "the groups, or the group described, were printed (status: all OK)",
            EXIT_WARN: "status: the worst partition is WARN (lag growing)",
            EXIT_STALL: "status: the worst partition is STALL (commits not moving, lag > 0)",
            EXIT_STOP: "status: the worst partition is STOP (no commits, lag > 0)",
            EXIT_ERR: "status: a partition is ERR (offset outside the log, or its log end unknown)",
        },
    )


async def run(args: argparse.Namespace) -> int:
    if args.action == "describe" and not args.group:
        raise UsageError("describe needs a GROUP")
    if args.action == "list" and args.group:
        raise UsageError(f"unexpected {args.group!r}: did you mean 'groups describe GROUP'?")
    status = LagStatus.OK
    async with zookeeper_session(args) as zk:
        if args.action == "list":
            _print_groups(await list_groups(zk), args.json)
        elif args.action == "describe":
            _print_description(await describe_group(zk, args.group, args.topic), args.json)
        else:
            report = await group_status(
                zk,
                [args.group] if args.group else None,
                args.topic,
                samples=args.samples,
                interval_ms=args.interval_ms,
                min_stop_ms=args.min_stop_ms,
                progress=sys.stderr.isatty() if args.progress is None else args.progress,
            )
            _print_status(report, args.group is not None, args.json)
            status = worst(LagStatus[g["status"]] for g in report["groups"])
    return EXIT_STATUS[status]


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
    partitions = await group_partitions(zk, registry, registrations, only_topics)
    brokers = await read_brokers(zk)
    committed: dict[TopicPartition, int | None] = {}
    owners: dict[TopicPartition, str | None] = {}
    for tp in partitions:
        committed[tp] = await registry.committed(tp.topic, tp.name)
        owners[tp] = await registry.owner(tp.topic, tp.name)
    async with ConnectionPool(connect_timeout_ms=5000, request_timeout_ms=10000) as pool:
        ends = await asyncio.gather(
            *(partition_offset(pool, brokers.get(tp.broker_id), tp) for tp in partitions)
        )
    rows = []
    total = 0
    unknown = 0  # committed, but the log end could not be read: never counted as 0
    for tp, end in zip(partitions, ends, strict=True):
        offset = committed[tp]
        lag = None if end is None or offset is None else end - offset
        total += lag or 0
        unknown += offset is not None and end is None
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
    return {
        "group": group,
        "members": members,
        "partitions": rows,
        "total_lag": None if unknown else total,
        "unknown_partitions": unknown,
    }


async def group_partitions(
    zk: ZooKeeper,
    registry: GroupRegistry,
    registrations: dict[str, str | None],
    only_topics: list[str],
) -> list[TopicPartition]:
    """The group's broker-partitions, sorted: of ``only_topics``, or else of every topic it
    has offsets or owners for or its members subscribe to; each with an offset node, an
    owner node, or registered by a broker."""
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
    partitions: list[TopicPartition] = []
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
        partitions.extend(sorted(found))
    return partitions


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
    rows = [_partition_row(p, p["owner"] or "none") for p in description["partitions"]]
    print(format_table(["TOPIC", "PARTITION", "COMMITTED", "LOG END", "LAG", "OWNER"], rows))
    unknown = description["unknown_partitions"]
    if unknown:
        print(
            f"\ntotal lag: unknown ({unknown} partitions' log ends could not be read: "
            "is their broker up?)"
        )
    else:
        print(f"\ntotal lag: {description['total_lag']} bytes")


# -- status ------------------------------------------------------------------------------


class _Watched:
    """One group partition being sampled: its lag window and what was last read."""

    __slots__ = ("committed", "log_end", "log_start", "registry", "tp", "window")

    def __init__(self, registry: GroupRegistry, tp: TopicPartition, window: LagWindow) -> None:
        self.registry = registry
        self.tp = tp
        self.window = window
        self.committed: int | None = None
        self.log_end: int | None = None
        self.log_start: int | None = None

    def state(
        self,
        owner: str | None,
        counts: Mapping[tuple[TopicPartition, int], MessageLag | None],
    ) -> GroupPartitionState:
        """What the last sample read, as the exporter holds a group partition (with its
        lag in messages from ``counts``): unknown (never judged on older samples, nor
        counted as 0) when an offset is committed and the log end could not be read."""
        lag = counted = unknown = None
        if self.committed is not None and self.log_end is not None:
            lag = self.log_end - self.committed
            counted = counts.get((self.tp, self.committed))
        elif self.committed is not None:
            unknown = (
                f"log end unknown (broker {self.tp.broker_id} not registered or not reachable)"
            )
        return GroupPartitionState(
            tp=self.tp,
            committed=self.committed,
            owner=owner,
            log_start=self.log_start,
            log_end=self.log_end,
            lag=lag,
            unmoved_seconds=None,
            unknown=unknown,
            lag_messages=None if counted is None else counted.messages,
            lag_messages_method=None if counted is None else counted.method,
        )


async def group_status(
    zk: ZooKeeper,
    groups: list[str] | None,
    only_topics: list[str],
    *,
    samples: int,
    interval_ms: int,
    progress: bool,
    min_stop_ms: int = DEFAULT_MIN_STOP_MS,
) -> dict[str, Any]:
    """Sample ``groups`` (None: every group) ``samples`` times, ``interval_ms`` apart, and
    judge each group partition's lag as the exporter does
    (:func:`~aiokafka07.monitor.status.judge_partition`, a :class:`LagWindow` of
    ``samples`` commits, at least 2, and ``min_stop_ms``); each group's report is the
    exporter's document (:func:`~aiokafka07.monitor.status.group_document`). A first
    Ctrl-C stops the sampling: what was sampled so far is judged."""
    if groups is None:
        groups = await GroupRegistry.groups(zk)
    watched: dict[str, list[_Watched]] = {}
    for group in groups:
        registry = GroupRegistry(zk, group)
        if not await registry.exists():
            raise CommandError(f"there is no consumer group {group!r} in ZooKeeper")
        partitions = await group_partitions(
            zk, registry, await registry.registrations(), only_topics
        )
        watched[group] = [
            _Watched(registry, tp, LagWindow(commits=max(2, samples), min_stop_ms=min_stop_ms))
            for tp in partitions
        ]
    everything = [w for ws in watched.values() for w in ws]
    taken = 0

    async def count() -> tuple[int, int | None]:
        return taken, samples

    async with (
        ConnectionPool(connect_timeout_ms=5000, request_timeout_ms=10000) as pool,
        LiveCount("sampling", "sample", count, enabled=progress),
    ):
        try:
            for _ in range(samples):
                if taken:
                    await asyncio.sleep(interval_ms / 1000)
                await _sample(zk, pool, everything)
                taken += 1
        except asyncio.CancelledError:
            stop_acknowledged()  # Ctrl-C: judge what was sampled
        messages = await _count_messages(zk, pool, everything)
        # Who owns what, and who is there, when the sampling ended.
        owners = await asyncio.gather(
            *(w.registry.owner(w.tp.topic, w.tp.name) for w in everything)
        )
        members = {g: len(await GroupRegistry(zk, g).member_ids()) for g in watched}
    owner_of = {id(w): owner for w, owner in zip(everything, owners, strict=True)}
    now_ms = int(time.time() * 1000)
    report = []
    for group, ws in watched.items():
        states = tuple(w.state(owner_of[id(w)], messages) for w in ws)
        verdicts = {
            p.tp: judge_partition(p, w.window, now_ms) for p, w in zip(states, ws, strict=True)
        }
        report.append(group_document(GroupState(group, members[group], 0, states), verdicts))
    return {"samples": taken, "interval_ms": interval_ms, "groups": report}


async def _count_messages(
    zk: ZooKeeper, pool: ConnectionPool, watched: list[_Watched]
) -> dict[tuple[TopicPartition, int], MessageLag | None]:
    """Each partition's lag in messages at the last sample, counted (or estimated) by a
    :class:`MessageCounter` with the exporter's bounds. A Ctrl-C while counting keeps
    what was counted."""
    ranges: dict[TopicPartition, set[int]] = {}
    bounds: dict[TopicPartition, tuple[int, int]] = {}
    for w in watched:
        if w.committed is not None and w.log_end is not None and w.log_start is not None:
            ranges.setdefault(w.tp, set()).add(w.committed)
            bounds[w.tp] = (w.log_start, w.log_end)
    partitions = {
        tp: PartitionRange(*bounds[tp], frozenset(committed)) for tp, committed in ranges.items()
    }
    counter = MessageCounter()
    try:
        brokers = await read_brokers(zk)
        await wait_for(counter.read(pool, brokers, partitions), counter.max_seconds + 10)
    except (asyncio.TimeoutError, ZooKeeperError):
        pass  # what was counted is used; the rest is estimated or unknown
    except asyncio.CancelledError:
        stop_acknowledged()
    return counter.lags(partitions)


async def _sample(zk: ZooKeeper, pool: ConnectionPool, watched: list[_Watched]) -> None:
    """Read every watched partition's committed offset (and when it was written), and
    each broker-partition's log start and end once; feed the windows."""
    brokers = await read_brokers(zk)
    commits = await asyncio.gather(
        *(w.registry.committed_at(w.tp.topic, w.tp.name) for w in watched)
    )
    per_broker: dict[int, list[TopicPartition]] = {}
    for tp in sorted({w.tp for w in watched}):
        per_broker.setdefault(tp.broker_id, []).append(tp)
    probes = await asyncio.gather(
        *(
            probe_broker(pool, brokers[broker_id], tps)
            for broker_id, tps in per_broker.items()
            if broker_id in brokers
        )
    )
    log = {tp: offsets for probe in probes for tp, offsets in probe.offsets.items()}
    for w, commit in zip(watched, commits, strict=True):
        offsets = log.get(w.tp)
        w.log_end = None if offsets is None else offsets.end
        w.log_start = None if offsets is None else offsets.start
        w.committed = None if commit is None else commit[0]
        if commit is None or offsets is None:
            continue
        offset, written_ms = commit
        w.window.observe(OffsetSample(offset, offsets.end, offsets.start, written_ms))


def _print_status(report: dict[str, Any], one_group: bool, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    groups = report["groups"]
    taken = plural(report["samples"], "sample")
    if not one_group:
        if not groups:
            print("no consumer groups")
            return
        rows = [
            [
                g["group"],
                len(g["partitions"]),
                "unknown" if g["total_lag"] is None else g["total_lag"],
                _messages(g["total_lag_messages"], g["total_lag_messages_method"]),
                g["status"],
                g["reason"],
            ]
            for g in groups
        ]
        print(format_table(["GROUP", "PARTITIONS", "LAG", "MESSAGES", "STATUS", "REASON"], rows))
        print(_MESSAGES_NOTE)
        print(f"\n{taken}, {report['interval_ms']} ms apart")
        return
    (group,) = groups
    if group["partitions"]:
        rows = [
            _partition_row(
                p,
                _messages(p["lag_messages"], p["lag_messages_method"], p["committed"] is None),
                p["status"],
                p["reason"],
            )
            for p in group["partitions"]
        ]
        headers = [
            "TOPIC", "PARTITION", "COMMITTED", "LOG END", "LAG", "MESSAGES", "STATUS", "REASON",
        ]  # fmt: skip
        print(format_table(headers, rows))
        print(_MESSAGES_NOTE)
        print()
    else:
        print("no partitions: the group has no offsets, owners or subscribed topics\n")
    print(f"group {group['group']}: {group['status']} ({taken}, {report['interval_ms']} ms apart)")


_MESSAGES_NOTE = "LAG in bytes; MESSAGES counted, ~ estimated (mean message size)"


def _messages(count: int | None, method: str | None, none: bool = False) -> str:
    """A lag in messages for a table: ``63``, ``~63`` (estimated), ``unknown``, or empty
    (``none``: nothing committed, nothing to count)."""
    if none:
        return ""
    if count is None:
        return "unknown"
    return f"~{count}" if method == ESTIMATE else str(count)


def _partition_row(partition: dict[str, Any], *more: Any) -> list[Any]:
    """A table row of one group partition: topic, broker-partition, committed, log end,
    lag, then ``more``."""
    p = partition
    return [
        p["topic"],
        f"{p['broker_id']}-{p['partition']}",
        p["committed"],
        p["log_end"],
        p["lag"],
        *more,
    ]

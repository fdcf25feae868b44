"""``aiokafka07 bridge offsets``: move a 0.7 consumer group's position to the target.

Translates the group's committed offsets (ZooKeeper) through the headers of the records
``aiokafka07 bridge`` wrote (see :mod:`aiokafka07.bridge.switchover`) and commits them on
the target for the same or another group id, so consumers stopped on 0.7 and started on
the target continue where they were.
"""

from __future__ import annotations

import argparse
import sys

from ..bridge.switchover import commit_offsets, group_offsets, translate
from ..errors import BridgeError
from .bridge import client_option
from .common import (
    CommandError,
    add_cluster_options,
    describe_exit_status,
    zookeeper_session,
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Translate the committed offsets of a 0.7 consumer GROUP into committed offsets on "
        "the target cluster of 'aiokafka07 bridge', for the same group id or --target-group. "
        "Refuses while members of the 0.7 group are alive (unless --force) and while the "
        "bridge has not copied up to the group's offsets."
    )
    parser.add_argument(
        "topics",
        nargs="*",
        metavar="TOPIC",
        help="the topics to move the group's offsets of (default: every topic the group "
        "committed offsets of)",
    )
    parser.add_argument("-g", "--group", required=True, help="the 0.7 consumer group")
    add_cluster_options(parser, brokers=False)
    parser.add_argument(
        "--bootstrap-servers", required=True, metavar="HOST:PORT,...", help="the target cluster"
    )
    parser.add_argument("--target-group", help="group id on the target (default: GROUP)")
    parser.add_argument(
        "--force", action="store_true", help="translate although members of GROUP are alive"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the offsets, commit nothing")
    parser.add_argument(
        "--consumer-option",
        action="append",
        default=[],
        type=client_option,
        metavar="NAME=VALUE",
        help="a keyword argument for aiokafka's consumer on the target; repeatable",
    )
    describe_exit_status(parser, {0: "the offsets were committed on the target (or printed)"})


async def run(args: argparse.Namespace) -> int:
    options = dict(args.consumer_option)
    target_group = args.target_group or args.group
    try:
        async with zookeeper_session(args) as zk:
            committed = await group_offsets(zk, args.group, args.topics, force=args.force)
        if not committed:
            of = f" of {', '.join(args.topics)}" if args.topics else ""
            raise CommandError(f"group {args.group} has no committed offsets{of}")
        topics = args.topics or sorted({source.topic for source in committed})
        translation = await translate(args.bootstrap_servers, committed, topics, options=options)
        for (topic, partition), offset in sorted(translation.offsets.items()):
            print(f"{topic} {partition} {offset}")
        if not args.dry_run:
            await commit_offsets(
                args.bootstrap_servers, target_group, translation.offsets, options=options
            )
    except BridgeError as exc:
        raise CommandError(str(exc)) from exc
    done = "would commit" if args.dry_run else "committed"
    repeats = (
        f"; {translation.repeats} records already consumed on 0.7 lie after them and will "
        "be delivered again (their target partitions mix several 0.7 broker-partitions)"
        if translation.repeats
        else ""
    )
    print(
        f"{done} {len(translation.offsets)} offsets for group {target_group}{repeats}",
        file=sys.stderr,
    )
    return 0

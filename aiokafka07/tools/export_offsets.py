"""``aiokafka07 export-offsets GROUP FILE``: save a group's committed offsets.

0.7.2's ExportZkOffsets, for one group, as JSON by default (see
:mod:`.offset_files`) or in 0.7.2's own line format (``--format zk``). ``-`` writes to
stdout. Read straight from ZooKeeper, so it works while the group runs (the values are
then a snapshot of what was last committed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from ..group import GroupRegistry
from .common import CommandError, add_cluster_options, describe_exit_status, zookeeper_session
from .offset_files import Offsets, to_json, to_zk_lines


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Write the committed offsets of GROUP to FILE ('-' for stdout)."
    parser.add_argument("group", metavar="GROUP")
    parser.add_argument("file", metavar="FILE")
    add_cluster_options(parser, brokers=False)
    parser.add_argument("--topic", action="append", default=[], help="only this topic (repeatable)")
    parser.add_argument(
        "--format",
        choices=["json", "zk"],
        default="json",
        help="json (default) or zk: 0.7.2 ExportZkOffsets lines <znode path>:<offset>",
    )
    describe_exit_status(parser, {0: "the offsets were written"})


async def run(args: argparse.Namespace) -> int:
    async with zookeeper_session(args) as zk:
        registry = GroupRegistry(zk, args.group)
        if not await zk.exists(registry.root):
            raise CommandError(f"there is no consumer group {args.group!r} in ZooKeeper")
        offsets: Offsets = {}
        for topic in args.topic or await registry.offset_topics():
            partitions = await registry.offsets(topic)
            if partitions:
                offsets[topic] = dict(
                    sorted(partitions.items(), key=lambda kv: tuple(map(int, kv[0].split("-"))))
                )
    text = (
        to_json(args.group, offsets) if args.format == "json" else to_zk_lines(args.group, offsets)
    )
    if args.file == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        await asyncio.to_thread(Path(args.file).write_text, text)
    count = sum(len(p) for p in offsets.values())
    where = "stdout" if args.file == "-" else args.file
    print(
        f"exported {count} offsets of group {args.group} ({len(offsets)} topics) to {where}",
        file=sys.stderr,
    )
    return 0

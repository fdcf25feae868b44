"""``aiokafka07 import-offsets GROUP FILE``: set a group's committed offsets from a file.

0.7.2's ImportZkOffsets: every offset in the file is written to GROUP's offset znode
(created if missing; offsets not in the file are left alone). The file is what
``export-offsets`` writes, in either format; its own group name does not matter, so
offsets can be copied to another group. ``-`` reads stdin.

Running members would overwrite imported offsets with their own at the next commit, so
the import is refused while the group has live members, unless ``--force``.
``--dry-run`` shows what would change.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from ..znodes import GroupRegistry
from .common import (
    ChunkReader,
    add_cluster_options,
    describe_exit_status,
    format_table,
    refuse_live_members,
    zookeeper_session,
)
from .offset_files import parse_offsets


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = "Set the committed offsets of GROUP from FILE ('-' for stdin)."
    parser.add_argument("group", metavar="GROUP")
    parser.add_argument("file", metavar="FILE")
    add_cluster_options(parser, brokers=False)
    parser.add_argument(
        "--force", action="store_true", help="import even while the group has live members"
    )
    parser.add_argument("--dry-run", action="store_true", help="show the changes, write nothing")
    describe_exit_status(parser, {0: "the offsets were set (or, with --dry-run, shown)"})


async def run(args: argparse.Namespace) -> int:
    source = "stdin" if args.file == "-" else args.file
    if args.file == "-":
        text = b"".join([chunk async for chunk in ChunkReader(sys.stdin.buffer)]).decode()
    else:
        text = await asyncio.to_thread(Path(args.file).read_text)
    _, offsets = parse_offsets(text, source)
    async with zookeeper_session(args) as zk:
        registry = GroupRegistry(zk, args.group)
        if not args.force and not args.dry_run:
            await refuse_live_members(
                registry, "they would overwrite the imported offsets; stop them first (or --force)"
            )
        rows = []
        changed = 0
        for topic, partitions in offsets.items():
            for name, offset in partitions.items():
                current = await registry.committed(topic, name)
                rows.append([topic, name, current, offset])
                if current != offset:
                    changed += 1
                    if not args.dry_run:
                        await registry.commit(topic, name, offset)
    if args.dry_run:
        if rows:
            print(format_table(["TOPIC", "PARTITION", "CURRENT", "NEW"], rows))
        print(f"would change {changed} of {len(rows)} offsets of group {args.group}")
    else:
        print(
            f"imported {len(rows)} offsets into group {args.group} ({changed} changed)",
            file=sys.stderr,
        )
    return 0

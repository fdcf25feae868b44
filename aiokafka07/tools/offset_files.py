"""The offsets files of ``export-offsets`` / ``import-offsets``.

Our format is one JSON document::

    {"group": "g", "exported": "2024-05-01T12:00:00Z",
     "offsets": {"topic": {"0-0": 1234, "1-0": 0}}}

``offsets`` maps each topic to its broker-partitions (``"<broker>-<partition>"``, as in
ZooKeeper paths) and their committed offsets: the next byte offset to fetch. 0.7.2's
ExportZkOffsets text format, one ``/consumers/<group>/offsets/<topic>/<b-p>:<offset>``
line per partition, is written with ``--format zk`` and read back as well (reading stops
at the first empty line, as ImportZkOffsets does).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from ..protocol import validate_topic
from ..records import TopicPartition
from ..znodes import offset_path, parse_offset_path
from .common import CommandError

__all__ = ["Offsets", "parse_offsets", "to_json", "to_zk_lines"]

#: topic → "b-p" → committed offset
Offsets = dict[str, dict[str, int]]


def to_json(group: str, offsets: Offsets) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    document = {"group": group, "exported": now, "offsets": offsets}
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


def to_zk_lines(group: str, offsets: Offsets) -> str:
    """0.7.2 ExportZkOffsets lines."""
    return "".join(
        f"{offset_path(group, topic, name)}:{offset}\n"
        for topic, partitions in offsets.items()
        for name, offset in partitions.items()
    )


def _check(topic: Any, name: Any, offset: Any, where: str) -> tuple[str, str, int]:
    if not isinstance(topic, str):
        raise CommandError(f"{where}: topic {topic!r} is not a string")
    try:
        validate_topic(topic)
        TopicPartition.parse(topic, str(name))
    except ValueError as exc:
        raise CommandError(f"{where}: {exc}") from None
    if isinstance(offset, str) and offset.strip().isdigit():
        offset = int(offset)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise CommandError(f"{where}: offset {offset!r} of {topic}/{name} is not an offset >= 0")
    return topic, str(name), offset


def parse_offsets(text: str, source: str) -> tuple[str | None, Offsets]:
    """The group named in the file (if any) and its offsets, from either format."""
    offsets: Offsets = {}
    if text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{source}: not valid JSON: {exc}") from None
        table = document.get("offsets") if isinstance(document, dict) else None
        if not isinstance(table, dict):
            raise CommandError(f"{source}: expected an object with an 'offsets' object")
        for topic, partitions in table.items():
            if not isinstance(partitions, dict):
                raise CommandError(f"{source}: offsets of {topic!r} are not an object")
            for name, offset in partitions.items():
                t, n, o = _check(topic, name, offset, source)
                offsets.setdefault(t, {})[n] = o
        group = document.get("group")
        return (group if isinstance(group, str) else None), offsets
    group = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            break  # ImportZkOffsets stops at the first empty line
        # "<offset znode path>:<offset>": the partition name holds no ':' (nor '/').
        head, slash, tail = line.strip().rpartition("/")
        name, colon, offset = tail.partition(":")
        where = parse_offset_path(head + slash + name) if colon else None
        if where is None:
            raise CommandError(
                f"{source} line {number}: neither JSON nor "
                "'/consumers/<group>/offsets/<topic>/<broker>-<partition>:<offset>'"
            )
        group = where[0]
        t, n, o = _check(where[1], where[2], offset, f"{source} line {number}")
        offsets.setdefault(t, {})[n] = o
    return group, offsets

"""Where a copied message came from, as it travels in the target's record headers.

A 0.7 offset is a byte offset, and the messages of a compressed set share it: the
library's records report the set's start for every inner message but the last, which
reports the set's end (see :class:`~aiokafka07.records.ConsumerRecord`). A position is
therefore a pair ``(offset, skip)``: fetch from ``offset`` and drop the first ``skip``
messages, and the next message handed out is the one after the message the position
belongs to. Positions of one broker-partition grow in the order its messages are read,
so "copied up to here" is a comparison of pairs.

Every record the bridge writes carries three headers (ASCII):

* ``aiokafka07.topic``: the 0.7 topic,
* ``aiokafka07.partition``: the 0.7 broker-partition, ``<broker>-<partition>``,
* ``aiokafka07.position``: the position after the message, ``<offset>:<skip>``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from ..errors import BridgeError
from ..records import ConsumerRecord, TopicPartition

__all__ = [
    "HEADER_PARTITION",
    "HEADER_POSITION",
    "HEADER_TOPIC",
    "Position",
    "PositionTracker",
    "source_of",
]

HEADER_TOPIC = "aiokafka07.topic"
HEADER_PARTITION = "aiokafka07.partition"
HEADER_POSITION = "aiokafka07.position"

#: Headers longer than this are not ours (a bound before any parsing).
_MAX_HEADER = 512


class Position(NamedTuple):
    """Where to resume a 0.7 broker-partition: fetch from ``offset``, drop ``skip``."""

    offset: int
    skip: int = 0

    def encode(self) -> bytes:
        return f"{self.offset}:{self.skip}".encode("ascii")

    @classmethod
    def decode(cls, data: bytes) -> Position:
        if len(data) > _MAX_HEADER:
            raise BridgeError(f"{HEADER_POSITION} header of {len(data)} bytes")
        offset, colon, skip = data.decode("ascii", "replace").partition(":")
        if not colon or not offset.isdigit() or not skip.isdigit():
            raise BridgeError(f"{HEADER_POSITION} header {data!r} is not <offset>:<skip>")
        return cls(int(offset), int(skip))


class PositionTracker:
    """The position after each record of one broker-partition, in reading order.

    Starts at the position reading resumed from; :meth:`after` takes the next record
    handed out and returns the position after it (see the module docstring).
    """

    __slots__ = ("current",)

    def __init__(self, start: Position) -> None:
        self.current = start

    def after(self, record: ConsumerRecord) -> Position:
        if record.offset == self.current.offset:
            self.current = Position(record.offset, self.current.skip + 1)
        else:
            self.current = Position(record.offset, 0)
        return self.current


@functools.lru_cache(maxsize=4096)
def _source_headers(source: TopicPartition) -> tuple[tuple[str, bytes], tuple[str, bytes]]:
    return (HEADER_TOPIC, source.topic.encode("utf-8")), (
        HEADER_PARTITION,
        source.name.encode("ascii"),
    )


def headers_for(source: TopicPartition, position: Position) -> list[tuple[str, bytes]]:
    """The headers of a record copied from ``source``, ending at ``position`` (the
    first two, the same for every record of a broker-partition, made once)."""
    topic, partition = _source_headers(source)
    return [topic, partition, (HEADER_POSITION, b"%d:%d" % position)]


def source_of(
    headers: Sequence[tuple[str, bytes]] | Iterable[tuple[str, bytes]],
) -> tuple[TopicPartition, Position] | None:
    """The 0.7 broker-partition and position a target record's headers name, or None
    for a record that has none (written by someone else). Malformed headers of ours
    raise :class:`~aiokafka07.errors.BridgeError`."""
    found: dict[str, bytes] = {}
    for name, value in headers:
        if name in (HEADER_TOPIC, HEADER_PARTITION, HEADER_POSITION):
            if len(value) > _MAX_HEADER:
                raise BridgeError(f"{name} header of {len(value)} bytes")
            found[name] = value
    if not found:
        return None
    if len(found) != 3:
        raise BridgeError(f"record with some of the bridge's headers only: {sorted(found)}")
    topic = found[HEADER_TOPIC].decode("utf-8", "replace")
    try:
        source = TopicPartition.parse(topic, found[HEADER_PARTITION].decode("ascii", "replace"))
    except ValueError as exc:
        raise BridgeError(f"{HEADER_PARTITION} header: {exc}") from None
    return source, Position.decode(found[HEADER_POSITION])

"""Moving a 0.7 consumer group to the target: its committed offsets, translated.

A 0.7 group's committed offset ``O`` of a broker-partition is where its consumers resume:
every message a fetch from ``O`` hands out is not consumed yet (inside a compressed set,
that is the whole set: 0.7 commits set boundaries). A copied record's position header
``(offset, skip)`` (``aiokafka07.bridge.positions``) tells which side it is on: a record is consumed
when ``skip == 0 and offset <= O`` (it ends at or before ``O``) or ``skip > 0 and offset <
O`` (it is inside a set that ends at or before ``O``).

:func:`translate` reads every target partition of the topics and proposes, per target
partition, the offset of its first record that is not consumed (the partition's end when
all are): nothing unconsumed is skipped. It is exact, no record consumed twice, when the
consumed records of each target partition come first, as they do when each target
partition holds one 0.7 broker-partition; where broker-partitions interleave (keys hashed
over the target's partitions) consumed records after the first unconsumed one are
delivered again, and :attr:`Translation.repeats` counts them. It refuses while the bridge
has not yet copied a broker-partition up to the group's offset (the translation would
lose nothing but repeat what the group already consumed, as it arrives).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import BridgeError
from ..records import TopicPartition
from ..timeouts import wait_for
from ..znodes import GroupRegistry
from ..zookeeper import ZooKeeper
from . import _aiokafka
from .positions import Position, source_of
from .recovery import TargetReader

__all__ = ["Translation", "commit_offsets", "consumed", "group_offsets", "translate"]


def consumed(position: Position, committed: int) -> bool:
    """Whether a message whose position is ``position`` is consumed by a group that
    committed ``committed`` for its broker-partition (see the module docstring)."""
    if position.skip == 0:
        return position.offset <= committed
    return position.offset < committed


@dataclass
class Translation:
    """Target offsets for a group: (topic, partition) -> offset, and how many consumed
    records lie after them (delivered again)."""

    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    repeats: int = 0


async def group_offsets(
    zookeeper: ZooKeeper, group: str, topics: Sequence[str], *, force: bool = False
) -> dict[TopicPartition, int]:
    """The 0.7 group's committed offsets of ``topics`` (none named: of every topic it
    committed offsets of); refuses (BridgeError) while members of the group are
    registered, unless ``force``."""
    registry = GroupRegistry(zookeeper, group)
    if not await registry.exists():
        raise BridgeError(f"there is no consumer group {group!r} in ZooKeeper")
    members = await registry.member_ids()
    if members and not force:
        raise BridgeError(
            f"group {group} has {len(members)} live members ({', '.join(sorted(members))}): "
            "stop them first (their offsets still move), or force"
        )
    result: dict[TopicPartition, int] = {}
    for topic in topics or await registry.offset_topics():
        for name, offset in (await registry.offsets(topic)).items():
            result[TopicPartition.parse(topic, name)] = offset
    return result


async def translate(
    bootstrap_servers: str,
    committed: Mapping[TopicPartition, int],
    topics: Sequence[str],
    *,
    request_timeout_ms: float = 30000.0,
    options: Mapping[str, Any] | None = None,
) -> Translation:
    """Target offsets for a group that committed ``committed`` (see the module docstring)."""
    aiokafka = _aiokafka.load()
    timeout = request_timeout_ms / 1000
    consumer = _aiokafka.read_committed_consumer(bootstrap_servers, request_timeout_ms, options)
    first: dict[tuple[str, int], int] = {}
    after_first = 0
    copied: dict[TopicPartition, Position] = {}

    def each(where: tuple[str, int], record: Any) -> None:
        nonlocal after_first
        found = source_of(record.headers or ())
        if found is None:
            return
        source, position = found
        if position > copied.get(source, Position(-1)):
            copied[source] = position
        offset = committed.get(source)
        done = offset is not None and consumed(position, offset)
        if not done and where not in first:
            first[where] = int(record.offset)
        elif done and where in first:
            after_first += 1

    try:
        await wait_for(consumer.start(), timeout)
        starts: dict[tuple[str, int], int | None] = {}
        for topic in topics:
            partitions = await wait_for(_aiokafka.partitions_of(consumer._client, topic), timeout)
            if not partitions:
                raise BridgeError(f"topic {topic} does not exist on the target")
            starts.update({(topic, p): None for p in partitions})
        ends = await TargetReader(consumer, aiokafka.structs.TopicPartition, timeout).read(
            starts, each
        )
    except (asyncio.TimeoutError, aiokafka.errors.KafkaError, OSError) as exc:
        raise BridgeError(f"reading target {bootstrap_servers} failed: {exc!r}") from exc
    finally:
        await wait_for(consumer.stop(), timeout)
    behind = sorted(
        f"{s.topic}/{s.name}"
        for s, offset in committed.items()
        if offset > copied.get(s, Position(0)).offset
    )
    if behind:
        raise BridgeError(
            "the bridge has not yet copied up to the group's offsets of "
            + ", ".join(behind)
            + ": let it catch up first"
        )
    return Translation({w: first.get(w, end) for w, end in ends.items()}, after_first)


async def commit_offsets(
    bootstrap_servers: str,
    group: str,
    offsets: Mapping[tuple[str, int], int],
    *,
    request_timeout_ms: float = 30000.0,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Commit ``offsets`` for ``group`` on the target."""
    aiokafka = _aiokafka.load()
    timeout = request_timeout_ms / 1000
    settings: dict[str, Any] = {"request_timeout_ms": int(request_timeout_ms)}
    settings.update(options or {})
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers, group_id=group, enable_auto_commit=False, **settings
    )
    structs = aiokafka.structs
    try:
        await wait_for(consumer.start(), timeout)
        tps = {structs.TopicPartition(t, p): o for (t, p), o in offsets.items()}
        consumer.assign(list(tps))
        await wait_for(
            consumer.commit({tp: structs.OffsetAndMetadata(o, "") for tp, o in tps.items()}),
            timeout,
        )
    except (asyncio.TimeoutError, aiokafka.errors.KafkaError, OSError) as exc:
        raise BridgeError(f"committing group {group} on the target failed: {exc!r}") from exc
    finally:
        await wait_for(consumer.stop(), timeout)

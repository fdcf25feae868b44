"""Where to resume after a stop or a crash: the last checkpoint and the target's tails.

Each transaction of the bridge ends with a checkpoint record (key: the bridge's name) in
partition 0 of its checkpoint topic, holding

* ``positions``: per 0.7 broker-partition, the position after the last message copied,
* ``targets``: per target partition, the offset after the bridge's last record there,
* ``partitions``: per target topic, the partition count the mapping used,
* ``pending``: per target partition and 0.7 broker-partition, a position up to which the
  records are already in that target partition although ``positions`` has not reached
  it (found by an earlier recovery, before ``targets``; see below).

:func:`recover` reads the last checkpoint (``read_committed``: on a broker that honours
transactions, only a committed one), then reads every target partition of the bridged
topics from the checkpoint's offset to its end and notes, per target partition and 0.7
broker-partition, the highest position among the records found there
(:attr:`Recovered.written`, which starts from the checkpoint's ``pending``: the
checkpoint's ``targets`` may lie past records an earlier recovery found and that the
copying has not reached yet, and those must still be skipped). On a broker that honours
transactions nothing is found (an unfinished transaction was aborted when the new producer
fenced the old one); where uncommitted records are visible anyway, they are what the
independent readers see too, and the bridge does not write them again (see
:mod:`aiokafka07.bridge`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import BridgeError
from ..records import TopicPartition
from ..timeouts import wait_for
from . import _aiokafka
from .positions import Position, source_of

__all__ = ["Checkpoint", "Recovered", "recover"]

log = logging.getLogger("aiokafka07.bridge")

#: A checkpoint record larger than this is refused (a bound before parsing).
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024

#: How far back from the end of the checkpoint partition the first look reaches.
_FIRST_LOOK = 64


@dataclass
class Checkpoint:
    """What a checkpoint record holds (see the module docstring)."""

    positions: dict[TopicPartition, Position] = field(default_factory=dict)
    targets: dict[tuple[str, int], int] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)
    pending: dict[tuple[str, int], dict[TopicPartition, Position]] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "positions": [
                    [s.topic, s.name, p.offset, p.skip] for s, p in sorted(self.positions.items())
                ],
                "targets": [[t, p, o] for (t, p), o in sorted(self.targets.items())],
                "partitions": self.partitions,
                "pending": [
                    [t, p, s.topic, s.name, pos.offset, pos.skip]
                    for (t, p), sources in sorted(self.pending.items())
                    for s, pos in sorted(sources.items())
                ],
            },
            separators=(",", ":"),
        ).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint:
        if len(data) > MAX_CHECKPOINT_BYTES:
            raise BridgeError(f"checkpoint record of {len(data)} bytes")
        try:
            doc = json.loads(data)
            if doc.get("version") != 1:
                raise BridgeError(f"checkpoint version {doc.get('version')!r} is not 1")
            positions = {
                TopicPartition.parse(str(t), str(n)): Position(int(o), int(s))
                for t, n, o, s in doc["positions"]
            }
            targets = {(str(t), int(p)): int(o) for t, p, o in doc["targets"]}
            partitions = {str(t): int(n) for t, n in doc["partitions"].items()}
            pending: dict[tuple[str, int], dict[TopicPartition, Position]] = {}
            for t, p, st, sn, o, k in doc["pending"]:
                source = TopicPartition.parse(str(st), str(sn))
                pending.setdefault((str(t), int(p)), {})[source] = Position(int(o), int(k))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BridgeError(f"unreadable checkpoint record: {exc}") from None
        return cls(positions, targets, partitions, pending)


@dataclass
class Recovered:
    """The outcome of :func:`recover`."""

    checkpoint: Checkpoint
    #: (target topic, partition) -> 0.7 broker-partition -> highest position found there
    #: after the checkpoint.
    written: dict[tuple[str, int], dict[TopicPartition, Position]]
    #: (target topic, partition) -> offset after the last record read.
    ends: dict[tuple[str, int], int]


async def recover(
    bootstrap_servers: str,
    checkpoint_topic: str,
    checkpoint_key: bytes,
    topics: Mapping[str, int],
    *,
    request_timeout_ms: float = 30000.0,
    options: Mapping[str, Any] | None = None,
) -> Recovered:
    """Read the last checkpoint and the records after it (``topics``: target topic ->
    partition count). ``options`` are further AIOKafkaConsumer keyword arguments."""
    aiokafka = _aiokafka.load()
    timeout = request_timeout_ms / 1000
    consumer = _aiokafka.read_committed_consumer(bootstrap_servers, request_timeout_ms, options)
    try:
        await wait_for(consumer.start(), timeout)
        reader = TargetReader(consumer, aiokafka.structs.TopicPartition, timeout)
        checkpoint = await _last_checkpoint(reader, checkpoint_topic, checkpoint_key)
        written = {where: dict(found) for where, found in checkpoint.pending.items()}
        starts = {
            (topic, p): checkpoint.targets.get((topic, p))
            for topic, count in topics.items()
            for p in range(count)
        }
        ends = await reader.read(starts, lambda where, record: _note(written, where, record))
        log.debug("recovery read target partitions from %s to %s", starts, ends)
    except (asyncio.TimeoutError, aiokafka.errors.KafkaError, OSError) as exc:
        raise BridgeError(f"recovery from target {bootstrap_servers} failed: {exc!r}") from exc
    finally:
        await wait_for(consumer.stop(), timeout)
    log.info(
        "recovered: checkpoint with %d broker-partitions; records after it in %d target partitions",
        len(checkpoint.positions),
        len(written),
    )
    return Recovered(checkpoint, written, ends)


def _note(
    written: dict[tuple[str, int], dict[TopicPartition, Position]],
    where: tuple[str, int],
    record: Any,
) -> None:
    found = source_of(record.headers or ())
    if found is None:
        return
    source, position = found
    seen = written.setdefault(where, {})
    if position > seen.get(source, Position(-1)):
        seen[source] = position


async def _last_checkpoint(reader: TargetReader, topic: str, key: bytes) -> Checkpoint:
    """The last checkpoint record with ``key`` in partition 0 of ``topic`` (an empty
    checkpoint when there is none), looking back further until found."""
    begin, end = await reader.bounds((topic, 0))
    if end is None or begin is None:
        return Checkpoint()
    look = _FIRST_LOOK
    stop = end
    while stop > begin:
        start = max(begin, stop - look)
        found: list[bytes] = []

        def keep(where: tuple[str, int], record: Any, found: list[bytes] = found) -> None:
            if record.key == key and record.value is not None:
                found.append(record.value)

        await reader.read({(topic, 0): start}, keep, until={(topic, 0): stop})
        if found:
            return Checkpoint.decode(found[-1])
        stop = start
        look *= 4
    return Checkpoint()


class TargetReader:
    """Reads assigned partitions of an AIOKafkaConsumer between offsets."""

    def __init__(self, consumer: Any, make_tp: Any, timeout: float) -> None:
        self.consumer = consumer
        self.make_tp = make_tp
        self.timeout = timeout

    async def bounds(self, where: tuple[str, int]) -> tuple[int | None, int | None]:
        partitions = await wait_for(
            _aiokafka.partitions_of(self.consumer._client, where[0]), self.timeout
        )
        if not partitions or where[1] not in partitions:
            return None, None
        tp = self.make_tp(*where)
        begin = await wait_for(self.consumer.beginning_offsets([tp]), self.timeout)
        end = await wait_for(self.consumer.end_offsets([tp]), self.timeout)
        return int(begin[tp]), int(end[tp])

    async def read(
        self,
        starts: Mapping[tuple[str, int], int | None],
        each: Any,
        *,
        until: Mapping[tuple[str, int], int] | None = None,
    ) -> dict[tuple[str, int], int]:
        """Hand every record from ``starts`` (None: the beginning) up to ``until``
        (default: the end offsets now) to ``each(where, record)``; return the ends."""
        tps = {self.make_tp(*where): where for where in starts}
        if not tps:
            return {}
        self.consumer.assign(list(tps))
        if until is None:
            answer = await wait_for(self.consumer.end_offsets(list(tps)), self.timeout)
            until = {tps[tp]: int(offset) for tp, offset in answer.items()}
        first = await wait_for(self.consumer.beginning_offsets(list(tps)), self.timeout)
        pending = set()
        for tp, where in tps.items():
            start = max(starts[where] or 0, int(first[tp]))
            if start < until[where]:
                self.consumer.seek(tp, start)
                pending.add(tp)
        self.consumer.pause(*[tp for tp in tps if tp not in pending])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while pending:
            if loop.time() > deadline:
                late = sorted(tps[tp] for tp in pending)
                raise BridgeError(f"reading the target's tails made no progress: {late}")
            batches = await wait_for(self.consumer.getmany(*pending, timeout_ms=1000), self.timeout)
            for tp, records in batches.items():
                where = tps[tp]
                if records:
                    deadline = loop.time() + self.timeout
                for record in records:
                    if record.offset < until[where]:
                        each(where, record)
            for tp in list(pending):
                position = await wait_for(self.consumer.position(tp), self.timeout)
                if position >= until[tps[tp]]:
                    deadline = loop.time() + self.timeout
                    pending.discard(tp)
                    self.consumer.pause(tp)
        # Paused, not unsubscribed: after an unsubscribe, aiokafka's stop() waited a whole
        # request timeout for the metadata request it had sent.
        self.consumer.pause(*tps)
        return dict(until)

"""Reading partitions' log offsets (OFFSETS) from brokers, for the tools and the exporter.

0.7 offsets are byte positions: a partition's *log start* is the oldest offset a fetch can
begin at (OFFSETS EARLIEST), its *log end* the next offset a message will get (OFFSETS
LATEST). :func:`partition_offset` asks for one partition; :func:`probe_broker` asks one broker for
all of its partitions at once, every request pipelined on one connection of the pool, so
a broker with a thousand partitions costs one round trip's wait, not a thousand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import NamedTuple

from ..connection import BrokerAddress
from ..errors import KafkaError
from ..pool import ConnectionPool
from ..protocol import EARLIEST, LATEST
from ..records import TopicPartition

__all__ = ["BrokerProbe", "LogOffsets", "partition_offset", "probe_broker"]


class LogOffsets(NamedTuple):
    """A partition's oldest offset (log start) and next offset (log end), in bytes."""

    start: int
    end: int


class BrokerProbe(NamedTuple):
    """What one probe of a broker found: the offsets of each partition asked for (all of
    them, or none when ``error`` says why the broker could not answer), and how long the
    probe took in seconds."""

    offsets: dict[TopicPartition, LogOffsets]
    seconds: float
    error: KafkaError | None


def _first(offsets: Sequence[int]) -> int:
    # A partition with no segment answers no offsets: it is empty, start and end at 0.
    return offsets[0] if offsets else 0


async def partition_offset(
    pool: ConnectionPool, address: BrokerAddress | None, tp: TopicPartition, time: int = LATEST
) -> int | None:
    """OFFSETS ``time`` of one partition (latest: its log end; earliest: its log start),
    or None when its broker cannot be asked."""
    if address is None:
        return None
    try:
        connection = await pool.connection(address)
        return _first(await connection.offsets(tp.topic, tp.partition, time, 1))
    except KafkaError:
        return None


async def probe_broker(
    pool: ConnectionPool, address: BrokerAddress, partitions: Sequence[TopicPartition]
) -> BrokerProbe:
    """Log start and end of every partition in ``partitions`` (all on ``address``), two
    OFFSETS requests each, all pipelined on one connection. A broker that cannot be
    reached, or fails any request, gives ``error`` and no offsets: a broker answers all
    or is down, and the caller shows it as down. The pool's connect and request timeouts
    bound the probe."""
    started = time.perf_counter()
    try:
        connection = await pool.connection(address)
        answers = await asyncio.gather(
            *(
                connection.offsets(tp.topic, tp.partition, which, 1)
                for tp in partitions
                for which in (EARLIEST, LATEST)
            )
        )
    except KafkaError as exc:
        return BrokerProbe({}, time.perf_counter() - started, exc)
    offsets = {
        tp: LogOffsets(_first(answers[2 * i]), _first(answers[2 * i + 1]))
        for i, tp in enumerate(partitions)
    }
    return BrokerProbe(offsets, time.perf_counter() - started, None)

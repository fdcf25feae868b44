"""Reading: offset ranges as Spark input partitions, rows as Arrow record batches.

A read range is ``[start, end)`` of one broker-partition, both message boundaries. A
task fetches it with the SimpleConsumer (next fetch in flight while a batch is built)
and turns each fetch into one Arrow record batch: the constant columns are repeated
arrays and the offset and value columns are built from whole lists, so no Python code
runs per row. Compressed wrappers are expanded; ``offset`` follows the 0.7.2 rule used
everywhere in the library (the offset to fetch from next, the value a consumer commits).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import KafkaError, OffsetOutOfRangeError
from ..protocol import EARLIEST, LATEST
from ..records import TopicPartition
from ..simple import SimpleConsumer
from .options import OffsetSpec, OptionError, ReadOptions
from .planning import PartitionState, describe, discover, split_range
from .runtime import WorkerRuntime

__all__ = [
    "MAX_FETCH_SIZE",
    "SCHEMA",
    "SCHEMA_DDL",
    "BatchReader",
    "DataLossError",
    "OffsetRange",
    "read_range",
    "state_of_partitions",
]

log = logging.getLogger("aiokafka07.spark")

SCHEMA_DDL = "topic string, broker_id int, partition int, offset long, value binary"

#: The largest fetch a task (or the driver, cutting a micro-batch) makes for one message:
#: a larger message, or an offset that is not a message start, fails the task with a
#: typed error (:mod:`aiokafka07.fetch_size`).
MAX_FETCH_SIZE = 64 << 20
SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("broker_id", pa.int32()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("value", pa.binary()),
    ]
)


class DataLossError(KafkaError):
    """Data a read needs is gone (retention deleted it, or the broker's log was
    replaced); raised unless ``failOnDataLoss`` is false."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One task's work: ``[start, end)`` of one broker-partition (plain, picklable data).

    ``end < start`` marks a log that went back (replaced or truncated): with
    ``fail_on_data_loss`` false the task reads it from its earliest offset up to ``end``.
    """

    cluster: str
    topic: str
    broker_id: int
    partition: int
    host: str
    port: int
    start: int
    end: int
    fetch_size: int
    request_timeout: float
    fail_on_data_loss: bool

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.broker_id}-{self.partition}"


def ranges_for(
    state: PartitionState,
    start: int,
    end: int,
    options: ReadOptions,
    max_bytes: int | None,
) -> list[OffsetRange]:
    """The input partitions covering ``[start, end)`` of one broker-partition."""
    tp, address = state.tp, state.address

    def make(s: int, e: int) -> OffsetRange:
        return OffsetRange(
            options.connection.name,
            tp.topic,
            tp.broker_id,
            tp.partition,
            address.host,
            address.port,
            s,
            e,
            options.fetch_size,
            options.connection.request_timeout,
            options.fail_on_data_loss,
        )

    if end < start:
        return [make(start, end)]
    return [make(s, e) for s, e in split_range(start, end, state.boundaries, max_bytes)]


class _BatchBuilder:
    """Arrow record batches for one broker-partition's records.

    The topic, broker and partition columns are constant: built once, at the largest
    size seen, and sliced (without copying) for each batch.
    """

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self._constants: list[pa.Array] = []

    def batch(self, records: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
        n = len(records)
        if not self._constants or len(self._constants[0]) < n:
            size = max(n, 2 * len(self._constants[0]) if self._constants else n)
            self._constants = [
                pa.array([self.tp.topic] * size, pa.string()),
                pa.array([self.tp.broker_id] * size, pa.int32()),
                pa.array([self.tp.partition] * size, pa.int32()),
            ]
        topic, broker, partition = (c.slice(0, n) for c in self._constants)
        return pa.RecordBatch.from_arrays(
            [
                topic,
                broker,
                partition,
                pa.array([r[3] for r in records], pa.int64()),
                pa.array([r[4] for r in records], pa.binary()),
            ],
            schema=SCHEMA,
        )


async def _earliest(consumer: SimpleConsumer, r: OffsetRange) -> int:
    (earliest,) = await consumer.offsets_before(r.topic, r.partition, EARLIEST, 1)
    return earliest


async def read_range(r: OffsetRange, runtime: WorkerRuntime) -> AsyncIterator[pa.RecordBatch]:
    """Arrow record batches of every message in the range (runs on the worker's loop)."""
    pool = await runtime.pool(r.cluster, r.request_timeout)
    consumer = SimpleConsumer(
        r.host,
        r.port,
        broker_id=r.broker_id,
        fetch_size=r.fetch_size,
        max_fetch_size=max(r.fetch_size, MAX_FETCH_SIZE),
        pool=pool,
    )
    builder = _BatchBuilder(TopicPartition(r.topic, r.broker_id, r.partition))
    start, end = r.start, r.end
    if end < start:
        lost = f"{r.name}: the log now ends at {end}, before offset {start} where reading stopped"
        if r.fail_on_data_loss:
            raise DataLossError(lost + " (set failOnDataLoss=false to read it from the start)")
        log.warning("%s; reading it from its earliest offset", lost)
        start = await _earliest(consumer, r)
    while start < end:
        batches = consumer.batches(r.topic, r.partition, start, end_offset=end)
        try:
            async for result in batches:
                yield builder.batch(result.messages)
            return
        except OffsetOutOfRangeError:
            earliest = await _earliest(consumer, r)
            if earliest <= start:
                raise
            lost = f"{r.name}: offsets {start}-{earliest} were deleted before they were read"
            if r.fail_on_data_loss:
                raise DataLossError(lost + " (set failOnDataLoss=false to skip them)") from None
            log.warning("%s; skipping them", lost)
            start = earliest
        finally:
            await batches.aclose()


def read_partition(r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The synchronous form Spark's ``read`` needs."""
    runtime = WorkerRuntime.get()
    return runtime.iterate(read_range(r, runtime))


async def state_of_partitions(options: ReadOptions, runtime: WorkerRuntime) -> list[PartitionState]:
    """Discover the broker-partitions read and ask their brokers for offsets."""
    zk = None
    if options.connection.zookeeper is not None:
        zk = await runtime.zookeeper(options.connection.zookeeper)
    found = await discover(
        options.connection, options.topics, options.pattern, options.partitions_per_broker, zk
    )
    c = options.connection
    return await describe(found, await runtime.pool(c.name, c.request_timeout))


def resolve(spec: OffsetSpec, state: PartitionState) -> int:
    """The offset ``spec`` gives for ``state``'s partition (earliest/latest resolved)."""
    offset = spec.for_partition(state.tp.topic, state.name)
    if offset == EARLIEST:
        return state.earliest
    if offset == LATEST:
        return state.latest
    return offset


class BatchReader(DataSourceReader):
    """A batch read of fixed ranges, planned once from the brokers' current offsets."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[OffsetRange]:
        runtime = WorkerRuntime.get()
        options = self.options
        ranges: list[OffsetRange] = []
        for state in runtime.run(state_of_partitions(options, runtime)):
            start = resolve(options.starting, state)
            end = resolve(options.ending, state)
            where = f"{state.tp.topic}/{state.name}"
            if end > state.latest:
                raise OptionError(
                    f"option 'endingOffsets': {where} ends at {state.latest}, before {end}"
                )
            if start < state.earliest or start > state.latest:
                problem = (
                    f"option 'startingOffsets': {where} holds offsets {state.earliest}-"
                    f"{state.latest}, not {start}"
                )
                if options.fail_on_data_loss:
                    raise DataLossError(problem + " (failOnDataLoss=false starts at the earliest)")
                log.warning("%s; starting at %d", problem, state.earliest)
                start = state.earliest
            if start > end:
                raise OptionError(f"{where}: starting offset {start} is after ending offset {end}")
            ranges.extend(ranges_for(state, start, end, options, options.max_bytes_per_partition))
        log.info(
            "kafka07 batch read of %s: %d input partitions, %d bytes",
            options.topics or options.pattern,
            len(ranges),
            sum(r.end - r.start for r in ranges),
        )
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark's placeholder when there is nothing to read
        return read_partition(partition)

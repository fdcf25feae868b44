"""Reading: offset ranges as Spark input partitions, rows as Arrow record batches.

A read range is ``[start, end)`` of one broker-partition, both message boundaries. A
task fetches it with the SimpleConsumer (next fetch in flight while a batch is built)
and turns each fetch into one Arrow record batch with no Python object per row: the
codec decodes the fetch straight into the buffers of the ``offset`` and ``value``
columns (:mod:`aiokafka07.protocol.columns`, in C with the GIL released), which Arrow
takes without a copy; the constant columns are repeated arrays sliced to size, and
``offset_seq`` comes from the codec, as a :class:`~aiokafka07.RecordBatch`'s does.
Compressed wrappers are expanded; ``offset`` follows the 0.7.2 rule used everywhere in
the library (the offset to fetch from next, the value a consumer commits), so the
messages of a wrapper share offsets, and ``offset_seq`` tells them apart
(:attr:`aiokafka07.RecordBatch.offset_seqs`). A task
checks that its range ended exactly at ``end``: a cut that was not a message boundary
fails the read instead of losing the message across it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructType,
)

from ..errors import KafkaError, OffsetOutOfRangeError
from ..pool import ConnectionPool
from ..protocol import EARLIEST, _accel, decode_message_set
from ..protocol.columns import MessageColumns
from ..protocol.messages import BytesLike
from ..records import TopicPartition
from ..simple import FetchResult, SimpleConsumer
from .options import OffsetSpec, OptionError, ReadOptions, max_fetch_size
from .planning import (
    PartitionState,
    check_named,
    check_user_offset,
    describe,
    discover,
    fetcher,
    plan_pieces,
    resolve,
)
from .runtime import WorkerRuntime

try:  # PySpark >= 4.1: filter pushdown
    from pyspark.sql.datasource import EqualNullSafe, EqualTo, Filter, In

    _PUSHDOWN = True
except ImportError:  # pragma: no cover - PySpark 4.0
    _PUSHDOWN = False

__all__ = [
    "COLUMNS",
    "SCHEMA",
    "SCHEMA_DDL",
    "BatchReader",
    "DataLossError",
    "OffsetRange",
    "RangeEndError",
    "columns_for",
    "read_range",
    "state_of_partitions",
]

log = logging.getLogger("aiokafka07.spark")

#: The source's columns: name, Spark type, Arrow type.
COLUMNS: tuple[tuple[str, type[DataType], pa.DataType], ...] = (
    ("topic", StringType, pa.string()),
    ("broker_id", IntegerType, pa.int32()),
    ("partition", IntegerType, pa.int32()),
    ("offset", LongType, pa.int64()),
    ("offset_seq", IntegerType, pa.int32()),
    ("value", BinaryType, pa.binary()),
)
SCHEMA_DDL = ", ".join(f"{name} {spark().simpleString()}" for name, spark, _ in COLUMNS)
#: The Arrow schema of a read with the source's own schema.
SCHEMA = pa.schema([(name, arrow) for name, _, arrow in COLUMNS])


class DataLossError(KafkaError):
    """Data a read needs is gone (retention deleted it, or the broker's log was
    replaced); raised unless ``failOnDataLoss`` is false."""


class RangeEndError(KafkaError):
    """A read range did not end on a message boundary where it was cut, or the log no
    longer reaches its end: rows would be lost or repeated, so the read fails."""


def columns_for(schema: StructType) -> pa.Schema:
    """The Arrow schema a read delivers for ``schema``: the source's own, or a
    user-given one that selects some of its columns (any order, same types).

    Raises :class:`OptionError` naming a column the source does not have.
    """
    ours = {name: (spark_type, arrow) for name, spark_type, arrow in COLUMNS}
    fields = []
    for f in schema.fields:
        name = f.name.lower()
        if name not in ours or not isinstance(f.dataType, ours[name][0]):
            raise OptionError(
                f"the schema given to kafka07 has column '{f.name} "
                f"{f.dataType.simpleString()}'; a user-given schema may only select "
                f"kafka07's columns ({SCHEMA_DDL})"
            )
        fields.append(pa.field(f.name, ours[name][1], nullable=f.nullable))
    if len({f.name.lower() for f in fields}) != len(fields):
        raise OptionError(f"the schema given to kafka07 names a column twice: {schema}")
    return pa.schema(fields)


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
    request_timeout_ms: int
    fail_on_data_loss: bool

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.broker_id}-{self.partition}"


def make_range(state: PartitionState, start: int, end: int, options: ReadOptions) -> OffsetRange:
    """The input partition reading ``[start, end)`` of ``state``'s broker-partition."""
    tp, address = state.tp, state.address
    return OffsetRange(
        options.connection.name,
        tp.topic,
        tp.broker_id,
        tp.partition,
        address.host,
        address.port,
        start,
        end,
        options.fetch_size,
        options.connection.request_timeout_ms,
        options.fail_on_data_loss,
    )


async def ranges_for(
    state: PartitionState, start: int, end: int, options: ReadOptions, pool: ConnectionPool
) -> list[OffsetRange]:
    """The input partitions covering ``[start, end)`` of one broker-partition, split
    into pieces of about ``maxBytesPerPartition``."""
    if end < start:
        return [make_range(state, start, end, options)]
    pieces = await plan_pieces(
        state,
        start,
        end,
        options.max_bytes_per_partition,
        fetcher(pool, state),
        options.max_message_size,
    )
    return [make_range(state, s, e, options) for s, e in pieces]


class _BatchBuilder:
    """Arrow record batches with the columns of ``schema`` for one broker-partition.

    The topic, broker and partition columns are constant: built once, at the largest
    size seen, and sliced (without copying) for each batch.
    """

    def __init__(self, tp: TopicPartition, schema: pa.Schema) -> None:
        self.tp = tp
        self.schema = schema
        self._names = [name.lower() for name in schema.names]
        self._constants: dict[str, pa.Array] = {}
        self._size = 0

    def _constant(self, name: str, n: int) -> pa.Array:
        if n > self._size:
            self._size = max(n, 2 * self._size)
            self._constants = {
                "topic": pa.array([self.tp.topic] * self._size, pa.string()),
                "broker_id": pa.array([self.tp.broker_id] * self._size, pa.int32()),
                "partition": pa.array([self.tp.partition] * self._size, pa.int32()),
            }
        return self._constants[name].slice(0, n)

    def batch(self, result: FetchResult) -> pa.RecordBatch:
        """The batch of one fetch decoded by a :class:`_ColumnarConsumer`: its buffers
        become the ``offset`` and ``value`` columns as they are (Arrow keeps the
        bytearrays alive, and they cannot be resized while it does)."""
        columns: MessageColumns = result.messages  # type: ignore[assignment]
        n = len(columns)
        arrays = []
        for name in self._names:
            if name in ("topic", "broker_id", "partition"):
                arrays.append(self._constant(name, n))
            elif name == "value":
                buffers = [None, pa.py_buffer(columns.value_ends), pa.py_buffer(columns.values)]
                arrays.append(pa.Array.from_buffers(pa.binary(), n, buffers))
            elif name == "offset":
                buffers = [None, pa.py_buffer(columns.offsets)]
                arrays.append(pa.Array.from_buffers(pa.int64(), n, buffers))
            else:
                # The codec's offset_seq, as RecordBatch.offset_seqs (in C when built).
                seq = _accel.impl.offset_seq(columns.offsets, result.offset)
                arrays.append(pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(seq)]))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


class _ColumnarConsumer(SimpleConsumer):
    """A SimpleConsumer whose fetch results hold :class:`MessageColumns` instead of
    records: every fetch rule (sizes, the end offset, errors) is the SimpleConsumer's."""

    def _decode(
        self, topic: str, partition: int, offset: int, message_set: BytesLike
    ) -> tuple[MessageColumns, int]:
        return self._decode_columns(topic, partition, offset, message_set)


async def _earliest(consumer: SimpleConsumer, r: OffsetRange) -> int:
    (earliest,) = await consumer.offsets_before(r.topic, r.partition, EARLIEST, 1)
    return earliest


async def _check_end(consumer: SimpleConsumer, r: OffsetRange, reached: int) -> None:
    """Fail unless the read that stopped at ``reached`` covered the range: what lies
    between (wrappers with no messages, which yield no rows) must end exactly at
    ``r.end``. A log that now ends before ``r.end`` lost data (see ``failOnDataLoss``);
    a range end inside a message raises :class:`RangeEndError`."""
    if reached == r.end:
        return
    problem = f"{r.name}: the read of {r.start}-{r.end} stopped at {reached}"
    if reached > r.end or r.end - reached > max_fetch_size(r.fetch_size):
        raise RangeEndError(f"{problem}; {r.end} is not a message boundary")
    conn = await consumer.connection()
    response = await conn.fetch(r.topic, r.partition, reached, r.end - reached)
    error = response.error(reached)
    if error is not None:
        raise error
    if not response.message_set:
        lost = f"{problem}, where the log now ends"
        if r.fail_on_data_loss:
            raise DataLossError(lost + " (set failOnDataLoss=false to go on)")
        log.warning("%s; going on", lost)
        return
    try:
        valid = decode_message_set(response.message_set, reached, shallow=True).valid_bytes
    except KafkaError as exc:
        raise RangeEndError(f"{problem}: {r.end} is not a message boundary ({exc})") from None
    if reached + valid != r.end:
        raise RangeEndError(
            f"{problem}, and no whole message ends at {r.end}: it is not a message boundary"
        )


async def read_range(
    r: OffsetRange, runtime: WorkerRuntime, schema: pa.Schema
) -> AsyncIterator[pa.RecordBatch]:
    """Arrow record batches of every message in the range (runs on the worker's loop)."""
    pool = await runtime.pool(r.cluster, r.request_timeout_ms)
    consumer = _ColumnarConsumer(
        r.host,
        r.port,
        broker_id=r.broker_id,
        fetch_size=r.fetch_size,
        max_fetch_size=max_fetch_size(r.fetch_size),
        pool=pool,
    )
    builder = _BatchBuilder(TopicPartition(r.topic, r.broker_id, r.partition), schema)
    start, end = r.start, r.end
    if end < start:
        lost = f"{r.name}: the log now ends at {end}, before offset {start} where reading stopped"
        if r.fail_on_data_loss:
            raise DataLossError(lost + " (set failOnDataLoss=false to read it from the start)")
        log.warning("%s; reading it from its earliest offset", lost)
        start = await _earliest(consumer, r)
        r = dataclasses.replace(r, start=start)
    reached = start
    while reached < end:
        batches = consumer.batches(r.topic, r.partition, reached, end_offset=end)
        try:
            async for result in batches:
                reached = result.next_offset
                yield builder.batch(result)
            break
        except OffsetOutOfRangeError:
            earliest = await _earliest(consumer, r)
            if earliest <= reached:
                raise
            lost = f"{r.name}: offsets {reached}-{earliest} were deleted before they were read"
            if r.fail_on_data_loss:
                raise DataLossError(lost + " (set failOnDataLoss=false to skip them)") from None
            log.warning("%s; skipping them", lost)
            if earliest >= end:
                return  # the whole rest of the range is gone
            reached = earliest
        finally:
            await batches.aclose()
    await _check_end(consumer, r, reached)


def read_partition(r: OffsetRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The synchronous form Spark's ``read`` needs."""
    runtime = WorkerRuntime.get()
    return runtime.iterate(read_range(r, runtime, schema))


#: Which broker-partitions to keep (filter pushdown); None keeps all.
Keep = Callable[[TopicPartition], bool] | None


async def state_of_partitions(
    options: ReadOptions,
    runtime: WorkerRuntime,
    *,
    streaming: bool,
    checks: Sequence[OffsetSpec] | None = None,
    keep: Keep = None,
) -> tuple[list[PartitionState], ConnectionPool]:
    """Discover the broker-partitions read and ask their brokers for offsets.

    A topic that does not exist fails a batch read and a stream alike (the one check
    both share). A batch read also fails on a topic with no live broker and on a pattern
    no topic matches; a stream reads such topics once a broker serves them. With
    ``checks``, ``assign`` and those offsets options may name only broker-partitions
    that exist. ``keep`` drops broker-partitions before their brokers are asked.
    """
    c = options.connection
    zk = None
    if c.zookeeper is not None:
        zk = await runtime.zookeeper(c.zookeeper, c.request_timeout_ms)
    discovery = await discover(
        c, options.topics, options.pattern, options.assigned, options.partitions_per_broker, zk
    )
    where = f"option {options.subscription!r}"
    for why in discovery.missing.values():
        raise OptionError(f"{where}: {why}")
    if not streaming:
        if discovery.matched_nothing is not None:
            raise OptionError(
                f"{where}: no topic matches {options.pattern!r} (topics: "
                f"{discovery.matched_nothing})"
            )
        for why in discovery.absent.values():
            raise OptionError(f"{where}: {why}")
    else:
        for why in discovery.absent.values():
            log.info("%s: %s; the stream reads it once a broker serves it", where, why)
    if checks is not None:
        check_named(checks, (tp for tp, _ in discovery.found), options.assigned)
    assigned = options.assigned
    found = [
        (tp, address)
        for tp, address in discovery.found
        if (assigned is None or tp.name in assigned.get(tp.topic, ()))
        and (keep is None or keep(tp))
    ]
    pool = await runtime.pool(c.name, c.request_timeout_ms)
    states = await describe(found, pool)
    if c.brokers is not None and not streaming:
        # A 0.7 broker reports a topic it does not have as an empty log at 0.
        empty = {s.tp.topic for s in states} - {s.tp.topic for s in states if s.latest > 0}
        for topic in sorted(empty):
            raise OptionError(
                f"{where}: no listed broker has topic {topic!r} (a 0.7 broker reports a topic "
                "it does not have as an empty log)"
            )
    return states, pool


async def check_given(
    spec: OffsetSpec,
    state: PartitionState,
    offset: int,
    options: ReadOptions,
    pool: ConnectionPool,
) -> None:
    """If ``offset`` is one the user gave explicitly (not earliest, latest or a time),
    fail unless it is a message boundary (:func:`~.planning.check_user_offset`)."""
    if spec.kind == "explicit" and state.earliest <= offset <= state.latest:
        max_entry = max_fetch_size(options.fetch_size) - 4
        await check_user_offset(spec.option, state, offset, fetcher(pool, state), max_entry)


async def plan_batch(
    options: ReadOptions, runtime: WorkerRuntime, keep: Keep = None
) -> list[OffsetRange]:
    """The input partitions of a batch read, every option checked against the cluster."""
    states, pool = await state_of_partitions(
        options, runtime, streaming=False, checks=(options.starting, options.ending), keep=keep
    )

    async def plan(state: PartitionState) -> list[OffsetRange]:
        where = f"{state.tp.topic}/{state.name}"
        start = await resolve(options.starting, state, pool)
        end = await resolve(options.ending, state, pool)
        if end > state.latest:
            raise OptionError(
                f"option 'endingOffsets': {where} ends at {state.latest}, before {end}"
            )
        if start < state.earliest or start > state.latest:
            problem = (
                f"option {options.starting.option!r}: {where} holds offsets {state.earliest}-"
                f"{state.latest}, not {start}"
            )
            if options.fail_on_data_loss:
                raise DataLossError(problem + " (failOnDataLoss=false starts at the earliest)")
            log.warning("%s; starting at %d", problem, state.earliest)
            start = state.earliest
        if start > end:
            raise OptionError(f"{where}: starting offset {start} is after ending offset {end}")
        await check_given(options.starting, state, start, options, pool)
        await check_given(options.ending, state, end, options, pool)
        return await ranges_for(state, start, end, options, pool)

    ranges = [r for rs in await asyncio.gather(*(plan(s) for s in states)) for r in rs]
    log.info(
        "kafka07 batch read of %s: %d input partitions, %d bytes",
        options.topics or options.pattern,
        len(ranges),
        sum(r.end - r.start for r in ranges),
    )
    return ranges


class BatchReader(DataSourceReader):
    """A batch read of fixed ranges, planned once from the brokers' current offsets."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = columns_for(schema)

    def _keep(self) -> Keep:
        return None

    def partitions(self) -> Sequence[OffsetRange]:
        runtime = WorkerRuntime.get()
        return runtime.run(plan_batch(self.options, runtime, self._keep()))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark's placeholder when there is nothing to read
        return read_partition(partition, self.arrow_schema)


#: Columns whose filters select whole broker-partitions, and the type of their values.
_FILTERABLE = {"topic": str, "broker_id": int, "partition": int}


def _pushable(f: Any) -> tuple[str, frozenset[Any]] | None:
    """(column, allowed values) for an equality or IN filter on a filterable column."""
    if not _PUSHDOWN or not isinstance(f, (EqualTo, EqualNullSafe, In)):
        return None
    if len(f.attribute) != 1 or f.attribute[0].lower() not in _FILTERABLE:
        return None
    column = f.attribute[0].lower()
    values = f.value if isinstance(f, In) else (f.value,)
    wanted = _FILTERABLE[column]
    if not all(type(v) is wanted for v in values):
        return None
    return column, frozenset(values)


class FilteringBatchReader(BatchReader):
    """A batch read that takes Spark's filters on ``topic``, ``broker_id`` and
    ``partition`` (equality and IN): only the matching broker-partitions are planned
    and read, so Spark need not evaluate them. For ``filterPushdown=true`` only: PySpark
    refuses every reader that implements ``pushFilters`` while its
    ``spark.sql.python.filterPushdown.enabled`` is false, its default."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.allowed: dict[str, frozenset[Any]] = {}

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        rest = []
        for f in filters:
            pushed = _pushable(f)
            if pushed is None:
                rest.append(f)
                continue
            column, values = pushed
            self.allowed[column] = self.allowed.get(column, values) & values
        return rest

    def _keep(self) -> Keep:
        allowed = dict(self.allowed)
        if not allowed:
            return None

        def keep(tp: TopicPartition) -> bool:
            row = {"topic": tp.topic, "broker_id": tp.broker_id, "partition": tp.partition}
            return all(row[column] in values for column, values in allowed.items())

        return keep


def reader_for(options: ReadOptions, schema: StructType) -> BatchReader:
    """The batch reader for ``options``: with ``filterPushdown``, one that takes filters."""
    if not options.filter_pushdown:
        return BatchReader(options, schema)
    if not _PUSHDOWN:  # pragma: no cover - PySpark 4.0
        raise OptionError("option 'filterPushdown' needs PySpark >= 4.1")
    return FilteringBatchReader(options, schema)

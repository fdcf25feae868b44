"""Writing: each Spark task produces its rows with a Producer and reports what it wrote.

Rows carry ``value`` (binary or string), optionally ``key`` (string, binary, integer
or boolean: Java-compatible partitioning, as the Producer does), optionally ``topic``
(used where the ``topic`` option is not set: the option overrides the column, as in
Spark's Kafka sink) and optionally ``partition`` for explicit placement: a
``"<broker>-<partition>"`` string, or an integer with a ``broker_id`` column (a 0.7
partition lives on one broker); a null ``partition`` leaves the choice to the key. The
cluster is checked when the write is planned, on the driver: an unreachable ZooKeeper or
broker fails ``save()`` (or the streaming query's start) at once, not every task after
its retries. A ``headers`` column is refused: 0.7 messages have none, and dropping it
silently would lose data. The task's producer shares the process's cluster
view and connections, batches and compresses as configured and, in confirm mode, knows
every message is in the partition's log (its log end grew by every byte written) before
the task reports success. A message that cannot be
delivered fails the task (and so the job, once Spark's retries are spent): never a
silent loss. A retried task writes its rows again: delivery is at least once, as with
any 0.7 producer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructType,
)

from ..errors import KafkaError, NoBrokersError
from ..producer import Producer
from ..records import TopicPartition
from ..znodes import read_brokers
from .options import OptionError, WriteOptions
from .runtime import WorkerRuntime

try:  # PySpark >= 4.1 hands streaming writers Arrow batches too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _STREAM_ARROW = True
except ImportError:  # pragma: no cover - PySpark 4.0
    from pyspark.sql.datasource import (  # type: ignore[assignment, unused-ignore]
        DataSourceStreamWriter as _StreamWriterBase,
    )

    _STREAM_ARROW = False

__all__ = ["BatchWriter", "StreamWriter", "WriteReport", "check_cluster", "check_schema"]

log = logging.getLogger("aiokafka07.spark")

_KEY_TYPES = (StringType, BinaryType, IntegerType, LongType, BooleanType)


@dataclass
class WriteReport(WriterCommitMessage):
    """What one task wrote: messages and payload bytes, per topic."""

    partition_id: int
    messages: int = 0
    bytes: int = 0
    topics: dict[str, int] = field(default_factory=dict)


def check_schema(schema: StructType, options: WriteOptions) -> None:
    """Check the columns before any task runs."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    value = fields.get("value")
    if not isinstance(value, (BinaryType, StringType)):
        raise OptionError(
            "writing to kafka07 needs a 'value' column of type binary or string; the "
            f"DataFrame has columns {[f.name for f in schema.fields]}"
        )
    key = fields.get("key")
    if key is not None and not isinstance(key, _KEY_TYPES):
        raise OptionError(
            f"column 'key' has type {key.simpleString()}; use string, binary, int, long or "
            "boolean (Java-compatible hashing)"
        )
    if "headers" in fields:
        raise OptionError(
            "column 'headers': Kafka 0.7 messages have no headers, and writing without "
            "them would lose them silently; drop the column to write the rest"
        )
    topic = fields.get("topic")
    if options.topic is None:  # else the option overrides the column, as in Spark's sink
        if topic is None:
            raise OptionError("set the option 'topic' or give the DataFrame a 'topic' column")
        if not isinstance(topic, StringType):
            raise OptionError(f"column 'topic' must be a string, not {topic.simpleString()}")
    partition = fields.get("partition")
    broker = fields.get("broker_id")
    if partition is None:
        return
    if isinstance(partition, StringType):
        return
    if not isinstance(partition, (IntegerType, LongType)):
        raise OptionError(
            f"column 'partition' has type {partition.simpleString()}; use a string "
            "'<broker>-<partition>', or an int with a 'broker_id' int column"
        )
    if not isinstance(broker, (IntegerType, LongType)):
        raise OptionError(
            "column 'partition' is an int, but a 0.7 partition lives on one broker: add an "
            "int 'broker_id' column, or give 'partition' as '<broker>-<partition>' strings"
        )


async def check_cluster(options: WriteOptions, runtime: WorkerRuntime) -> None:
    """Raise unless the cluster written to answers: ZooKeeper opens a session and lists
    a live broker, or every listed broker accepts a connection (within the request
    timeout)."""
    c = options.connection
    if c.zookeeper is not None:
        zk = await runtime.zookeeper(c.zookeeper, c.request_timeout_ms)
        if not await read_brokers(zk):
            raise NoBrokersError(f"no broker is registered in ZooKeeper at {c.zookeeper}")
        return
    assert c.brokers is not None
    pool = await runtime.pool(c.name, c.request_timeout_ms)
    for address in c.brokers.values():
        await pool.connection(address)


def _placements(batch: pa.RecordBatch) -> list[tuple[int, int] | None] | None:
    """Each row's explicit (broker, partition), from a ``partition`` column (and
    ``broker_id`` when it is an int); None without one."""
    partitions = _column(batch, "partition")
    if partitions is None:
        return None
    brokers = _column(batch, "broker_id")
    placements: list[tuple[int, int] | None] = []
    for i, partition in enumerate(partitions):
        if partition is None:
            placements.append(None)
        elif isinstance(partition, str):
            try:
                tp = TopicPartition.parse("", partition)
            except ValueError as exc:
                raise OptionError(f"column 'partition': {exc}") from None
            placements.append((tp.broker_id, tp.partition))
        else:
            broker = brokers[i] if brokers is not None else None
            if broker is None:
                raise OptionError("a row has a 'partition' but a null 'broker_id'")
            placements.append((broker, partition))
    return placements


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if name == "value" and (
        pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    ):
        column = column.cast(pa.binary())
    return column.to_pylist()  # type: ignore[no-any-return]


class _Writer:
    """The write logic shared by the batch and streaming writers."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        check_schema(schema, options)
        runtime = WorkerRuntime.get()
        try:
            runtime.run(check_cluster(options, runtime))
        except KafkaError as exc:
            exc.args = (f"kafka07 cannot write to {options.connection.name}: {exc}",)
            raise

    def _write_batches(self, batches: Iterator[pa.RecordBatch]) -> WriteReport:
        from pyspark import TaskContext

        context = TaskContext.get()
        report = WriteReport(context.partitionId() if context is not None else 0)
        runtime = WorkerRuntime.get()
        options = self.options

        async def open_producer() -> Producer:
            producer = Producer(
                cluster=await runtime.cluster(
                    options.connection.zookeeper, options.connection.broker_list
                ),
                pool=await runtime.pool(
                    options.connection.name, options.connection.request_timeout_ms
                ),
                compression=options.compression,
                compression_level=options.compression_level,
                confirm=options.confirm,
                batch_size=options.batch_size,
            )
            await producer.start()
            return producer

        async def send(
            producer: Producer,
            values: list[bytes | None],
            keys: list[Any] | None,
            topics: list[str | None] | None,
            placements: list[tuple[int, int] | None] | None,
        ) -> None:
            default = options.topic
            for i, value in enumerate(values):
                if value is None:
                    raise OptionError(f"row {report.messages + i} has a null 'value'")
                topic = topics[i] if topics is not None else default
                if topic is None:
                    raise OptionError(f"row {report.messages + i} has a null 'topic'")
                await producer.send(
                    topic,
                    value,
                    None if keys is None else keys[i],
                    None if placements is None else placements[i],
                )

        producer = runtime.run(open_producer())
        try:
            for batch in batches:
                values = _column(batch, "value")
                assert values is not None
                keys = _column(batch, "key")
                # The topic option overrides the column (the column is not even read).
                topics = _column(batch, "topic") if options.topic is None else None
                runtime.run(send(producer, values, keys, topics, _placements(batch)))
                report.messages += len(values)
                report.bytes += sum(map(len, values))
                for topic in topics if topics is not None else [options.topic] * len(values):
                    assert topic is not None
                    report.topics[topic] = report.topics.get(topic, 0) + 1
        finally:
            runtime.run(producer.close())  # delivers the rest, or raises naming what failed
        return report

    def _rows_to_batches(self, rows: Iterator[Any]) -> Iterator[pa.RecordBatch]:
        """Spark Rows in chunks, as record batches (the PySpark 4.0 streaming path)."""
        chunk: list[dict[str, Any]] = []
        for row in rows:
            chunk.append(row.asDict())
            if len(chunk) >= 10_000:
                yield pa.RecordBatch.from_pylist(chunk)
                chunk = []
        if chunk:
            yield pa.RecordBatch.from_pylist(chunk)

    @staticmethod
    def _summary(messages: list[WriterCommitMessage | None]) -> str:
        reports = [m for m in messages if isinstance(m, WriteReport)]
        topics: dict[str, int] = {}
        for report in reports:
            for topic, count in report.topics.items():
                topics[topic] = topics.get(topic, 0) + count
        return (
            f"{sum(r.messages for r in reports)} messages, {sum(r.bytes for r in reports)} "
            f"bytes from {len(reports)} tasks ({topics})"
        )


class BatchWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("kafka07")``: one producer per task."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteReport:
        return self._write_batches(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("kafka07 write committed: %s", self._summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "kafka07 write failed; what the successful tasks wrote stays in Kafka "
            "(0.7 has no transactions): %s",
            self._summary(messages),
        )


class StreamWriter(_Writer, _StreamWriterBase):
    """``df.writeStream.format("kafka07")``: each micro-batch written as a batch write."""

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        if _STREAM_ARROW:
            return self._write_batches(iterator)
        return self._write_batches(self._rows_to_batches(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("kafka07 micro-batch %d written: %s", batchId, self._summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("kafka07 micro-batch %d failed: %s", batchId, self._summary(messages))

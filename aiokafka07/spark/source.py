"""The ``kafka07`` data source: what Spark instantiates from ``format("kafka07")``.

When each mistake surfaces (Spark decides when it calls the source):

* ``load()`` calls :meth:`Kafka07DataSource.schema`: options that neither a batch nor a
  streaming read accepts (a typo, a malformed value, a missing ``zookeeper``) fail there.
* Planning a batch read (the first action: ``collect()``, ``count()``, ``write``...) checks
  the rest against the cluster: an unreachable ZooKeeper or broker, an unknown topic or
  broker-partition, an offset outside the log or not on a message boundary, a user-given
  schema with a column the source does not have. A streaming query does the same when it
  starts and reports it through ``awaitTermination()`` / ``exception()``; so do options
  only a batch read takes (``endingOffsets``): Spark's ``load()`` does not tell the
  source whether it reads a stream (the same calls, the same options), so an option
  that fits one kind of read and not the other can only be refused once the read
  starts.
* ``save()`` checks the write options, the DataFrame's columns and that the cluster
  answers; a streaming write does it when the query starts.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .options import OptionError, ReadOptions, WriteOptions
from .reader import SCHEMA_DDL, BatchReader, reader_for
from .stream import RefusedStream, StreamReader
from .writer import BatchWriter, StreamWriter

__all__ = ["Kafka07DataSource"]


class Kafka07DataSource(DataSource):
    """Read (batch and streaming) and write Kafka 0.7 topics.

    Every error names the option, topic, broker-partition or offset it is about; the
    module docstring says when each surfaces. The source holds only its options (plain
    strings): Spark pickles it to the processes that plan and run the work, and each
    opens its own connections there.
    """

    @classmethod
    def name(cls) -> str:
        return "kafka07"

    def schema(self) -> str:
        ReadOptions.check(self.options)  # load() is a read whose kind Spark does not say
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> BatchReader:
        return reader_for(ReadOptions.parse(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> StreamReader | RefusedStream:
        try:
            options = ReadOptions.parse(self.options, streaming=True)
        except OptionError as exc:  # raised by the stream's first call (see RefusedStream)
            return RefusedStream(exc)
        return StreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(WriteOptions.parse(self.options), schema)

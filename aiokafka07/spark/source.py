"""The ``kafka07`` data source: what Spark instantiates from ``format("kafka07")``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .options import ReadOptions, WriteOptions
from .reader import SCHEMA_DDL, BatchReader
from .stream import StreamReader
from .writer import BatchWriter, StreamWriter

__all__ = ["Kafka07DataSource"]


class Kafka07DataSource(DataSource):
    """Read (batch and streaming) and write Kafka 0.7 topics.

    Options are checked when the reader or writer is made, so a mistake fails
    ``load()`` / ``save()`` / ``start()`` with an error naming the option. The source
    holds only its options (plain strings): Spark pickles it to the processes that plan
    and run the work, and each opens its own connections there.
    """

    @classmethod
    def name(cls) -> str:
        return "kafka07"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(WriteOptions.parse(self.options), schema)

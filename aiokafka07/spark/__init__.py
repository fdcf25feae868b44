"""A PySpark data source for Kafka 0.7: ``spark.read.format("kafka07")``.

Built on PySpark's Python Data Source API (PySpark >= 4.0 with pyarrow; no JVM jar).
Register it once per session with :func:`register` (installing aiokafka07 also makes
PySpark find it on its own, through the ``pyspark_kafka07`` module)::

    from aiokafka07.spark import register
    register(spark)
    df = (spark.read.format("kafka07")
          .option("zookeeper", "127.0.0.1:2181").option("topic", "events").load())

Columns: ``topic``, ``broker_id``, ``partition``, ``offset`` (0.7.2 next-offset
semantics) and ``value`` (binary). See the README for every option.
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "aiokafka07.spark needs PySpark >= 4.0 and pyarrow: pip install 'aiokafka07[spark]'"
    ) from exc

from typing import Any

from .options import OptionError
from .reader import SCHEMA_DDL, DataLossError
from .source import Kafka07DataSource

__all__ = ["SCHEMA_DDL", "DataLossError", "Kafka07DataSource", "OptionError", "register"]


def register(spark: Any) -> None:
    """Register the ``kafka07`` format with a SparkSession."""
    spark.dataSource.register(Kafka07DataSource)

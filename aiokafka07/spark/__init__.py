"""A PySpark data source for Kafka 0.7: ``spark.read.format("kafka07")``.

Built on PySpark's Python Data Source API (PySpark >= 4.0 with pyarrow; no JVM jar).
Register it once per session with :func:`register` (installing aiokafka07 also makes
PySpark find it on its own, through the ``pyspark_kafka07`` module)::

    from aiokafka07.spark import register
    register(spark)
    df = (spark.read.format("kafka07")
          .option("zookeeper", "127.0.0.1:2181").option("topic", "events").load())

Columns: ``topic``, ``broker_id``, ``partition``, ``offset`` (0.7.2 next-offset
semantics), ``offset_seq`` (tells apart the messages of a compressed wrapper, which share
an offset: ``(broker_id, partition, offset, offset_seq)`` is unique per topic) and
``value`` (binary). See the README for every option.
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "aiokafka07.spark needs PySpark >= 4.0 and pyarrow: pip install 'aiokafka07[spark]'"
    ) from exc

import os
import sys
from collections.abc import Mapping
from typing import Any

from .options import OptionError
from .reader import SCHEMA_DDL, DataLossError, RangeEndError
from .source import Kafka07DataSource

__all__ = [
    "SCHEMA_DDL",
    "DataLossError",
    "Kafka07DataSource",
    "OptionError",
    "RangeEndError",
    "activate",
    "local_session",
    "register",
]


def register(spark: Any) -> None:
    """Register the ``kafka07`` format with a SparkSession."""
    spark.dataSource.register(Kafka07DataSource)


def local_session(
    cores: int = 2, app_name: str = "aiokafka07", conf: Mapping[str, str] | None = None
) -> Any:
    """A local SparkSession bound to loopback, its Python workers on this interpreter,
    the UI and progress bars off and ``kafka07`` registered; ``conf`` adds settings."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": str(cores),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def activate(spark: Any) -> None:
    """Make ``spark`` the calling thread's active session.

    Spark looks Python data sources up for writes through the thread's active session,
    and a thread other than the one that built the session (``asyncio.to_thread``, a
    thread pool) has none: call this there before writing to ``kafka07``.
    """
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)

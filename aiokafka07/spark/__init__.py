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
    from .._install import install_hint

    raise ImportError(
        f"aiokafka07.spark needs PySpark >= 4.0 and pyarrow: {install_hint('spark')}"
    ) from exc

import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
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
    cores: int = 2,
    app_name: str = "aiokafka07",
    conf: Mapping[str, str] | None = None,
    *,
    log_file: str | Path | None = None,
) -> Any:
    """A local SparkSession bound to loopback, its Python workers on this interpreter,
    the UI and progress bars off and ``kafka07`` registered; ``conf`` adds settings.

    When this starts Spark's JVM (the first session of the process), the JVM and the
    Python workers it forks run in a session of their own, so a Ctrl-C at the terminal
    reaches only this program, which decides what to stop; with ``log_file``, their
    output (Spark's banner, its WARN lines, worker tracebacks) is appended there instead
    of the terminal.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.master": f"local[{cores}]",
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": str(cores),
        **(conf or {}),
    }
    if SparkContext._gateway is None:  # no JVM yet: start it our way
        popen: dict[str, Any] = {"start_new_session": True}
        with contextlib.ExitStack() as files:
            if log_file is not None:
                output = files.enter_context(open(log_file, "ab"))
                popen.update(stdout=output, stderr=output)
            jvm_conf = SparkConf().setAll(list(settings.items()))
            gateway = launch_gateway(jvm_conf, popen)  # type: ignore[no-untyped-call, unused-ignore]
            SparkContext._ensure_initialized(gateway=gateway)
    builder = SparkSession.builder
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

"""A Spark streaming query from ``kafka07`` into Parquet, in a process of its own so that
a test can kill its driver mid-batch (tests/test_spark.py).

Each micro-batch's tasks pause for half a second (``mapInArrow``), so a test that sees a
micro-batch start (its offsets written to the checkpoint, its commit not) kills the
driver while the batch is under way.

Run: ``python tests/spark_stream_driver.py ZOOKEEPER TOPIC CHECKPOINT SINK``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

from aiokafka07.spark import local_session


def slow(batches: Iterator[Any]) -> Iterator[Any]:
    time.sleep(0.5)
    yield from batches


def main() -> None:
    zookeeper, topic, checkpoint, sink = sys.argv[1:5]
    spark = local_session(2, "killed-driver")
    stream = (
        spark.readStream.format("kafka07")
        .option("zookeeper", zookeeper)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", "6000")
        .load()
    )
    query = (
        stream.mapInArrow(slow, stream.schema)
        .writeStream.format("parquet")
        .option("path", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()

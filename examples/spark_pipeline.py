"""A Spark pipeline over Kafka 0.7: the demo's pipeline, small enough to read in one go.

1. Produce page views ``user|page|country`` keyed by user (Java-compatible partitions).
2. Spark batch job: views per page, read through the ``kafka07`` data source.
3. Spark streaming job (``availableNow``): the same counts, micro-batch by micro-batch,
   with its progress published to ZooKeeper as consumer group ``spark-pageviews``.
4. Write the counts back to Kafka (topic ``pageview-counts``) and read them again.

Spark actions block, so they run in a thread while the event loop keeps serving (the
local brokers run on it). ``python -m aiokafka07 demo`` is the same pipeline at scale,
with a consumer group and throughput figures.

Run: ``python examples/spark_pipeline.py [ZOOKEEPER]`` (no argument: a local cluster).
Needs the ``spark`` extra (in a checkout: ``python -m pip install -e '.[spark]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import tempfile
from typing import Any

from _local import address_argument, local_cluster

from aiokafka07 import Producer

TOPIC = "pageviews"
COUNTS = "pageview-counts"
PAGES = ["/", "/search", "/cart", "/checkout", "/help"]


def start_spark() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this Python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from aiokafka07.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)  # optional where PySpark finds the pyspark_kafka07 module itself
    return spark


def spark_jobs(spark: Any, zookeeper: str, checkpoint: str) -> None:
    from pyspark.sql import functions as F

    from aiokafka07.spark import activate

    # Spark looks Python data sources up for writes through the thread's active session.
    activate(spark)
    page = F.split(F.col("value").cast("string"), r"\|").getItem(1).alias("page")

    views = spark.read.format("kafka07").option("zookeeper", zookeeper).option("topic", TOPIC)
    batch = views.load().select(page).groupBy("page").count().orderBy("page")
    print("batch job, views per page:")
    for row in batch.collect():
        print(f"  {row['page']:<10} {row['count']}")

    query = (
        spark.readStream.format("kafka07")
        .option("zookeeper", zookeeper)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", "4000")  # a few micro-batches
        .option("group", "spark-pageviews")
        .load()
        .select(page)
        .groupBy("page")
        .count()
        .writeStream.format("memory")
        .queryName("live_counts")
        .outputMode("complete")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = sum(1 for p in query.recentProgress if p["numInputRows"])
    streamed = spark.sql("select page, count from live_counts order by page").collect()
    print(
        f"streaming job ({batches} micro-batches): " + ", ".join(f"{r[0]}={r[1]}" for r in streamed)
    )

    counts = batch.select(
        F.col("page").alias("key"),
        F.concat_ws("=", "page", F.col("count").cast("string")).alias("value"),
    )
    counts.write.format("kafka07").option("zookeeper", zookeeper).option("topic", COUNTS).option(
        "compression", "gzip"
    ).mode("append").save()
    back = spark.read.format("kafka07").option("zookeeper", zookeeper).option("topic", COUNTS)
    written = sorted(r[0] for r in back.load().select(F.col("value").cast("string")).collect())
    print(f"written to {COUNTS} and read back: {', '.join(written)}")


async def run(zookeeper: str) -> None:
    produced: collections.Counter[str] = collections.Counter()
    async with Producer(zookeeper=zookeeper) as producer:
        for i in range(600):
            user, page = f"user-{i % 37}", PAGES[(i * i) % len(PAGES)]
            await producer.send(TOPIC, f"{user}|{page}|DE".encode(), key=user)
            produced[page] += 1
    print("produced:", ", ".join(f"{p}={n}" for p, n in sorted(produced.items())))

    spark = await asyncio.to_thread(start_spark)
    try:
        with tempfile.TemporaryDirectory() as checkpoint:
            await asyncio.to_thread(spark_jobs, spark, zookeeper, checkpoint)
    finally:
        await asyncio.to_thread(spark.stop)


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    address_argument(parser)
    args = parser.parse_args()
    async with local_cluster(args.zookeeper, topics=[TOPIC]) as zookeeper:
        await run(zookeeper)


if __name__ == "__main__":
    asyncio.run(main())

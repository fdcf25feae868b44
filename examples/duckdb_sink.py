"""A sink into DuckDB, exactly once across a crash: record batches in, offsets committed
after each write.

* :meth:`Consumer.getmany_batches <aiokafka07.group.Consumer.getmany_batches>` hands out
  each partition's messages as an :class:`aiokafka07.RecordBatch`: columns, no Python
  object per message. DuckDB reads one as a table through the Arrow PyCapsule interface,
  without pyarrow and without a copy: SQL names the Python variable holding it.
* The batches of each call go into the ``events`` table, keyed by (``broker_id``,
  ``partition``, ``offset``), in one DuckDB transaction with ``INSERT OR IGNORE``, and
  only then are the group's offsets committed. A crash between the two makes the next
  run read those messages again; the key keeps them out the second time, so the table
  holds each message exactly once.

Without an argument this runs a demo on a local cluster: it produces 20,000 events, runs
the sink as a child process that is killed (SIGKILL, as a crash: no cleanup) at the worst
moment, right after a write and before its commit, once it has written 8,000 rows; then
runs the sink again until it has caught up, and checks that the table holds every event
exactly once.

Run: ``python examples/duckdb_sink.py [ZOOKEEPER [DATABASE]]`` (with an address it sinks
``events`` into DATABASE, default ``events.duckdb``, as a member of the group
``duckdb-sink`` until stopped with Ctrl-C or SIGTERM). Needs ``pip install duckdb``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import duckdb
from _local import address_argument, local_cluster

from aiokafka07 import Producer, RecordBatch
from aiokafka07.group import Consumer

TOPIC = "events"
GROUP = "duckdb-sink"
EVENTS = 20_000
#: Values of at most this many bytes per call: a write and a commit every few thousand
#: events (a real sink picks what its database writes best).
MAX_BYTES = 64 << 10
#: The demo's child: with this set, the sink kills itself after the write that brings the
#: table to at least that many rows, before committing their offsets.
CRASH_AFTER = "DUCKDB_SINK_CRASH_AFTER_ROWS"
#: With this set, the sink stops once nothing came for that many ms (it caught up).
STOP_WHEN_IDLE = "DUCKDB_SINK_STOP_WHEN_IDLE_MS"

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    broker_id INTEGER,
    partition INTEGER,
    "offset" BIGINT,
    value BLOB,
    PRIMARY KEY (broker_id, partition, "offset")
)
"""


def write(db: duckdb.DuckDBPyConnection, batches: dict[object, RecordBatch]) -> int:
    """Insert the batches in one transaction; return how many rows were new."""
    inserted = 0
    db.execute("BEGIN TRANSACTION")
    for batch in batches.values():
        # DuckDB reads `batch` (a local variable) through __arrow_c_stream__.
        (count,) = db.execute(
            'INSERT OR IGNORE INTO events SELECT ?, ?, "offset", value FROM batch',
            [batch.broker_id, batch.partition],
        ).fetchone() or (0,)
        inserted += count
    db.execute("COMMIT")
    return inserted


async def sink(zookeeper: str, database: str, stop: asyncio.Event) -> None:
    """Consume ``events`` into ``database`` until ``stop`` is set (or, in the demo's
    child processes, until idle or the planned crash)."""
    crash_after = int(os.environ.get(CRASH_AFTER, "0"))
    idle_ms = float(os.environ.get(STOP_WHEN_IDLE, "0"))
    db = duckdb.connect(database)
    db.execute(SCHEMA)
    (rows,) = db.execute("SELECT count(*) FROM events").fetchone() or (0,)
    read = inserted = 0
    consumer = Consumer(
        TOPIC,
        group=GROUP,
        zookeeper=zookeeper,
        auto_commit=False,  # committed after each write, below
        auto_offset_reset="smallest",  # a new group starts at the oldest event
    )
    async with consumer:
        last = time.monotonic()
        while not stop.is_set():
            batches = await consumer.getmany_batches(timeout_ms=200, max_bytes=MAX_BYTES)
            if not batches:
                if idle_ms and (time.monotonic() - last) * 1000 >= idle_ms:
                    break
                continue
            last = time.monotonic()
            new = write(db, batches)
            read += sum(len(batch) for batch in batches.values())
            inserted += new
            rows += new
            if crash_after and rows >= crash_after:
                print(f"wrote {rows} rows; crashing before committing their offsets", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            await consumer.commit()  # the positions after the batches just written
    db.close()
    print(f"read {read} messages, inserted {inserted}, table holds {rows}", flush=True)


async def run_child(zookeeper: str, database: str, env: dict[str, str]) -> tuple[int, str]:
    """Run this file as the sink in a child process; its exit status and last line."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        zookeeper,
        database,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(child.communicate(), 120)
    lines = out.decode().splitlines()
    return child.returncode or 0, lines[-1] if lines else ""


async def demo(zookeeper: str) -> None:
    async with Producer(zookeeper=zookeeper) as producer:
        for n in range(EVENTS):
            await producer.send(TOPIC, b"event %d" % n)
    print(f"produced {EVENTS} events")
    with tempfile.TemporaryDirectory() as directory:
        database = str(Path(directory) / "events.duckdb")
        status, line = await run_child(zookeeper, database, {CRASH_AFTER: "8000"})
        print(f"first sink: {line}; exit status {status}")
        status, line = await run_child(zookeeper, database, {STOP_WHEN_IDLE: "3000"})
        print(f"second sink: {line}; exit status {status}")
        db = duckdb.connect(database, read_only=True)
        (rows, keys, values) = db.execute(
            'SELECT count(*), count(DISTINCT (broker_id, partition, "offset")), '
            "count(DISTINCT value) FROM events"
        ).fetchone() or (0, 0, 0)
        found = {value for (value,) in db.execute("SELECT value FROM events").fetchall()}
        db.close()
    missing = EVENTS - len(found & {b"event %d" % n for n in range(EVENTS)})
    print(f"events table: {rows} rows, {keys} distinct offsets, {values} distinct events")
    print(
        "every event exactly once"
        if rows == keys == values == EVENTS and missing == 0
        else f"NOT exactly once: {missing} events missing"
    )


async def serve(zookeeper: str, database: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await sink(zookeeper, database, stop)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    address_argument(parser)
    parser.add_argument("database", nargs="?", default="events.duckdb")
    args = parser.parse_args()
    if args.zookeeper:
        await serve(args.zookeeper, args.database)
        return
    async with local_cluster(None, topics=[TOPIC]) as zookeeper:
        await demo(zookeeper)


if __name__ == "__main__":
    asyncio.run(main())

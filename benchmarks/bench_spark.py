"""Spark reads through the ``kafka07`` data source, against the library's own read.

Workload: ``--messages`` 100-byte uncompressed messages over ``--partitions`` partitions
(the backlog), and one partition of ``--split-messages`` messages in a single segment,
written as 0.7.2 segment files for one embedded broker in its own process.

Every Spark figure is a ratio to the library's single-process read of the same
partitions (the SimpleConsumer's ``batches()`` over every partition in turn, every record
decoded, with the same ``--fetch-size`` as the Spark reads), measured interleaved with it:
``--reps`` repetitions of (library read, Spark reads), median and spread.

* **Spark local[1] and local[2]**: ``spark.read.format("kafka07")`` and an aggregate that
  touches every row (count and total value bytes), after a warm-up read; rows/s per core.
  Spark's own ceiling: the same query over a Python source that hands Spark one prebuilt
  Arrow batch again and again (no I/O, no decoding).
* **Job overhead**: every Spark read is a job with a fixed cost (planning in Python
  workers, scheduling, the aggregate's stage), measured by the same query reading no rows
  (``endingOffsets`` earliest; the ceiling source with no batches), interleaved too. "Rows
  past the overhead" divides the rows by the read's time minus that: the rate at which
  the executors read once the job runs, which is what a longer read tends to.
* **Spark standalone**: a master and ``--workers`` workers (2; 1 core, 1 GiB each, separate
  executor JVMs) started here from the pyspark package, on loopback; rows/s per executor.
* **Split inside a segment** (local[2]): the one-segment partition read as a single range
  and cut into ``--split-pieces`` by ``maxBytesPerPartition`` (cuts found from a window
  of about ``maxMessageSize`` bytes each): rows/s, and the bytes the broker read from its
  log (its ``/proc/<pid>/io`` rchar) as a ratio to the partition's size.

The machine's load average is printed before and after. Everything started here (the
broker, the Spark master and workers with their executors, the drivers) is stopped when
the run ends, fails or is interrupted (Ctrl-C, SIGTERM).

Run: ``python benchmarks/bench_spark.py [--messages N] [--partitions N] [--reps N]
[--fetch-size BYTES] [--split-messages N] [--split-pieces N] [--workers N]
[--no-standalone] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import spread, start_broker, write_segments

from aiokafka07 import SimpleConsumer
from aiokafka07.protocol import encode_message_set

PAYLOAD = 100
BATCH = 1000
TOPIC = "backlog"
SPLIT = "split"
WORKERS = 2
FETCH_SIZE = 1 << 20  # the kafka07 source's default fetchSize


def write_backlog(log_dir: Path, topic: str, partitions: int, messages: int) -> list[int]:
    """``messages`` spread evenly over ``partitions`` segment files; each partition's size."""
    rng = random.Random(5)
    payloads = [rng.randbytes(30) + b"v" * (PAYLOAD - 30) for _ in range(BATCH)]
    chunk = encode_message_set(payloads)
    return write_segments(log_dir, topic, partitions, chunk, messages // partitions // BATCH)


async def library_read(port: int, partitions: int, fetch_size: int) -> tuple[int, float]:
    """Rows and seconds to decode every record of the backlog in this process."""
    async with SimpleConsumer("127.0.0.1", port, fetch_size=fetch_size) as consumer:
        rows = 0
        start = time.perf_counter()
        for p in range(partitions):
            async for batch in consumer.batches(TOPIC, p, 0):
                rows += len(batch.messages)
        return rows, time.perf_counter() - start


def _ceiling_source(rows: int, partitions: int, name: str = "ceiling") -> Any:
    """A Python data source that hands Spark the same prebuilt Arrow batch over and over:
    what Spark's Python data source path costs when the source itself costs nothing."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from aiokafka07.spark.reader import COLUMNS, SCHEMA, SCHEMA_DDL

    per_batch = 9500
    batches = max(1, rows // per_batch // partitions) if rows else 0

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition: InputPartition) -> Any:
            n = per_batch
            values = {
                "topic": [TOPIC] * n,
                "broker_id": [0] * n,
                "partition": [0] * n,
                "offset": list(range(n)),
                "offset_seq": [0] * n,
                "value": [b"v" * PAYLOAD] * n,
            }
            arrays = [pa.array(values[name], arrow) for name, _, arrow in COLUMNS]
            batch = pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)
            for _ in range(batches):
                yield batch

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema: Any) -> Reader:
            return Reader()

    return Ceiling


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers on loopback, each a JVM in a
    process group of its own (a worker's executors are its children), started with the
    pyspark package's ``spark-class``; :meth:`stop` ends every one of them."""

    def __init__(self, directory: Path, workers: int = WORKERS) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.directory = directory
        self.workers = workers
        self.processes: list[subprocess.Popen[bytes]] = []
        self.url = ""
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }

    def _start(self, name: str, *args: str) -> None:
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 - the process's
        with log:
            self.processes.append(
                subprocess.Popen(
                    [str(self.home / "bin" / "spark-class"), *args],
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def start(self, timeout: float = 180) -> None:
        properties = self.directory / "spark.properties"
        properties.write_text("spark.master.rest.enabled false\n")
        port, ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{port}"
        common = ["--properties-file", str(properties)]
        self._start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(port), "--webui-port", str(ui), *common,
        )  # fmt: skip
        for i in range(self.workers):
            work = self.directory / f"work-{i}"
            work.mkdir()
            self._start(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", "0", "--work-dir", str(work), *common,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while self._alive_workers(ui) < self.workers:
            for process, name in zip(self.processes, self._names(), strict=True):
                if process.poll() is not None:
                    log = (self.directory / f"{name}.log").read_text(errors="replace")
                    raise RuntimeError(f"Spark {name} exited: {log[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark standalone cluster did not start in {timeout} s")
            time.sleep(0.5)

    def _names(self) -> list[str]:
        return ["master", *(f"worker-{i}" for i in range(self.workers))][: len(self.processes)]

    @staticmethod
    def _alive_workers(ui: int) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as answer:
                return int(json.load(answer)["aliveworkers"])
        except (OSError, ValueError, KeyError):
            return 0

    def stop(self) -> None:
        """SIGTERM to each process group (workers first), SIGKILL after 15 s."""
        for process in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in reversed(self.processes):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # executors left in the group


def broker_bytes_read(pid: int) -> int:
    """Bytes the broker process has read through read()/pread() calls (its log files and
    its sockets): ``rchar`` of /proc/<pid>/io."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/<pid>/io")


class Run:
    """One Spark session's measurements (local or standalone)."""

    def __init__(self, spark: Any, port: int, partitions: int, fetch_size: int) -> None:
        self.spark = spark
        self.port = port
        self.partitions = partitions
        self.fetch_size = fetch_size

    def read(self, fmt: str, **options: str) -> tuple[int, float]:
        """Rows and seconds of a new DataFrame's read and aggregate (planned again) of
        the backlog, or of what ``options`` subscribe to."""
        from pyspark.sql import functions as F

        reader = (
            self.spark.read.format(fmt)
            .option("brokers", f"0:127.0.0.1:{self.port}")
            .option("partitionsPerBroker", str(self.partitions))
            .option("fetchSize", str(self.fetch_size))
        )
        if "assign" not in options:
            reader = reader.option("topic", TOPIC)
        for key, value in options.items():
            reader = reader.option(key, value)
        start = time.perf_counter()
        df = reader.load()
        (result,) = df.agg(F.count("*").alias("rows"), F.sum(F.length("value"))).collect()
        return int(result["rows"]), time.perf_counter() - start

    def input_partitions(self, **options: str) -> int:
        reader = self.spark.read.format("kafka07").option("brokers", f"0:127.0.0.1:{self.port}")
        for key, value in options.items():
            reader = reader.option(key, value)
        return int(reader.load().rdd.getNumPartitions())


async def interleaved(
    reps: int, library: Callable[[], Any], *spark_reads: Callable[[], tuple[int, float]]
) -> tuple[list[float], list[list[tuple[int, float]]]]:
    """``reps`` rounds of the library read then each Spark read; library rows/s per round
    and each Spark read's (rows, seconds) per round."""
    library_rates: list[float] = []
    spark: list[list[tuple[int, float]]] = [[] for _ in spark_reads]
    for _ in range(reps):
        rows, seconds = await library()
        library_rates.append(rows / seconds)
        for i, read in enumerate(spark_reads):
            spark[i].append(await asyncio.to_thread(read))
    return library_rates, spark


def session(mode: str, master: str | None, workers: int) -> Any:
    from aiokafka07.spark import local_session

    cores = 1 if mode == "local[1]" else 2
    conf = {"spark.driver.memory": "2g"}
    if master is not None:
        conf |= {
            "spark.executor.memory": "1g",
            "spark.executor.cores": "1",
            "spark.cores.max": str(workers),
            "spark.pyspark.python": sys.executable,
        }
        if os.environ.get("PYTHONPATH"):  # executors import this library as the driver does
            conf["spark.executorEnv.PYTHONPATH"] = os.environ["PYTHONPATH"]
        conf["spark.master"] = master
    return local_session(cores, f"bench-spark-{mode}", conf)


async def measure_mode(
    mode: str, port: int, args: argparse.Namespace, work: Path, split_bytes: int, broker: int
) -> dict[str, Any]:
    cluster = StandaloneCluster(work / "standalone", args.workers) if mode == "standalone" else None
    try:
        if cluster is not None:
            cluster.directory.mkdir()
            await asyncio.to_thread(cluster.start)
        spark = await asyncio.to_thread(
            session, mode, cluster.url if cluster else None, args.workers
        )
        try:
            run = Run(spark, port, args.partitions, args.fetch_size)
            return await _measure_session(mode, run, args, split_bytes, broker)
        finally:
            await asyncio.to_thread(spark.stop)
    finally:
        if cluster is not None:
            cluster.stop()


async def _measure_session(
    mode: str, run: Run, args: argparse.Namespace, split_bytes: int, broker: int
) -> dict[str, Any]:
    def library() -> Any:
        return library_read(run.port, args.partitions, args.fetch_size)

    nothing = json.dumps({f"0-{p}": -2 for p in range(args.partitions)})  # end at earliest
    reads: list[Callable[[], tuple[int, float]]] = [
        lambda: run.read("kafka07"),
        lambda: run.read("kafka07", endingOffsets=nothing),  # no rows: the job's cost
    ]
    local = mode != "standalone"
    if local:
        run.spark.dataSource.register(_ceiling_source(args.messages, args.partitions))
        run.spark.dataSource.register(_ceiling_source(0, args.partitions, "ceiling_empty"))
        reads += [lambda: run.read("ceiling"), lambda: run.read("ceiling_empty")]
    for read in reads:
        await asyncio.to_thread(read)  # warm-up: Python workers start, modules load
    library_rates, spark = await interleaved(args.reps, library, *reads)
    rows = spark[0][0][0]
    if spark[1][0][0] or (local and spark[3][0][0]):
        raise RuntimeError("a read meant to hold no rows returned some")
    units = args.workers if mode == "standalone" else (1 if mode == "local[1]" else 2)
    unit = "per_executor" if mode == "standalone" else "per_core"

    def rates(samples: list[tuple[int, float]], empty: list[tuple[int, float]]) -> dict[str, Any]:
        """Rows/s of the reads and per unit against the library, end to end and past
        the job's overhead (the empty read of the same round)."""
        end_to_end = [r / s for r, s in samples]
        past = [r / max(1e-3, s - e) for (r, s), (_, e) in zip(samples, empty, strict=True)]
        return {
            "rows_per_s": spread(end_to_end),
            f"{unit}_vs_library": spread(
                [x / units / lib for x, lib in zip(end_to_end, library_rates, strict=True)]
            ),
            "overhead_s": spread([e for _, e in empty]),
            "past_overhead_rows_per_s": spread(past),
            f"past_overhead_{unit}_vs_library": spread(
                [x / units / lib for x, lib in zip(past, library_rates, strict=True)]
            ),
        }

    figures: dict[str, Any] = {
        "rows": rows,
        "library_rows_per_s": spread(library_rates),
        **rates(spark[0], spark[1]),
    }
    if mode == "standalone":
        figures["executors"] = args.workers
        figures["per_executor_rows_per_s"] = spread([r / s / units for r, s in spark[0]])
    if local:
        figures["ceiling"] = rates(spark[2], spark[3])
        figures["vs_spark_ceiling"] = spread(
            [(r / s) / (cr / cs) for (r, s), (cr, cs) in zip(spark[0], spark[2], strict=True)]
        )
    if mode == "local[2]":
        figures["split"] = await _measure_split(run, args, split_bytes, broker)
    return figures


async def _measure_split(
    run: Run, args: argparse.Namespace, split_bytes: int, broker: int
) -> dict[str, Any]:
    one = {"assign": json.dumps({SPLIT: ["0-0"]})}
    cut = {**one, "maxBytesPerPartition": str(-(-split_bytes // args.split_pieces))}
    pieces = await asyncio.to_thread(run.input_partitions, **cut)

    def measured(options: dict[str, str]) -> Callable[[], tuple[int, float, int]]:
        def read() -> tuple[int, float, int]:
            before = broker_bytes_read(broker)
            rows, seconds = run.read("kafka07", **options)
            return rows, seconds, broker_bytes_read(broker) - before

        return read

    await asyncio.to_thread(measured(cut))  # warm-up
    single: list[tuple[int, float, int]] = []
    split: list[tuple[int, float, int]] = []
    for _ in range(args.reps):
        single.append(await asyncio.to_thread(measured(one)))
        split.append(await asyncio.to_thread(measured(cut)))

    def figures(samples: list[tuple[int, float, int]]) -> dict[str, Any]:
        return {
            "rows": samples[0][0],
            "rows_per_s": spread([r / s for r, s, _ in samples]),
            "broker_read_vs_partition": spread([b / split_bytes for _, _, b in samples]),
        }

    return {
        "partition_bytes": split_bytes,
        "input_partitions": pieces,
        "single_range": figures(single),
        "cut_inside_segment": figures(split),
        "speedup": spread([a[1] / b[1] for a, b in zip(single, split, strict=True)]),
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as directory:
        work = Path(directory)
        log_dir = work / "logs"
        log_dir.mkdir()
        write_backlog(log_dir, TOPIC, args.partitions, args.messages)
        (split_bytes,) = write_backlog(log_dir, SPLIT, 1, args.split_messages)
        proc, port = await start_broker(str(log_dir), partitions=args.partitions)
        try:
            modes = ["local[1]", "local[2]"] + ([] if args.no_standalone else ["standalone"])
            results = {
                mode: await measure_mode(mode, port, args, work, split_bytes, proc.pid)
                for mode in modes
            }
        finally:
            proc.terminate()
            await proc.wait()
    split = results["local[2]"].pop("split")
    return {
        "messages": args.messages,
        "partitions": args.partitions,
        "fetch_size": args.fetch_size,
        "reps": args.reps,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "spark": results,
        "scaling_2_over_1": results["local[2]"]["rows_per_s"]["median"]
        / results["local[1]"]["rows_per_s"]["median"],
        "split": split,
    }


def _spread(s: dict[str, float], fmt: str = ",.0f") -> str:
    return f"{s['median']:{fmt}} [{s['min']:{fmt}} - {s['max']:{fmt}}]"


def render(results: dict[str, Any]) -> str:
    load = results["load_average"]
    lines = [
        f"{results['messages']:,} messages of {PAYLOAD} B over {results['partitions']} "
        f"partitions, fetches of {results['fetch_size']:,} B; {results['reps']} interleaved "
        "repetitions, median [min - max]",
        f"load average before {load['before'][0]:.2f}, after {load['after'][0]:.2f}",
    ]

    def reads(name: str, f: dict[str, Any], unit: str) -> list[str]:
        return [
            f"    {name:<22} {_spread(f['rows_per_s'])} rows/s",
            f"      per {unit} vs library {_spread(f[f'per_{unit}_vs_library'], '.0%')}",
            f"      job overhead        {_spread(f['overhead_s'], '.2f')} s (reading 0 rows)",
            f"      past the overhead   {_spread(f['past_overhead_rows_per_s'])} rows/s, per "
            f"{unit} vs library {_spread(f[f'past_overhead_per_{unit}_vs_library'], '.0%')}",
        ]

    for mode, figures in results["spark"].items():
        unit = "executor" if mode == "standalone" else "core"
        lines += [
            f"  {mode}: {figures['rows']:,} rows",
            f"    library, one process   {_spread(figures['library_rows_per_s'])} rows/s",
            *reads("spark (kafka07)", figures, unit),
        ]
        if "ceiling" in figures:
            lines += [
                *reads("Spark's own ceiling", figures["ceiling"], unit),
                f"    kafka07 vs ceiling     {_spread(figures['vs_spark_ceiling'], '.0%')}",
            ]
    lines.append(f"  local[2] / local[1]      {results['scaling_2_over_1']:.2f}x")
    split = results["split"]
    lines.append(
        f"  one partition, one segment of {split['partition_bytes']:,} B, local[2]: "
        f"{split['input_partitions']} input partitions when cut"
    )
    for name in ("single_range", "cut_inside_segment"):
        f = split[name]
        lines.append(
            f"    {name:<20} {_spread(f['rows_per_s'])} rows/s, broker read "
            f"{_spread(f['broker_read_vs_partition'], '.3f')}x the partition"
        )
    lines.append(f"    speedup              {_spread(split['speedup'], '.2f')}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--fetch-size", type=int, default=FETCH_SIZE, help="bytes per fetch, library and Spark"
    )
    parser.add_argument("--split-messages", type=int, default=1_000_000)
    parser.add_argument("--split-pieces", type=int, default=4)
    parser.add_argument("--workers", type=int, default=WORKERS, help="standalone workers")
    parser.add_argument("--no-standalone", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # unwinds through every finally: all is stopped

    signal.signal(signal.SIGTERM, interrupted)
    try:
        results = asyncio.run(measure(args))
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped", file=sys.stderr)
        sys.exit(130)
    print(json.dumps(results, indent=2) if args.json else render(results))


if __name__ == "__main__":
    main()

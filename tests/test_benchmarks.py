"""The benchmark scripts run and report every figure they promise (figures are printed,
not asserted as thresholds: see benchmarks/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_json(script: str, *args: str) -> Any:
    """Run a benchmark script with ``--json`` and return its figures."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(result.stdout)


def test_codec_benchmark_reports_every_figure() -> None:
    figures = run_json("bench_codec.py", "--quick")
    assert figures["workload"]["payload_bytes"] == 100
    for op in ("decode", "encode"):
        ours = [v for k, v in figures[op].items() if k.startswith("ours_")]
        assert ours
        assert all(v["messages_per_s"] > 0 for v in ours)
    for codec in ("gzip", "snappy"):
        for op in ("encode", "compress", "decode", "decompress"):
            assert figures["compression"][codec][op]["time_ratio"] > 0


def test_broker_benchmark_reports_ingest_and_serve_rates() -> None:
    figures = run_json("bench_broker.py", "--messages", "40000", "--connections", "2")
    for name in ("ingest_none", "ingest_snappy", "serve"):
        assert figures[name]["messages_per_s"] > 0
        assert figures[name]["wire_mb_per_s"] > 0


def test_consumer_benchmark_reports_iteration_and_request_rates() -> None:
    figures = run_json("bench_consumer.py", "--messages", "50000", "--requests", "500")
    assert figures["messages"] == 50000
    assert figures["messages_iter"]["messages_per_s"] > 0
    assert figures["batches_iter"]["messages_per_s"] > 0
    assert figures["requests"]["pipelined_per_s"] > 0
    assert figures["requests"]["serial_per_s"] > 0


def test_producer_benchmark_reports_every_codec() -> None:
    figures = run_json("bench_producer.py", "--messages", "20000")
    runs = {(r["codec"], r["confirm"]): r for r in figures["runs"]}
    assert set(runs) == {("none", True), ("gzip", True), ("snappy", True), ("none", False)}
    assert all(r["messages_per_s"] > 0 for r in runs.values())


def test_group_benchmark_reports_cpu_ratios_memory_and_rebalances() -> None:
    figures = run_json("bench_group.py", "--messages", "40000", "--memory-mb", "10")
    assert figures["reps"] >= 5
    assert len(figures["load_before"]) == len(figures["load_after"]) == 3
    for codec in ("none", "snappy"):
        cpu = figures["cpu"][codec]
        assert cpu["floor"]["cpu_us_per_message"]["median"] > 0
        for mode in ("async_for", "getmany"):
            ratio = cpu[mode]["cpu_ratio_to_floor"]
            assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
            assert cpu[mode]["messages_per_s"]["median"] > 0
    memory = figures["memory"]
    assert memory["backlog_mb"] == 10
    assert memory["large"]["peak_rss_mb"] > 0
    assert memory["small"]["peak_rss_mb"] > 0
    for move in ("join_s", "leave_s"):
        assert 0 < figures["rebalance"][move]["min"] <= figures["rebalance"][move]["max"]


def test_spark_benchmark_reports_both_core_counts_and_the_ceiling() -> None:
    pytest.importorskip("pyspark")
    figures = run_json("bench_spark.py", "--messages", "40000", "--partitions", "2", "--runs", "1")
    assert figures["library_single_process"]["rows"] == 40000
    for cores in ("local[1]", "local[2]"):
        spark = figures["spark"][cores]
        assert spark["rows"] == 40000  # Spark read every message once
        assert spark["rows_per_s"] > 0
        assert spark["ceiling_rows_per_s"] > 0
    assert figures["scaling_2_over_1"] > 0

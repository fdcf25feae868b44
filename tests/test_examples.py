"""Every example runs (so none can rot), and prints what it promises.

Examples run as a user runs them (``python examples/<name>.py``, no arguments), against
this checkout. All but the codec tour start a local cluster with a real ZooKeeper, so
they need the ``zookeeper_installed`` fixture; the Spark one is skipped, as every Spark
test is, when the ``spark`` extra is not installed.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aiokafka07.partitioner import default_partition, java_hash_code

ROOT = Path(__file__).resolve().parents[1]
# ``_local.py`` and other ``_`` modules are helpers shared by the examples.
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


def check_codec_tour(lines: list[str]) -> None:
    assert lines[0].startswith("client writes a 396-byte MULTIPRODUCE")
    offsets = [int(line.split()[1]) for line in lines if line.startswith("  offset")]
    # Three plain messages, then a gzip wrapper: start, start, end (0.7.2 offsets).
    assert offsets == [40, 80, 121, 121, 121, 219]
    assert "fetch next at offset 219 (log end 328)" in lines[-2]
    assert lines[-1] == "the next fetch returns 3 more, ending at 328"


def _local_candidates(lines: list[str]) -> list[str]:
    """The sorted "b-p" candidates of a local 2-broker cluster with 2 partitions each."""
    assert lines[0].startswith("local cluster: ZooKeeper 127.0.0.1:"), lines[0]
    return ["0-0", "0-1", "1-0", "1-1"]


def check_keyed_producer(lines: list[str]) -> None:
    candidates = _local_candidates(lines)
    assert lines[1] == f"page-views has 4 partitions: {' '.join(candidates)}"
    placed = {}
    for line in lines:
        match = re.fullmatch(r"key '(\w+)' -> (\d-\d) \(hashCode (-?\d+), index (\d) of 4\)", line)
        if match:
            key, where, hash_code, index = match.groups()
            # Where the producer put the key is where the Java partitioner says it goes.
            assert int(hash_code) == java_hash_code(key)
            assert int(index) == default_partition(key, 4)
            assert where == candidates[int(index)]
            placed[key] = where
    assert len(placed) == 8
    assert set(placed.values()) == set(candidates)  # the keys were chosen to hit all four
    read_back = lines[lines.index("read back:") + 1 :]
    found = {}
    for line in read_back:
        where, _, users = line.strip().partition(": ")
        for entry in users.split(", "):
            user, _, count = entry.partition(" x")
            assert count == "3", line  # all three views of a key, in its one partition
            found[user] = where
    assert found == placed


def check_worker(lines: list[str]) -> None:
    def total(ids: range) -> str:
        return f"{sum((i * 37) % 100 + 0.5 for i in ids):.2f}"

    assert "produced orders 0-59" in lines
    assert "produced orders 60-74" in lines
    assert lines.count("SIGTERM: finishing the current order, committing, leaving the group") == 2
    assert (
        f"worker-1 processed 60 orders (ids 0-59, 60 distinct, 0 repeated), "
        f"total {total(range(60))}"
    ) in lines
    # The second worker resumed exactly after what the first one committed.
    assert (
        f"worker-2 processed 15 orders (ids 60-74, 15 distinct, 0 repeated), "
        f"total {total(range(60, 75))}"
    ) in lines
    committed = [line for line in lines if " committed " in line]
    assert len(committed) == 2
    first, second = (
        dict(e.split("=") for e in c.split(" committed ")[1].split(", ")) for c in committed
    )
    assert set(first) == set(second) == {f"orders/{p}" for p in ("0-0", "0-1", "1-0", "1-1")}
    assert all(int(second[tp]) >= int(first[tp]) for tp in first)
    assert sum(int(second[tp]) > int(first[tp]) for tp in first) >= 2  # 15 keyed orders moved


def check_fan_out(lines: list[str]) -> None:
    assert "produced 400 readings" in lines
    owners: dict[str, int] = {}
    totals = []
    for line in lines:
        match = re.fullmatch(r"stream (\d): (\d+) records from (.*)", line)
        if not match:
            continue
        stream, count, sources = int(match[1]), int(match[2]), match[3]
        per_partition = dict(entry.split(" x") for entry in sources.split(", "))
        assert sum(map(int, per_partition.values())) == count
        for partition in per_partition:
            assert partition not in owners, (
                f"{partition} in streams {owners[partition]} and {stream}"
            )
            owners[partition] = stream
        totals.append(count)
    assert len(totals) == 4
    assert sorted(owners) == [f"{b}-{p}" for b in range(2) for p in range(4)]
    assert collections.Counter(owners.values()) == {0: 2, 1: 2, 2: 2, 3: 2}  # 8 over 4 threads
    assert lines[-1] == "total: 400 records in 4 streams"


def check_topic_filter(lines: list[str]) -> None:
    assert "whitelist 'metrics-.*' got: metrics-cpu x20, metrics-mem x20" in lines
    after = next(line for line in lines if line.startswith("after a rebalance"))
    assert after.endswith("metrics-cpu x20, metrics-disk x20, metrics-mem x20")
    rebalances = re.search(r"rebalances so far: (\d+)", after)
    assert rebalances is not None
    # The count is of rebalances finished: the one that claims metrics-disk starts its
    # fetches before it finishes, so on a busy machine its records can come first (1).
    assert int(rebalances[1]) >= 1
    # ... and the assignment, which only a rebalance changes, has the new topic.
    assert "assigned topics: metrics-cpu, metrics-disk, metrics-mem" in lines
    assert lines[-1] == (
        "final: metrics-cpu x20, metrics-disk x20, metrics-mem x20; logs-app x0 (not matched)"
    )


def check_aiohttp_app(lines: list[str]) -> None:
    candidates = _local_candidates(lines)
    assert re.fullmatch(r"serving on http://127\.0\.0\.1:\d+", lines[1])
    assert lines[2] == "SSE stream ready: 4 partitions of clicks"
    posts = [line for line in lines if line.startswith("POST ")]
    for n in (1, 2, 3):
        assert (
            f'POST /topics/clicks?key=user-{n} -> 202 {{"queued": true, "topic": "clicks"}}'
            in posts
        )
    confirmed = {}
    for line in posts:
        match = re.fullmatch(r"POST /topics/clicks\?key=(user-\d)&wait=1 -> 200 (.*)", line)
        if match:
            answer = json.loads(match[2])
            assert answer["confirmed"] is True
            confirmed[match[1]] = f"{answer['broker']}-{answer['partition']}"
    assert sorted(confirmed) == ["user-4", "user-5", "user-6"]
    assert "POST /topics/xxxxxxxxxxxx -> 400 InvalidTopicError" in posts
    assert "POST /topics/clicks -> 413 MessageTooLargeError" in posts
    assert "GET /topics/clicks/events?from=middle -> 400" in lines

    received = {}
    for line in lines:
        match = re.fullmatch(r"SSE message (\d-\d)@\d+: (user-\d) clicked (buy|home)", line)
        if match:
            received[match[2]] = match[1]
    # Every accepted message came back through the event stream, each key from the
    # partition the Java partitioner picks (and the one the 200 answer named).
    assert sorted(received) == [f"user-{n}" for n in range(1, 7)]
    for user, where in received.items():
        assert where == candidates[default_partition(user, 4)]
        assert confirmed.get(user, where) == where
    assert "SSE stream ended after 6 messages" in lines
    assert "GET /readyz -> 200 ready" in lines
    sent = next(line for line in lines if line.startswith("GET /metrics -> "))
    metric = r'aiokafka07_producer_messages_sent_total\{client_id="producer"\} (\d+)\.0'
    match = re.fullmatch(r"GET /metrics -> 200 " + metric, sent)
    assert match is not None, sent
    assert 3 <= int(match[1]) <= 6  # the three confirmed ones at least, of six accepted
    unsent = re.fullmatch(
        r"queued 20 more; shutting down with (\d+) messages not yet delivered", lines[-2]
    )
    assert unsent is not None
    assert int(unsent[1]) > 0  # the shutdown really had messages to flush
    assert lines[-1] == "shut down: 23 of 23 queued messages delivered, 0 failed"


def check_spark_pipeline(lines: list[str]) -> None:
    produced = next(line for line in lines if line.startswith("produced: "))
    counts = produced.removeprefix("produced: ")
    assert sum(int(item.split("=")[1]) for item in counts.split(", ")) == 600
    batch = [line.split() for line in lines if line.startswith("  /")]
    assert ", ".join(f"{page}={n}" for page, n in batch) == counts
    streaming = next(line for line in lines if line.startswith("streaming job ("))
    assert int(streaming.split("(")[1].split()[0]) > 1  # several micro-batches
    assert streaming.endswith(f"): {counts}")
    assert lines[-1] == f"written to pageview-counts and read back: {counts}"


def check_duckdb_sink(lines: list[str]) -> None:
    assert "produced 20000 events" in lines
    first = next(line for line in lines if line.startswith("first sink: "))
    crashed = re.fullmatch(
        r"first sink: wrote (\d+) rows; crashing before committing their offsets; "
        r"exit status -9",
        first,
    )
    assert crashed, first
    written = int(crashed[1])
    assert 8000 <= written < 20000
    second = next(line for line in lines if line.startswith("second sink: "))
    caught_up = re.fullmatch(
        r"second sink: read (\d+) messages, inserted (\d+), table holds 20000; exit status 0",
        second,
    )
    assert caught_up, second
    read, inserted = int(caught_up[1]), int(caught_up[2])
    # What the first wrote and never committed was read again and kept out by the key.
    assert inserted == 20000 - written
    assert read > inserted
    assert "events table: 20000 rows, 20000 distinct offsets, 20000 distinct events" in lines
    assert lines[-1] == "every event exactly once"


CHECKS = {
    "aiohttp_app.py": check_aiohttp_app,
    "codec_tour.py": check_codec_tour,
    "duckdb_sink.py": check_duckdb_sink,
    "fan_out.py": check_fan_out,
    "keyed_producer.py": check_keyed_producer,
    "spark_pipeline.py": check_spark_pipeline,
    "topic_filter.py": check_topic_filter,
    "worker.py": check_worker,
}
NO_ZOOKEEPER = {"codec_tour.py"}
#: Examples that need an optional extra, by the module that extra brings.
NEEDS = {"spark_pipeline.py": "pyspark"}


def test_every_example_is_checked() -> None:
    assert sorted(CHECKS) == [p.name for p in EXAMPLES]


@pytest.mark.timeout(900)  # the Spark example starts Spark: minutes on a busy machine
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example(example: Path, request: pytest.FixtureRequest) -> None:
    if example.name in NEEDS:
        pytest.importorskip(NEEDS[example.name], reason="the spark extra is not installed")
    if example.name not in NO_ZOOKEEPER:
        request.getfixturevalue("zookeeper_installed")
    # The checkout under test comes first, whatever else is installed.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, str(example)],
        capture_output=True,
        text=True,
        timeout=840,  # a bound for a hang, not for speed
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines, f"{example.name} printed nothing"
    CHECKS[example.name](lines)

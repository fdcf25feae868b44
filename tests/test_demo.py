"""``aiokafka07 demo``, the README's main job, as a user runs it (small sizes)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


def demo(*args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "aiokafka07", "demo", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result.stdout.splitlines()


@pytest.mark.usefixtures("zookeeper_installed")
def test_demo_pipeline_counts_agree_on_every_path() -> None:
    pytest.importorskip("pyspark")
    lines = demo("--messages", "20000", "--members", "2")
    text = "\n".join(lines)
    for path in ("consumer group (live)", "spark batch", "spark streaming", "read back from"):
        assert re.search(rf"{re.escape(path)}.* 20,000 views  ok", text), path
    assert re.search(r"consumer group, 2 members: 20,000 in", text)
    assert "group spark-pageviews: offsets in ZooKeeper, lag 0 bytes" in text
    assert "group pageview-counter: offsets in ZooKeeper, lag 0 bytes" in text
    # Keyed by user over 2 brokers x 4 partitions: every partition got its share.
    rows = [line.split() for line in lines if re.match(r"  \d-\d ", line)]
    assert len(rows) == 8
    assert all(int(row[1].replace(",", "")) > 1000 for row in rows)
    assert sum(int(row[1].replace(",", "")) for row in rows) == 20000
    assert lines[-1].startswith("all paths agree")


def test_demo_static_mode_without_spark() -> None:
    lines = demo("--messages", "5000", "--static", "--no-spark")
    text = "\n".join(lines)
    assert "static broker list" in text
    assert re.search(r"simple consumers \(live\).* 5,000 views  ok", text)
    assert lines[-1].startswith("all paths agree")

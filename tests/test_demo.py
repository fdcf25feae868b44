"""``aiokafka07 demo``, the README's main job, as a user runs it (small sizes).

The full pipeline (ZooKeeper, a consumer group, Spark), static mode, what happens on a
machine without ZooKeeper (installed when the demo may, else one line saying what to
run), and one Ctrl-C at the terminal during the produce stage and during Spark.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiokafka07 import demo as demo_module
from aiokafka07.testing.local import local_cluster
from aiokafka07.tools.progress import Elapsed

from .test_cli_edges import Terminal

ROOT = Path(__file__).resolve().parents[1]


def demo(*args: str) -> tuple[list[str], str]:
    result = subprocess.run(
        [sys.executable, "-m", "aiokafka07", "demo", *args],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return result.stdout.splitlines(), result.stderr


@pytest.mark.timeout(900)  # Spark's start and three Spark jobs: minutes on a busy machine
@pytest.mark.usefixtures("zookeeper_installed")
def test_demo_pipeline_counts_agree_on_every_path() -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    lines, err = demo("--messages", "20000", "--members", "2")
    # Nothing but the report: no Spark banner or WARN lines, no progress bars (not a
    # terminal here), nothing on stderr.
    assert err == ""
    text = "\n".join(lines)
    assert "WARN" not in text
    assert "log level" not in text
    # Spark's start (half a minute or more) is announced before it begins.
    starting = lines.index("  starting local Spark (its JVM; half a minute or more) ...")
    assert lines[starting + 1].startswith("  (local Spark started in ")
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
    lines, err = demo("--messages", "5000", "--static", "--no-spark")
    assert err == ""
    text = "\n".join(lines)
    assert "static broker list" in text
    assert re.search(r"simple consumers \(live\).* 5,000 views  ok", text)
    assert "spark" not in text.lower()  # --no-spark: not started, not needed installed
    assert lines[-1].startswith("all paths agree")
    assert "spark" not in text.lower()  # --no-spark, whether PySpark is installed or not


@pytest.mark.usefixtures("zookeeper_installed")
def test_demo_without_spark_reports_only_the_group_that_ran() -> None:
    lines, err = demo("--messages", "3000", "--members", "2", "--no-spark")
    assert err == ""
    text = "\n".join(lines)
    assert "group pageview-counter: offsets in ZooKeeper, lag 0 bytes" in text
    assert "spark" not in text.lower()  # no group spark-pageviews "lagging" by everything
    assert lines[-1].startswith("all paths agree")


@pytest.mark.parametrize("value", ["-5", "0", "many"])
def test_demo_bad_numbers_are_bad_arguments(value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aiokafka07", "demo", "--messages", value],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("usage: aiokafka07 demo")
    assert "argument --messages: " in result.stderr.splitlines()[-1]


async def test_a_wait_without_a_count_shows_its_time_on_a_terminal() -> None:
    """What the demo shows on a terminal while Spark starts: a line counting the seconds,
    removed when the wait ends."""
    terminal = Terminal()
    try:
        with os.fdopen(terminal.slave, "w", closefd=False) as stream:
            async with Elapsed("  starting Spark", enabled=True, interval=0.1, stream=stream):
                await terminal.expect(re.compile(rb"  starting Spark: 00:00"))
                await terminal.expect(re.compile(rb"  starting Spark: 00:01"))  # counting
        terminal.close_slave()  # the slave end closed: the output ends
        shown = await terminal.until_closed()
    finally:
        terminal.close()
    assert shown.endswith("\r")  # and removed: the cursor back at the start of the line


# -- a machine without ZooKeeper -----------------------------------------------------------

# Runs the demo where ZooKeeper looks missing (no jars where Debian puts them), as a user
# whose id is EUID, with an apt-get on PATH that only records that it was called.
WITHOUT_ZOOKEEPER = """
import os, sys
from pathlib import Path
from aiokafka07.testing import zookeeper_server
zookeeper_server.JAVA_DIR = Path(sys.argv[1])
os.geteuid = lambda: int(sys.argv[2])
from aiokafka07.cli import main
sys.exit(main(["demo", "--messages", "10"]))
"""


def demo_without_zookeeper(
    tmp_path: Path, euid: int
) -> tuple[subprocess.CompletedProcess[str], bool]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "apt-get-called"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {called}\nexit 1\n')
    (bin_dir / "apt-get").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_ZOOKEEPER, str(tmp_path / "no-jars"), str(euid)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    return result, called.exists()


def test_without_zookeeper_and_not_root_one_line_says_what_to_run(tmp_path: Path) -> None:
    result, apt_get_called = demo_without_zookeeper(tmp_path, euid=1000)
    assert not apt_get_called
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("aiokafka07 demo: error: ZooKeeper is not installed (")
    assert "sudo apt-get install -y zookeeper" in line  # what to run
    assert "consumer group" in line  # and why
    assert "--static" in line  # or how to do without


@pytest.mark.skipif(
    not Path("/etc/debian_version").exists(), reason="the demo installs only on Debian"
)
def test_without_zookeeper_as_root_the_demo_installs_it_saying_so(tmp_path: Path) -> None:
    result, apt_get_called = demo_without_zookeeper(tmp_path, euid=0)
    assert apt_get_called
    assert result.stdout.startswith(
        "aiokafka07 demo: installing Debian's zookeeper package with apt-get ("
    )
    assert result.returncode == 1  # our stand-in apt-get fails, and that is reported
    (line,) = result.stderr.splitlines()
    assert line.startswith("aiokafka07 demo: error: apt-get ")
    assert "failed with exit code 1" in line


# -- one Ctrl-C ------------------------------------------------------------------------------


async def ctrl_c_during(marker: str, *args: str) -> tuple[int, str, str, float]:
    """Run the demo as a terminal's foreground job, send SIGINT to its process group when
    ``marker`` appears on stdout: (status, stdout, stderr, seconds from SIGINT to exit)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aiokafka07", "demo", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # a process group of its own, as a shell job
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stderr is not None
    seen: list[str] = []
    try:
        while marker not in (seen[-1] if seen else ""):
            line = await asyncio.wait_for(process.stdout.readline(), 600)
            assert line, "\n".join(seen)
            seen.append(line.decode())
        await asyncio.sleep(1.0)  # well inside the stage
        sent = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        out, err = await asyncio.wait_for(process.communicate(), 60)
    except BaseException:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, "".join(seen) + out.decode(), err.decode(), time.monotonic() - sent


def demo_directory(out: str) -> Path:
    """The data directory, from the interrupted line."""
    match = re.search(r"(/\S+aiokafka07-demo-\w+) removed", out)
    assert match, out
    return Path(match[1])


@pytest.mark.usefixtures("zookeeper_installed")
async def test_one_ctrl_c_during_produce_stops_everything_with_one_line() -> None:
    status, out, err, seconds = await ctrl_c_during("  2 brokers (", "--messages", "1000000")
    assert status == 130, out + err
    assert len(err.splitlines()) == 1, err
    (line,) = err.splitlines()
    assert line.startswith("aiokafka07 demo: interrupted during the produce stage: ")
    assert line.endswith(" removed")
    assert not demo_directory(line).exists()
    assert "not delivered" not in out + err
    # Under 2 s on an idle machine; the bound is its clean-up's own (each step bounded).
    assert seconds < 60, seconds


async def test_an_interrupted_produce_stage_whose_brokers_are_gone_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The race the test above can lose on a busy machine, made certain: the brokers
    (stopped by the same Ctrl-C as the demo) are gone before the producers close, so
    what they hold cannot be delivered. That is logged at debug level, not as an error
    line beside the demo's one line."""
    caplog.set_level(logging.DEBUG, logger="aiokafka07")
    topic = demo_module.TOPIC
    async with local_cluster(tmp_path, brokers=1, zookeeper=False, topics=[topic]) as cluster:
        views = demo_module.page_views(300_000)
        stage = asyncio.ensure_future(
            demo_module.produce(cluster, views, demo_module.Report(), live=False)
        )
        log_dir = tmp_path / "broker-0" / f"{topic}-0"
        for _ in range(600):  # until the producers have written something
            if any(f.stat().st_size for f in log_dir.glob("*.kafka")) or stage.done():
                break
            await asyncio.sleep(0.05)
        assert not stage.done()
        for process in cluster.processes.values():
            process.kill()
            await process.wait()
        stage.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(stage, 60)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert any(
        "closing a producer of the interrupted demo" in r.getMessage() for r in caplog.records
    )


@pytest.mark.timeout(900)  # Spark's start: minutes on a busy machine
@pytest.mark.usefixtures("zookeeper_installed")
async def test_one_ctrl_c_during_spark_stops_everything_with_one_line() -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    # 20,000 views: Spark's first job (its Python workers start) outlasts the second
    # before the Ctrl-C whatever the count; more only makes the stages before it longer.
    status, out, err, seconds = await ctrl_c_during(
        "(local Spark started", "--messages", "20000", "--members", "2"
    )
    assert status == 130, out + err
    (line,) = err.splitlines()
    assert line.startswith("aiokafka07 demo: interrupted during the Spark batch job: ")
    assert not demo_directory(line).exists()
    # Under 2 s on an idle machine; the bound is its clean-up's own: cancelling and
    # stopping Spark 10 s each, the data source's sessions 15 s, then the cluster.
    assert seconds < 60, seconds

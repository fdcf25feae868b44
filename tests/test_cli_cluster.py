"""``aiokafka07 cluster``, the local development cluster, run as a user runs it: a real
ZooKeeper and broker processes on loopback, stopped by one Ctrl-C at the terminal."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from aiokafka07 import Producer, SimpleConsumer
from aiokafka07.zookeeper import ZooKeeper

from .test_cli_common import run_cli
from .wire import eventually

pytestmark = pytest.mark.usefixtures("zookeeper_installed")


class Running:
    """A running ``aiokafka07 cluster`` in a process group of its own, as a shell job."""

    def __init__(self, process: asyncio.subprocess.Process, lines: list[str]) -> None:
        self.process = process
        self.lines = lines
        fields = dict(line.split(": ", 1) for line in lines[:3])
        self.zookeeper = fields["zookeeper"]
        self.brokers = [entry.split(":") for entry in fields["brokers"].split(",")]
        self.data = Path(fields["data"].split(" (")[0])

    def children(self) -> list[int]:
        """The command's child processes (Linux: each thread lists those it started)."""
        tasks = Path(f"/proc/{self.process.pid}/task").iterdir()
        return [int(pid) for task in tasks for pid in (task / "children").read_text().split()]

    def broker_pids(self) -> list[int]:
        return [
            pid
            for pid in self.children()
            if b"aiokafka07\x00broker" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]

    async def ctrl_c(self) -> tuple[int, list[str], float]:
        """SIGINT to the process group, as a terminal's Ctrl-C: (status, output, seconds)."""
        sent = time.monotonic()
        os.killpg(self.process.pid, signal.SIGINT)
        out, _ = await asyncio.wait_for(self.process.communicate(), 30)
        seconds = time.monotonic() - sent
        assert self.process.returncode is not None
        return self.process.returncode, out.decode().splitlines(), seconds


@pytest.fixture
async def start() -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    """``start(*args)`` runs the command; whatever a test leaves running is killed."""
    started: list[asyncio.subprocess.Process] = []

    async def run(*args: str) -> Running:
        running = await _start(*args)
        started.append(running.process)
        return running

    yield run
    for process in started:
        if process.returncode is None:
            process.terminate()  # a clean stop of the command and everything it runs
            await asyncio.wait_for(process.wait(), 30)


async def _start(*args: str) -> Running:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aiokafka07", "cluster", "--zookeeper-port", "0", "--port", "0",
        *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # a process group of its own, as a shell job
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    try:
        while not lines or "Ctrl-C stops everything" not in lines[-1]:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            assert line, "\n".join(lines)
            lines.append(line.decode().rstrip("\n"))
    except BaseException:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)
        raise
    return Running(process, lines)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


Start = Callable[..., Awaitable[Running]]


async def test_one_ctrl_c_stops_everything_and_says_so(start: Start) -> None:
    cluster = await start("--brokers", "2")
    assert len(cluster.brokers) == 2
    children = cluster.children()
    # ZooKeeper, its watchdog and two brokers, none of them in the terminal's process
    # group: Ctrl-C reaches the command alone, which stops them in order.
    assert len(children) == 4
    assert len(cluster.broker_pids()) == 2
    assert all(os.getpgid(child) != cluster.process.pid for child in children)

    # A produced message is visible at once (0.7.2's flush defaults would hold it back).
    async with Producer(zookeeper=cluster.zookeeper, linger_ms=0) as producer:
        result = await producer.send_and_wait("events", b"hello", partition=(1, 1))
    assert (result.broker_id, result.partition) == (1, 1)
    _, host, port = cluster.brokers[1]
    async with SimpleConsumer(host, int(port)) as simple:
        fetched = await simple.fetch("events", 1, 0)
    assert [m.value for m in fetched.messages] == [b"hello"]

    status, lines, seconds = await cluster.ctrl_c()
    assert status == 0, lines
    assert lines == [
        "aiokafka07 cluster: stopping the brokers and ZooKeeper",
        lines[-1],
    ]
    assert lines[-1].startswith("aiokafka07 cluster: stopped in ")
    assert lines[-1].endswith(f", removed {cluster.data}")
    assert seconds < 5, seconds  # about 0.5 s here; the margin is for a loaded machine
    assert not any(alive(child) for child in children)
    assert not cluster.data.exists()


async def test_nothing_outlives_a_killed_cluster_command(start: Start) -> None:
    cluster = await start("--brokers", "2")
    children = cluster.children()
    assert len(children) == 4
    os.kill(cluster.process.pid, signal.SIGKILL)
    await asyncio.wait_for(cluster.process.wait(), 30)
    # The brokers see their standard input close and stop; ZooKeeper's watchdog kills it.
    await eventually(lambda: not any(alive(child) for child in children), timeout=30)
    shutil.rmtree(cluster.data)  # what a killed command cannot remove itself


async def test_data_dir_keeps_messages_and_offsets_across_runs(
    start: Start, tmp_path: Path
) -> None:
    data = tmp_path / "dev"
    cluster = await start("--brokers", "1", "--data-dir", str(data))
    async with Producer(zookeeper=cluster.zookeeper, linger_ms=0) as producer:
        await producer.send_and_wait("kept", b"first run")
    async with ZooKeeper(cluster.zookeeper) as zk:
        await zk.write_persistent("/consumers/g/offsets/kept/0-0", "7")
    status, lines, _ = await cluster.ctrl_c()
    assert status == 0, lines
    assert data.is_dir()

    again = await start("--brokers", "1", "--data-dir", str(data))
    _, host, port = again.brokers[0]
    async with SimpleConsumer(host, int(port)) as simple:
        fetched = await simple.fetch("kept", 0, 0)
    assert [m.value for m in fetched.messages] == [b"first run"]
    async with ZooKeeper(again.zookeeper) as zk:
        assert await zk.get_data("/consumers/g/offsets/kept/0-0") == "7"
    assert (await again.ctrl_c())[0] == 0


async def test_a_broker_that_dies_stops_the_cluster_with_one_error_line(start: Start) -> None:
    cluster = await start("--brokers", "2")
    children = cluster.children()
    brokers = cluster.broker_pids()
    assert len(brokers) == 2
    os.kill(brokers[0], signal.SIGKILL)
    out, _ = await asyncio.wait_for(cluster.process.communicate(), 30)
    lines = out.decode().splitlines()
    assert cluster.process.returncode == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("aiokafka07 cluster: error: broker ")
    assert "exited with status -9" in lines[0]
    assert lines[0].endswith("; stopped the rest")
    assert not any(alive(child) for child in children)


async def test_a_port_in_use_is_one_error_line(start: Start) -> None:
    cluster = await start("--brokers", "1")
    zk_port = cluster.zookeeper.rpartition(":")[2]
    code, out, err = await run_cli("cluster", "--zookeeper-port", zk_port, "--port", "0")
    assert code == 1
    assert out == b""
    assert err.startswith(f"aiokafka07 cluster: error: cannot start ZooKeeper: 127.0.0.1:{zk_port}")
    assert "already in use" in err
    assert len(err.splitlines()) == 1
    assert (await cluster.ctrl_c())[0] == 0

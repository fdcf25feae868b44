"""The console tools' edges as a user meets them at a terminal, in real processes: files
after the options, typing into ``produce`` (a pseudo-terminal stands in for the
terminal), whole counts on the progress bar, a ZooKeeper given without its port, and a
broker id another broker holds."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import struct
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

from aiokafka07.testing import KafkaCluster
from aiokafka07.testing.zookeeper_server import ZooKeeperServer, ZooKeeperStartError, _port_is_free
from aiokafka07.zookeeper import DEFAULT_PORT, ZooKeeper, parse_connect_string

from .test_cli_common import ok, run_cli
from .test_cli_produce_consume import registered


class Terminal:
    """A pseudo-terminal: the tool gets the slave end (as its stdin, stdout or stderr),
    the test reads what the tool writes from the master end, and types into it."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        # 24 rows of 100 columns, as a terminal window has (a new pty has 0 x 0, where
        # tqdm draws nothing).
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        os.set_blocking(self.master, False)
        self.output = bytearray()
        self.closed = False
        self._changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.master, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 1 << 16)
        except BlockingIOError:
            return
        except OSError:  # EIO: no process holds the slave end any more
            data = b""
        if data:
            self.output += data
        else:
            self.closed = True
            self._loop.remove_reader(self.master)
        self._changed.set()

    def close_slave(self) -> None:
        """Close our copy of the slave end (the tool has its own): the master reads EOF
        once every writer is gone."""
        os.close(self.slave)

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    async def expect(self, pattern: re.Pattern[bytes], timeout: float = 30) -> re.Match[bytes]:
        """Wait until the output matches ``pattern``."""

        async def wait() -> re.Match[bytes]:
            while (match := pattern.search(self.output)) is None:
                assert not self.closed, bytes(self.output)
                self._changed.clear()
                await self._changed.wait()
            return match

        try:
            return await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"{pattern.pattern!r} not in {bytes(self.output)!r}") from None

    async def until_closed(self, timeout: float = 30) -> str:
        async def wait() -> None:
            while not self.closed:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)
        return self.output.decode(errors="replace")

    def close(self) -> None:
        if not self.closed:
            self._loop.remove_reader(self.master)
        os.close(self.master)


async def test_files_may_follow_the_options(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str, tmp_path: Path
) -> None:
    """``produce TOPIC --zookeeper ZK FILE``: the FILE is read, not refused."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes(b"a1\na2\n")
    second.write_bytes(b"b1\n")
    async with kafka_cluster(1, num_partitions=1) as cluster:
        code, _, err = await run_cli(
            "produce", "files", "--zookeeper", zookeeper, str(first), "--linger-ms", "1",
            str(second),
        )  # fmt: skip
        assert code == 0, err
        assert err.startswith("produced 3 messages ("), err
        await registered(zookeeper, cluster, "files")
        out = await ok("consume", "files", "--zookeeper", zookeeper, "--from-beginning",
                       "-n", "3", "--timeout-ms", "10000", "-q")  # fmt: skip
        assert out.splitlines() == [b"a1", b"a2", b"b1"]


async def test_typing_into_produce_draws_no_bar_over_the_typed_line(
    cluster: KafkaCluster,
) -> None:
    """stdin, stdout and stderr a terminal, as when a user types messages: one line says
    how to end, nothing is drawn over what is typed, the summary counts what was sent."""
    terminal = Terminal()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aiokafka07", "produce", "typed",
            "--brokers", cluster.broker_list,
            stdin=terminal.slave, stdout=terminal.slave, stderr=terminal.slave,
        )  # fmt: skip
        terminal.close_slave()
        await terminal.expect(re.compile(rb"type messages for typed, one per line"))
        terminal.type(b"hello world\n")
        terminal.type(b"\x04")  # Ctrl-D at the start of a line: the end of the input
        text = await terminal.until_closed()
        assert await asyncio.wait_for(process.wait(), 30) == 0, text
    finally:
        terminal.close()
    assert "produced:" not in text  # tqdm's bar, drawn over the typed line before
    assert "\r" not in text.replace("\r\n", "\n")  # nothing moves the cursor back
    assert re.search(r"produced 1 message \(11 B\) in .* to typed", text), text
    out = await ok(
        "consume", "typed", "--brokers", cluster.broker_list, "--broker-partition", "0-0,0-1",
        "--from-beginning", "-n", "1", "--timeout-ms", "10000", "-q",
    )  # fmt: skip
    assert out == b"hello world\n"


async def test_the_progress_bar_counts_whole_messages(cluster: KafkaCluster) -> None:
    """Input from a pipe, stderr a terminal: the bar counts ``3 msg``, not ``3.00``."""
    terminal = Terminal()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aiokafka07", "produce", "counted",
            "--brokers", cluster.broker_list,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            stderr=terminal.slave,
        )  # fmt: skip
        terminal.close_slave()
        assert process.stdin is not None
        process.stdin.write(b"a\nb\nc\n")
        await process.stdin.drain()
        # The bar is redrawn every second; wait for the one that has all three.
        match = await terminal.expect(re.compile(rb"produced: (3\S*) msg"))
        process.stdin.close()
        text = await terminal.until_closed()
        assert await asyncio.wait_for(process.wait(), 30) == 0, text
    finally:
        terminal.close()
    assert match.group(1) == b"3", text
    assert "produced 3 messages (" in text


def test_a_server_without_a_port_is_on_zookeepers_port() -> None:
    assert parse_connect_string("localhost") == ("localhost:2181", None)
    assert parse_connect_string("a,b:2182,[::1]/kafka") == (
        "a:2181,b:2182,[::1]:2181",
        "/kafka",
    )
    for bad in ("a:", ":2181", "a:x", "a:70000", "[::1"):
        with pytest.raises(ValueError, match="ZooKeeper server"):
            parse_connect_string(bad)


@pytest.mark.usefixtures("zookeeper_installed")
async def test_zookeeper_given_without_port_is_found_at_2181() -> None:
    """``--zookeeper HOST`` reaches ZooKeeper at HOST:2181. A loopback address of its own
    (127.77.x.1) keeps port 2181 free of whatever else runs on the machine."""
    host = next(
        (f"127.77.{n}.1" for n in range(1, 50) if _port_is_free(f"127.77.{n}.1", DEFAULT_PORT)),
        None,
    )
    if host is None:
        pytest.skip("port 2181 is taken on 127.77.1-49.1")
    server = ZooKeeperServer(host=host, port=DEFAULT_PORT)
    try:
        await asyncio.to_thread(server.start)
    except ZooKeeperStartError as exc:  # taken meanwhile
        server.close()
        pytest.skip(f"ZooKeeper could not bind {host}:{DEFAULT_PORT}: {exc}")
    try:
        async with ZooKeeper(f"{host}:{DEFAULT_PORT}/edges") as zk:
            await zk.write_persistent("/consumers/typed-by-hand/offsets/t/0-0", "5")
        out = await ok("groups", "--zookeeper", f"{host}/edges", "--json")
        assert "typed-by-hand" in out.decode()
    finally:
        await asyncio.to_thread(server.close)

"""The test ZooKeeper server, exercised against a real server with the real aiozk client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiozk
import pytest
from aiozk.states import States

from aiokafka07.testing.zookeeper_server import (
    ZooKeeperServer,
    ZooKeeperStartError,
    ensure_zookeeper_installed,
    expire_session,
    zookeeper_classpath,
)

ROOT = Path(__file__).resolve().parents[1]
# Every test here starts a real server: ZooKeeper must be there (installed if opted in).
pytestmark = pytest.mark.usefixtures("zookeeper_installed")


@pytest.fixture(scope="module")
def server(zookeeper_installed: str) -> Iterator[ZooKeeperServer]:
    """One server for the tests that only need a running ZooKeeper."""
    with ZooKeeperServer() as zk:
        yield zk


@contextlib.asynccontextmanager
async def client(connect_string: str, session_timeout: float = 10) -> AsyncIterator[aiozk.ZKClient]:
    zk = aiozk.ZKClient(connect_string, session_timeout=session_timeout)
    await asyncio.wait_for(zk.start(), 10)
    try:
        yield zk
    except BaseException:
        # Keep the test's own failure visible: closing a client that lost its server can
        # time out too.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(zk.close(), 5)
        raise
    await asyncio.wait_for(zk.close(), 10)


def srvr(zk: ZooKeeperServer) -> bytes:
    """The server's answer to the 'srvr' four-letter command (b'' if nothing answers)."""
    try:
        with socket.create_connection((zk.host, zk.port), timeout=2) as sock:
            sock.sendall(b"srvr")
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return b""


def process_alive(pid: int) -> bool:
    """Whether pid is a live process (a zombie waiting to be reaped counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_until_dead(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_start_stop_close_lifecycle() -> None:
    zk = ZooKeeperServer()
    assert zk.port == 0
    assert not zk.running
    zk.start()
    try:
        assert zk.running
        assert zk.port > 0
        assert zk.connect_string == f"127.0.0.1:{zk.port}"
        assert srvr(zk).startswith(b"Zookeeper version: 3.")
        config = (zk.data_dir / "zoo.cfg").read_text().splitlines()
        for line in (
            "clientPortAddress=127.0.0.1",
            f"clientPort={zk.port}",
            "admin.enableServer=false",
            "tickTime=200",
            f"dataDir={zk.data_dir}",
        ):
            assert line in config
        # The log4j binding works: ZooKeeper's own log lines reach the log file.
        assert f"binding to port /127.0.0.1:{zk.port}" in zk.log_path.read_text()
        pid = zk.pid
        assert pid is not None
        zk.start()  # already running: no second process
        assert zk.pid == pid
    finally:
        zk.stop()
    assert not zk.running
    assert zk.pid is None
    assert not process_alive(pid)
    assert srvr(zk) == b""
    assert (zk.data_dir / "version-2").is_dir()  # stop keeps the data
    zk.stop()  # idempotent
    zk.close()
    assert not zk.data_dir.exists()


def test_host_must_be_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        ZooKeeperServer(host="0.0.0.0")


async def test_client_writes_and_reads(server: ZooKeeperServer) -> None:
    async with client(server.connect_string) as zk:
        assert await zk.create("/rw", b"hello") == "/rw"
        assert await zk.get_data("/rw") == b"hello"
        await zk.set_data("/rw", b"world")
        assert await zk.get_data("/rw") == b"world"
        assert await zk.exists("/rw")
        assert not await zk.exists("/missing")
        await zk.delete("/rw")
        assert not await zk.exists("/rw")


async def test_expire_session(server: ZooKeeperServer) -> None:
    async with client(server.connect_string) as observer, client(server.connect_string, 2) as zk:
        await zk.create("/expiring", b"mine", ephemeral=True)
        session_id, password = zk.session.session_id, zk.session.password
        lost = zk.session.state.wait_for(States.LOST)

        await expire_session(server.connect_string, session_id, password)

        # The server has ended the session by the time expire_session returns.
        assert not await observer.exists("/expiring")
        with pytest.raises(ValueError, match="already expired"):
            await expire_session(server.connect_string, session_id, password)

        # aiozk notices (dropped connection, then 'session expired' on reconnect) and opens
        # a fresh session by itself.
        await asyncio.wait_for(lost, 10)
        await asyncio.wait_for(zk.session.state.wait_for(States.CONNECTED), 10)
        assert zk.session.session_id not in (None, session_id)
        await zk.create("/expiring", b"again", ephemeral=True)
        assert await observer.get_data("/expiring") == b"again"


async def test_expire_session_with_wrong_password_is_refused(server: ZooKeeperServer) -> None:
    async with client(server.connect_string) as observer, client(server.connect_string, 2) as zk:
        await zk.create("/guarded", b"", ephemeral=True)
        session_id, password = zk.session.session_id, zk.session.password
        with pytest.raises(ValueError, match="password"):
            await expire_session(server.connect_string, session_id, b"\x00" * 16)
        # The session lives on; only the right password ends it. (The server does drop the
        # client's connection on any attempt to take the session over, so wait for aiozk
        # to be connected again before closing it.)
        assert await observer.exists("/guarded")
        await expire_session(server.connect_string, session_id, password)
        assert not await observer.exists("/guarded")
        await asyncio.wait_for(zk.session.state.wait_for(States.LOST), 10)
        await asyncio.wait_for(zk.session.state.wait_for(States.CONNECTED), 10)


async def test_expire_session_accepts_a_chrooted_connect_string(server: ZooKeeperServer) -> None:
    async with client(server.connect_string) as observer, client(server.connect_string, 2) as zk:
        await zk.create("/chrooted", b"", ephemeral=True)
        await expire_session(
            f"{server.connect_string}/some/chroot", zk.session.session_id, zk.session.password
        )
        assert not await observer.exists("/chrooted")
        await asyncio.wait_for(zk.session.state.wait_for(States.LOST), 10)
        await asyncio.wait_for(zk.session.state.wait_for(States.CONNECTED), 10)


async def test_restart_keeps_data_port_and_sessions(tmp_path: Path) -> None:
    zk_server = ZooKeeperServer(data_dir=tmp_path / "zk")
    zk_server.start()
    try:
        port = zk_server.port
        # With aiozk a lost connection is noticed after about one session timeout, and the
        # restarted server gives each stored session one full timeout from its start: 3 s
        # leaves time for the restart.
        async with client(zk_server.connect_string, session_timeout=3) as zk:
            await zk.create("/persistent", b"kept")
            await zk.create("/ephemeral", b"mine", ephemeral=True)
            session_id = zk.session.session_id
            suspended = zk.session.state.wait_for(States.SUSPENDED)

            await asyncio.to_thread(zk_server.restart)

            assert zk_server.port == port
            assert zk_server.running
            await asyncio.wait_for(suspended, 10)
            await asyncio.wait_for(zk.session.state.wait_for(States.CONNECTED), 10)
            assert zk.session.session_id == session_id
            assert await zk.get_data("/persistent") == b"kept"
            assert await zk.get_data("/ephemeral") == b"mine"
        assert (tmp_path / "zk" / "version-2").is_dir()
    finally:
        zk_server.close()
    assert (tmp_path / "zk").is_dir()  # a data_dir the caller gave is not deleted


async def test_kill_then_start_again(tmp_path: Path) -> None:
    zk_server = ZooKeeperServer(data_dir=tmp_path)
    zk_server.start()
    try:
        async with client(zk_server.connect_string) as zk:
            await zk.create("/survives-crash", b"on disk")
        pid = zk_server.pid
        assert pid is not None
        zk_server.kill()
        assert not zk_server.running
        assert not process_alive(pid)
        assert srvr(zk_server) == b""

        zk_server.start()
        assert zk_server.pid != pid
        async with client(zk_server.connect_string) as zk:
            assert await zk.get_data("/survives-crash") == b"on disk"
    finally:
        zk_server.close()


def test_two_servers_get_different_ports(server: ZooKeeperServer) -> None:
    with ZooKeeperServer() as other:
        assert other.port != server.port
        assert other.data_dir != server.data_dir
        assert srvr(other).startswith(b"Zookeeper version:")
        assert srvr(server).startswith(b"Zookeeper version:")


def test_port_taken_is_a_clear_error() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        zk = ZooKeeperServer(port=port)
        try:
            with pytest.raises(ZooKeeperStartError, match=f"127.0.0.1:{port} is already in use"):
                zk.start()
            assert not zk.running
        finally:
            zk.close()


def test_server_dying_at_startup_reports_its_log(tmp_path: Path) -> None:
    # ZooKeeper cannot write its first snapshot when version-2 is a file, and exits.
    (tmp_path / "version-2").write_text("not a directory")
    zk = ZooKeeperServer(data_dir=tmp_path)
    with pytest.raises(ZooKeeperStartError) as failure:
        zk.start()
    message = str(failure.value)
    assert "exited with code 1" in message
    assert "Not a directory" in message  # the Java exception, from the log tail
    assert not zk.running
    zk.close()


def test_ensure_zookeeper_installed_returns_the_classpath(zookeeper_installed: str) -> None:
    classpath = ensure_zookeeper_installed(install=False)
    assert classpath == zookeeper_installed
    assert classpath == zookeeper_classpath()
    entries = classpath.split(os.pathsep)
    assert entries[0] == "/usr/share/java/zookeeper.jar"
    assert "/usr/share/java/zookeeper-jute.jar" in entries
    assert all(Path(entry).is_file() for entry in entries)


def _run_script(body: str) -> subprocess.Popen[str]:
    script = textwrap.dedent(
        """
        from aiokafka07.testing.zookeeper_server import ZooKeeperServer
        zk = ZooKeeperServer()
        zk.start()
        print(zk.pid, zk.data_dir, flush=True)
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )


def test_server_dies_with_a_script_that_forgets_to_stop_it() -> None:
    script = _run_script("")  # exits normally without stop(): the exit-time finalizer
    out, _ = script.communicate(timeout=30)
    assert script.returncode == 0
    pid, data_dir = out.split()
    assert wait_until_dead(int(pid))
    assert not Path(data_dir).exists()


def test_server_dies_with_a_killed_python_process() -> None:
    script = _run_script("import time; time.sleep(60)")
    assert script.stdout is not None
    pid_text, data_dir = script.stdout.readline().split()
    pid = int(pid_text)
    assert process_alive(pid)
    script.send_signal(signal.SIGKILL)  # no atexit, no finalizers: the watchdog kills it
    script.wait(timeout=10)
    assert wait_until_dead(pid)
    deadline = time.monotonic() + 5
    while Path(data_dir).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(data_dir).exists()

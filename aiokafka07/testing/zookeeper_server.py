"""A real, throw-away ZooKeeper server for tests and local work.

Kafka 0.7 keeps broker registrations, consumer-group membership and committed offsets in
ZooKeeper, so the parts of aiokafka07 that talk to it are tested against the real thing
rather than a fake: Debian's ``zookeeper`` package (3.8) run as a standalone
``ZooKeeperServerMain`` on a free loopback port, with its own data directory.

- :class:`ZooKeeperServer` starts, stops, crashes and restarts such a server
  synchronously, so it works from a pytest session fixture and from a plain script.
- :func:`expire_session` expires a live client session on demand, the way Curator's
  ``KillSession`` does, to test what a client does when ZooKeeper drops it.
- :func:`ensure_zookeeper_installed` checks for the package, and installs it with apt-get
  on a fresh Debian-like box when run as root (only when called: nothing here installs
  anything on its own, and the pytest fixtures do so only when the project opts in).

Every wait is bounded, and a started server never outlives the Python process that started
it: besides ``stop()``, an exit-time finalizer kills it, and a tiny watchdog process kills it
even if Python itself is killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import weakref
import zipfile
from pathlib import Path
from types import TracebackType

from ..timeouts import wait_for
from ..validation import check_ms
from ..zookeeper import parse_connect_string, parse_server

__all__ = [
    "ZooKeeperNotInstalled",
    "ZooKeeperServer",
    "ZooKeeperStartError",
    "can_install_zookeeper",
    "ensure_zookeeper_installed",
    "expire_session",
    "zookeeper_classpath",
]

JAVA_DIR = Path("/usr/share/java")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

# ZooKeeper's runtime dependencies, as the Class-Path of Debian's zookeeper.jar names them.
# Listed here too because that manifest entry is not guaranteed to be present.
_DEPENDENCY_JARS = (
    "zookeeper-jute.jar",
    "commons-cli.jar",
    "commons-io.jar",
    "jackson-annotations.jar",
    "jackson-core.jar",
    "jackson-databind.jar",
    "jline.jar",
    "metrics-core.jar",
    "netty-buffer.jar",
    "netty-common.jar",
    "netty-handler.jar",
    "netty-transport.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "slf4j-api.jar",
    "snappy-java.jar",
)
# The zookeeper package ships slf4j-api without a binding (slf4j would silently drop every
# line); these two route the server's log through log4j 1.2, which the package depends on.
_LOGGING_JARS = ("slf4j-log4j12.jar", "log4j-1.2.jar")
_REQUIRED_JARS = ("zookeeper.jar", "zookeeper-jute.jar")

_INSTALL_HINT = (
    "ZooKeeper is not installed. On Debian/Ubuntu run (as root): "
    "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y zookeeper "
    "(that brings a Java runtime too), or call "
    "aiokafka07.testing.zookeeper_server.ensure_zookeeper_installed() as root."
)

_POLL_INTERVAL = 0.05
_STOP_TIMEOUT_MS = 10000.0
_LOG_NAME = "zookeeper.log"

# Small, quick-starting JVM: a test server holds a few znodes, not gigabytes.
_JVM_FLAGS = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.jmx.log4j.disable=true",
)

_LOG4J_PROPERTIES = """\
# Written by aiokafka07.testing.zookeeper_server: everything to stdout, which the
# launcher redirects to zookeeper.log in the data directory.
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
"""

# Run as a separate process next to each server. It blocks reading a pipe whose only writer
# is the Python process that started the server: b"d" disarms it; end-of-file without it
# means that process died without stopping the server, so the server is killed (and the
# temporary data directory, if one is given, removed).
_WATCHDOG_SCRIPT = """\
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
if sys.stdin.buffer.read(1) != b"d":
    pid = int(sys.argv[1])
    deadline = time.monotonic() + 2
    try:
        os.kill(pid, signal.SIGKILL)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:  # an unreaped zombie is dead too
                if stat.read().rpartition(")")[2].split()[0] == "Z":
                    break
    except OSError:
        pass
    if len(sys.argv) > 2:
        shutil.rmtree(sys.argv[2], ignore_errors=True)
"""


class ZooKeeperNotInstalled(RuntimeError):
    """ZooKeeper (or the Java runtime it needs) is missing; the message says how to install."""


class ZooKeeperStartError(RuntimeError):
    """The server did not come up; the message carries the tail of its log."""


def _java_executable() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    return "/usr/bin/java" if os.access("/usr/bin/java", os.X_OK) else None


def _manifest_class_path(jar: Path) -> list[str]:
    """The jars named by ``jar``'s manifest Class-Path, or nothing if it has none."""
    try:
        with zipfile.ZipFile(jar) as archive:
            manifest = archive.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return []
    # Manifest lines are wrapped at 72 bytes; a continuation line starts with one space.
    unwrapped = manifest.replace("\r\n", "\n").replace("\n ", "")
    for line in unwrapped.splitlines():
        if line.startswith("Class-Path:"):
            return line.partition(":")[2].split()
    return []


def zookeeper_classpath() -> str:
    """Classpath for Debian's zookeeper package; raises ZooKeeperNotInstalled if missing.

    It holds zookeeper.jar, every dependency jar that exists (whether or not the jar's manifest
    names them) and an slf4j-to-log4j binding so that the server's log is not lost.
    """
    missing = [name for name in _REQUIRED_JARS if not (JAVA_DIR / name).is_file()]
    if missing:
        raise ZooKeeperNotInstalled(f"{', '.join(missing)} missing in {JAVA_DIR}. {_INSTALL_HINT}")
    entries: list[str] = [str(JAVA_DIR / "zookeeper.jar")]
    candidates = [
        *(str(JAVA_DIR / name) for name in _DEPENDENCY_JARS),
        *_manifest_class_path(JAVA_DIR / "zookeeper.jar"),
        *(str(JAVA_DIR / name) for name in _LOGGING_JARS),
    ]
    for candidate in candidates:
        if candidate not in entries and Path(candidate).is_file():
            entries.append(candidate)
    return os.pathsep.join(entries)


def _output_tail(output: str, lines: int = 30) -> str:
    return "\n".join(output.splitlines()[-lines:])


def can_install_zookeeper() -> bool:
    """Whether :func:`ensure_zookeeper_installed` could install the package here: root on
    a Debian-like system with apt-get."""
    return (
        hasattr(os, "geteuid")
        and os.geteuid() == 0
        and shutil.which("apt-get") is not None
        and Path("/etc/debian_version").exists()
    )


def apt_get_install(*packages: str, options: tuple[str, ...] = ()) -> None:
    """``apt-get update`` then ``apt-get install -y [options] packages``, non-interactive,
    each within a bound (10 and 30 minutes); concurrent test processes queue behind each
    other's install (the dpkg lock is waited for 5 minutes). :class:`RuntimeError` with
    the command and the end of its output when one fails or times out."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock_wait = ["-o", "DPkg::Lock::Timeout=300"]
    for command, timeout in (
        (["apt-get", *lock_wait, "update"], 600.0),
        (["apt-get", *lock_wait, "install", "-y", *options, *packages], 1800.0),
    ):
        try:
            done = subprocess.run(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            partial = exc.output if isinstance(exc.output, str) else ""
            raise RuntimeError(
                f"{' '.join(command)} timed out after {timeout:.0f}s:\n{_output_tail(partial)}"
            ) from exc
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} failed with exit code {done.returncode}:\n"
                f"{_output_tail(done.stdout)}"
            )


def ensure_zookeeper_installed(*, install: bool = True) -> str:
    """Return the classpath, installing Debian's zookeeper package first if need be.

    Installation happens only when ``install`` is true and we run as root on a
    Debian-like system with apt-get (a fresh CI container); anywhere else a missing
    package raises :class:`ZooKeeperNotInstalled`, whose message says what to run, rather
    than touching the machine. ``install=False`` only checks.
    """
    try:
        classpath = zookeeper_classpath()
    except ZooKeeperNotInstalled:
        pass
    else:
        if _java_executable() is not None:
            return classpath
    if not install:
        raise ZooKeeperNotInstalled(_INSTALL_HINT)
    if not can_install_zookeeper():
        raise ZooKeeperNotInstalled(_INSTALL_HINT)
    try:
        apt_get_install("zookeeper")
    except RuntimeError as exc:
        raise ZooKeeperNotInstalled(str(exc)) from None
    if _java_executable() is None:
        raise ZooKeeperNotInstalled(
            f"zookeeper was installed but no java was found. {_INSTALL_HINT}"
        )
    return zookeeper_classpath()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(host: str, port: int) -> bool:
    """Whether ZooKeeper could bind ``host:port`` now.

    SO_REUSEADDR as ZooKeeper sets it: leftover TIME_WAIT connections from a previous run on
    the same port do not count, a listening socket does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _srvr(host: str, port: int, timeout: float) -> bytes:
    """Send the 'srvr' four-letter command and return the whole reply (empty on failure)."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"srvr")
            chunks: list[bytes] = []
            while (remaining := deadline - time.monotonic()) > 0:
                sock.settimeout(remaining)
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
    except OSError:
        return b""


def _kill_and_reap(process: subprocess.Popen[bytes], watchdog: subprocess.Popen[bytes]) -> None:
    """Finalizer: SIGKILL a server still running at exit (or when its owner is collected)."""
    with contextlib.suppress(OSError):
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    _disarm(watchdog)


def _disarm(watchdog: subprocess.Popen[bytes]) -> None:
    stdin = watchdog.stdin
    if stdin is not None:
        with contextlib.suppress(OSError, ValueError):
            stdin.write(b"d")
            stdin.flush()
        with contextlib.suppress(OSError, ValueError):
            stdin.close()
    try:
        watchdog.wait(timeout=5)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=5)


class ZooKeeperServer:
    """A standalone ZooKeeper server process for tests.

    ``org.apache.zookeeper.server.ZooKeeperServerMain`` run with ``java -cp <classpath>`` over
    a generated ``zoo.cfg``: bound to loopback only, on a free port (kept across restarts),
    with its own data directory and the admin HTTP server off. ``zoo.cfg``, the log4j
    configuration and the server's log (``zookeeper.log``, appended across restarts) live in
    the data directory next to ZooKeeper's ``version-2`` snapshots and transaction logs.

    The methods are synchronous and meant for one thread; they take one or two seconds at
    most (a JVM start) and every wait has a timeout. Use it as a context manager, or call
    :meth:`start` and :meth:`close`::

        with ZooKeeperServer() as zk:
            client = aiozk.ZKClient(zk.connect_string)
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | Path | None = None,
        tick_time_ms: int = 200,
        max_session_timeout_ms: int = 60000,
        startup_timeout_ms: float = 30000.0,
        startup_timeout: float | None = None,
    ) -> None:
        try:
            loopback = ipaddress.IPv4Address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"host must be an IPv4 loopback address, not {host!r}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port out of range: {port}")
        if tick_time_ms <= 0 or max_session_timeout_ms < 2 * tick_time_ms:
            raise ValueError("need tick_time_ms > 0 and max_session_timeout_ms >= 2 * tick_time_ms")
        self.host = host
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.startup_timeout_ms = check_ms(
            "ZooKeeperServer", "startup_timeout_ms", startup_timeout_ms, startup_timeout, above=True
        )
        self._auto_port = port == 0
        self._ever_started = False
        self._process: subprocess.Popen[bytes] | None = None
        self._reaper: weakref.finalize[..., ZooKeeperServer] | None = None
        self._owns_data_dir = data_dir is None
        if data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="aiokafka07-zk-"))
            # Also removed at interpreter exit if close() is never called.
            self._dir_remover: weakref.finalize[..., ZooKeeperServer] | None = weakref.finalize(
                self, shutil.rmtree, str(self.data_dir), ignore_errors=True
            )
        else:
            self.data_dir = Path(data_dir).resolve()
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._dir_remover = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ZooKeeperServer {self.connect_string} {state} data_dir={self.data_dir}>"

    @property
    def connect_string(self) -> str:
        """``host:port`` for a ZooKeeper client; the port is 0 until the first start."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log: JVM output and every log4j line, across restarts."""
        return self.data_dir / _LOG_NAME

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive (it may have died since start())."""
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log, for error messages."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 64 * 1024))
                data = log.read()
        except OSError:
            return "(no server log)"
        return _output_tail(data.decode("utf-8", "replace"), lines)

    def _write_config(self) -> Path:
        config = {
            "tickTime": self.tick_time_ms,
            "dataDir": self.data_dir,
            "clientPort": self.port,
            "clientPortAddress": self.host,
            "admin.enableServer": "false",
            "maxSessionTimeout": self.max_session_timeout_ms,
            "4lw.commands.whitelist": "srvr,ruok,stat,mntr",
            "maxClientCnxns": 0,
            # Test data is disposable: skip fsync per write and 64 MB log preallocation.
            "forceSync": "no",
            "preAllocSize": 4096,
        }
        path = self.data_dir / "zoo.cfg"
        path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
        (self.data_dir / "log4j.properties").write_text(_LOG4J_PROPERTIES)
        return path

    def start(self) -> None:
        """Start the server and wait until it serves clients; a no-op if it is running.

        Raises :class:`ZooKeeperStartError` (with the log tail) if the port is taken, the
        process dies, or it does not answer within ``startup_timeout_ms``, and
        :class:`ZooKeeperNotInstalled` if ZooKeeper or Java is missing.
        """
        if self.running:
            return
        self._cleanup_process()
        classpath = zookeeper_classpath()
        java = _java_executable()
        if java is None:
            raise ZooKeeperNotInstalled(f"no java executable found. {_INSTALL_HINT}")
        # A port we picked ourselves may be grabbed by someone else before the JVM binds it;
        # then pick another. A port the caller chose, or that clients already know, is kept.
        attempts = 3 if self._auto_port and not self._ever_started else 1
        for attempt in range(attempts):
            if self.port == 0 or attempt > 0:
                self.port = _free_port(self.host)
            if not _port_is_free(self.host, self.port):
                if attempt + 1 < attempts:
                    continue
                raise ZooKeeperStartError(
                    f"cannot start ZooKeeper: {self.connect_string} is already in use"
                )
            try:
                self._launch(java, classpath)
            except ZooKeeperStartError as exc:
                if attempt + 1 < attempts and "Address already in use" in str(exc):
                    continue
                raise
            self._ever_started = True
            return

    def _launch(self, java: str, classpath: str) -> None:
        config = self._write_config()
        command = [
            java,
            *_JVM_FLAGS,
            f"-Dlog4j.configuration={(self.data_dir / 'log4j.properties').as_uri()}",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(config),
        ]
        with self.log_path.open("ab") as log:
            log.write(
                f"\n=== aiokafka07: starting ZooKeeper on {self.connect_string} ===\n".encode()
            )
            log.flush()
            # Own session: a Ctrl-C meant for a script must not kill its server before the
            # script's own clean-up runs; the finalizer and the watchdog cover everything else.
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,
            )
        try:
            watchdog = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _WATCHDOG_SCRIPT,
                    str(process.pid),
                    *([str(self.data_dir)] if self._owns_data_dir else []),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            process.kill()
            process.wait(timeout=5)
            raise
        self._process = process
        self._reaper = weakref.finalize(self, _kill_and_reap, process, watchdog)
        try:
            self._wait_until_serving(process)
        except BaseException:
            self.kill()
            raise

    def _wait_until_serving(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout_ms / 1000
        while True:
            code = process.poll()
            if code is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.connect_string} exited with code {code} during "
                    f"startup; log {self.log_path} ends with:\n{self.log_tail()}"
                )
            if b"Zookeeper version:" in _srvr(self.host, self.port, timeout=1.0):
                return
            if time.monotonic() > deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.connect_string} did not answer within "
                    f"{self.startup_timeout_ms:g} ms; log {self.log_path} ends with:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL)

    def _cleanup_process(self) -> None:
        """SIGKILL the process if it still runs, reap it, disarm its watchdog, forget it."""
        if self._reaper is not None:
            self._reaper()  # kills (if still alive), reaps, disarms; runs at most once
        self._reaper = None
        self._process = None

    def stop(self, timeout: float | None = None, *, timeout_ms: float = _STOP_TIMEOUT_MS) -> None:
        """Stop the server gracefully: SIGTERM, then SIGKILL after ``timeout_ms``
        (``timeout``, in seconds, is its deprecated form).

        Idempotent; the data directory is kept, so a later :meth:`start` resumes.
        """
        wait = check_ms("ZooKeeperServer.stop", "timeout_ms", timeout_ms, timeout) / 1000
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=wait)
        self._cleanup_process()

    def kill(self) -> None:
        """Crash the server with SIGKILL; what it acknowledged before survives a restart."""
        self._cleanup_process()

    def restart(self) -> None:
        """Stop gracefully, then start again on the same port and data directory.

        Sessions are stored with the data, so clients that reconnect within their session
        timeout keep their sessions and ephemeral nodes.
        """
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and delete the data directory if this object created it."""
        self.stop()
        if self._dir_remover is not None:
            self._dir_remover()
            self._dir_remover = None

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# --- session expiry -------------------------------------------------------------------------

_INT = struct.Struct(">i")
_CONNECT_REQUEST = struct.Struct(">iqiq")  # protocolVersion, lastZxidSeen, timeOut, sessionId
_CONNECT_RESPONSE = struct.Struct(">iiq")  # protocolVersion, timeOut, sessionId
_REQUEST_HEADER = struct.Struct(">ii")  # xid, type
_REPLY_HEADER = struct.Struct(">iqi")  # xid, zxid, err
_CLOSE_SESSION = -11
_CLOSE_XID = 1
_MAX_FRAME = 1 << 20


def _first_server(connect_string: str) -> tuple[str, int]:
    servers, _ = parse_connect_string(connect_string)
    return parse_server(servers.split(",")[0])


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    try:
        (size,) = _INT.unpack(await reader.readexactly(_INT.size))
        if not 0 <= size <= _MAX_FRAME:
            raise ConnectionError(f"bad frame length {size} from ZooKeeper")
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        raise ConnectionError("ZooKeeper closed the connection mid-reply") from exc


def _frame(payload: bytes) -> bytes:
    return _INT.pack(len(payload)) + payload


async def _expire(host: str, port: int, session_id: int, password: bytes) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        # Attaching to the session moves it to this connection (the server drops the
        # original client's connection), then closing it here ends it for good.
        connect = (
            _CONNECT_REQUEST.pack(0, 0, 30000, session_id)
            + _INT.pack(len(password))
            + password
            + b"\x00"  # readOnly = false
        )
        writer.write(_frame(connect))
        await writer.drain()
        response = await _read_frame(reader)
        _, _, granted = _CONNECT_RESPONSE.unpack_from(response)
        if granted == 0:
            raise ValueError(
                f"ZooKeeper at {host}:{port} refused session 0x{session_id:x}: "
                "it has already expired, or the password is wrong"
            )
        writer.write(_frame(_REQUEST_HEADER.pack(_CLOSE_XID, _CLOSE_SESSION)))
        await writer.drain()
        while True:
            xid, _, err = _REPLY_HEADER.unpack_from(await _read_frame(reader))
            if xid == _CLOSE_XID:
                break  # anything else is a notification or ping meant for someone else
        if err != 0:
            raise ConnectionError(f"closeSession for 0x{session_id:x} failed with error {err}")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def expire_session(
    connect_string: str,
    session_id: int,
    password: bytes,
    *,
    timeout_ms: float = 10000.0,
    timeout: float | None = None,
) -> None:
    """Force-expire an existing client session, the way Curator's KillSession does.

    Opens a second connection to the server with the SAME session id and password (a jute
    ConnectRequest over an asyncio stream), sends closeSession (type -11) on it and waits for
    the reply. By then the server has ended the session and deleted its ephemeral nodes; the
    original client finds its connection dropped and, when it reconnects, that its session
    has expired. Uses the first server of ``connect_string`` (chroot ignored).

    Raises ValueError if the server does not know the session (already expired, or a wrong
    password), TimeoutError after ``timeout_ms`` (``timeout``, in seconds, is its deprecated
    form), OSError if it cannot connect. Even a refused attempt drops the original client's
    connection: ZooKeeper closes it before it checks the password.
    """
    limit_ms = check_ms("expire_session", "timeout_ms", timeout_ms, timeout, above=True)
    host, port = _first_server(connect_string)
    try:
        await wait_for(_expire(host, port, session_id, bytes(password)), limit_ms / 1000)
    except asyncio.TimeoutError as exc:
        raise TimeoutError(
            f"expiring session 0x{session_id:x} at {host}:{port} took over {limit_ms:g} ms"
        ) from exc

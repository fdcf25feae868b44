"""One ZooKeeper session, with the znode conventions of Kafka 0.7.2 (ZOOKEEPER §0-§2).

A thin layer over ``aiozk`` that speaks the domain: the connect string with an optional
chroot, persistent parents with *null* data (as 0.7.2 creates them; aiozk's own
``ensure_path`` makes container nodes, which ZooKeeper deletes when they empty), ephemeral
nodes created "expecting conflict", listeners told when the session expired and when a
*new* session replaced it, so owners of ephemeral nodes can stop acting as owners and then
register again, and child watches whose callbacks stay registered while the one-shot
server-side watch is re-armed by each read.

Writes can be *fenced* to a session (``session=`` on the writing calls): aiozk re-sends a
request that met a broken connection once it is connected again, possibly in a new
session, which would let a member write an offset or delete an owner node after its
session expired and another member took over. A fenced write is refused unless its session
is the current one, and abandoned (never re-sent) if the connection breaks before it is
answered.

After the connection breaks, the servers are tried again every half second at most
(:data:`RECONNECT_BACKOFF`, each attempt bounded by :data:`CONNECT_TIMEOUT`), not after
aiozk's 4 to 60 s: a restarted server gives every stored session a full timeout from its
start, so a client back within about a second keeps its session, its ephemeral nodes and
its watches.

It knows nothing of sockets to brokers or of the Kafka wire protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import random
import re
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import aiozk
import aiozk.connection
import aiozk.session
from aiozk import exc as zk_exc
from aiozk import protocol
from aiozk.states import States

from .backoff import Backoff
from .errors import InvalidConfigError, ZNodeConflictError, ZooKeeperError
from .supervisor import CrashPolicy, Supervisor, mark_retrieved
from .timeouts import wait_for
from .validation import name_problem

__all__ = [
    "CONNECT_STRING_FORM",
    "DEFAULT_PORT",
    "ZooKeeper",
    "parse_connect_string",
    "parse_server",
]

log = logging.getLogger("aiokafka07.zookeeper")
# aiozk's session logger, where its make_connection() logs a failed connection attempt.
_aiozk_log: logging.Logger = aiozk.session.log

# aiozk logs a traceback for every failed connection attempt, and while nothing is
# configured, logging's last resort prints such records to stderr. This module is the one
# that runs aiozk, so aiozk's records keep our manners: printed nowhere until the
# application configures logging. They still propagate to the application's handlers
# then, and a handler or level the application sets on "aiozk" is left as it is.
logging.getLogger("aiozk").addHandler(logging.NullHandler())

SessionListener = Callable[[], Awaitable[None]]
LostListener = Callable[[], None]
WatchCallback = Callable[[str], None]
T = TypeVar("T")

# The watch events a child watch, or the existence watch left on a missing node, reports.
_CHILD_WATCH_EVENTS = (
    aiozk.WatchEvent.CHILDREN_CHANGED,
    aiozk.WatchEvent.CREATED,
    aiozk.WatchEvent.DELETED,
)


#: ZooKeeper's client port, where a server given without one listens (as in Java's
#: ZooKeeper client and 0.7.2's zk.connect).
DEFAULT_PORT = 2181

#: The form of a connect string, as error messages show it.
CONNECT_STRING_FORM = "host[:port][,host[:port]...][/chroot], e.g. zk1:2181,zk2:2181/kafka"

# A host name (RFC 1123 labels, underscores allowed as resolvers do, a trailing dot
# allowed) or a dotted IPv4 address, which has the same shape.
_HOST_NAME = re.compile(
    r"(?=.{1,253}\.?$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
    r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?"
)
_PORT = re.compile(r"[0-9]{1,5}")


def _bad(what: str, problem: str) -> InvalidConfigError:
    return InvalidConfigError(f"{what} {problem}; expected {CONNECT_STRING_FORM}")


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def parse_server(server: str) -> tuple[str, int]:
    """``(host, port)`` of one server of a connect string: ``host``, ``host:port``,
    ``[v6]``, ``[v6]:port`` or a bare IPv6 address; without a port, :data:`DEFAULT_PORT`.

    Strict, so that a typo is refused at construction rather than tried as a host name
    for a whole connection timeout: a host is a host name, an IPv4 address or (in
    brackets, or bare without a port) an IPv6 address; a port is 1-65535 in decimal.
    Anything else raises :class:`~aiokafka07.errors.InvalidConfigError` (a
    ``ValueError``) saying what is wrong and the expected form."""
    what = f"ZooKeeper server {server!r}"
    text = server.strip()
    if not text:
        raise _bad("a ZooKeeper connect string", "has an empty server (a stray comma?)")
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket:
            raise _bad(what, "opens '[' without closing it")
        if not _is_ipv6(host):
            raise _bad(what, f"has {host!r} in brackets, which is not an IPv6 address")
        if rest and not rest.startswith(":"):
            raise _bad(what, f"has {rest!r} after ']' where ':port' or nothing belongs")
        port = rest[1:] if rest else None
    elif text.count(":") > 1:  # a bare IPv6 address (its port cannot be told apart)
        if not _is_ipv6(text):
            raise _bad(
                what,
                "is not host[:port] (more than one ':'; an IPv6 address with a port goes in "
                "brackets: [::1]:2181)",
            )
        host, port = text, None
    else:
        host, colon, after = text.partition(":")
        port = after if colon else None
        if not host:
            raise _bad(what, "is not host[:port]: the host is empty")
        if not _HOST_NAME.fullmatch(host):
            raise _bad(what, f"is not host[:port]: {host!r} is not a host name or address")
    if port is None:
        return host, DEFAULT_PORT
    if not port:
        raise _bad(what, "is not host[:port]: ':' without a port")
    if not _PORT.fullmatch(port) or not 0 < int(port) <= 65535:
        raise _bad(what, f"is not host[:port]: the port {port!r} is not a number 1-65535")
    return host, int(port)


def _parse_chroot(chroot: str, connect: str) -> str | None:
    """The chroot of ``connect`` (the part from its first ``/``), None for ``/`` alone,
    checked as ZooKeeper's ``PathUtils.validatePath`` checks it: components separated by
    single slashes, no trailing slash, no ``.`` or ``..``, no illegal character."""
    if chroot == "/":
        return None
    what = f"the chroot {chroot!r} of ZooKeeper connect string {connect!r}"
    if chroot.endswith("/"):
        raise _bad(what, "ends with '/' (ZooKeeper refuses such a path: drop the '/')")
    for part in chroot[1:].split("/"):
        problem = name_problem(part)
        if problem == "is empty":
            raise _bad(what, "has an empty component ('//')")
        if problem is not None:
            raise _bad(what, f"has a component {part!r} that {problem}")
    return chroot


def parse_connect_string(connect: str) -> tuple[str, str | None]:
    """Split ``host1:port1,host2:port2/chroot`` into the server list and the chroot.

    The one parser of connect strings (every entry point that takes one, the console
    tools' ``--zookeeper`` and the Spark options included, goes through it), as strict as
    ZooKeeper's own ``ConnectStringParser`` and stricter about hosts and ports (see
    :func:`parse_server`), so a mistyped string is refused at once with
    :class:`~aiokafka07.errors.InvalidConfigError` instead of failing a connection
    timeout later. A server without a port gets :data:`DEFAULT_PORT`, and the list
    returned names every port (``"localhost/x"`` → ``("localhost:2181", "/x")``); a
    chroot of ``/`` alone is none.
    """
    if not isinstance(connect, str):
        raise InvalidConfigError(f"the ZooKeeper connect string must be a str, not {connect!r}")
    connect = connect.strip()
    if not connect:
        raise _bad("the ZooKeeper connect string", "is empty")
    servers, slash, chroot = connect.partition("/")
    if not servers.strip():
        raise _bad(f"ZooKeeper connect string {connect!r}", "names no server")
    listed = []
    for server in servers.split(","):
        host, port = parse_server(server)
        listed.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return ",".join(listed), _parse_chroot(slash + chroot, connect) if slash else None


#: Seconds between rounds of connection attempts while no ZooKeeper server answers: the
#: first delay and the cap (jittered): about what the Java client waits (0 to 1 s).
RECONNECT_BACKOFF = (0.1, 0.5)
#: How long ``close()`` lets a session that is not connected reconnect, to close it
#: politely, before giving it up (seconds; a little over the reconnection backoff's cap).
CLOSE_RECONNECT_GRACE = 1.0
#: Seconds one connection attempt (TCP connect, ``srvr`` handshake, connect) may take.
CONNECT_TIMEOUT = 2.0


class _Connection(aiozk.connection.Connection):  # type: ignore[misc]
    """aiozk's connection, keeping what the server answered to the ``srvr`` request that
    opens every connection, so a failed attempt can say what answered instead of
    ZooKeeper (aiozk only raises a bare ``ConnectionError``)."""

    reader: Any
    writer: Any
    answer: bytes | None = None

    async def _make_handshake(self) -> None:
        read = self.reader.read

        async def recording(n: int = -1) -> bytes:
            data: bytes = await read(n)
            self.answer = data
            return data

        self.reader.read = recording  # (this reader serves the handshake only)
        await super()._make_handshake()


@dataclass(frozen=True, order=True)
class _Attempt:
    """What one connection attempt to one server found, for the error of a session that
    could not open: ``accepted`` tells "nothing there" from "something that is not
    ZooKeeper" (they call for different fixes)."""

    server: str
    accepted: bool
    found: str


def _attempt(server: str, conn: _Connection, exc: BaseException | None) -> _Attempt:
    """Describe an attempt from its connection and how it ended (``exc`` None: it was
    still under way when the wait ended)."""
    if conn.writer is None:  # no TCP connection
        if isinstance(exc, ConnectionRefusedError):
            found = "refused the connection (nothing listens there)"
        elif isinstance(exc, socket.gaierror):
            found = f"is not a known host ({exc.strerror or exc})"
        elif exc is None:
            found = "had not accepted the connection when the wait ended"
        elif isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            found = (
                f"did not accept the connection within {CONNECT_TIMEOUT * 1000:g} ms "
                "(no route to it, or a firewall dropping it)"
            )
        else:
            found = f"could not be connected to ({exc or type(exc).__name__})"
        return _Attempt(server, False, found)
    answer = conn.answer
    if answer is None:
        if exc is None:
            found = "accepted the connection but had not answered ZooKeeper's 'srvr' request"
            found += " when the wait ended"
        elif isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            found = (
                "accepted the connection but did not answer ZooKeeper's 'srvr' request "
                f"within {CONNECT_TIMEOUT * 1000:g} ms"
            )
        else:
            found = "accepted the connection, then broke it without answering ZooKeeper's "
            found += f"'srvr' request ({exc or type(exc).__name__})"
    elif not answer:
        found = "accepted the connection, then closed it without answering ZooKeeper's "
        found += "'srvr' request"
    elif b"whitelist" in answer:
        found = (
            f"answered {answer[:80]!r} to 'srvr': a ZooKeeper that does not allow that "
            "command (add srvr to its 4lw.commands.whitelist)"
        )
    else:
        found = f"answered {answer[:40]!r} to ZooKeeper's 'srvr' request, not as ZooKeeper does"
    return _Attempt(server, True, found)


def _why_no_session(attempts: list[_Attempt]) -> str:
    """What the attempts found, server by server, and what to do about it."""
    if not attempts:
        return "no server answered in time"
    found = "; ".join(f"{a.server} {a.found}" for a in sorted(attempts))
    if all(a.accepted for a in attempts):
        advice = (
            "That is not a ZooKeeper server (a Kafka broker's port?): check the ports of "
            f"the connect string (ZooKeeper's clientPort, {DEFAULT_PORT} by default)"
        )
    elif any(a.accepted for a in attempts):
        advice = (
            "Check that ZooKeeper is running and that the connect string names its "
            f"hosts and client ports ({DEFAULT_PORT} by default)"
        )
    else:
        advice = "Check that ZooKeeper is running there and that the host and port are right"
    return f"{found}. {advice}"


class _Session(aiozk.session.Session):  # type: ignore[misc]
    """aiozk's session, looking for a server again with :data:`RECONNECT_BACKOFF`.

    aiozk waits 4, 8, 16, 32, then 60 s between rounds of attempts, so a client came back
    up to a minute after its ZooKeeper server did (a member's partitions idle all along),
    and then often after its session had expired (every ephemeral node gone: brokers
    and group members re-register, the group rebalances from the committed offsets). The
    server gives every stored session a full timeout from its restart, so reconnecting
    within about a second keeps the session and everything that hangs on it.
    """

    conn: Any  # (aiozk's attributes this class uses)
    hosts: list[tuple[str, str | int]]
    timeout: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._closing: set[asyncio.Task[None]] = set()  # connections replaced
        # What the last attempt to each server found, and the attempt under way: what
        # the error says when the session cannot open.
        self.attempts: dict[str, _Attempt] = {}
        self.trying: tuple[str, _Connection] | None = None

    async def find_server(self, allow_read_only: bool) -> None:
        """Connect to a server (in random order, as aiozk does); until one answers,
        round after round, with the backoff between rounds, or until the session closes.

        It runs in aiozk's repair loop, which aiozk cancels when the session is closed.
        The closing check does not rely on that cancellation alone: with
        ``asyncio.wait_for`` (Python 3.10 and 3.11) a cancellation arriving as an attempt
        ended was lost, and this loop went on trying for ever, a task left behind by a
        closed session (seen in CI, a start failing with no server up); see
        :mod:`aiokafka07.timeouts`."""
        backoff = Backoff(*RECONNECT_BACKOFF)
        conn: Any = None
        while conn is None:
            for host, port in random.sample(self.hosts, len(self.hosts)):
                self._raise_if_closed()
                conn = await self._connect(host, port)
                if conn is not None and (
                    self._closed() or (conn.start_read_only and not allow_read_only)
                ):
                    self._close_later(conn)
                    conn = None
                if conn is not None:
                    break
            else:
                delay = backoff.failed()
                log.debug("no ZooKeeper server answered; trying again in %.2f s", delay)
                await asyncio.sleep(delay)
        old, self.conn = self.conn, conn
        if old is not None:
            # Not awaited: it may wait for a half-open socket's reads to end.
            self._close_later(old)

    def _closed(self) -> bool:
        """Whether the session is closing or closed (aiozk clears ``closing`` when
        ``close()`` has finished, and ``started`` with it)."""
        return bool(self.closing or not self.started)

    def _raise_if_closed(self) -> None:
        """End the repair loop as cancelled (what aiozk expects of it while closing)."""
        if self._closed():
            raise asyncio.CancelledError

    async def _connect(self, host: str, port: str | int) -> Any:
        """A connection to one server, or None, what it found kept in :attr:`attempts`
        (aiozk's ``make_connection``, which only logs why it failed). Bounded: aiozk
        waits for the answer to its ``srvr`` handshake without a timeout, and a server
        that is going down or coming up may accept a connection and never answer it."""
        server = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
        conn = _Connection(
            host, port, watch_handler=self.event_dispatch, read_timeout=self.read_timeout
        )
        self.trying = (server, conn)
        try:
            await wait_for(conn.connect(), CONNECT_TIMEOUT)
        except Exception as exc:
            attempt = self.attempts[server] = _attempt(server, conn, exc)
            log.debug("ZooKeeper at %s %s", server, attempt.found)
            if not isinstance(exc, asyncio.TimeoutError):
                # The record aiozk's make_connection() writes, where an application that
                # routes aiozk's logs expects it.
                _aiozk_log.exception("Couldn't connect to %s:%s", host, port)
            return None
        finally:
            self.trying = None
        self.attempts.pop(server, None)
        return conn

    def _close_later(self, conn: Any) -> None:
        task = asyncio.ensure_future(conn.close(self.timeout))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        task.add_done_callback(_log_close_failure)


async def _until_connected(client: Any, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until the client's session is connected (at once
    if it is); whether it is."""
    state = client.session.state
    if state != States.CONNECTED:
        waiting = state.wait_for(States.CONNECTED)
        try:
            await asyncio.wait({waiting}, timeout=timeout)
        finally:
            state.futures[States.CONNECTED].discard(waiting)
            waiting.cancel()
    return bool(client.session.state == States.CONNECTED)


async def _abandon(client: Any) -> None:
    """Close a client whose session never opened or is not connected, leaving none of
    its tasks behind.

    aiozk's ``close()`` waits for a connected state to send its close request, so it is
    cut short after a second, and skipped for a session the server never granted (there
    is nothing to close then, and the second would only lengthen a failed start); its
    repair loop (cancelled by it, and ending by itself once the session is closing) is
    then awaited, bounded, and its heartbeat timer and heartbeat cancelled.
    """
    session = client.session
    if session.session_id is None:
        # No session was granted: nothing to close politely (aiozk's close() would wait
        # for a connection to send its close request). Closing ends the repair loop.
        session.closing = True
        if session.conn is not None:
            with contextlib.suppress(Exception):
                await wait_for(session.conn.close(0), 1.0)
    else:
        with contextlib.suppress(Exception):
            await wait_for(client.close(), 1.0)
    if session.heartbeat_handle is not None:
        session.heartbeat_handle.cancel()
        session.heartbeat_handle = None
    heartbeat = session.heartbeat_task  # (waits for a connection that will not come)
    if heartbeat is not None and not heartbeat.done():
        heartbeat.cancel()
        await asyncio.wait({heartbeat}, timeout=1.0)
    task = session.repair_loop_task
    if task is not None and not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
        if not task.done():
            log.warning("aiozk's repair loop did not end within 1 s of its cancellation")


def _log_close_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("closing a replaced ZooKeeper connection failed: %r", task.exception())


def _decode(data: Any) -> str | None:
    if data is None:
        return None
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return str(data)


class ZooKeeper:
    """A ZooKeeper session for one broker or client (an async context manager).

    ``session_timeout_ms`` and ``connection_timeout_ms`` are the 0.7.2
    ``zk.sessiontimeout.ms`` / ``zk.connectiontimeout.ms`` (6000 by default).
    ``operation_timeout_ms`` bounds each operation (None: aiozk waits for a reconnection
    as long as it takes); an operation that times out raises :class:`ZooKeeperError`.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: float = 6000,
        connection_timeout_ms: float = 6000,
        operation_timeout_ms: float | None = None,
    ) -> None:
        self.connect = connect
        self.servers, self.chroot = parse_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.operation_timeout_ms = operation_timeout_ms
        self._client: Any = None
        self._listeners: list[SessionListener] = []
        # Owns the session monitor (a new one per session opened).
        self._supervisor: Supervisor | None = None
        self._lost_listeners: list[LostListener] = []
        self._watch_wrappers: dict[tuple[str, WatchCallback], _WatchWrapper] = {}

    async def __aenter__(self) -> ZooKeeper:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def client(self) -> Any:
        """The underlying ``aiozk.ZKClient`` (for watches and recipes)."""
        if self._client is None:
            raise ZooKeeperError("the ZooKeeper session is not started")
        return self._client

    @property
    def where(self) -> str:
        """Where this session looks, for error messages: the connect string and its
        chroot, said outright (``ZooKeeper at zk1:2181/kafka (chroot /kafka)``), since a
        wrong or missing chroot is the usual reason for finding no broker there."""
        chroot = f"chroot {self.chroot}" if self.chroot else "no chroot: the root"
        return f"ZooKeeper at {self.connect} ({chroot})"

    @property
    def session_id(self) -> int | None:
        """The current session id (changes when an expired session is replaced)."""
        return None if self._client is None else self._client.session.session_id

    @property
    def session_timeout(self) -> float:
        """The session timeout the server granted, in seconds (what it expires us after)."""
        if self._client is not None and self._client.session.timeout:
            return float(self._client.session.timeout)
        return self.session_timeout_ms / 1000

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.session.state == States.CONNECTED

    async def start(self) -> None:
        """Open the session; raise :class:`ZooKeeperError` if no server answers in time.

        The error says the connect string, how long it really waited (measured: the
        configured ``connection_timeout_ms`` plus giving up the attempts, bounded), what
        each server was found to be (nothing listening, or something that accepted the
        connection but did not answer as ZooKeeper does), and what to check."""
        if self._client is not None:
            return
        began = time.monotonic()
        timeout = self.session_timeout_ms / 1000
        client = aiozk.ZKClient(self.servers, chroot=self.chroot, session_timeout=timeout)
        # The same session, reconnecting sooner (retry policy, read-only and read timeout
        # as ZKClient's defaults).
        session = client.session = _Session(self.servers, timeout, None, False, None)
        try:
            await wait_for(client.start(), self.connection_timeout_ms / 1000)
        except asyncio.CancelledError:
            # Cut short (Ctrl-C, a caller giving up): stop aiozk's attempts too, or its
            # tasks outlive us and complain when they are torn down.
            await _abandon(client)
            raise
        except (asyncio.TimeoutError, OSError, zk_exc.ZKError) as exc:
            if isinstance(exc, asyncio.TimeoutError):
                # (Read before giving up, which ends the attempt under way.)
                attempts = dict(session.attempts)
                if session.trying is not None:  # (an earlier attempt's end says more)
                    server, conn = session.trying
                    attempts.setdefault(server, _attempt(server, conn, None))
                reason = _why_no_session(list(attempts.values()))
            else:
                reason = str(exc) or type(exc).__name__
            await _abandon(client)
            waited_ms = (time.monotonic() - began) * 1000
            raise ZooKeeperError(
                f"cannot open a ZooKeeper session at {self.connect}: gave up after "
                f"{waited_ms:.0f} ms (connection_timeout_ms={self.connection_timeout_ms:g}): "
                f"{reason}"
            ) from exc
        self._client = client
        # The monitor re-registers listeners after expiry for as long as the session is
        # open: a crash (a bug; listener errors are handled) is logged and it restarts.
        self._supervisor = Supervisor("zookeeper", log)
        self._supervisor.spawn("sessions", self._watch_sessions, policy=CrashPolicy.RESTART)
        log.info("ZooKeeper session %#x open at %s", client.session.session_id, self.connect)

    async def close(self) -> None:
        """Close the session (ZooKeeper then deletes its ephemeral nodes). A session not
        connected gets :data:`CLOSE_RECONNECT_GRACE` to reconnect; if it does not, it is
        given up, and the server expires it (and its ephemeral nodes) after its timeout."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            await supervisor.aclose()  # before the client goes: the monitor reads it
        client, self._client = self._client, None
        self._watch_wrappers.clear()  # registered with this client only
        if client is not None:
            session_id = client.session.session_id or 0
            # (aiozk's close would wait its whole timeout for a connection: see _abandon.)
            if not await _until_connected(client, CLOSE_RECONNECT_GRACE):
                await _abandon(client)
                log.info(
                    "ZooKeeper session %#x given up at close: not connected (the server "
                    "expires it)",
                    session_id,
                )
                return
            try:
                await wait_for(client.close(), self.session_timeout_ms / 1000)
            except Exception as exc:  # an unreachable server: the session expires by itself
                log.warning("closing the ZooKeeper session %#x failed: %r", session_id, exc)
            else:
                log.info("ZooKeeper session %#x closed", session_id)

    async def wait_connected(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the session is connected (at once if it
        is); whether it is. False at once when the session is not open."""
        client = self._client
        if client is None:
            return False
        return await _until_connected(client, timeout) and self.connected

    def add_session_listener(self, listener: SessionListener) -> None:
        """Call ``listener()`` after a new session replaced an expired one."""
        self._listeners.append(listener)

    def add_session_lost_listener(self, listener: LostListener) -> None:
        """Call ``listener()`` (synchronously, at once) when the session is found expired,
        before a new one is opened: its ephemeral nodes are gone, and others may already
        hold what they stood for."""
        self._lost_listeners.append(listener)

    async def _watch_sessions(self) -> None:
        session = self.client.session
        current = session.session_id
        while True:
            await session.state.wait_for(States.LOST, States.SUSPENDED)
            log.info("ZooKeeper connection %s", session.state.current_state)
            lost = False
            if session.state == States.SUSPENDED:
                await session.state.wait_for(States.CONNECTED, States.LOST)
            if session.state == States.LOST:
                lost = True
                log.warning("ZooKeeper session %#x expired", current or 0)
                self._notify_lost()
                await session.state.wait_for(States.CONNECTED)
            if session.session_id == current:
                log.info("ZooKeeper connection restored, session %#x", current or 0)
                continue
            if not lost:  # (aiozk goes through LOST; do not rely on it)
                self._notify_lost()
            log.warning(
                "ZooKeeper session %#x replaced by new session %#x",
                current or 0,
                session.session_id or 0,
            )
            current = session.session_id
            for listener in list(self._listeners):
                try:
                    await listener()
                except Exception:
                    log.exception("session listener %r failed", listener)

    def _notify_lost(self) -> None:
        for listener in list(self._lost_listeners):
            try:
                listener()
            except Exception:
                log.exception("session-lost listener %r failed", listener)

    async def _fenced(self, session: int | None, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` (a write) only in ``session``, and never after its connection broke.

        Raises :class:`ZooKeeperError` when ``session`` is not the current, connected
        session, or when the connection breaks before the answer (the request is then
        abandoned: aiozk would re-send it after reconnecting, maybe in a new session).
        """
        if session is None:
            return await work
        try:
            state = self.client.session.state  # raises once the session is closed
            if self.session_id != session or state != States.CONNECTED:
                raise ZooKeeperError(
                    f"ZooKeeper session {session:#x} is not the current connected session: "
                    "write refused"
                )
        except BaseException:
            work.close()  # never started: nothing was sent
            raise
        task = asyncio.ensure_future(work)
        interrupted = state.wait_for(States.SUSPENDED, States.LOST)
        try:
            await asyncio.wait({task, interrupted}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
        finally:
            for waiting in (state.futures[States.SUSPENDED], state.futures[States.LOST]):
                waiting.discard(interrupted)
            if not task.done():  # interrupted, or we are cancelled: never send it again
                task.cancel()
                task.add_done_callback(mark_retrieved)
        await asyncio.wait({task})
        raise ZooKeeperError(
            f"the connection of ZooKeeper session {session:#x} broke during a write; "
            "the write was abandoned (it may or may not have been applied)"
        )

    # -- znodes ---------------------------------------------------------------------

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing parents as persistent nodes with null data."""
        parts = [p for p in path.split("/") if p]
        current = ""
        for part in parts:
            current += "/" + part
            with contextlib.suppress(zk_exc.NodeExists):
                await self._call(self.client.create(current, data=None))

    async def create_ephemeral(self, path: str, data: str, *, session: int | None = None) -> None:
        """Create an ephemeral node "expecting conflict" (ZOOKEEPER §0).

        Missing parents are created. If the node exists with exactly ``data`` it is ours
        (it survived a connection blip) and that is success; other data raises
        :class:`ZNodeConflictError`. With ``session``, fenced to that session.
        """
        await self._fenced(session, self._create_ephemeral(path, data))

    async def _create_ephemeral(self, path: str, data: str) -> None:
        parent = path.rsplit("/", 1)[0]
        if parent:
            await self.ensure_path(parent)
        try:
            await self._call(self.client.create(path, data=data, ephemeral=True))
        except zk_exc.NodeExists:
            existing = await self.get_data(path)
            if existing != data:
                raise ZNodeConflictError(
                    f"{path} exists with {existing!r}, not {data!r}", path=path, existing=existing
                ) from None

    async def write_persistent(self, path: str, data: str, *, session: int | None = None) -> None:
        """ "Update persistent" (ZOOKEEPER §0): write ``data``; if the node does not exist,
        create its parents and the node; if another writer created it meanwhile, write
        again. With ``session``, fenced to that session."""
        await self._fenced(session, self._write_persistent(path, data))

    async def _write_persistent(self, path: str, data: str) -> None:
        for _ in range(3):
            try:
                await self._call(self.client.set_data(path, data, force=True))
                return
            except zk_exc.NoNode:
                pass
            parent = path.rsplit("/", 1)[0]
            if parent:
                await self.ensure_path(parent)
            try:
                await self._call(self.client.create(path, data=data))
                return
            except zk_exc.NodeExists:
                continue  # created by someone else just now: write over it
        raise ZooKeeperError(f"could not write {path}: it keeps appearing and vanishing")

    async def get_data(self, path: str) -> str | None:
        """The node's data as text (None when null); raises ZooKeeperError if missing."""
        try:
            return _decode(await self._call(self.client.get_data(path)))
        except zk_exc.NoNode:
            raise ZooKeeperError(f"no znode {path}") from None

    async def get_children(self, path: str) -> list[str]:
        """Children names of ``path``; an empty list when the node does not exist."""
        try:
            children: list[str] = await self._call(self.client.get_children(path))
        except zk_exc.NoNode:
            return []
        return children

    async def exists(self, path: str) -> bool:
        return bool(await self._call(self.client.exists(path)))

    async def delete(self, path: str) -> None:
        """Delete a node if it exists."""
        with contextlib.suppress(zk_exc.NoNode):
            await self._call(self.client.delete(path, force=True))

    async def delete_own(self, path: str, session: int) -> bool:
        """Delete the ephemeral node ``path`` only if ``session`` created it and is the
        current session (fenced); True if it was deleted. A node another session created
        meanwhile (the same path, someone else's ownership) is left alone."""
        if self.session_id != session:
            return False  # the node went with that session
        try:
            _, stat = await self._call(self.client.get(path))
        except zk_exc.NoNode:
            return False
        if stat.ephemeral_owner != session:
            return False
        request = protocol.DeleteRequest(
            path=self.client.normalize_path(path), version=stat.version
        )
        return bool(await self._fenced(session, self._call(self._send_if_unchanged(request))))

    async def _send_if_unchanged(self, request: Any) -> bool:
        """Send a versioned request; False when the node changed or vanished meanwhile."""
        try:
            await self.client.send(request)
        except (zk_exc.NoNode, zk_exc.BadVersion):
            return False
        return True

    async def _call(self, call: Awaitable[Any]) -> Any:
        timeout = self.operation_timeout_ms
        try:
            if timeout is None:
                return await call
            return await wait_for(call, timeout / 1000)
        except (zk_exc.NodeExists, zk_exc.NoNode):
            raise
        except asyncio.TimeoutError:
            raise ZooKeeperError(
                f"ZooKeeper at {self.connect}: no answer within {timeout} ms"
            ) from None
        except zk_exc.ZKError as exc:
            raise ZooKeeperError(f"ZooKeeper at {self.connect}: {exc!r}") from exc

    # -- watches --------------------------------------------------------------------

    def add_child_watch_callback(self, path: str, callback: WatchCallback) -> None:
        """Call ``callback(path)`` each time a watch left on ``path`` by
        :meth:`watch_children` fires (children changed, node created or deleted).

        ZooKeeper watches are one-shot: the callback stays registered, but the watch must
        be re-armed by calling :meth:`watch_children` again (normally from the code the
        callback triggers). aiozk re-sends every registered watch to the server after a
        reconnection, also on a new session. ``callback`` runs in the event loop via
        ``call_soon`` and must not block; ``path`` is relative to the chroot.
        """
        key = (path, callback)
        if key in self._watch_wrappers:
            return
        self._watch_wrappers[key] = wrapper = _WatchWrapper(path, callback)
        full_path = self.client.normalize_path(path)
        for event_type in _CHILD_WATCH_EVENTS:
            self.client.session.add_watch_callback(event_type, full_path, wrapper)

    def remove_child_watch_callback(self, path: str, callback: WatchCallback) -> None:
        """Undo :meth:`add_child_watch_callback` (a no-op if it was not registered)."""
        wrapper = self._watch_wrappers.pop((path, callback), None)
        if wrapper is None or self._client is None:
            return
        full_path = self._client.normalize_path(path)
        for event_type in _CHILD_WATCH_EVENTS:
            self._client.session.remove_watch_callback(event_type, full_path, wrapper)

    async def watch_children(self, path: str) -> list[str]:
        """Children of ``path``, leaving a one-shot child watch on it.

        When ``path`` does not exist, return ``[]`` and leave an existence watch instead,
        so its creation is reported too (ZooKeeper sets no watch on a missing node's
        children).
        """
        while True:
            try:
                children: list[str] = await self._call(self.client.get_children(path, watch=True))
            except zk_exc.NoNode:
                pass
            else:
                return children
            if not await self._call(self.client.exists(path, watch=True)):
                return []
            # Created between the two calls: read its children (and watch them) after all.

    async def watch_children_data(self, path: str) -> dict[str, str | None]:
        """Children of ``path`` with their data (None when null), leaving a child watch.

        Children that vanish between listing and reading are left out (the child watch
        reports their removal anyway). The data reads are pipelined.
        """
        names = await self.watch_children(path)
        base = path.rstrip("/")
        values = await asyncio.gather(*(self.data_if_exists(f"{base}/{name}") for name in names))
        return {name: value for name, (found, value) in zip(names, values, strict=True) if found}

    async def wait_deleted(self, path: str, timeout: float) -> bool:
        """Wait until ``path`` does not exist: True once it is gone (at once when it is
        already), False after ``timeout`` seconds with it still there. One existence
        watch, through the same session; raises :class:`ZooKeeperError` when ZooKeeper
        cannot be asked."""
        gone = asyncio.Event()
        full_path = self.client.normalize_path(path)
        session = self.client.session

        def deleted(_server_path: str) -> None:
            gone.set()

        session.add_watch_callback(aiozk.WatchEvent.DELETED, full_path, deleted)
        try:
            if not await self._call(self.client.exists(path, watch=True)):
                return True
            try:
                await wait_for(gone.wait(), max(0.0, timeout))
            except asyncio.TimeoutError:
                return False
            return True
        finally:
            session.remove_watch_callback(aiozk.WatchEvent.DELETED, full_path, deleted)

    async def data_and_mtime(self, path: str) -> tuple[str | None, int] | None:
        """``(data, mtime)``: the node's data and when it was last written (ms since the
        epoch, by the ZooKeeper server's clock), or None when it does not exist (one read)."""
        try:
            data, stat = await self._call(self.client.get(path))
        except zk_exc.NoNode:
            return None
        return _decode(data), int(stat.modified)

    async def data_if_exists(self, path: str) -> tuple[bool, str | None]:
        """``(True, data)``, or ``(False, None)`` when the node does not exist (one read)."""
        try:
            return True, _decode(await self._call(self.client.get_data(path)))
        except zk_exc.NoNode:
            return False, None


class _WatchWrapper:
    """Hands a watch callback the chroot-relative path it was registered for (aiozk passes
    the server-side path, which includes the chroot)."""

    __slots__ = ("callback", "path")

    def __init__(self, path: str, callback: WatchCallback) -> None:
        self.path = path
        self.callback = callback

    def __call__(self, _server_path: str) -> None:
        try:
            self.callback(self.path)
        except Exception:  # aiozk runs it with call_soon: nobody else would see it
            log.exception("watch callback for %s failed", self.path)

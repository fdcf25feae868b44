"""The Kafka 0.7.2 ZooKeeper layout: every znode path and value, read and written here only.

Brokers, producers, group members, the console tools and the Spark source all meet in
ZooKeeper, and Java 0.7.2 clients read what we write, so the layout must be exactly 0.7.2's
(ZOOKEEPER §1-§3, captured in ``tests/data/znodes-observed.txt``)::

    /brokers/ids/<broker id>                          ephemeral   "<creator>:<host>:<port>"
    /brokers/topics/<topic>                           persistent  null
    /brokers/topics/<topic>/<broker id>               ephemeral   partition count, decimal
    /consumers/<group>/ids/<consumer id>              ephemeral   registration (§3.2)
    /consumers/<group>/owners/<topic>/<b>-<p>         ephemeral   owning thread id
    /consumers/<group>/offsets/<topic>/<b>-<p>        persistent  next offset, decimal

Parents are persistent with null data. This module owns the paths (builders and the one
path parser the offset files need), the value formats (broker registrations, partition
counts, offsets, consumer registrations, consumer and thread ids), and the reads and writes
built on them: :func:`read_brokers`, :func:`read_topics`, :func:`read_topic_registrations`,
:func:`topic_exists`, :func:`register_broker`, :func:`register_topic` and
:class:`GroupRegistry` for a consumer group. No other module spells a path or parses a
value; watches and sessions are :mod:`aiokafka07.zookeeper`'s, what the values mean is the
callers'.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any, NamedTuple

from .connection import BrokerAddress
from .errors import InvalidTopicError, ZNodeConflictError, ZooKeeperError
from .validation import check_name
from .zookeeper import ZooKeeper

__all__ = [
    "BROKER_IDS",
    "BROKER_TOPICS",
    "CONSUMERS",
    "GroupRegistry",
    "Registration",
    "broker_path",
    "consumer_id",
    "format_broker_registration",
    "format_registration",
    "group_path",
    "ids_path",
    "member_path",
    "offset_path",
    "offsets_path",
    "owner_path",
    "owners_path",
    "parse_broker_id",
    "parse_broker_registration",
    "parse_offset_path",
    "parse_partition_count",
    "parse_registration",
    "read_brokers",
    "read_topic_registrations",
    "read_topics",
    "register_broker",
    "register_topic",
    "thread_ids",
    "topic_broker_path",
    "topic_exists",
    "topic_of_path",
    "topic_path",
]

log = logging.getLogger("aiokafka07.zookeeper")

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"

_DECIMAL = re.compile(r"[0-9]+")
_MAX_PORT = 65535
# Longer decimal strings are not offsets, counts or ids (and int() of huge strings is slow).
_MAX_DECIMAL_DIGITS = 19
_WHITELIST = re.compile(r"\*(\d{1,9})\*(.*)", re.DOTALL)
_BLACKLIST = re.compile(r"!(\d{1,9})!(.*)", re.DOTALL)
_OFFSET_LINE = re.compile(r"/consumers/([^/]+)/offsets/([^/]+)/([^/:]+)")


def _decimal(text: str | None) -> int | None:
    """A non-negative decimal as 0.7.2 writes it, or None."""
    text = (text or "").strip()
    if len(text) > _MAX_DECIMAL_DIGITS or not _DECIMAL.fullmatch(text):
        return None
    return int(text)


def _offset_value(path: str, value: str | None) -> int:
    """The offset an offsets znode holds; ZooKeeperError if it holds anything else."""
    offset = _decimal(value)
    if offset is None:
        raise ZooKeeperError(f"{path} holds {value!r}, not an offset")
    return offset


# -- paths ---------------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    """``/brokers/ids/<id>``: a live broker's registration."""
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    """``/brokers/topics/<topic>``: its children are the brokers that host the topic."""
    return f"{BROKER_TOPICS}/{topic}"


def topic_broker_path(topic: str, broker_id: int) -> str:
    """``/brokers/topics/<topic>/<id>``: how many partitions broker ``id`` has for it."""
    return f"{BROKER_TOPICS}/{topic}/{broker_id}"


def topic_of_path(path: str) -> str | None:
    """The topic of a ``/brokers/topics/<topic>`` path (a watch firing), else None."""
    prefix = BROKER_TOPICS + "/"
    if path.startswith(prefix) and "/" not in path[len(prefix) :]:
        return path[len(prefix) :] or None
    return None


def group_path(group: str) -> str:
    """``/consumers/<group>``: everything a consumer group keeps."""
    return f"{CONSUMERS}/{group}"


def ids_path(group: str) -> str:
    """``/consumers/<group>/ids``: one child per live member."""
    return f"{CONSUMERS}/{group}/ids"


def member_path(group: str, consumer: str) -> str:
    """``/consumers/<group>/ids/<consumer id>``: a member's registration."""
    return f"{CONSUMERS}/{group}/ids/{consumer}"


def owners_path(group: str, topic: str | None = None) -> str:
    """``/consumers/<group>/owners`` (or ``.../owners/<topic>``)."""
    root = f"{CONSUMERS}/{group}/owners"
    return root if topic is None else f"{root}/{topic}"


def owner_path(group: str, topic: str, partition: str) -> str:
    """``/consumers/<group>/owners/<topic>/<b-p>``: the thread owning a partition."""
    return f"{CONSUMERS}/{group}/owners/{topic}/{partition}"


def offsets_path(group: str, topic: str | None = None) -> str:
    """``/consumers/<group>/offsets`` (or ``.../offsets/<topic>``)."""
    root = f"{CONSUMERS}/{group}/offsets"
    return root if topic is None else f"{root}/{topic}"


def offset_path(group: str, topic: str, partition: str) -> str:
    """``/consumers/<group>/offsets/<topic>/<b-p>``: a committed next offset."""
    return f"{CONSUMERS}/{group}/offsets/{topic}/{partition}"


def parse_offset_path(path: str) -> tuple[str, str, str] | None:
    """``(group, topic, "b-p")`` of an offset znode path, or None (0.7.2's
    ExportZkOffsets lines name offsets by path)."""
    match = _OFFSET_LINE.fullmatch(path)
    return (match.group(1), match.group(2), match.group(3)) if match else None


# -- values: brokers -----------------------------------------------------------------


def format_broker_registration(host: str, port: int, *, started_ms: int | None = None) -> str:
    """The ``/brokers/ids/<id>`` value ``<host>-<start ms>:<host>:<port>`` (§2.1)."""
    ms = int(time.time() * 1000) if started_ms is None else started_ms
    return f"{host}-{ms}:{host}:{port}"


def parse_broker_registration(value: str | None) -> tuple[str, int]:
    """``(host, port)`` from a ``/brokers/ids/<id>`` value ``"<creator>:<host>:<port>"``.

    As every 0.7.2 reader does, the host is the second ``:``-field and the port the third
    (ZOOKEEPER §2.1). With more than three fields (a host containing ``:`` would break the
    Java readers) the port is taken from the last field and the host from the second.
    Raises :class:`ZooKeeperError` naming the value when it cannot be used.
    """
    if value is None:
        raise ZooKeeperError("broker registration is null, expected '<creator>:<host>:<port>'")
    fields = value.split(":")
    if len(fields) < 3:
        raise ZooKeeperError(f"broker registration {value!r} is not '<creator>:<host>:<port>'")
    host = fields[1].strip()
    port = _decimal(fields[2] if len(fields) == 3 else fields[-1])
    if not host or port is None or not 0 < port <= _MAX_PORT:
        raise ZooKeeperError(
            f"broker registration {value!r} has no usable host and port (1-{_MAX_PORT})"
        )
    return host, port


def parse_broker_id(name: str, where: str = BROKER_IDS) -> int | None:
    """A broker id from a child name under ``where``; None (logged) when not decimal."""
    broker_id = _decimal(name)
    if broker_id is None or name != name.strip():
        log.warning("ignoring %s/%s: %r is not a broker id", where, name, name)
        return None
    return broker_id


def parse_partition_count(topic: str, broker_id: int, value: str | None) -> int | None:
    """The partition count of a topic registration; None (logged) when not positive."""
    count = _decimal(value)
    if count is not None and count > 0:
        return count
    log.warning(
        "ignoring the registration of topic %s on broker %d: partition count %r is not a "
        "positive integer",
        topic,
        broker_id,
        value,
    )
    return None


# -- values: consumers ---------------------------------------------------------------


def consumer_id(
    group: str,
    *,
    suffix: str | None = None,
    hostname: str | None = None,
    now_ms: int | None = None,
) -> str:
    """``<group>_<host>-<ms>-<8 hex>`` as 0.7.2 builds it (``suffix`` = the ``consumerid``
    config, meant for tests, replaces everything after the underscore)."""
    if suffix is None:
        host = hostname or socket.gethostname()
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        # Java: Long.toHexString(uuid.getMostSignificantBits()).substring(0, 8)
        suffix = f"{host}-{ms}-{format(uuid.uuid4().int >> 64, 'x')[:8]}"
    return f"{group}_{suffix}"


def thread_ids(consumer: str, streams: int) -> list[str]:
    """The consumer's thread ids for a topic with ``streams`` streams (owner values)."""
    return [f"{consumer}-{i}" for i in range(streams)]


class Registration(NamedTuple):
    """A ``/consumers/<group>/ids/<id>`` value, decoded: a static topic → stream count
    map, or a filter (``regex``, ``whitelist``, ``streams``)."""

    topics: dict[str, int] | None
    regex: str | None = None
    whitelist: bool = True
    streams: int = 1


def format_registration(registration: Registration) -> str:
    """The value byte-identical to Java's: ``{ "t": 2,"u": 1 }``, ``*n*regex`` (whitelist)
    or ``!n!regex`` (blacklist)."""
    if registration.topics is not None:
        return "{ " + ",".join(f'"{t}": {n}' for t, n in registration.topics.items()) + " }"
    mark = "*" if registration.whitelist else "!"
    return f"{mark}{registration.streams}{mark}{registration.regex}"


def parse_registration(value: str | None) -> Registration:
    """A member's registration in any 0.7.2 form; :class:`ZooKeeperError` naming the
    value when it is none of them. Stream counts are checked; regexes are the caller's."""
    if not value:
        raise ZooKeeperError(f"empty consumer registration {value!r}")
    for pattern, whitelist in ((_WHITELIST, True), (_BLACKLIST, False)):
        match = pattern.fullmatch(value)
        if match:
            streams = int(match.group(1))
            if streams < 1:
                raise ZooKeeperError(f"consumer registration {value!r} has no streams")
            return Registration(None, match.group(2), whitelist, streams)
    try:
        data: Any = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        raise ZooKeeperError(
            f"consumer registration {value!r} is neither JSON nor a filter"
        ) from None
    if not isinstance(data, dict) or not data:
        raise ZooKeeperError(f"consumer registration {value!r} is not a topic map")
    for topic, count in data.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ZooKeeperError(
                f"consumer registration {value!r}: topic {topic!r} needs a positive stream "
                f"count, not {count!r}"
            )
    return Registration(dict(data))


# -- reads and writes ----------------------------------------------------------------


async def read_brokers(zookeeper: ZooKeeper) -> dict[int, BrokerAddress]:
    """The registered brokers (``/brokers/ids/*``), read once without a watch. Entries
    that are not broker ids, vanished while read, or hold no usable address are skipped."""
    brokers: dict[int, BrokerAddress] = {}
    for name in await zookeeper.get_children(BROKER_IDS):
        broker_id = parse_broker_id(name)
        if broker_id is None:
            continue
        try:
            host, port = parse_broker_registration(await zookeeper.get_data(broker_path(broker_id)))
        except ZooKeeperError:
            continue  # gone meanwhile, or not host:port
        brokers[broker_id] = BrokerAddress(broker_id, host, port)
    return brokers


def brokers_from_values(values: Mapping[str, str | None]) -> dict[int, BrokerAddress]:
    """Broker addresses from ``{child name: value}`` of ``/brokers/ids`` (a watched read);
    unusable entries are skipped with a warning."""
    brokers: dict[int, BrokerAddress] = {}
    for name, value in values.items():
        broker_id = parse_broker_id(name)
        if broker_id is None:
            continue
        try:
            host, port = parse_broker_registration(value)
        except ZooKeeperError as exc:
            log.warning("ignoring broker %d: %s", broker_id, exc)
            continue
        brokers[broker_id] = BrokerAddress(broker_id, host, port)
    return brokers


async def read_topics(zookeeper: ZooKeeper) -> list[str]:
    """The children of ``/brokers/topics``, sorted (what wildcard subscriptions and topic
    patterns expand against)."""
    return sorted(await zookeeper.get_children(BROKER_TOPICS))


def registrations_from_values(topic: str, values: Mapping[str, str | None]) -> dict[int, int]:
    """Broker id → partition count from ``{child: value}`` of ``/brokers/topics/<topic>``;
    unusable entries are skipped with a warning."""
    registrations: dict[int, int] = {}
    for name, value in values.items():
        broker_id = parse_broker_id(name, topic_path(topic))
        if broker_id is None:
            continue
        count = parse_partition_count(topic, broker_id, value)
        if count is not None:
            registrations[broker_id] = count
    return registrations


async def read_topic_registrations(zookeeper: ZooKeeper, topic: str) -> dict[int, int]:
    """Broker id → partition count from ``/brokers/topics/<topic>``, read once without a
    watch; unusable entries are skipped with a warning, and a broker that left while read
    is skipped."""
    values: dict[str, str | None] = {}
    for child in await zookeeper.get_children(topic_path(topic)):
        try:
            values[child] = await zookeeper.get_data(f"{topic_path(topic)}/{child}")
        except ZooKeeperError:
            continue  # the broker went away while we read
    return registrations_from_values(topic, values)


async def topic_exists(zookeeper: ZooKeeper, topic: str) -> bool:
    """Whether ``/brokers/topics/<topic>`` exists: some broker has had the topic (the
    node is persistent; its children are the brokers serving it now)."""
    return await zookeeper.exists(topic_path(topic))


async def register_broker(zookeeper: ZooKeeper, broker_id: int, host: str, port: int) -> str:
    """Create ``/brokers/ids/<id>`` (ephemeral, expecting conflict); return its value.

    When another registration holds the id, the :class:`ZNodeConflictError` names its
    holder and the two ways out: it is a running broker (stop it, or choose another id),
    or the registration of a process that died, which ZooKeeper removes when that
    process's session expires.
    """
    value = format_broker_registration(host, port)
    path = broker_path(broker_id)
    try:
        await zookeeper.create_ephemeral(path, value)
    except ZNodeConflictError as exc:
        try:
            holder = "a broker at {}:{}".format(*parse_broker_registration(exc.existing))
        except ZooKeeperError:
            holder = f"something else ({exc.existing!r})"
        raise ZNodeConflictError(
            f"broker id {broker_id} is taken: {path} is the registration of {holder}. If "
            f"that broker is running, stop it or give this one another id (brokerid, "
            f"--broker-id); if its process died, ZooKeeper removes the registration once "
            f"its session expires (zk.sessiontimeout.ms, 6000 ms by default): start again "
            f"then",
            path=path,
            existing=exc.existing,
        ) from None
    return value


async def register_topic(zookeeper: ZooKeeper, topic: str, broker_id: int, partitions: int) -> None:
    """Create ``/brokers/topics/<topic>/<id>`` = the broker's partition count (ephemeral)."""
    await zookeeper.create_ephemeral(topic_broker_path(topic, broker_id), str(partitions))


def _topic(topic: str) -> str:
    # A component check, not the broker's topic rules: a topic some broker registered
    # (under /brokers/topics) must stay usable here, whatever its length.
    return check_name("topic", topic, error=InvalidTopicError)


def _partition(name: str) -> str:
    return check_name("partition name", name, error=InvalidTopicError)


class GroupRegistry:
    """The znodes of one consumer group, over a shared :class:`ZooKeeper` session.

    Owner nodes are claimed "expecting conflict": a node holding our own thread id is ours
    (a connection blip), another value means the previous owner has not released yet. The
    registry holds no state of its own; the rebalance logic and the tools build on it.

    A member passes ``session=`` (the ZooKeeper session it claimed in) to its writes, so
    nothing it writes lands in ZooKeeper from a session other than the one it owned the
    partition in (see :mod:`aiokafka07.zookeeper`); the tools write unfenced.

    Every name that becomes a path component (the group, a consumer id, a topic, a
    ``"b-p"`` partition name) is checked first (:func:`~aiokafka07.validation.check_name`):
    :class:`~aiokafka07.errors.InvalidConfigError` for a group or consumer id,
    :class:`~aiokafka07.errors.InvalidTopicError` for a topic or partition name, before
    anything is read or written, so no name can read another path or leave nodes behind.
    """

    def __init__(self, zookeeper: ZooKeeper, group: str) -> None:
        check_name("consumer group", group)
        self.zookeeper = zookeeper
        self.group = group
        self.root = group_path(group)

    # -- membership ---------------------------------------------------------------------

    async def register(
        self, consumer: str, registration: Registration, *, session: int | None = None
    ) -> None:
        """Create this member's ephemeral ``ids`` node (again, after a session expiry), with
        its registration in the one create: the node never exists without it."""
        check_name("consumer id", consumer)
        await self.zookeeper.create_ephemeral(
            member_path(self.group, consumer), format_registration(registration), session=session
        )

    async def unregister(self, consumer: str) -> None:
        check_name("consumer id", consumer)
        await self.zookeeper.delete(member_path(self.group, consumer))

    async def member_ids(self) -> list[str]:
        """The live members' consumer ids, sorted."""
        return sorted(await self.zookeeper.get_children(ids_path(self.group)))

    async def registrations(self) -> dict[str, str | None]:
        """Every live member's raw registration value (a member that left while read is
        left out)."""
        values: dict[str, str | None] = {}
        for consumer in await self.member_ids():
            found, value = await self.zookeeper.data_if_exists(member_path(self.group, consumer))
            if found:
                values[consumer] = value
        return values

    async def members(self) -> dict[str, Registration]:
        """Every member's registration, in any 0.7.2 form. A member whose node vanished
        while reading is left out; an unreadable registration raises ZooKeeperError."""
        return {c: parse_registration(v) for c, v in (await self.registrations()).items()}

    # -- ownership -------------------------------------------------------------------------

    async def claim(
        self, topic: str, partition: str, thread_id: str, *, session: int | None = None
    ) -> bool:
        """Own ``partition`` ("b-p") for ``thread_id``; False while someone else owns it."""
        try:
            await self.zookeeper.create_ephemeral(
                self._owner_path(topic, partition), thread_id, session=session
            )
        except ZNodeConflictError as exc:
            log.info("%s/%s still owned by %s", topic, partition, exc.existing)
            return False
        return True

    async def release(self, topic: str, partition: str, *, session: int | None = None) -> None:
        """Give up ownership (a missing node is fine, as in 0.7.2). With ``session``, only a
        node that session created is deleted: after an expiry the path may already hold
        another member's claim."""
        path = self._owner_path(topic, partition)
        if session is None:
            await self.zookeeper.delete(path)
        else:
            await self.zookeeper.delete_own(path, session)

    async def wait_released(self, topic: str, partition: str, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until nobody owns ``partition``: True once
        its owner node is gone, False if it is still there."""
        return await self.zookeeper.wait_deleted(self._owner_path(topic, partition), timeout)

    async def owner(self, topic: str, partition: str) -> str | None:
        """The thread id owning ``partition``, or None."""
        _, value = await self.zookeeper.data_if_exists(self._owner_path(topic, partition))
        return value

    async def owned_partitions(self, topic: str) -> list[str]:
        """The "b-p" names with an owner node under ``owners/<topic>``."""
        return sorted(await self.zookeeper.get_children(owners_path(self.group, _topic(topic))))

    async def owner_topics(self) -> list[str]:
        """Topics with an ``owners/<topic>`` node (0.7.2 leaves it after a clean exit)."""
        return sorted(await self.zookeeper.get_children(owners_path(self.group)))

    # -- offsets ----------------------------------------------------------------------------

    async def committed(self, topic: str, partition: str) -> int | None:
        """The committed next offset of ``partition``, or None when none was committed."""
        path = self._offset_path(topic, partition)
        found, value = await self.zookeeper.data_if_exists(path)
        if not found:
            return None
        return _offset_value(path, value)

    async def committed_at(self, topic: str, partition: str) -> tuple[int, int] | None:
        """``(offset, mtime)``: the committed next offset of ``partition`` and when its
        znode was last written (ms since the epoch, ZooKeeper's clock; 0.7's Java consumer
        rewrites it every auto-commit interval, changed or not), or None when none was
        committed."""
        path = self._offset_path(topic, partition)
        found = await self.zookeeper.data_and_mtime(path)
        if found is None:
            return None
        value, mtime = found
        return _offset_value(path, value), mtime

    async def commit(
        self, topic: str, partition: str, offset: int, *, session: int | None = None
    ) -> None:
        """Write the next offset to fetch, in decimal (0.7.2's "update persistent")."""
        if offset < 0:
            raise ValueError(f"cannot commit the negative offset {offset}")
        await self.zookeeper.write_persistent(
            self._offset_path(topic, partition), str(offset), session=session
        )

    async def offset_partitions(self, topic: str) -> list[str]:
        """The "b-p" names with an offset node under ``offsets/<topic>``."""
        return sorted(await self.zookeeper.get_children(offsets_path(self.group, _topic(topic))))

    async def offsets(self, topic: str) -> dict[str, int]:
        """Every committed offset of ``topic`` by "b-p"."""
        result: dict[str, int] = {}
        for partition in await self.offset_partitions(topic):
            offset = await self.committed(topic, partition)
            if offset is not None:
                result[partition] = offset
        return result

    async def offset_topics(self) -> list[str]:
        """Topics the group has committed offsets for."""
        return sorted(await self.zookeeper.get_children(offsets_path(self.group)))

    async def exists(self) -> bool:
        """Whether ``/consumers/<group>`` exists at all."""
        return await self.zookeeper.exists(self.root)

    def _owner_path(self, topic: str, partition: str) -> str:
        return owner_path(self.group, _topic(topic), _partition(partition))

    def _offset_path(self, topic: str, partition: str) -> str:
        return offset_path(self.group, _topic(topic), _partition(partition))

    @staticmethod
    async def groups(zookeeper: ZooKeeper) -> list[str]:
        """Every consumer group known to ZooKeeper."""
        return sorted(await zookeeper.get_children(CONSUMERS))

"""The ``kafka07`` data source's options, parsed and checked on the driver.

Spark hands a data source its options as strings with case-insensitive names. Everything
is validated here, before a job starts, and every problem raises :class:`OptionError`
naming the option, so a typo fails the ``load()`` / ``save()`` call, not a task an hour
into the job. Nothing here imports PySpark: the rules are plain Python and tested alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..cluster import parse_broker_list
from ..connection import BrokerAddress
from ..errors import KafkaError
from ..group.subscription import normalize_filter
from ..protocol import EARLIEST, LATEST, Compression
from ..protocol.requests import validate_topic
from ..zookeeper import parse_connect_string

__all__ = [
    "KNOWN_OPTIONS",
    "OPTION_NAMES",
    "OffsetSpec",
    "OptionError",
    "ReadOptions",
    "WriteOptions",
    "parse_offset_spec",
]

#: Every option the source understands, as documented (names are case-insensitive).
OPTION_NAMES = (
    "zookeeper",
    "brokers",
    "topic",
    "topics",
    "topicPattern",
    "startingOffsets",
    "endingOffsets",
    "maxBytesPerPartition",
    "maxBytesPerTrigger",
    "failOnDataLoss",
    "group",
    "partitionsPerBroker",
    "fetchSize",
    "requestTimeoutMs",
    "compression",
    "confirm",
    "batchSize",
)
# Spark's own options reach the source too: load(path) / save(path) as "path", and a
# streaming sink's checkpoint location and query name.
SPARK_OPTIONS = ("path", "checkpointLocation", "queryName")
KNOWN_OPTIONS = frozenset(name.lower() for name in (*OPTION_NAMES, *SPARK_OPTIONS))


class OptionError(KafkaError, ValueError):
    """A ``kafka07`` option is missing, unknown or malformed; the message names it."""


#: Offsets per topic, per ``"<broker>-<partition>"``; -2 = earliest, -1 = latest.
TopicOffsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class OffsetSpec:
    """``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or explicit.

    Explicit offsets map topic -> ``"b-p"`` -> offset; a broker-partition not named
    falls back to ``default`` (earliest for a start, latest for an end).
    """

    kind: str  # "earliest" | "latest" | "explicit"
    offsets: TopicOffsets = field(default_factory=dict)
    default: int = EARLIEST

    def for_partition(self, topic: str, name: str) -> int:
        """The configured offset (or EARLIEST / LATEST) for ``topic`` ``name``."""
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        return self.offsets.get(topic, {}).get(name, self.default)


_BP = re.compile(r"\d+-\d+")


def parse_offset_spec(
    option: str, text: str | None, *, default: str, topics: list[str] | None
) -> OffsetSpec:
    """Parse an offsets option.

    Accepted: ``earliest``, ``latest``, or JSON: ``{"topic": {"0-1": 1234}}`` or, when one
    topic is read, the short form ``{"0-1": 1234}``. -2 means earliest and -1 latest, as in
    the OFFSETS request. ``topics`` is the fixed topic list (None for a pattern).
    """
    raw = (text if text is not None else default).strip()
    fallback = EARLIEST if default == "earliest" else LATEST
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower(), {}, fallback)
    try:
        data = json.loads(raw)
    except ValueError:
        raise OptionError(
            f"option {option!r}: expected 'earliest', 'latest' or a JSON object such as "
            f'{{"topic": {{"0-0": 123}}}}, got {raw!r}'
        ) from None
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option {option!r}: expected a non-empty JSON object, got {raw!r}")
    if all(isinstance(key, str) and _BP.fullmatch(key) for key in data):
        if topics is None or len(topics) != 1:
            raise OptionError(
                f"option {option!r}: a flat {{'<broker>-<partition>': offset}} map needs exactly "
                f"one topic; with several, nest it: {{'topic': {{'0-0': 123}}}}"
            )
        data = {topics[0]: data}
    offsets: TopicOffsets = {}
    for topic, per_partition in data.items():
        if not isinstance(per_partition, dict):
            raise OptionError(
                f"option {option!r}: topic {topic!r} must map '<broker>-<partition>' to offsets"
            )
        if topics is not None and topic not in topics:
            raise OptionError(f"option {option!r} names topic {topic!r}, which is not read")
        checked: dict[str, int] = {}
        for name, offset in per_partition.items():
            if not isinstance(name, str) or not _BP.fullmatch(name):
                raise OptionError(
                    f"option {option!r}: {name!r} is not a '<broker>-<partition>' name"
                )
            if type(offset) is not int or offset < EARLIEST:
                raise OptionError(
                    f"option {option!r}: offset {offset!r} for {topic}/{name} must be an "
                    "integer >= 0, or -2 (earliest) / -1 (latest)"
                )
            checked[name] = offset
        offsets[topic] = checked
    return OffsetSpec("explicit", offsets, fallback)


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {name!r}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be at least {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r}: expected true or false, got {text!r}")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(set(lowered) - KNOWN_OPTIONS)
    if unknown:
        raise OptionError(
            f"unknown kafka07 option(s) {', '.join(map(repr, unknown))}; known: "
            + ", ".join(OPTION_NAMES)
        )
    return lowered


@dataclass(frozen=True)
class Connection:
    """Where the cluster is: a ZooKeeper connect string or a static broker list."""

    zookeeper: str | None
    brokers: dict[int, BrokerAddress] | None
    broker_list: str | None
    request_timeout: float

    @property
    def name(self) -> str:
        """The cluster's identity: its ZooKeeper connect string or broker list."""
        return self.zookeeper or self.broker_list or ""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Connection:
        zookeeper = (options.get("zookeeper") or "").strip() or None
        broker_list = (options.get("brokers") or "").strip() or None
        if (zookeeper is None) == (broker_list is None):
            raise OptionError(
                "set exactly one of the options 'zookeeper' (host:port[/chroot]) and "
                "'brokers' (id:host:port,...)"
            )
        brokers = None
        if zookeeper is not None:
            try:
                parse_connect_string(zookeeper)
            except ValueError as exc:
                raise OptionError(f"option 'zookeeper': {exc}") from None
        else:
            assert broker_list is not None
            try:
                brokers = parse_broker_list(broker_list)
            except ValueError as exc:
                raise OptionError(f"option 'brokers': {exc}") from None
        timeout = _int(options, "requestTimeoutMs", 30_000, 1)
        assert timeout is not None
        return cls(zookeeper, brokers, broker_list, timeout / 1000)


def _topics(options: Mapping[str, str]) -> tuple[list[str] | None, str | None]:
    given = [name for name in ("topic", "topics", "topicpattern") if options.get(name)]
    if len(given) != 1:
        raise OptionError("set exactly one of the options 'topic', 'topics' and 'topicPattern'")
    if given[0] == "topicpattern":
        pattern = options["topicpattern"].strip()
        normalized = normalize_filter(pattern)
        try:
            re.compile(normalized)
        except re.error as exc:
            raise OptionError(f"option 'topicPattern': {pattern!r} is not a regex: {exc}") from None
        return None, normalized
    names = [t.strip() for t in options[given[0]].split(",") if t.strip()]
    if not names:
        raise OptionError(f"option {given[0]!r} names no topic")
    for name in names:
        try:
            validate_topic(name)
        except KafkaError as exc:
            raise OptionError(f"option {given[0]!r}: {exc}") from None
    return sorted(set(names)), None


def _partitions_per_broker(options: Mapping[str, str], connection: Connection) -> int | None:
    value = _int(options, "partitionsPerBroker", None, 1)
    if connection.brokers is not None and value is None:
        raise OptionError(
            "option 'partitionsPerBroker' is required with 'brokers': without ZooKeeper a 0.7 "
            "broker cannot tell how many partitions a topic has (its num.partitions)"
        )
    return value


@dataclass(frozen=True)
class ReadOptions:
    """Everything a batch or streaming read needs, checked."""

    connection: Connection
    topics: list[str] | None
    pattern: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_bytes_per_partition: int | None
    max_bytes_per_trigger: int | None
    fail_on_data_loss: bool
    group: str | None
    partitions_per_broker: int | None
    fetch_size: int

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        options = _lower(raw)
        connection = Connection.parse(options)
        topics, pattern = _topics(options)
        if pattern is not None and connection.zookeeper is None:
            raise OptionError("option 'topicPattern' needs 'zookeeper' to list the topics")
        starting = parse_offset_spec(
            "startingOffsets",
            options.get("startingoffsets"),
            default="latest" if streaming else "earliest",
            topics=topics,
        )
        if streaming and "endingoffsets" in options:
            raise OptionError("option 'endingOffsets' applies to batch reads only")
        ending = parse_offset_spec(
            "endingOffsets", options.get("endingoffsets"), default="latest", topics=topics
        )
        if ending.kind == "earliest":
            raise OptionError("option 'endingOffsets' cannot be 'earliest'")
        if starting.kind == "latest" and not streaming:
            raise OptionError("option 'startingOffsets' cannot be 'latest' for a batch read")
        group = (options.get("group") or "").strip() or None
        if group is not None:
            if not streaming:
                raise OptionError(
                    "option 'group' applies to streaming reads: offsets are published to "
                    "ZooKeeper when a micro-batch commits, and a batch read has no such point"
                )
            if connection.zookeeper is None:
                raise OptionError("option 'group' needs 'zookeeper' to publish offsets")
            if "/" in group:
                raise OptionError(f"option 'group': {group!r} may not contain '/'")
        if not streaming and "maxbytespertrigger" in options:
            raise OptionError("option 'maxBytesPerTrigger' applies to streaming reads only")
        fetch_size = _int(options, "fetchSize", 1 << 20, 1024)
        assert fetch_size is not None
        return cls(
            connection=connection,
            topics=topics,
            pattern=pattern,
            starting=starting,
            ending=ending,
            max_bytes_per_partition=_int(options, "maxBytesPerPartition", None, 1),
            max_bytes_per_trigger=_int(options, "maxBytesPerTrigger", None, 1),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            group=group,
            partitions_per_broker=_partitions_per_broker(options, connection),
            fetch_size=fetch_size,
        )


@dataclass(frozen=True)
class WriteOptions:
    """Everything a write needs, checked."""

    connection: Connection
    topic: str | None
    compression: Compression
    confirm: bool
    batch_size: int

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> WriteOptions:
        options = _lower(raw)
        connection = Connection.parse(options)
        for name in ("topics", "topicPattern", "startingOffsets", "endingOffsets", "group"):
            if name.lower() in options:
                raise OptionError(f"option {name!r} applies to reads only")
        topic = (options.get("topic") or "").strip() or None
        if topic is not None:
            try:
                validate_topic(topic)
            except KafkaError as exc:
                raise OptionError(f"option 'topic': {exc}") from None
        try:
            compression = Compression.parse(options.get("compression", "none"))
        except (KafkaError, ValueError) as exc:
            raise OptionError(f"option 'compression': {exc}") from None
        batch_size = _int(options, "batchSize", 1000, 1)
        assert batch_size is not None
        return cls(
            connection=connection,
            topic=topic,
            compression=compression,
            confirm=_bool(options, "confirm", True),
            batch_size=batch_size,
        )

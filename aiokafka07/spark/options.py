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
from ..connection import MAX_MESSAGE_SIZE, BrokerAddress
from ..errors import KafkaError
from ..group.subscription import normalize_filter
from ..protocol import EARLIEST, LATEST, Compression
from ..protocol.requests import validate_topic
from ..zookeeper import parse_connect_string

__all__ = [
    "KNOWN_OPTIONS",
    "OPTION_NAMES",
    "SPARK_KAFKA_OPTIONS",
    "OffsetSpec",
    "OptionError",
    "ReadOptions",
    "WriteOptions",
    "max_fetch_size",
    "parse_offset_spec",
]

#: Every option the source understands, as documented (names are case-insensitive).
OPTION_NAMES = (
    "zookeeper",
    "brokers",
    "topic",
    "topics",
    "topicPattern",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsets",
    "maxBytesPerPartition",
    "maxMessageSize",
    "maxBytesPerTrigger",
    "failOnDataLoss",
    "group",
    "partitionsPerBroker",
    "fetchSize",
    "requestTimeoutMs",
    "filterPushdown",
    "compression",
    "compressionLevel",
    "confirm",
    "batchSize",
)
# Spark's own options reach the source too: load(path) / save(path) as "path", and a
# streaming sink's checkpoint location and query name.
SPARK_OPTIONS = ("path", "checkpointLocation", "queryName")
KNOWN_OPTIONS = frozenset(name.lower() for name in (*OPTION_NAMES, *SPARK_OPTIONS))

_USE_REQUEST_TIMEOUT = (
    "kafka07 retries a broken connection once and bounds every request by 'requestTimeoutMs'"
)
_USE_MAX_BYTES_PER_TRIGGER = (
    "0.7 offsets are byte positions: 'maxBytesPerTrigger' caps a micro-batch in bytes"
)
#: Options of Spark's own ``format("kafka")`` that mean nothing to 0.7, with what to use
#: instead (lower-case names; every ``kafka.*`` option is answered as a group).
SPARK_KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": (
        "0.7 clients find brokers through ZooKeeper: use 'zookeeper' (host:port[/chroot]), "
        "or 'brokers' (id:host:port,...) for a static list"
    ),
    "kafka.group.id": "use 'group' (a streaming read publishes its offsets for it)",
    "groupidprefix": "use 'group' (a streaming read publishes its offsets for it)",
    "maxoffsetspertrigger": _USE_MAX_BYTES_PER_TRIGGER,
    "minoffsetspertrigger": _USE_MAX_BYTES_PER_TRIGGER + "; there is no minimum",
    "maxtriggerdelay": _USE_MAX_BYTES_PER_TRIGGER + "; there is no minimum",
    "minpartitions": (
        "0.7 offsets are byte positions: 'maxBytesPerPartition' splits a broker-partition "
        "into input partitions of about that many bytes"
    ),
    "maxrecordsperpartition": (
        "0.7 offsets are byte positions: 'maxBytesPerPartition' splits a broker-partition "
        "into input partitions of about that many bytes"
    ),
    "endingtimestamp": (
        "a 0.7 broker knows times only per segment, which cannot end a read exactly: use "
        "'endingOffsets'"
    ),
    "endingoffsetsbytimestamp": (
        "a 0.7 broker knows times only per segment, which cannot end a read exactly: use "
        "'endingOffsets'"
    ),
    "startingoffsetsbytimestampstrategy": (
        "not needed: kafka07 starts at the newest segment start at or before the time "
        "(the earliest offset when there is none), so a time never fails a read"
    ),
    "includeheaders": "0.7 messages have no headers",
    "fetchoffset.numretries": _USE_REQUEST_TIMEOUT,
    "fetchoffset.retryintervalms": _USE_REQUEST_TIMEOUT,
    "kafkaconsumer.polltimeoutms": _USE_REQUEST_TIMEOUT,
}


class OptionError(KafkaError, ValueError):
    """A ``kafka07`` option is missing, unknown or malformed; the message names it."""


def max_fetch_size(fetch_size: int) -> int:
    """The largest fetch a read grows to for one large message (and so the largest entry
    planning accepts as a message)."""
    return max(fetch_size, 64 << 20)


#: Offsets per topic, per ``"<broker>-<partition>"``; -2 = earliest, -1 = latest.
TopicOffsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: ``earliest``, ``latest``, explicit offsets or times.

    ``option`` is the option it came from (for error messages). Explicit offsets
    (``kind`` "explicit") map topic -> ``"b-p"`` -> offset; with ``kind`` "timestamp"
    the values are times in ms, which the brokers turn into offsets (OFFSETS request). A
    broker-partition not named falls back to ``default``: EARLIEST / LATEST, or the one
    time of ``startingTimestamp``.
    """

    kind: str  # "earliest" | "latest" | "explicit" | "timestamp"
    offsets: TopicOffsets = field(default_factory=dict)
    default: int = EARLIEST
    option: str = "startingOffsets"

    def for_partition(self, topic: str, name: str) -> int:
        """The configured value for ``topic`` ``name``: an offset or a time as ``kind``
        says, or EARLIEST / LATEST."""
        if self.kind == "earliest":
            return EARLIEST
        if self.kind == "latest":
            return LATEST
        return self.offsets.get(topic, {}).get(name, self.default)

    def named(self) -> list[tuple[str, str, int]]:
        """Every (topic, ``"b-p"``, value) the option names explicitly."""
        return [
            (topic, name, value)
            for topic, per_partition in sorted(self.offsets.items())
            for name, value in sorted(per_partition.items())
        ]


_BP = re.compile(r"\d+-\d+")


def parse_offset_spec(
    option: str,
    text: str | None,
    *,
    default: str,
    topics: list[str] | None,
    times: bool = False,
) -> OffsetSpec:
    """Parse an offsets option (``times``: an offsets-by-timestamp option).

    Accepted: ``earliest``, ``latest``, or JSON: ``{"topic": {"0-1": 1234}}`` or, when one
    topic is read, the short form ``{"0-1": 1234}``. -2 means earliest and -1 latest, as in
    the OFFSETS request. ``topics`` is the fixed topic list (None for a pattern).
    """
    raw = (text if text is not None else default).strip()
    fallback = EARLIEST if default == "earliest" else LATEST
    if raw.lower() in ("earliest", "latest") and not times:
        return OffsetSpec(raw.lower(), {}, fallback, option)
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
                what = "time (ms since the epoch)" if times else "offset"
                raise OptionError(
                    f"option {option!r}: {what} {offset!r} for {topic}/{name} must be an "
                    "integer >= 0, or -2 (earliest) / -1 (latest)"
                )
            checked[name] = offset
        offsets[topic] = checked
    return OffsetSpec("timestamp" if times else "explicit", offsets, fallback, option)


def _starting(options: Mapping[str, str], topics: list[str] | None, streaming: bool) -> OffsetSpec:
    """The start of a read: ``startingOffsets``, ``startingTimestamp`` or
    ``startingOffsetsByTimestamp`` (at most one)."""
    given = [
        name
        for name in ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp")
        if name.lower() in options
    ]
    if len(given) > 1:
        raise OptionError(f"set at most one of the options {', '.join(map(repr, given))}")
    default = "latest" if streaming else "earliest"
    if given == ["startingTimestamp"]:
        time = _int(options, "startingTimestamp", None, 0)
        assert time is not None
        return OffsetSpec("timestamp", {}, time, "startingTimestamp")
    if given == ["startingOffsetsByTimestamp"]:
        text = options["startingoffsetsbytimestamp"]
        return parse_offset_spec(
            "startingOffsetsByTimestamp", text, default=default, topics=topics, times=True
        )
    return parse_offset_spec(
        "startingOffsets", options.get("startingoffsets"), default=default, topics=topics
    )


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
    for name in unknown:
        hint = SPARK_KAFKA_OPTIONS.get(name)
        if hint is None and name.startswith("kafka."):
            hint = (
                "'kafka.*' options configure Spark's Kafka 0.10+ client; kafka07 speaks "
                "0.7 itself and has options of its own"
            )
        if hint is not None:
            raise OptionError(f"option {name!r} of Spark's Kafka source has no 0.7 meaning: {hint}")
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
    request_timeout_ms: int

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
        return cls(zookeeper, brokers, broker_list, timeout)


#: The options that say what is read, as Spark's Kafka source names them too.
SUBSCRIPTIONS = ("topic", "topics", "topicPattern", "subscribe", "subscribePattern", "assign")

#: Broker-partitions per topic that ``assign`` lists (``"b-p"`` names).
Assignment = dict[str, frozenset[str]]


def _topic_name(option: str, name: str) -> str:
    try:
        validate_topic(name)
    except KafkaError as exc:
        raise OptionError(f"option {option!r}: {exc}") from None
    return name


def _assignment(text: str) -> Assignment:
    """``assign``: ``{"topic": ["<broker>-<partition>", ...], ...}``."""
    example = '{"events": ["0-0", "1-0"]}'
    try:
        data = json.loads(text)
    except ValueError:
        raise OptionError(
            f"option 'assign': expected JSON such as {example}, got {text!r}"
        ) from None
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option 'assign': expected a non-empty JSON object such as {example}")
    assigned: Assignment = {}
    for topic, names in data.items():
        _topic_name("assign", topic)
        if not isinstance(names, list) or not names:
            raise OptionError(
                f"option 'assign': topic {topic!r} must list its broker-partitions, e.g. {example}"
            )
        for name in names:
            if not isinstance(name, str) or not _BP.fullmatch(name):
                raise OptionError(
                    f"option 'assign': {name!r} is not a '<broker>-<partition>' name; a 0.7 "
                    f"partition lives on one broker, so name both, e.g. {example}"
                )
        assigned[topic] = frozenset(names)
    return assigned


def _topics(
    options: Mapping[str, str],
) -> tuple[str, list[str] | None, str | None, Assignment | None]:
    """(option, topics, pattern, assignment) from exactly one subscription option."""
    given = [name for name in SUBSCRIPTIONS if options.get(name.lower())]
    if len(given) != 1:
        raise OptionError(
            "set exactly one of the options "
            + ", ".join(map(repr, SUBSCRIPTIONS[:-1]))
            + f" and {SUBSCRIPTIONS[-1]!r}"
        )
    option = given[0]
    text = options[option.lower()]
    if option == "assign":
        assigned = _assignment(text)
        return option, sorted(assigned), None, assigned
    if option in ("topicPattern", "subscribePattern"):
        pattern = text.strip()
        normalized = normalize_filter(pattern)
        try:
            re.compile(normalized)
        except re.error as exc:
            raise OptionError(f"option {option!r}: {pattern!r} is not a regex: {exc}") from None
        return option, None, normalized, None
    names = [_topic_name(option, t.strip()) for t in text.split(",") if t.strip()]
    if not names:
        raise OptionError(f"option {option!r} names no topic")
    return option, sorted(set(names)), None, None


def _check_assigned(spec: OffsetSpec, assigned: Assignment | None) -> None:
    """An offsets option may name only broker-partitions that ``assign`` lists."""
    if assigned is None:
        return
    for topic, name, _ in spec.named():
        if name not in assigned.get(topic, frozenset()):
            raise OptionError(
                f"option {spec.option!r} names {topic}/{name}, which 'assign' does not list"
            )


def _partitions_per_broker(
    options: Mapping[str, str], connection: Connection, assigned: Assignment | None
) -> int | None:
    value = _int(options, "partitionsPerBroker", None, 1)
    if connection.brokers is not None and value is None and assigned is None:
        raise OptionError(
            "option 'partitionsPerBroker' is required with 'brokers' (unless 'assign' lists the "
            "broker-partitions): without ZooKeeper a 0.7 broker cannot tell how many partitions "
            "a topic has (its num.partitions)"
        )
    return value


@dataclass(frozen=True)
class ReadOptions:
    """Everything a batch or streaming read needs, checked."""

    connection: Connection
    subscription: str  # the option that says what is read: 'topic', 'assign', ...
    topics: list[str] | None
    pattern: str | None
    assigned: Assignment | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_bytes_per_partition: int | None
    max_message_size: int
    max_bytes_per_trigger: int | None
    fail_on_data_loss: bool
    group: str | None
    partitions_per_broker: int | None
    fetch_size: int
    filter_pushdown: bool

    @classmethod
    def check(cls, raw: Mapping[str, str]) -> None:
        """Raise :class:`OptionError` unless a batch or a streaming read accepts ``raw``.

        For ``load()``, where Spark does not yet say which of the two it will be: what
        is wrong for both fails there, what is wrong for one fails when it starts.
        """
        try:
            cls.parse(raw, streaming=False)
        except OptionError as batch:
            try:
                cls.parse(raw, streaming=True)
            except OptionError as stream:
                if str(stream) == str(batch):
                    raise batch from None
                raise OptionError(
                    f"as a batch read: {batch}; as a streaming read: {stream}"
                ) from None

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
        options = _lower(raw)
        connection = Connection.parse(options)
        subscription, topics, pattern, assigned = _topics(options)
        if pattern is not None and connection.zookeeper is None:
            raise OptionError(
                "options 'topicPattern' and 'subscribePattern' need 'zookeeper' to list the topics"
            )
        if assigned is not None and connection.brokers is not None:
            # Static brokers are all asked; the listed names must be among them.
            for topic, names in assigned.items():
                for name in sorted(names):
                    if int(name.partition("-")[0]) not in connection.brokers:
                        raise OptionError(
                            f"option 'assign' names {topic}/{name}, on a broker that 'brokers' "
                            "does not list"
                        )
        starting = _starting(options, topics, streaming)
        _check_assigned(starting, assigned)
        if streaming and "endingoffsets" in options:
            raise OptionError("option 'endingOffsets' applies to batch reads only")
        ending = parse_offset_spec(
            "endingOffsets", options.get("endingoffsets"), default="latest", topics=topics
        )
        _check_assigned(ending, assigned)
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
        max_message_size = _int(options, "maxMessageSize", MAX_MESSAGE_SIZE, 1)
        assert max_message_size is not None
        if max_message_size > max_fetch_size(fetch_size) - 10:
            raise OptionError(
                f"option 'maxMessageSize' must be at most {max_fetch_size(fetch_size) - 10}: "
                "a read cannot fetch a larger message (it grows a fetch up to "
                f"{max_fetch_size(fetch_size)} bytes)"
            )
        filter_pushdown = _bool(options, "filterPushdown", False)
        if filter_pushdown and streaming:
            raise OptionError("option 'filterPushdown' applies to batch reads only")
        return cls(
            connection=connection,
            subscription=subscription,
            topics=topics,
            pattern=pattern,
            assigned=assigned,
            starting=starting,
            ending=ending,
            max_bytes_per_partition=_int(options, "maxBytesPerPartition", None, 1),
            max_message_size=max_message_size,
            max_bytes_per_trigger=_int(options, "maxBytesPerTrigger", None, 1),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            group=group,
            partitions_per_broker=_partitions_per_broker(options, connection, assigned),
            fetch_size=fetch_size,
            filter_pushdown=filter_pushdown,
        )


@dataclass(frozen=True)
class WriteOptions:
    """Everything a write needs, checked."""

    connection: Connection
    topic: str | None
    compression: Compression
    confirm: bool
    batch_size: int
    #: gzip's level, 0 to 9 (None: 6, the Java producer's).
    compression_level: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> WriteOptions:
        options = _lower(raw)
        connection = Connection.parse(options)
        read_only = (
            *(name for name in SUBSCRIPTIONS if name != "topic"),
            "startingOffsets",
            "startingTimestamp",
            "startingOffsetsByTimestamp",
            "endingOffsets",
            "group",
            "filterPushdown",
        )
        for name in read_only:
            if name.lower() in options:
                raise OptionError(f"option {name!r} applies to reads only")
        topic = (options.get("topic") or "").strip() or None
        if topic is not None:
            _topic_name("topic", topic)
        try:
            compression = Compression.parse(options.get("compression", "none"))
        except (KafkaError, ValueError) as exc:
            raise OptionError(f"option 'compression': {exc}") from None
        level = _int(options, "compressionLevel", None, 0)
        if level is not None and (level > 9 or compression is not Compression.GZIP):
            raise OptionError(
                f"option 'compressionLevel' is gzip's, 0 to 9, got {level} with "
                f"compression {compression.name.lower()}"
            )
        batch_size = _int(options, "batchSize", 1000, 1)
        assert batch_size is not None
        return cls(
            connection=connection,
            topic=topic,
            compression=compression,
            confirm=_bool(options, "confirm", True),
            batch_size=batch_size,
            compression_level=level,
        )

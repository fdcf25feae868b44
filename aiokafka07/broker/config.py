"""Broker configuration with the Kafka 0.7.2 ``server.properties`` keys (CONFIG §1).

:class:`BrokerConfig` holds every key with its 0.7.2 code default. Build it from a
properties file or mapping with :meth:`BrokerConfig.from_properties` (the 0.7.2 key
names) or directly with keyword arguments (the Python names). Two deliberate differences
for an embedded broker: it binds to the loopback address unless ``hostname`` is set, and
``port = 0`` picks a free port. ``log.flush.fsync`` (ours) turns off fsync on flush, for
test clusters where durability across power loss does not matter but speed does.
``max.decompressed.bytes`` (ours) bounds what the broker inflates to validate a produced
compressed set; see :meth:`BrokerConfig.decompression_bound`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .log import LogConfig

log = logging.getLogger("aiokafka07.broker")

__all__ = ["DECOMPRESSION_RATIO", "BrokerConfig", "parse_properties"]

_HOUR_MS = 3600 * 1000

#: The default ``max.decompressed.bytes`` is this many times ``max.message.size``: every
#: wrapper's compressed payload is at most ``max.message.size``, and a 64-fold ratio covers
#: real data (text and JSON compress 3 to 20 times). With 0.7.2's default of 1,000,000 it
#: is 64,000,000, under the consumers' default ``max_fetch_size`` (64 MiB) bound, so every
#: set this broker accepts is one a default consumer can decode.
DECOMPRESSION_RATIO = 64


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``key=value`` lines of a Java properties file (comments and blanks skipped)."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in line:
                key, _, value = line.partition(sep)
                break
        else:
            key, value = line, ""
        result[key.strip()] = value.strip()
    return result


def _topic_map(text: str, key: str) -> dict[str, int]:
    """Parse ``topic:value,topic2:value`` (the 0.7.2 per-topic override syntax)."""
    result: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        topic, colon, value = item.rpartition(":")
        if not colon or not topic:
            raise ValueError(f"{key}: {item!r} is not topic:value")
        try:
            result[topic] = int(value)
        except ValueError:
            raise ValueError(f"{key}: {value!r} for topic {topic!r} is not an integer") from None
    return result


#: Keys a 0.7.2 broker accepts without using them, and why (CONFIG §0, §4).
IGNORED_KEYS = {
    "zk.synctime.ms": "only the consumer's rebalance.backoff.ms default reads it",
    "mirror.topics.whitelist": "0.7.0's embedded mirroring; nothing reads it in 0.7.2",
    "mirror.topics.blacklist": "0.7.0's embedded mirroring; nothing reads it in 0.7.2",
    "mirror.consumer.numthreads": "0.7.0's embedded mirroring; nothing reads it in 0.7.2",
    "embeddedconsumer.topics": "a 0.6-era key; nothing reads it in 0.7.2",
    "socket.buffer.size": "a misspelling the 0.7.2 tools set; nothing reads it",
}


@dataclass
class BrokerConfig:
    """Every 0.7.2 broker setting; each field's metadata names its properties key."""

    broker_id: int = field(metadata={"key": "brokerid"})
    log_dir: Path = field(metadata={"key": "log.dir"})
    port: int = field(default=6667, metadata={"key": "port"})
    hostname: str | None = field(default=None, metadata={"key": "hostname"})
    num_threads: int = field(default=1, metadata={"key": "num.threads"})
    socket_send_buffer: int = field(default=102400, metadata={"key": "socket.send.buffer"})
    socket_receive_buffer: int = field(default=102400, metadata={"key": "socket.receive.buffer"})
    max_socket_request_bytes: int = field(
        default=104857600, metadata={"key": "max.socket.request.bytes"}
    )
    max_message_size: int = field(default=1000000, metadata={"key": "max.message.size"})
    #: Ours: the most bytes the compressed wrappers of one produced set may decompress to
    #: (None: :data:`DECOMPRESSION_RATIO` x ``max.message.size``).
    max_decompressed_bytes: int | None = field(
        default=None, metadata={"key": "max.decompressed.bytes"}
    )
    max_topic_name_length: int = field(default=255, metadata={"key": "max.topic.name.length"})
    monitoring_period_secs: int = field(default=600, metadata={"key": "monitoring.period.secs"})
    num_partitions: int = field(default=1, metadata={"key": "num.partitions"})
    topic_partition_count_map: dict[str, int] = field(
        default_factory=dict, metadata={"key": "topic.partition.count.map", "map": True}
    )
    log_file_size: int = field(default=1073741824, metadata={"key": "log.file.size"})
    topic_log_file_size: dict[str, int] = field(
        default_factory=dict, metadata={"key": "topic.log.file.size", "map": True}
    )
    log_roll_hours: int = field(default=168, metadata={"key": "log.roll.hours"})
    topic_log_roll_hours: dict[str, int] = field(
        default_factory=dict, metadata={"key": "topic.log.roll.hours", "map": True}
    )
    log_retention_hours: int = field(default=168, metadata={"key": "log.retention.hours"})
    topic_log_retention_hours: dict[str, int] = field(
        default_factory=dict, metadata={"key": "topic.log.retention.hours", "map": True}
    )
    log_retention_size: int = field(default=-1, metadata={"key": "log.retention.size"})
    topic_log_retention_size: dict[str, int] = field(
        default_factory=dict, metadata={"key": "topic.log.retention.size", "map": True}
    )
    log_cleanup_interval_mins: int = field(
        default=10, metadata={"key": "log.cleanup.interval.mins"}
    )
    log_flush_interval: int = field(default=500, metadata={"key": "log.flush.interval"})
    log_default_flush_scheduler_interval_ms: int = field(
        default=3000, metadata={"key": "log.default.flush.scheduler.interval.ms"}
    )
    log_default_flush_interval_ms: int | None = field(
        default=None, metadata={"key": "log.default.flush.interval.ms"}
    )
    topic_flush_intervals_ms: dict[str, int] = field(
        default_factory=dict, metadata={"key": "topic.flush.intervals.ms", "map": True}
    )
    log_flush_fsync: bool = field(default=True, metadata={"key": "log.flush.fsync"})
    enable_zookeeper: bool = field(default=True, metadata={"key": "enable.zookeeper"})
    zk_connect: str | None = field(default=None, metadata={"key": "zk.connect"})
    zk_sessiontimeout_ms: int = field(default=6000, metadata={"key": "zk.sessiontimeout.ms"})
    zk_connectiontimeout_ms: int = field(default=6000, metadata={"key": "zk.connectiontimeout.ms"})
    #: Seconds after start-up before the first retention run (60 in 0.7.2).
    log_cleanup_initial_delay_s: float = field(
        default=60.0, metadata={"key": "log.cleanup.initial.delay.secs"}
    )

    def __post_init__(self) -> None:
        self.log_dir = Path(self.log_dir)
        if self.broker_id < 0:
            raise ValueError(f"brokerid must be >= 0, not {self.broker_id}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is outside 0..65535")
        if not 1 <= self.max_socket_request_bytes <= (1 << 31) - 1:
            raise ValueError("max.socket.request.bytes must be within 1..2^31-1")
        if self.num_partitions < 1:
            raise ValueError("num.partitions must be at least 1")
        if self.max_decompressed_bytes is not None and self.max_decompressed_bytes < 1:
            raise ValueError("max.decompressed.bytes must be at least 1")
        for topic, count in self.topic_partition_count_map.items():
            if count < 1:
                raise ValueError(f"topic.partition.count.map: {topic} has {count} partitions")
        if self.log_file_size < 5:
            raise ValueError("log.file.size must be at least 5")
        if self.log_flush_interval < 1:
            raise ValueError("log.flush.interval must be at least 1")
        if self.enable_zookeeper and not self.zk_connect:
            raise ValueError("zk.connect is required unless enable.zookeeper=false")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **overrides: Any) -> BrokerConfig:
        """Build from 0.7.2 ``server.properties`` keys.

        Keys 0.7.2 accepts but never reads (CONFIG §0, §4) are ignored with a warning, so
        a real broker's properties file works unchanged; any other unknown key is refused
        (most likely a typo that would otherwise be silently ignored).
        """
        by_key = {f.metadata["key"]: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in properties.items():
            if key in IGNORED_KEYS:
                log.warning("ignoring %s=%s: %s", key, raw, IGNORED_KEYS[key])
                continue
            spec = by_key.get(key)
            if spec is None:
                raise ValueError(f"unknown broker config key {key!r}")
            values[spec.name] = _convert(spec, key, raw)
        values.update(overrides)
        return cls(**values)

    def decompression_bound(self) -> int:
        """``max.decompressed.bytes``, or by default :data:`DECOMPRESSION_RATIO` times
        ``max.message.size`` (at least 1 MiB)."""
        if self.max_decompressed_bytes is not None:
            return self.max_decompressed_bytes
        return max(1 << 20, DECOMPRESSION_RATIO * self.max_message_size)

    def partitions_for(self, topic: str) -> int:
        """Partitions of ``topic`` on this broker (``topic.partition.count.map`` or default)."""
        return self.topic_partition_count_map.get(topic, self.num_partitions)

    def log_config_for(self, topic: str) -> LogConfig:
        """The effective log settings of ``topic`` with its per-topic overrides."""
        flush_ms = self.log_default_flush_interval_ms
        if flush_ms is None:
            flush_ms = self.log_default_flush_scheduler_interval_ms
        return LogConfig(
            segment_bytes=self.topic_log_file_size.get(topic, self.log_file_size),
            roll_ms=self.topic_log_roll_hours.get(topic, self.log_roll_hours) * _HOUR_MS,
            retention_ms=self.topic_log_retention_hours.get(topic, self.log_retention_hours)
            * _HOUR_MS,
            retention_bytes=self.topic_log_retention_size.get(topic, self.log_retention_size),
            flush_interval_messages=self.log_flush_interval,
            flush_interval_ms=self.topic_flush_intervals_ms.get(topic, flush_ms),
            fsync=self.log_flush_fsync,
        )

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)


def _convert(spec: dataclasses.Field[Any], key: str, raw: str) -> Any:
    if spec.metadata.get("map"):
        return _topic_map(raw, key)
    kind = spec.type if isinstance(spec.type, str) else getattr(spec.type, "__name__", "")
    text = raw.strip()
    if "bool" in kind:
        if text.lower() not in ("true", "false"):
            raise ValueError(f"{key} must be true or false, not {raw!r}")
        return text.lower() == "true"
    if "Path" in kind:
        return Path(text)
    if "float" in kind:
        return float(text)
    if "int" in kind:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{key} must be an integer, not {raw!r}") from None
    return text or None

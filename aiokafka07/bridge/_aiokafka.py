"""The typed boundary to aiokafka (an optional dependency without complete type hints).

Everything the bridge takes from aiokafka is imported here, once, and given the types the
bridge relies on; the rest of the package never imports aiokafka itself. A missing
aiokafka is a :class:`~aiokafka07.errors.BridgeError` naming the extra to install.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .._install import install_hint
from ..errors import BridgeError

__all__ = ["load", "murmur2_partition", "partitions_of", "read_committed_consumer"]


def load() -> Any:
    """The aiokafka module (raises BridgeError when the ``bridge`` extra is missing)."""
    try:
        import aiokafka
        import aiokafka.admin
        import aiokafka.errors
        import aiokafka.partitioner
        import aiokafka.record.default_records
        import aiokafka.structs
    except ImportError as exc:
        raise BridgeError(f"the bridge needs aiokafka: {install_hint('bridge')} ({exc})") from None
    return aiokafka


@functools.cache
def _murmur2() -> Any:
    return load().partitioner.murmur2


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition Java's DefaultPartitioner (and aiokafka's) gives a keyed record:
    ``toPositive(murmur2(key)) % num_partitions``."""
    return (int(_murmur2()(key)) & 0x7FFFFFFF) % num_partitions


async def partitions_of(client: Any, topic: str) -> set[int] | None:
    """The partition numbers of ``topic`` from a fresh metadata answer for every topic
    (None: no such topic). A fresh answer of its own, not ``force_metadata_update()``,
    which may join a refresh in flight of the client's tracked topics only."""
    metadata = await client.fetch_all_metadata()
    partitions = metadata.partitions_for_topic(topic)
    return {int(p) for p in partitions} if partitions else None


def read_committed_consumer(
    bootstrap_servers: str, request_timeout_ms: float, options: Mapping[str, Any] | None
) -> Any:
    """An AIOKafkaConsumer (not started) that reads committed data only and commits
    nothing by itself; ``options`` are further keyword arguments, which win."""
    settings: dict[str, Any] = {"request_timeout_ms": int(request_timeout_ms)}
    settings.update(options or {})
    return load().AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        isolation_level="read_committed",
        **settings,
    )

"""The router: which (broker, partition) each message goes to, as a 0.7.2 producer decides.

ZooKeeper mode (ZOOKEEPER §6-§7): the candidates for a topic are every registered (broker,
partition) pair, sorted numerically; a key picks one with the Java-compatible default
partitioner (or the caller's), no key picks one at random; a topic nobody registered yet
goes to partition 0 of every live broker (the cluster view bootstraps it). Static mode
(``broker.list``): a random broker gets the message with partition -1 and picks the
partition itself; keys are ignored, as 0.7.2 ignores them there.

Everything the caller supplies is checked here, when ``send()`` is called and before
anything is queued: an explicit partition must be a (broker id, partition) pair of ints
in range, a key must be one the partitioner can place; for the default partitioner (and
in static mode, where keys choose nothing) a key of a type whose hash is the same in
every process (:func:`~aiokafka07.validation.check_key`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from ..cluster import Cluster
from ..errors import InvalidConfigError, InvalidPartitionError, NoBrokersError
from ..partitioner import default_partition
from ..validation import INT32_MAX, check_key
from ..validation import check_partition as check_partition_number

__all__ = ["Partitioner", "Router", "check_partition"]

Partitioner = Callable[[Any, int], int]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_partition(partition: object) -> tuple[int, int]:
    """An explicit ``partition=`` as a (broker id, partition) tuple, or
    :class:`InvalidPartitionError` saying what is wrong with it.

    The broker id is 0..2**31-1; the partition -1 (the broker picks, as in static mode)
    to 2**31-1 (it is an int32 on the wire; a partition the broker does not have is
    refused by the broker, which confirm mode reports).
    """
    if (
        isinstance(partition, (str, bytes))
        or not isinstance(partition, Sequence)
        or len(partition) != 2
    ):
        raise InvalidPartitionError(
            f"partition must be a (broker id, partition) pair, not {partition!r}"
        )
    broker_id, number = partition
    if not _is_int(broker_id) or not 0 <= broker_id <= INT32_MAX:
        raise InvalidPartitionError(
            f"partition {tuple(partition)!r}: the broker id must be an int from 0 to "
            f"{INT32_MAX}, not {broker_id!r}"
        )
    try:
        check_partition_number(number, produce=True)
    except InvalidPartitionError as exc:
        raise InvalidPartitionError(f"partition {tuple(partition)!r}: {exc}") from None
    return broker_id, number


class Router:
    """Routes messages with the current cluster view (see the module docstring).

    ``key_serializer`` maps a key before the partitioner sees it.
    """

    def __init__(
        self,
        cluster: Cluster,
        partitioner: Partitioner | None = None,
        key_serializer: Callable[[Any], Any] | None = None,
    ) -> None:
        if partitioner is not None and cluster.static:
            raise InvalidConfigError(
                "a partitioner needs ZooKeeper mode (0.7.2 refuses one with broker.list)"
            )
        self.cluster = cluster
        self.partitioner: Partitioner = partitioner or default_partition
        self.key_serializer = key_serializer

    def key(self, key: Any) -> Any:
        """The key as routing uses it (None: no key; keys mean nothing in static mode).
        One the default partitioner would hash differently from process to process (a
        float, an object) raises :class:`~aiokafka07.errors.InvalidConfigError`, in
        static mode too."""
        if key is None:
            return None
        routed = key if self.key_serializer is None else self.key_serializer(key)
        if self.cluster.static or self.partitioner is default_partition:
            check_key(routed)
        return None if self.cluster.static else routed

    def by_key(self, topic: str, key: Any) -> tuple[int, int]:
        """The partitioner's choice among the topic's candidates (``key`` from
        :meth:`key`, not None). Raises what the partitioner raises for a key it cannot
        place (:class:`TypeError` for a type without a Java hash), :class:`NoBrokersError`
        without candidates, :class:`InvalidPartitionError` for an index out of range."""
        candidates = self.cluster.partitions(topic)
        if not candidates:
            raise self.cluster.no_brokers_error(topic)
        index = self.partitioner(key, len(candidates))
        if not _is_int(index) or not 0 <= index < len(candidates):
            raise InvalidPartitionError(
                f"partitioner chose index {index!r} of {len(candidates)} candidates"
            )
        return candidates[index]

    def random_target(self, topic: str) -> tuple[int, int]:
        """0.7.2's choice for a message without key: a random candidate partition, or in
        static mode a random broker with partition -1."""
        if self.cluster.static:
            brokers = list(self.cluster.brokers)
            if not brokers:
                raise NoBrokersError(f"no broker for topic {topic}")
            return random.choice(brokers), -1
        candidates = self.cluster.partitions(topic)
        if not candidates:
            raise self.cluster.no_brokers_error(topic)
        return random.choice(candidates)

    def partitions(self, topic: str) -> list[tuple[int, int]]:
        """The candidates for ``topic`` as :meth:`by_key` sees them."""
        return self.cluster.partitions(topic)

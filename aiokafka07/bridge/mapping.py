"""Which target partition a copied message goes to, and what its key is.

0.7 messages carry no key (a 0.7 producer uses its key only to choose the partition), so
the key is taken from the message bytes by a :data:`KeyFunction` (for example
:func:`key_before`), and the bytes are kept whole as the record's value.

* A keyed message goes where the target's default partitioner (Java's
  ``DefaultPartitioner``, murmur2 of the key) would put it, so consumers of the target
  that rely on key placement find every key where they expect it, always in one
  partition.
* A message without a key goes to the target partition at the index of its 0.7
  broker-partition among the topic's sorted broker-partitions, modulo the target's
  partition count: with as many target partitions as 0.7 broker-partitions, each
  broker-partition becomes one target partition, and a key a 0.7 producer placed by
  hash stays together. (A broker-partition that appears while the bridge runs goes by
  murmur2 of its ``<broker>-<partition>`` name.)

The mapping needs the target's partition count to stay as it is while the bridge runs and
between its runs (the checkpoint records it; a change is refused, see
:mod:`aiokafka07.bridge.recovery`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..records import TopicPartition
from ._aiokafka import murmur2_partition

__all__ = ["KeyFunction", "Mapping", "key_before"]

#: Takes a 0.7 message's bytes, returns the target record's key (None: no key).
KeyFunction = Callable[[bytes], bytes | None]


def key_before(separator: bytes) -> KeyFunction:
    """A key function: the bytes before the first ``separator`` (no key when absent)."""
    if not separator:
        raise ValueError("the key separator must not be empty")

    def key(value: bytes) -> bytes | None:
        index = value.find(separator)
        return value[:index] if index >= 0 else None

    return key


class Mapping:
    """Target partitions for one topic (see the module docstring)."""

    __slots__ = ("_index", "_keys", "num_partitions")

    #: Keys whose partition is remembered (aiokafka's murmur2 is pure Python: a few
    #: microseconds a key); the memory is emptied when it holds this many.
    MAX_REMEMBERED = 65536

    def __init__(self, sources: Sequence[TopicPartition], num_partitions: int) -> None:
        if num_partitions < 1:
            raise ValueError(f"a target topic needs partitions, not {num_partitions}")
        self.num_partitions = num_partitions
        self._index = {source: i for i, source in enumerate(sorted(sources))}
        self._keys: dict[bytes, int] = {}

    def partition(self, key: bytes | None, source: TopicPartition) -> int:
        if key is not None:
            partition = self._keys.get(key)
            if partition is None:
                if len(self._keys) >= self.MAX_REMEMBERED:
                    self._keys.clear()
                partition = self._keys[key] = murmur2_partition(key, self.num_partitions)
            return partition
        index = self._index.get(source)
        if index is None:  # a broker-partition that appeared after the start
            return murmur2_partition(source.name.encode("ascii"), self.num_partitions)
        return index % self.num_partitions

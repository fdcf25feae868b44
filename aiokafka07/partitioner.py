"""Java-compatible partitioning (ZOOKEEPER §7), as pure functions.

A 0.7.2 producer picks ``abs(key.hashCode()) % N`` over its numerically sorted list of
(broker id, partition) pairs, with Java's int arithmetic. Reproducing ``hashCode`` and the
abs/remainder rules exactly is what makes a Python producer put a key on the same
partition as a Java producer with the same cluster view.

Key types and the Java type whose ``hashCode`` they reproduce:

==================  ============================================================
``str``             ``String`` (31-polynomial over UTF-16 code units)
``bool``            ``Boolean`` (1231 / 1237)
``int``             ``Integer`` within int32 range, ``Long`` beyond it (int64)
:class:`JavaLong`   ``Long`` for any int64 value (``Long`` and ``Integer`` differ
                    for negative numbers)
``bytes``-like      ``java.util.Arrays.hashCode(byte[])``: a Java ``byte[]`` key
                    uses identity hashing, which no client can reproduce, so we use
                    the deterministic rule a Java partitioner would have to use
==================  ============================================================
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

from .errors import InvalidPartitionError
from .protocol import _accel

__all__ = [
    "JavaLong",
    "default_partition",
    "java_hash_code",
    "java_partition_index",
    "java_string_hash",
]

_INT_MIN = -(1 << 31)
_INT_MAX = (1 << 31) - 1
_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1


def java_string_hash(s: str) -> int:
    """``java.lang.String.hashCode`` of ``s`` (non-BMP characters count as surrogate pairs)."""
    result: int = _accel.impl.java_string_hash(s)
    return result


class JavaLong(NamedTuple):
    """Marks an int as a Java ``Long`` key, whose hash differs from ``Integer``'s."""

    value: int


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _long_hash(value: int) -> int:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{value} does not fit a Java long")
    bits = value & 0xFFFFFFFFFFFFFFFF
    return _to_int32(bits ^ (bits >> 32))


def java_hash_code(key: Any) -> int:
    """The Java ``hashCode`` of a key, as an int32 (see the module docs for types)."""
    if isinstance(key, str):
        return java_string_hash(key)
    if isinstance(key, bool):
        return 1231 if key else 1237
    if isinstance(key, JavaLong):
        return _long_hash(key.value)
    if isinstance(key, int):
        return key if _INT_MIN <= key <= _INT_MAX else _long_hash(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        h = 1
        for b in bytes(key):
            h = (31 * h + (b - 256 if b > 127 else b)) & 0xFFFFFFFF
        return _to_int32(h)
    raise TypeError(
        f"no Java-compatible hash for a {type(key).__name__} key; "
        "use str, int, bool, bytes or a custom partitioner"
    )


def java_partition_index(key_hash: int, num_partitions: int) -> int:
    """``abs(hash) % n`` with Java int semantics.

    ``abs(Integer.MIN_VALUE)`` stays negative in Java, and Java's remainder keeps the
    dividend's sign, so that one hash gives a negative index unless ``n`` is a power of
    two; the Java producer then fails with InvalidPartitionException, and so do we.
    """
    if num_partitions <= 0:
        raise ValueError(f"number of partitions must be positive, not {num_partitions}")
    if key_hash != _INT_MIN:
        return abs(key_hash) % num_partitions
    index = -((1 << 31) % num_partitions)
    if index < 0:
        raise InvalidPartitionError(
            f"key hash is Integer.MIN_VALUE, which Java maps to the invalid partition {index} "
            f"of {num_partitions}; a Java 0.7.2 producer fails on this key too"
        )
    return index


def default_partition(key: Any, num_partitions: int) -> int:
    """The 0.7.2 default partitioner: random without a key, else Java hash modulo ``n``."""
    if key is None:
        if num_partitions <= 0:
            raise ValueError(f"number of partitions must be positive, not {num_partitions}")
        return random.randrange(num_partitions)
    return java_partition_index(java_hash_code(key), num_partitions)

"""Java-compatible key hashing and partition choice (ZOOKEEPER §7)."""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka07.errors import InvalidPartitionError
from aiokafka07.partitioner import (
    JavaLong,
    default_partition,
    java_hash_code,
    java_partition_index,
    java_string_hash,
)
from aiokafka07.protocol import _pure


def reference_hash(s: str) -> int:
    """The spec's reference: 31-polynomial over UTF-16-BE code units."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -2147483648),
        # Values computed with java.lang.String.hashCode semantics (UTF-16 code units).
        ("user-42", reference_hash("user-42")),
        ("日本語", 26085 * 31 * 31 + 26412 * 31 + 35486),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
        ("\ud800", 0xD800),  # a lone surrogate is one code unit, as in Java
    ],
)
def test_string_hash(impl: ModuleType, key: str, expected: int) -> None:
    assert java_string_hash(key) == expected
    assert java_hash_code(key) == expected


@given(st.text())
def test_string_hash_matches_reference_for_any_text(key: str) -> None:
    expected = reference_hash(key)
    assert java_string_hash(key) == expected
    assert _pure.java_string_hash(key) == expected


def test_other_java_key_types() -> None:
    assert java_hash_code(True) == 1231
    assert java_hash_code(False) == 1237
    assert java_hash_code(42) == 42
    assert java_hash_code(-7) == -7
    assert java_hash_code(JavaLong(-1)) == 0  # Long.hashCode(-1L)
    assert java_hash_code(JavaLong(5)) == 5
    assert java_hash_code(1 << 40) == (1 << 40 >> 32) ^ 0  # Long beyond the int range
    assert java_hash_code(b"") == 1  # Arrays.hashCode(new byte[0])
    assert java_hash_code(b"\xff") == 31 - 1
    with pytest.raises(ValueError, match="long"):
        java_hash_code(1 << 64)
    with pytest.raises(TypeError, match="partitioner"):
        java_hash_code(1.5)


def test_partition_index_java_rules() -> None:
    assert java_partition_index(99162322, 7) == 99162322 % 7
    assert java_partition_index(-99162322, 7) == 99162322 % 7
    # Integer.MIN_VALUE: abs() overflows; only powers of two (and 1) give a valid index.
    assert java_partition_index(-(1 << 31), 8) == 0
    assert java_partition_index(-(1 << 31), 1) == 0
    with pytest.raises(InvalidPartitionError, match="-2"):
        java_partition_index(-(1 << 31), 3)  # 2**31 % 3 == 2 -> Java index -2
    with pytest.raises(ValueError, match="positive"):
        java_partition_index(5, 0)


def test_default_partition() -> None:
    assert default_partition("hello", 4) == 99162322 % 4
    with pytest.raises(InvalidPartitionError):
        default_partition("polygenelubricants", 6)
    assert default_partition("polygenelubricants", 4) == 0
    seen = {default_partition(None, 3) for _ in range(200)}
    assert seen == {0, 1, 2}


@given(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(1, 1000))
def test_partition_index_is_in_range(key_hash: int, n: int) -> None:
    if key_hash == -(1 << 31) and (1 << 31) % n:
        return
    assert 0 <= java_partition_index(key_hash, n) < n

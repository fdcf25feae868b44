"""Arrow arrays of binary or string values without pyarrow: the producer's Arrow path
(``Producer.send_arrow``) is tested where pyarrow is absent (the ``no-spark`` session).

:class:`ArrowValues` exports one array through the Arrow PyCapsule interface, built with
the ctypes structs of :mod:`aiokafka07.arrow` (the library's own exports are struct
arrays; this is a plain binary / string column), with any Arrow offset (a slice), nulls,
or a format of the caller's choice (to be refused)."""

from __future__ import annotations

from array import array
from typing import Any

from aiokafka07 import arrow


class ArrowValues:
    """``values`` as an Arrow array of ``format`` (``z``/``u``: int32 offsets, ``Z``/``U``:
    int64), from row ``offset`` of its buffers (the rows before it are ``skipped``),
    with nulls at the positions in ``nulls`` (a validity bitmap)."""

    def __init__(
        self,
        values: list[bytes],
        format: str = "z",
        *,
        skipped: list[bytes] | None = None,
        nulls: frozenset[int] = frozenset(),
    ) -> None:
        rows = [*(skipped or []), *values]
        self.offset = len(skipped or [])
        self.length = len(values)
        self.format = format
        ends = [0]
        for value in rows:
            ends.append(ends[-1] + len(value))
        self.offsets = bytearray(array("q" if format in "ZU" else "i", ends).tobytes())
        self.data = bytearray(b"".join(rows)) or bytearray(1)
        self.validity: bytearray | None = None
        if nulls:
            bits = bytearray((len(rows) + 7) // 8 or 1)
            for row in range(len(rows)):
                if row - self.offset not in nulls:
                    bits[row >> 3] |= 1 << (row & 7)
            self.validity = bits
        self.nulls = len(nulls)

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        schema = arrow._schema("values", self.format, b"", [])
        keep: list[Any] = [self]
        buffers: list[int | None] = [
            None if self.validity is None else arrow.buffer_address(self.validity, keep),
            arrow.buffer_address(self.offsets, keep),
            arrow.buffer_address(self.data, keep),
        ]
        array_ = arrow._array(self.length, self.offset, buffers, [], keep)
        array_.null_count = self.nulls
        return (
            arrow._capsule(schema, arrow.SCHEMA_NAME, arrow._destroy_schema),
            arrow._capsule(array_, arrow.ARRAY_NAME, arrow._destroy_array),
        )


def released(capsule: object) -> bool:
    """Whether the struct in an ``arrow_array`` capsule was moved out (or released)."""
    address = arrow._capsule_pointer_of(capsule, arrow.ARRAY_NAME)
    return not arrow.ArrowArray.from_address(address).release


__all__ = ["ArrowValues", "released"]

"""Message sets decoded into column buffers: no Python object per message.

:func:`decode_columns_into` decodes exactly as :func:`~aiokafka07.protocol.decode_message_set`
does (the same checks, errors, wrapper expansion, 0.7.2 offsets and decompression bound)
but appends to three bytearrays instead of a list of tuples: each message's offset
(int64), its payload (all payloads back to back) and where each payload ends (int32,
after a leading 0). These are the buffers of an Arrow ``int64`` and ``binary`` column,
so a columnar consumer (the Spark source) hands them on without a copy or a loop in
Python. Native byte order, as Arrow's in-memory format on this machine.
"""

from __future__ import annotations

import struct
from typing import Any

from . import _accel
from .compression import DEFAULT_MAX_DECOMPRESSED
from .messages import BytesLike, decode_into

__all__ = ["MessageColumns", "decode_columns", "decode_columns_into"]

_ZERO = struct.pack("=i", 0)
_OFFSET = struct.Struct("=q")


class MessageColumns:
    """Messages as column buffers (see the module docstring); a
    ``MessageSink`` (``aiokafka07.protocol.messages``) for :func:`decode_columns_into`.

    ``offsets`` holds one native int64 per message; ``value_ends`` one native int32 more
    (0, then where each payload ends in ``values``). Payloads may total at most 2 GiB
    (Arrow's int32 offsets): more raises OverflowError.
    """

    __slots__ = ("offsets", "value_ends", "values")

    def __init__(self) -> None:
        self.offsets = bytearray()
        self.value_ends = bytearray(_ZERO)
        self.values = bytearray()

    def __len__(self) -> int:
        return len(self.offsets) // 8

    def scan(
        self, buf: Any, pos: int, base: int, fixed: int | None, shallow: bool
    ) -> tuple[int, int, int]:
        if shallow:
            raise ValueError("columns hold decoded messages, not shallow wrappers")
        result: tuple[int, int, int] = _accel.impl.scan_columns(
            buf, pos, base, fixed, self.offsets, self.value_ends, self.values
        )
        return result

    def truncate(self, count: int) -> None:
        end = struct.unpack_from("=i", self.value_ends, 4 * count)[0]
        del self.offsets[8 * count :], self.value_ends[4 * (count + 1) :], self.values[end:]

    def set_last_offset(self, offset: int) -> None:
        _OFFSET.pack_into(self.offsets, len(self.offsets) - 8, offset)

    def decoded(self) -> MessageColumns:
        return self


def decode_columns_into(
    columns: MessageColumns,
    buf: BytesLike,
    base_offset: int = 0,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
) -> int:
    """Append the messages of the set at ``base_offset`` to ``columns``; return the valid
    byte count. Raises as :func:`~aiokafka07.protocol.decode_message_set` does, the error's
    ``decoded`` holding ``columns`` with the messages before the bad entry."""
    return decode_into(columns, buf, base_offset, False, max_decompressed)


def decode_columns(
    buf: BytesLike, base_offset: int = 0, *, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED
) -> tuple[MessageColumns, int]:
    """The messages of the set at ``base_offset`` in new columns, and the valid byte count
    (:func:`decode_columns_into`): what a consumer decoding fetches into columns does."""
    columns = MessageColumns()
    return columns, decode_columns_into(
        columns, buf, base_offset, max_decompressed=max_decompressed
    )

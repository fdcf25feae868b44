"""Bounds-checked big-endian reader for request and response bodies.

Every read that would run past the end raises :class:`MalformedFrameError` naming the
field and its position, so no ``struct.error`` or ``IndexError`` escapes the codec.
"""

from __future__ import annotations

import struct
from typing import Any

from ..errors import MalformedFrameError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Reader:
    """Reads fields from a frame body, tracking the position."""

    __slots__ = ("end", "pos", "view", "what")

    def __init__(self, buf: Any, what: str) -> None:
        self.view = memoryview(buf).cast("B")
        self.pos = 0
        self.end = len(self.view)
        self.what = what

    def _need(self, n: int, field: str) -> int:
        pos = self.pos
        if self.end - pos < n:
            raise MalformedFrameError(
                f"{self.what}: {field} at position {pos} needs {n} bytes, {self.end - pos} left",
                position=pos,
            )
        self.pos = pos + n
        return pos

    def i16(self, field: str) -> int:
        value: int = _I16.unpack_from(self.view, self._need(2, field))[0]
        return value

    def i32(self, field: str) -> int:
        value: int = _I32.unpack_from(self.view, self._need(4, field))[0]
        return value

    def i64(self, field: str) -> int:
        value: int = _I64.unpack_from(self.view, self._need(8, field))[0]
        return value

    def take(self, n: int, field: str) -> memoryview:
        if n < 0:
            raise MalformedFrameError(
                f"{self.what}: negative {field} length {n} at position {self.pos}",
                position=self.pos,
            )
        start = self._need(n, field)
        return self.view[start : start + n]

    def rest(self) -> memoryview:
        start, self.pos = self.pos, self.end
        return self.view[start:]

    def topic(self) -> str:
        """A short string (int16 length, UTF-8 bytes); null (-1) is malformed."""
        start = self.pos
        length = self.i16("topic length")
        if length < 0:
            raise MalformedFrameError(
                f"{self.what}: null topic (length {length}) at position {start}",
                position=start,
            )
        # The broker decodes leniently; invalid UTF-8 becomes U+FFFD, an invalid topic char.
        return str(self.take(length, "topic"), "utf-8", "replace")

"""Message boundaries learnt at planning from a few bytes of the log.

A 0.7 offset is a byte position, and a broker serves a FETCH from any position, message
boundary or not (PROTOCOL §10.3). Planning has two questions the segment starts from
OFFSETS cannot answer:

* **Is a user's offset a message boundary?** The entry that starts there must have a
  plausible size, a known magic byte and a matching CRC (:func:`first_entry`): one small
  FETCH, two for a message larger than :data:`PROBE_BYTES`. A user who means "message 5"
  gets an error naming the partition and the offset before any task runs.
* **Where can a partition be cut inside a segment?** (:func:`cut_after`.) From a window
  fetched at the wanted position, :func:`resync` finds the first position from which the
  rest of the window decodes as a chain of whole, CRC-checked entries. That position may
  still lie *inside* an entry: compressed wrappers (snappy stores incompressible data as
  literals) and messages whose values are message sets carry valid messages verbatim. A
  chain that starts inside an entry can only stay valid by ending exactly where that
  entry ends, and from there it follows the real entries; the entry holding the wanted
  position ends at most ``max_entry`` bytes after it. So the cut is the first chain
  position at least ``max_entry`` bytes on, and costs a window of about ``max_entry``
  bytes (the brokers' ``max.message.size``) per cut, never a second read of the range.
  The task that reads up to a cut also checks that its last message ends exactly there
  (see :mod:`.reader`): a log that breaks the assumption fails the read, loudly.

The byte logic is pure (bytes in, answer out); :func:`check_boundary` and
:func:`cut_after` drive it with a fetch function the caller provides.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from ..errors import ProtocolError
from ..protocol import decode_message_set
from ..protocol.messages import MAGIC_0_HEADER

__all__ = [
    "ENTRY_OVERHEAD",
    "MAX_FETCHES",
    "PROBE_BYTES",
    "EntryCheck",
    "Fetch",
    "Resync",
    "check_boundary",
    "cut_after",
    "first_entry",
    "resync",
]

#: Bytes fetched to look at a position: enough for many messages of a usual size.
PROBE_BYTES = 64 << 10

#: An entry's bytes beyond its payload: the length, magic, attributes and CRC.
ENTRY_OVERHEAD = 10

#: Fetches one cut may take (a window, and more only for entries larger than it).
MAX_FETCHES = 8

_I32 = struct.Struct(">i")

#: ``fetch(offset, size)``: up to ``size`` bytes of the log from ``offset`` (raising the
#: broker's error, if any).
Fetch = Callable[[int, int], Awaitable[bytes]]


class EntryCheck(NamedTuple):
    """Whether the bytes at a position start with a whole, valid entry.

    ``need`` (when not ``ok``) asks for a fetch of that many bytes to decide: the entry
    declares itself larger than the bytes at hand. ``reason`` says why it is not one.
    """

    ok: bool
    need: int | None = None
    reason: str = ""


def first_entry(data: bytes | memoryview, max_entry: int) -> EntryCheck:
    """Check the entry at the start of ``data`` (bytes fetched at the position asked
    about): size within ``[5, max_entry]``, magic 0 or 1, CRC matching the payload."""
    view = memoryview(data).cast("B")
    if len(view) < 4 + MAGIC_0_HEADER:
        return EntryCheck(False, reason=f"only {len(view)} bytes of the log follow it")
    (size,) = _I32.unpack_from(view, 0)
    if size < MAGIC_0_HEADER or size > max_entry:
        return EntryCheck(
            False, reason=f"the 4 bytes there declare an entry of {size} bytes, not a message"
        )
    if view[4] > 1:
        return EntryCheck(False, reason=f"the byte after the size is {view[4]}, not a magic byte")
    if len(view) < 4 + size:
        return EntryCheck(False, need=4 + size)
    try:
        decode_message_set(view[: 4 + size], 0, shallow=True)
    except ProtocolError as exc:
        return EntryCheck(False, reason=f"the bytes there are not a message ({exc})")
    return EntryCheck(True)


class Resync(NamedTuple):
    """Where a chain of valid entries starts in a window (see :func:`resync`).

    ``position``: the first position of a chain valid to the window's end, and
    ``ends``: where each of its whole entries ends. Else ``candidate`` / ``need``: the
    first plausible position, whose entry is larger than the window (fetch ``need``
    bytes there to check it); ``None`` both: no chain in the window.
    """

    position: int | None
    ends: tuple[int, ...] = ()
    candidate: int | None = None
    need: int | None = None


def resync(data: bytes | memoryview, max_entry: int, start: int = 0) -> Resync:
    """The first position >= ``start`` in ``data`` from which everything up to the end
    of ``data`` decodes as whole, CRC-checked entries (and a partial last one).

    A position qualifies only with a plausible size header (``[5, max_entry]``) and a
    magic byte 0 or 1 in front of a chain whose every CRC matches. It is a message
    boundary, or a valid message carried inside an entry (see the module docstring).
    """
    view = memoryview(data).cast("B")
    n = len(view)
    i = start
    while i + 4 + MAGIC_0_HEADER <= n:
        (size,) = _I32.unpack_from(view, i)
        if MAGIC_0_HEADER <= size <= max_entry and view[i + 4] <= 1:
            if i + 4 + size > n:
                return Resync(None, (), i, 4 + size)
            try:
                decoded = decode_message_set(view[i:], i, shallow=True)
            except ProtocolError:
                pass
            else:
                return Resync(i, tuple(m.offset for m in decoded.messages))
        i += 1
    return Resync(None)


async def check_boundary(fetch: Fetch, offset: int, max_entry: int) -> str | None:
    """None if a whole valid entry starts at ``offset``; else why not (one fetch, two
    when the entry there is larger than :data:`PROBE_BYTES`)."""
    check = first_entry(await fetch(offset, PROBE_BYTES), max_entry)
    if check.need is not None:
        check = first_entry(await fetch(offset, check.need), max_entry)
        if check.need is not None:  # the log ends inside the entry it declares
            return f"the entry there declares {check.need - 4} bytes, more than the log holds"
    return None if check.ok else check.reason


async def cut_after(fetch: Fetch, position: int, before: int, max_entry: int) -> int | None:
    """The first message boundary in ``[position + max_entry, before)``, found from a
    window of about ``max_entry`` bytes fetched at ``position`` (a few more fetches for
    entries larger than what is at hand, at most :data:`MAX_FETCHES` in all); None when
    there is none, or the bytes do not show one. Sound when no entry of the log is
    larger than ``max_entry`` bytes (length included): see the module docstring."""
    past = position + max_entry  # the entry holding `position` has ended by here
    if past >= before:
        return None
    data = await fetch(position, min(before, past + PROBE_BYTES) - position)
    budget = _Budget(MAX_FETCHES - 1)
    start = 0
    while True:  # scan the window for a chain; follow it; if it breaks, scan on
        found = resync(data, max_entry, start)
        if found.position is not None:
            chain = [position + found.position, *(position + end for end in found.ends)]
            start = found.position + 1
        elif found.candidate is not None and found.need is not None and budget.take():
            at = position + found.candidate  # its entry is larger than the window
            start = found.candidate + 1
            if not first_entry(await fetch(at, found.need), max_entry).ok:
                continue
            chain = [at, at + found.need]
        else:
            return None
        valid, cut = await _follow(fetch, chain, past, before, max_entry, budget)
        if valid:
            return cut


class _Budget:
    """Fetches a cut may still take."""

    def __init__(self, left: int) -> None:
        self.left = left

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


async def _follow(
    fetch: Fetch, chain: list[int], past: int, before: int, max_entry: int, budget: _Budget
) -> tuple[bool, int | None]:
    """Follow a chain of entry positions until one is at or beyond ``past``: (True,
    that one), or (True, None) when it is not before ``before`` or the fetches are
    spent; (False, None) when the bytes further on are not a valid entry (the chain
    started inside an entry and did not end with it)."""
    while True:
        beyond = [p for p in chain if p >= past]
        if beyond:
            return True, (beyond[0] if beyond[0] < before else None)
        at = chain[-1]
        if not budget.take():
            return True, None
        window = await fetch(at, min(before, past + PROBE_BYTES) - at)
        check = first_entry(window, max_entry)
        if check.need is not None and budget.take():
            window = await fetch(at, check.need)
            check = first_entry(window, max_entry)
        if check.need is not None:
            return True, None
        if not check.ok:
            return False, None
        try:
            decoded = decode_message_set(window, at, shallow=True)
        except ProtocolError:
            return False, None
        chain = [at, *(m.offset for m in decoded.messages)]

"""Live progress of the long-running commands, one way for all of them.

On a terminal, a `tqdm <https://tqdm.github.io/>`_ bar on stderr, refreshed a few times a
second and removed when the work ends (the command's summary line follows); elsewhere,
plain lines (only when asked for, e.g. ``--progress`` into a log file). The refresh runs in
a task owned by a :class:`~aiokafka07.supervisor.Supervisor` with the LOG policy: a display
that stops moving costs nothing else, and is never silent about why.

* :class:`Progress` counts what a tool pushes to it (messages and bytes produced,
  consumed, mirrored) and gives the closing :meth:`Progress.summary` line.
* :class:`LiveCount` polls a count (and a total, when known) from the work itself: the
  demo's stages, whose counters live in other tasks, threads or Spark.
* :class:`Elapsed` shows how long a wait without a count has lasted (Spark's start).

Counts are whole numbers, as exact as the summary line (``1234 msg``, never ``1.23k``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from ..supervisor import CrashPolicy, Supervisor

__all__ = ["Counter", "Elapsed", "LiveCount", "Progress", "human_bytes", "plural", "rate"]

log = logging.getLogger("aiokafka07.tools")

#: A live count and its total (None while unknown), read at every refresh.
Counter = Callable[[], Awaitable[tuple[int, int | None]]]


def rate(per_second: float) -> str:
    """A rate with the digits that matter: ``12345``, ``12.3``, ``0.23`` (not ``0``)."""
    if per_second >= 100 or per_second == 0:
        return f"{per_second:.0f}"
    return f"{per_second:.1f}" if per_second >= 10 else f"{per_second:.2f}"


def human_bytes(count: float) -> str:
    """``1536`` → ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def plural(count: int, word: str) -> str:
    """``1 member``, ``2 members``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _bar(desc: str, unit: str, stream: TextIO, *, bar_format: str | None = None) -> Any:
    """A tqdm bar that leaves nothing behind when closed; counts as whole numbers."""
    from tqdm import tqdm  # imported only where a terminal shows it

    return tqdm(
        desc=desc,
        unit=f" {unit}",
        unit_scale=False,
        leave=False,
        file=stream,
        dynamic_ncols=True,
        bar_format=bar_format,
    )


class _Refresher:
    """Calls ``refresh`` every ``interval`` seconds in a supervised task, from
    :meth:`start` until :meth:`stop`."""

    def __init__(self, name: str, interval: float, refresh: Callable[[], Awaitable[None]]) -> None:
        self.interval = interval
        self.refresh = refresh
        self._supervisor = Supervisor(f"progress of {name}", log)

    def start(self) -> None:
        self._supervisor.spawn("refresh", self._loop(), policy=CrashPolicy.LOG)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.refresh()

    async def stop(self) -> None:
        await self._supervisor.aclose()


class _Shown:
    """What :class:`Progress` and :class:`LiveCount` share: a bar (on a terminal) and
    the refresher that redraws it; leaving the context stops both."""

    _bar: Any = None
    _refresher: _Refresher

    async def __aexit__(self, *exc_info: object) -> None:
        await self._refresher.stop()
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class Progress(_Shown):
    """Counts the messages and bytes of a long-running command.

    While ``enabled`` (by default: when ``stream``, stderr, is a terminal) the count is
    shown every ``interval`` seconds: a bar on a terminal, else one line each time.
    ``bar=False`` asks for the lines on a terminal too (one where the user types: a bar
    would be drawn over the line being typed). ``detail`` adds a note (e.g. what a mirror
    is waiting for). :meth:`summary` is the closing line.
    """

    def __init__(
        self,
        verb: str,
        *,
        enabled: bool | None = None,
        interval: float = 1.0,
        stream: TextIO | None = None,
        detail: Callable[[], str] | None = None,
        bar: bool = True,
    ) -> None:
        self.verb = verb
        self.interval = interval
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() and bar
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.detail = detail
        self.messages = 0
        self.bytes = 0
        self.started = time.monotonic()
        self._last = (self.started, 0, 0)
        self._bar: Any = None
        self._refresher = _Refresher(verb, interval, self.refresh)

    def add(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size

    async def __aenter__(self) -> Progress:
        self.started = time.monotonic()
        self._last = (self.started, 0, 0)
        if self.enabled:
            if self.tty:
                self._bar = _bar(self.verb, "msg", self.stream)
            self._refresher.start()
        return self

    async def refresh(self) -> None:
        if self._bar is not None:
            self._bar.update(self.messages - self._bar.n)
            note = human_bytes(self.bytes)
            if self.detail is not None:
                note += f", {self.detail()}"
            self._bar.set_postfix_str(note, refresh=True)
            return
        now = time.monotonic()
        then, messages, size = self._last
        elapsed = max(now - then, 1e-9)
        message_rate = (self.messages - messages) / elapsed
        byte_rate = (self.bytes - size) / elapsed
        self._last = (now, self.messages, self.bytes)
        line = (
            f"{self.verb} {self.messages} messages, {human_bytes(self.bytes)} "
            f"({message_rate:.0f} msg/s, {human_bytes(byte_rate)}/s)"
        )
        if self.detail is not None:
            line += f", {self.detail()}"
        self.stream.write(f"{line}\n")
        self.stream.flush()

    def summary(self) -> str:
        """``produced 10 messages (1.2 KiB) in 0.05 s: 200 msg/s, 24.0 KiB/s``."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return (
            f"{self.verb} {plural(self.messages, 'message')} ({human_bytes(self.bytes)}) in "
            f"{elapsed:.2f} s: {rate(self.messages / elapsed)} msg/s, "
            f"{human_bytes(self.bytes / elapsed)}/s"
        )


class LiveCount(_Shown):
    """A stage's live progress on a terminal, polled from ``counter`` a few times a
    second; off (nothing shown) when ``enabled`` is false, e.g. stderr is not a terminal.
    An error reading the counter skips that refresh only (logged once, at DEBUG): the
    stage itself reports its own errors."""

    def __init__(
        self,
        name: str,
        unit: str,
        counter: Counter,
        *,
        enabled: bool,
        interval: float = 0.25,
        stream: TextIO | None = None,
    ) -> None:
        self.name = name
        self.unit = unit
        self.counter = counter
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._bar: Any = None
        self._failed = False
        self._refresher = _Refresher(name, interval, self.refresh)

    async def __aenter__(self) -> LiveCount:
        if self.enabled:
            self._bar = _bar(f"  {self.name}", self.unit, self.stream)
            await self.refresh()
            self._refresher.start()
        return self

    async def refresh(self) -> None:
        try:
            count, total = await self.counter()
        except Exception:
            if not self._failed:
                log.debug("progress of %s not read", self.name, exc_info=True)
            self._failed = True
            return
        if total is not None and total != self._bar.total:
            self._bar.total = total
        self._bar.update(count - self._bar.n)


class Elapsed(_Shown):
    """``<name>: 00:12`` counting up on a terminal (``stream``, stderr) while a wait with
    nothing to count lasts; nothing when ``enabled`` is false. Leaving the context removes
    the line."""

    def __init__(
        self, name: str, *, enabled: bool, interval: float = 0.5, stream: TextIO | None = None
    ) -> None:
        self.name = name
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._bar: Any = None
        self._refresher = _Refresher(name, interval, self.refresh)

    async def __aenter__(self) -> Elapsed:
        if self.enabled:
            self._bar = _bar(self.name, "s", self.stream, bar_format="{desc}: {elapsed}")
            self._refresher.start()
        return self

    async def refresh(self) -> None:
        self._bar.refresh()
